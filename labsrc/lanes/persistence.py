"""Saving a BM25 index to a directory and loading it back with identical scores.

The on-disk layout mirrors :class:`~labsrc.lanes.sparse.BM25Index`'s compressed sparse
rows, one file per array, so loading is a handful of ``np.load`` calls and the
large arrays can be memory-mapped (``mmap_mode="r"``): the OS pages postings in
as queries touch them instead of reading the whole index up front.

=====================  ===============================================================
``doc_len.npy``        float64 [N]: analysed length of each document (sorted by id)
``ptr.npy``            int64 [V + 1]: term t's postings are ``ptr[t]:ptr[t+1]``
``postings.npy``       int64 [2, P]: the packed postings (:mod:`labsrc.lanes.postings`): row 0 the
                       document position of each posting, row 1 its BM25 contribution (float64
                       bits, read back with ``view``), so loading computes nothing
``tf.npy``             float64 [P]: term frequency of each posting
``ids.json``           the N document ids, in position order
``vocabulary.json``    the V terms, in term-id order
``params.json``        format version, k1, b, sizes, and the analyzer's description
=====================  ===============================================================

``params.json`` is written last, so a directory without it is an unfinished
save and is refused. The analyzer must be an :class:`~labsrc.lanes.analysis.Analyzer`:
it is stored as its constructor fields (pattern, stopwords, normal form, case
folding, stemmer, name), so the loaded index tokenises queries exactly as the
saved one did. An arbitrary function cannot be described reproducibly, and
saving one is an error rather than a silent change of behaviour on load.

Everything is plain ``.npy`` and JSON: ``allow_pickle`` stays off, so loading a
directory can never run code.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from labsrc.errors import InvalidArgument, InvalidRecord
from labsrc.lanes.analysis import Analyzer
from labsrc.lanes.sparse import BM25Index
from labsrc.records.loading import load_json

__all__ = ["INDEX_FORMAT", "analyzer_from_description", "describe_analyzer", "load_bm25_index", "save_bm25_index"]

#: Written into params.json; bumped whenever the layout changes.
INDEX_FORMAT = {"name": "labsrc-bm25-index", "version": 3}

#: The arrays saved as .npy, and the NumPy kinds each may have ("f" float, "i"/"u" integer).
# Version 3 keeps the packed postings in one file; version 2 (still read) kept doc_pos and impact apart.
_ARRAYS = {"doc_len": "fiu", "ptr": "iu", "tf": "fiu", "postings": "i"}
_ARRAYS_V2 = {"doc_len": "fiu", "ptr": "iu", "doc_pos": "iu", "tf": "fiu", "impact": "f"}


def _analyzer_fields() -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(Analyzer) if f.init]


def describe_analyzer(analyzer: object) -> dict[str, Any]:
    """The JSON description of an :class:`Analyzer` (its constructor fields).

    Raises :class:`InvalidArgument` for anything else, e.g. a plain function:
    its behaviour cannot be written down and rebuilt on load.
    """
    if type(analyzer) is not Analyzer:
        raise InvalidArgument(
            f"cannot save a BM25 index whose analyzer is {type(analyzer).__name__} {analyzer!r}: only a "
            "labsrc.lanes.analysis.Analyzer can be stored reproducibly (by its fields); rebuild the index with "
            "analyzer=Analyzer(...)"
        )
    description: dict[str, Any] = {}
    for f in _analyzer_fields():
        value = getattr(analyzer, f.name)
        if isinstance(value, frozenset):
            value = sorted(value)
        if not (value is None or isinstance(value, (str, bool, int, float, list))):
            raise InvalidArgument(f"Analyzer field {f.name!r} = {value!r} cannot be written to JSON")
        description[f.name] = value
    return description


def analyzer_from_description(description: Any, *, path: str | Path | None = None) -> Analyzer:
    """Rebuild the :class:`Analyzer` that :func:`describe_analyzer` described."""
    if not isinstance(description, dict):
        raise InvalidRecord("must be a JSON object of Analyzer fields", path=path, field="analyzer")
    valid = {f.name for f in _analyzer_fields()}
    unknown = sorted(set(description) - valid)
    if unknown:
        raise InvalidRecord(
            f"unknown Analyzer field(s) {unknown}; valid fields are {sorted(valid)}", path=path, field="analyzer"
        )
    kwargs = dict(description)
    if "stopwords" in kwargs:
        kwargs["stopwords"] = frozenset(kwargs["stopwords"])
    try:
        return Analyzer(**kwargs)
    except (InvalidArgument, TypeError) as exc:
        raise InvalidRecord(f"cannot rebuild the analyzer: {exc}", path=path, field="analyzer") from exc


def save_bm25_index(index: BM25Index, directory: str | Path) -> Path:
    """Write ``index`` to ``directory`` (created if needed) and return its path.

    Files of an earlier save in the same directory are overwritten.
    """
    if not isinstance(index, BM25Index):
        raise InvalidArgument(f"save_bm25_index needs a BM25Index, not {type(index).__name__}")
    analyzer = describe_analyzer(index.analyzer)  # fail before writing anything
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    params_path = directory / "params.json"
    params_path.unlink(missing_ok=True)  # an interrupted overwrite must not look complete
    dtypes = {}
    for name in _ARRAYS:
        # Saved in the index's own dtype: a float32 -> float64 round trip could change scores.
        array = np.ascontiguousarray(index._packed if name == "postings" else getattr(index, name))
        np.save(directory / f"{name}.npy", array, allow_pickle=False)
        dtypes[name] = array.dtype.str
    terms = [""] * len(index.vocabulary)
    for term, t in index.vocabulary.items():
        terms[t] = term
    (directory / "ids.json").write_text(json.dumps(list(index.ids), ensure_ascii=False), encoding="utf-8")
    (directory / "vocabulary.json").write_text(json.dumps(terms, ensure_ascii=False), encoding="utf-8")
    params = {
        "format": INDEX_FORMAT,
        "k1": index.k1,
        "b": index.b,
        "n_docs": len(index.ids),
        "n_terms": len(terms),
        "n_postings": int(len(index.tf)),
        "dtypes": dtypes,
        "analyzer": analyzer,
    }
    params_path.write_text(json.dumps(params, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return directory


def _load_array(path: Path, dtype: np.dtype, shape: tuple[int, ...], mmap: bool) -> np.ndarray:
    try:
        array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except FileNotFoundError as exc:
        raise InvalidRecord("missing file of a saved BM25 index", path=path) from exc
    except (ValueError, OSError, EOFError) as exc:
        raise InvalidRecord(f"not a valid .npy array: {exc}", path=path) from exc
    if array.dtype != np.dtype(dtype) or array.shape != shape:
        raise InvalidRecord(f"expected {np.dtype(dtype)} of shape {shape}, found {array.dtype} of shape {array.shape}", path=path)
    return array


def _string_list(path: Path, length: int) -> list[str]:
    if not path.exists():
        raise InvalidRecord("missing file of a saved BM25 index", path=path)
    values = load_json(path)
    if not isinstance(values, list) or len(values) != length or not all(isinstance(v, str) for v in values):
        raise InvalidRecord(f"expected a JSON list of {length} strings", path=path)
    return values


def _param_number(params: dict[str, Any], field: str, path: Path, *, integer: bool = False) -> Any:
    value = params.get(field)
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value < 0:
        raise InvalidRecord(f"must be a non-negative {'integer' if integer else 'number'}", path=path, field=field)
    return value


def load_bm25_index(directory: str | Path, mmap: bool = True) -> BM25Index:
    """Load an index written by :func:`save_bm25_index`; it scores exactly as the saved one.

    With ``mmap=True`` the arrays are read-only memory maps of the files. An index
    saved in format version 2 (positions and impacts in two files) loads too; its
    postings are packed in memory on load.
    """
    directory = Path(directory)
    params_path = directory / "params.json"
    if not params_path.exists():
        raise InvalidRecord("no params.json: not a saved BM25 index (or an unfinished save)", path=directory)
    params = load_json(params_path)
    if not isinstance(params, dict):
        raise InvalidRecord("expected a JSON object", path=params_path)
    version_2 = params.get("format") == {**INDEX_FORMAT, "version": 2}
    if params.get("format") != INDEX_FORMAT and not version_2:
        raise InvalidRecord(f"unsupported index format {params.get('format')!r}; expected {INDEX_FORMAT}", path=params_path, field="format")
    n_docs = _param_number(params, "n_docs", params_path, integer=True)
    n_terms = _param_number(params, "n_terms", params_path, integer=True)
    n_postings = _param_number(params, "n_postings", params_path, integer=True)
    k1 = _param_number(params, "k1", params_path)
    b = _param_number(params, "b", params_path)
    analyzer = analyzer_from_description(params.get("analyzer"), path=params_path)
    dtypes = params.get("dtypes")
    expected = _ARRAYS_V2 if version_2 else _ARRAYS
    if not isinstance(dtypes, dict) or set(dtypes) != set(expected):
        raise InvalidRecord(f"must name the dtype of each of {sorted(expected)}", path=params_path, field="dtypes")
    shapes = {"doc_len": (n_docs,), "ptr": (n_terms + 1,), "postings": (2, n_postings)}
    arrays = {}
    for name, kinds in expected.items():
        try:
            dtype = np.dtype(dtypes[name])
        except TypeError as exc:
            raise InvalidRecord(f"invalid dtype {dtypes[name]!r} for {name}", path=params_path, field="dtypes") from exc
        if dtype.kind not in kinds:
            raise InvalidRecord(f"{name} must be numeric, not {dtype}", path=params_path, field="dtypes")
        if name == "postings" and dtype != np.int64:
            raise InvalidRecord(f"postings must be int64, not {dtype}", path=params_path, field="dtypes")
        arrays[name] = _load_array(directory / f"{name}.npy", dtype, shapes.get(name, (n_postings,)), mmap)
    if arrays["ptr"][0] != 0 or arrays["ptr"][-1] != n_postings:
        raise InvalidRecord(f"ptr must run from 0 to {n_postings}", path=directory / "ptr.npy")
    ids = _string_list(directory / "ids.json", n_docs)
    terms = _string_list(directory / "vocabulary.json", n_terms)
    vocabulary = {term: t for t, term in enumerate(terms)}
    if len(vocabulary) != n_terms:
        raise InvalidRecord("the vocabulary repeats a term", path=directory / "vocabulary.json")
    return BM25Index(
        ids,
        arrays["doc_len"],
        vocabulary,
        arrays["ptr"],
        arrays["doc_pos"] if version_2 else arrays["postings"][0],
        arrays["tf"],
        analyzer=analyzer,
        k1=k1,
        b=b,
        impact=arrays.get("impact"),
        packed=arrays.get("postings"),
    )
