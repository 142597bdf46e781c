"""The files of a saved BM25 index: written atomically, read back once each, checked.

:mod:`labsrc.lanes.persistence` describes the layout and is the public entry
point (``save_bm25_index``, ``load_bm25_index``); :meth:`BM25Index.save
<labsrc.lanes.sparse.BM25Index.save>` and :meth:`BM25Index.load
<labsrc.lanes.sparse.BM25Index.load>` call the two functions here. This module
does not import the index class, so the class can call it without a cycle.

**Atomic saves.** A save writes every file into a new folder beside the
target (``.<name>.staging-<host>-<pid>-<hex>``), fsyncs them, and then puts that folder in
place of the target in one step (:func:`~labsrc.records.files.commit_dir`:
``renameat2(RENAME_EXCHANGE)`` on Linux), removing the old one after. A save
killed at any point leaves the previous index or the new one, complete, never
neither; the file names inside stay the documented ones. Since the folder is
replaced whole, a target holding files an index does not is refused. The staging
folder of a save that was killed is removed by the next save or load of the
same target once its process is gone (:func:`~labsrc.records.files.remove_stale_staging`).

**Only the lab's own analyzers.** ``params.json`` describes the analyzer, and
its token pattern is a regular expression run on every query: one planted in
the file (``(a+)+$`` backtracks for hours) would be code. A load therefore
accepts only the token patterns of the lab's analyzers
(:data:`TRUSTED_TOKEN_PATTERNS`); an index saved with another pattern loads
only when the caller passes that analyzer (``analyzer=``), and then the saved
description must equal it. A checksum in the file would not do: whoever can
plant a pattern can rewrite the checksum too.

**Checksums.** A save records the SHA-256 of every file it writes in
``checksums.json`` (:mod:`labsrc.records.checksums`, as ``vectors/`` folders
do), written last in the staging folder, so it is swapped in with the files it
covers. A load checks each file's digest before it parses the file: one flipped
bit in ``postings.npy``, ``tf.npy`` or ``doc_len.npy`` can pass every check
below (a position still in range, a value still finite) and change scores. A
file whose digest differs is refused by name (field ``sha256``), and so is a
file the list names that is missing, and a ``checksums.json`` that is malformed
or leaves a file out. An index saved before the lab recorded digests (no
``checksums.json``) loads unchecked, as a ``vectors/`` folder without one does,
with an :class:`~labsrc.records.pinned.UncheckedFolderWarning` saying so;
``BM25Index.load(folder).save(folder)`` gives it checksums. The digests catch
damage, not an attacker (see the analyzers above).

**One version, each file read once.** A load opens the folder once and every
file relative to it, and digests and parses the same bytes (a memory-mapped
array: the same open file), so a save racing the load yields the old index, the
new one, or a refusal that names the race, never a mix of the two
(:func:`~labsrc.records.pinned.read_pinned`; issue 57 saw 31 of 3,000 loads mix
two saves and pass every check when files were checked, then opened again, by path).

**Checked loads.** Every array is checked before it is used: dtype and shape
against ``params.json``, ``ptr`` from 0 to the postings count and strictly
increasing (every term has a posting), positions inside ``[0, n_docs)`` and
ascending within each term, impacts, term frequencies and lengths finite and
positive, ids unique and ascending. Each failure is an
:class:`~labsrc.errors.InvalidRecord` naming the file and the field.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from labsrc.errors import InvalidArgument, InvalidRecord
from labsrc.lanes.analysis import LESSON_TOKEN_PATTERN, PROSE_TOKEN_PATTERN, Analyzer
from labsrc.records.checksums import CHECKSUMS_FILE, checksums_json
from labsrc.records.files import (
    as_path,
    commit_dir,
    reading,
    refuse_foreign_files,
    remove_stale_staging,
    stage_dir,
    write_durable,
    writing,
)
from labsrc.records.pinned import PinnedFolder, read_pinned

# read_index and write_index are the index class's own (BM25Index.load and .save call them).
__all__ = ["INDEX_FORMAT", "TRUSTED_TOKEN_PATTERNS", "analyzer_from_description", "describe_analyzer"]

#: Written into params.json; bumped whenever the layout changes.
INDEX_FORMAT = {"name": "labsrc-bm25-index", "version": 3}

#: The arrays saved as .npy, and the NumPy kinds each may have ("f" float, "i"/"u" integer).
# Version 3 keeps the packed postings in one file; version 2 (still read) kept doc_pos and impact apart.
_ARRAYS = {"doc_len": "fiu", "ptr": "iu", "tf": "fiu", "postings": "i"}
_ARRAYS_V2 = {"doc_len": "fiu", "ptr": "iu", "doc_pos": "iu", "tf": "fiu", "impact": "f"}
#: The names a saved index's folder may hold (format 3, and format 2's two extra arrays).
_OWNED = frozenset(
    {f"{name}.npy" for name in {*_ARRAYS, *_ARRAYS_V2}} | {"ids.json", "vocabulary.json", "params.json", CHECKSUMS_FILE}
)
#: The files a save writes and checksums.json must cover (format 3; format 2 predates checksums).
_WRITTEN = (*(f"{name}.npy" for name in _ARRAYS), "ids.json", "vocabulary.json", "params.json")
#: The end of the message refusing a file whose SHA-256 changed.
_REMEDY = "restore the folder from a copy, or build the index and save it again (BM25Index.build(...).save(folder))"
#: The end of the warning for an index without checksums.json: how to give it one.
_UNCHECKED = "save it again to record them: BM25Index.load(folder).save(folder), or save_bm25_index(index, folder)"


#: The token patterns a loaded index may restore on its own: those of the lab's analyzers
#: (the lesson's and the prose one, labsrc.lanes.analysis). Any other needs ``analyzer=`` at load.
TRUSTED_TOKEN_PATTERNS = frozenset({LESSON_TOKEN_PATTERN, PROSE_TOKEN_PATTERN})


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


#: Analyzer fields added after indexes were first saved, with the value that gives the analysis of an index
#: saved before them: such an index analyses queries as it did when it was saved (its vocabulary was built so).
_LEGACY_FIELDS = {"dashes": False}


def _with_legacy_fields(description: dict[str, Any]) -> dict[str, Any]:
    """``description`` with each field it predates set to its old behaviour (``"dashes": False``)."""
    return {**_LEGACY_FIELDS, **description}


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
    kwargs = _with_legacy_fields(description)
    if isinstance(kwargs.get("stopwords"), list):
        kwargs["stopwords"] = frozenset(kwargs["stopwords"])
    try:
        return Analyzer(**kwargs)
    except (InvalidArgument, TypeError, ValueError, re.error) as exc:
        raise InvalidRecord(f"cannot rebuild the analyzer: {exc}", path=path, field="analyzer") from exc


def _shorten(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _trusted_analyzer(description: Any, given: Analyzer | None, *, path: str | Path) -> Analyzer:
    """The analyzer a loaded index may use: the lab's own pattern, or exactly the ``given`` analyzer.

    ``given`` is the caller vouching for an analyzer (``BM25Index.load(path,
    analyzer=...)``); the saved description must then equal it. Without it, a
    pattern outside :data:`TRUSTED_TOKEN_PATTERNS` is refused before it is compiled.
    """
    if given is not None:
        if type(given) is not Analyzer:
            raise InvalidArgument(
                f"analyzer must be a labsrc.lanes.analysis.Analyzer (the one the index was saved with), "
                f"not {type(given).__name__}"
            )
        missing = set(_LEGACY_FIELDS) - set(description) if isinstance(description, dict) else set()
        if missing:
            # Saved before a field existed: the caller's analyzer, with that field as the index was analysed.
            description = _with_legacy_fields(description)
            given = dataclasses.replace(given, **{k: _LEGACY_FIELDS[k] for k in missing})
        if description != describe_analyzer(given):
            raise InvalidRecord(
                f"the saved analyzer {_shorten(description, 200)} differs from the analyzer given "
                f"{_shorten(describe_analyzer(given), 200)}; load the index with the analyzer it was saved with",
                path=path,
                field="analyzer",
            )
        return given
    pattern = description.get("pattern", LESSON_TOKEN_PATTERN) if isinstance(description, dict) else None
    if isinstance(description, dict) and (not isinstance(pattern, str) or pattern not in TRUSTED_TOKEN_PATTERNS):
        known = ", ".join(sorted(map(repr, TRUSTED_TOKEN_PATTERNS)))
        raise InvalidRecord(
            f"{_shorten(pattern)} is not a token pattern the lab writes ({known}); a pattern is a regular expression "
            "run on every query, so a saved index restores only the lab's own. If you saved this index with your "
            "own Analyzer, load it with analyzer=that Analyzer",
            path=path,
            field="analyzer.pattern",
        )
    return analyzer_from_description(description, path=path)


# --- writing ----------------------------------------------------------------------------


def _json_bytes(value: Any, *, indent: int | None = None) -> bytes:
    return (json.dumps(value, ensure_ascii=False, indent=indent) + "\n").encode("utf-8")


def write_index(index: Any, directory: str | Path) -> Path:
    """Write a :class:`~labsrc.lanes.sparse.BM25Index` to ``directory`` atomically (see the module docs)."""
    directory = as_path(directory)
    analyzer = describe_analyzer(index.analyzer)  # fail before writing anything
    with writing(directory):
        if directory.is_symlink():
            directory = directory.resolve()  # replace the folder it points to, not the link
        refuse_foreign_files(directory, _OWNED, "a saved index")
        staged = stage_dir(directory)
        try:
            _write(index, staged, analyzer)
            return commit_dir(staged, directory)
        finally:
            shutil.rmtree(staged, ignore_errors=True)  # already gone unless something failed


def _write(index: Any, directory: Path, analyzer: dict[str, Any]) -> None:
    dtypes = {}
    for name in _ARRAYS:
        # Saved in the index's own dtype: a float32 -> float64 round trip could change scores.
        array = np.ascontiguousarray(index._packed if name == "postings" else getattr(index, name))
        write_durable(directory / f"{name}.npy", lambda h, a=array: np.save(h, a, allow_pickle=False))
        dtypes[name] = array.dtype.str
    terms = [""] * len(index.vocabulary)
    for term, t in index.vocabulary.items():
        terms[t] = term
    for name, values in (("ids", list(index.ids)), ("vocabulary", terms)):
        write_durable(directory / f"{name}.json", lambda h, v=values: h.write(_json_bytes(v)))
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
    write_durable(directory / "params.json", lambda h: h.write(_json_bytes(params, indent=2)))
    checksums = checksums_json(directory, _WRITTEN)  # last, inside the same atomic swap
    write_durable(directory / CHECKSUMS_FILE, lambda h: h.write(checksums))


# --- reading ----------------------------------------------------------------------------


def _param_number(params: dict[str, Any], field: str, path: Path, *, integer: bool = False) -> Any:
    value = params.get(field)
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value) or value < 0:
        raise InvalidRecord(f"must be a finite non-negative {'integer' if integer else 'number'}, not {value!r}",
                            path=path, field=field)  # fmt: skip
    return value


def _string_list(folder: PinnedFolder, name: str, length: int) -> list[str]:
    path = folder.path / name
    values = folder.load_json(name, missing="missing file of a saved BM25 index")
    if not isinstance(values, list) or len(values) != length or not all(isinstance(v, str) for v in values):
        raise InvalidRecord(f"expected a JSON list of {length} strings", path=path)
    return values


def _check(ok: bool, message: str, path: Path, field: str) -> None:
    if not ok:
        raise InvalidRecord(message, path=path, field=field)


def _check_arrays(arrays: dict[str, np.ndarray], files: dict[str, Path], n_docs: int, n_postings: int) -> None:
    """What the scoring code assumes of the arrays, checked once (a pass over each)."""
    ptr = arrays["ptr"]
    _check(ptr[0] == 0 and ptr[-1] == n_postings, f"must run from 0 to {n_postings}", files["ptr"], "ptr")
    # int64 before differencing: an unsigned array's differences would wrap instead of going negative.
    _check(bool(np.all(np.diff(ptr.astype(np.int64)) > 0)), "must increase strictly (every term has a posting)",
           files["ptr"], "ptr")  # fmt: skip
    if "postings" in arrays:
        positions, impact = arrays["postings"][0], arrays["postings"][1].view(np.float64)
        (pos_file, pos_field), (impact_file, impact_field) = (
            (files["postings"], "postings[0] (positions)"), (files["postings"], "postings[1] (impacts)"))
    else:
        positions, impact = arrays["doc_pos"], arrays["impact"]
        (pos_file, pos_field), (impact_file, impact_field) = (files["doc_pos"], "doc_pos"), (files["impact"], "impact")
    if positions.size:
        low, high = int(positions.min()), int(positions.max())
        _check(low >= 0 and high < n_docs, f"positions run from {low} to {high}; they must lie in [0, {n_docs})",
               pos_file, pos_field)  # fmt: skip
        step = np.diff(positions.astype(np.int64))
        step[ptr[1:-1] - 1] = 1  # a term's first posting may sit below the previous term's last one
        _check(bool(np.all(step > 0)), "must ascend within each term (sorted, no repeats)", pos_file, pos_field)
    _check(bool(np.all(np.isfinite(impact) & (impact > 0))), "every impact must be finite and > 0",
           impact_file, impact_field)  # fmt: skip
    tf = arrays["tf"]
    _check(bool(np.all(np.isfinite(tf) & (tf > 0))), "every term frequency must be finite and > 0", files["tf"], "tf")
    doc_len = arrays["doc_len"]
    _check(bool(np.all(np.isfinite(doc_len) & (doc_len >= 0))), "every length must be finite and >= 0",
           files["doc_len"], "doc_len")  # fmt: skip


def read_index(directory: str | Path, mmap: bool, analyzer: Analyzer | None = None) -> dict[str, Any]:
    """The checked constructor arguments of the index saved in ``directory`` (formats 2 and 3).

    ``analyzer``: the analyzer the index was saved with, when its token pattern is
    not one of the lab's (see the module docs).
    """
    directory = as_path(directory)
    remove_stale_staging(directory)  # what saves of this folder killed part-way left beside it
    with reading(directory):
        if not directory.is_dir():
            raise InvalidRecord("no params.json: not a saved BM25 index (or an unfinished save)", path=directory)
        return read_pinned(directory, lambda folder: _read(folder, mmap, analyzer), required=_WRITTEN,
                           remedy=_REMEDY, unchecked=_UNCHECKED)  # fmt: skip


def _read(folder: PinnedFolder, mmap: bool, given: Analyzer | None) -> dict[str, Any]:
    """The checked constructor arguments, each file read once from the one ``folder`` (see the module docs)."""
    directory = folder.path
    params_path = directory / "params.json"
    params = folder.load_json("params.json", missing="missing: not a saved BM25 index (or an unfinished save)")
    if not isinstance(params, dict):
        raise InvalidRecord("expected a JSON object", path=params_path)
    version = params.get("format", {}).get("version") if isinstance(params.get("format"), dict) else None
    if params.get("format") != {**INDEX_FORMAT, "version": version} or version not in (2, 3):
        raise InvalidRecord(f"unsupported index format {params.get('format')!r}; expected {INDEX_FORMAT}",
                            path=params_path, field="format")  # fmt: skip
    n_docs = _param_number(params, "n_docs", params_path, integer=True)
    n_terms = _param_number(params, "n_terms", params_path, integer=True)
    n_postings = _param_number(params, "n_postings", params_path, integer=True)
    k1 = _param_number(params, "k1", params_path)
    b = _param_number(params, "b", params_path)
    _check(b <= 1, f"must be in [0, 1], not {b!r}", params_path, "b")
    analyzer = _trusted_analyzer(params.get("analyzer"), given, path=params_path)
    dtypes = params.get("dtypes")
    expected = _ARRAYS_V2 if version == 2 else _ARRAYS
    if not isinstance(dtypes, dict) or set(dtypes) != set(expected):
        raise InvalidRecord(f"must name the dtype of each of {sorted(expected)}", path=params_path, field="dtypes")
    shapes = {"doc_len": (n_docs,), "ptr": (n_terms + 1,), "postings": (2, n_postings)}
    arrays, files = {}, {}
    for name, kinds in expected.items():
        try:
            dtype = np.dtype(dtypes[name])
        except (TypeError, ValueError) as exc:
            raise InvalidRecord(f"invalid dtype {dtypes[name]!r} for {name}", path=params_path, field="dtypes") from exc
        _check(dtype.kind in kinds, f"{name} must be numeric, not {dtype}", params_path, "dtypes")
        _check(name != "postings" or dtype == np.int64, f"postings must be int64, not {dtype}", params_path, "dtypes")
        files[name] = path = directory / f"{name}.npy"
        array = arrays[name] = folder.load_npy(f"{name}.npy", mmap=mmap)
        shape = shapes.get(name, (n_postings,))
        _check(array.dtype == dtype and array.shape == shape,
               f"expected {dtype} of shape {shape}, found {array.dtype} of shape {array.shape}", path, name)  # fmt: skip
    _check_arrays(arrays, files, n_docs, n_postings)
    ids = _string_list(folder, "ids.json", n_docs)
    _check(all(a < b for a, b in zip(ids, ids[1:])), "ids must be unique and ascending (positions are in id order)",
           directory / "ids.json", "ids")  # fmt: skip
    terms = _string_list(folder, "vocabulary.json", n_terms)
    vocabulary = {term: t for t, term in enumerate(terms)}
    _check(len(vocabulary) == n_terms, "the vocabulary repeats a term", directory / "vocabulary.json", "vocabulary")
    return {
        "ids": ids,
        "doc_len": arrays["doc_len"],
        "vocabulary": vocabulary,
        "ptr": arrays["ptr"],
        "doc_pos": arrays["doc_pos"] if version == 2 else arrays["postings"][0],
        "tf": arrays["tf"],
        "analyzer": analyzer,
        "k1": k1,
        "b": b,
        "impact": arrays.get("impact"),
        "packed": arrays.get("postings"),
    }
