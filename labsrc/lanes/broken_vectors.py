"""What to tell a learner whose vector folder is broken: which rows, which ids, and the command that writes it again.

Used by :func:`labsrc.lanes.embed.load_embeddings`: a NaN or an
infinity in ``corpus.npy`` or ``queries.npy`` is refused by the folder's value
check, or first by ``checksums.json`` when the file changed after the write.
Either message names one row; this one names every such row with its chunk or
query id (a query id is a case name) and the ``labsrc embed`` command, since no
edit of the cases can repair a vector.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import numpy as np

from labsrc.errors import InvalidRecord
from labsrc.lanes.coverage import EMBED_COMMAND
from labsrc.lanes.vectordir import read_id_list
from labsrc.records.files import load_npy
from labsrc.records.loading import load_json

__all__ = ["broken_rows_error", "cast_fix", "embed_command", "shell_path"]

#: Where the course keeps its chunks and a learner their cases (the defaults of ``coverage.no_vector_hint``).
_COURSE_CHUNKS = "fixtures/policies/chunks.jsonl"
_COURSE_CASES = "my-submission/cases.jsonl"
#: The matrices of a vector folder, the file naming their rows, and what a row stands for.
_MATRICES = {"corpus.npy": ("corpus_ids.txt", "chunk"), "queries.npy": ("query_ids.txt", "query")}
#: How many broken rows a message names before "and N more".
_SHOWN = 5


def shell_path(path: Path) -> str:
    """``path`` as a learner types it in a shell: relative to the current directory when it is under it
    (``my-submission/cases.jsonl``), absolute otherwise, and quoted when it holds spaces."""
    absolute = Path(os.path.abspath(path))
    try:
        shown = str(absolute.relative_to(Path(os.getcwd())))
    except ValueError:
        shown = str(absolute)
    return shlex.quote(shown)


def embed_command(folder: str | Path) -> str:
    """The ``labsrc embed`` command that writes ``folder`` again, runnable as printed.

    The chunks and queries are the ``chunks.jsonl`` and ``cases.jsonl`` beside the
    folder's ``vectors/`` parent (a submission, or the course's ``fixtures/policies``)
    when they are there, and the course's layout otherwise.
    """
    folder = Path(folder)
    root = folder.parent.parent if folder.parent.name == "vectors" else None

    def beside(name: str, default: str) -> str:
        return shell_path(root / name) if root is not None and (root / name).is_file() else default

    return EMBED_COMMAND.format(chunks=beside("chunks.jsonl", _COURSE_CHUNKS),
                                cases=beside("cases.jsonl", _COURSE_CASES), out=shell_path(folder))


def broken_rows_error(folder: Path, exc: InvalidRecord) -> InvalidRecord | None:
    """The error naming every row (and id) of the matrix ``exc`` is about that holds NaN or infinity.

    None when ``exc`` is not about ``folder``'s ``corpus.npy`` or ``queries.npy``, or
    when that matrix cannot be read or holds only finite values: ``exc`` says it best then.
    """
    name = Path(exc.path).name if exc.path is not None else None
    if name not in _MATRICES or Path(exc.path).parent != Path(folder):
        return None
    ids_file, what = _MATRICES[name]
    try:
        matrix = load_npy(Path(folder) / name, mmap=True)
    except InvalidRecord:
        return None
    if exc.field == "sha256" and (recast := _recast_error(folder, name, matrix)) is not None:
        return recast
    if matrix.ndim != 2 or not np.issubdtype(matrix.dtype, np.floating):
        return None
    bad = [int(r) for r in np.flatnonzero(~np.isfinite(matrix).all(axis=1))]
    if not bad:
        return None
    try:
        ids = read_id_list(Path(folder) / ids_file)
    except InvalidRecord:
        ids = []
    shown = [f"row {r + 1} ({what} id {ids[r]!r})" if r < len(ids) else f"row {r + 1}" for r in bad[:_SHOWN]]
    more = f" and {len(bad) - _SHOWN} more" if len(bad) > _SHOWN else ""
    return InvalidRecord(
        f"{len(bad)} row(s) hold NaN or infinite values: {', '.join(shown)}{more} (row i is line i of {ids_file}); "
        f"such a vector ranks nothing: the vector folder is broken, not your cases. Re-run "
        f"`{embed_command(folder)}` (the 'embed' extra) to write it again",
        path=Path(folder) / name,
        field="values",
    )


def cast_fix(held: str, dtype: str, said: str, embed: str) -> str:
    """The message for vectors stored as ``dtype`` where ``labsrc embed`` writes float32, with both fixes.

    ``held``: what holds them (``"holds"``, ``"a.npy and b.npy hold"``); ``said``: what MODEL.json says.
    """
    digits = "; float16 keeps only about 3 significant digits" if dtype == "float16" else ""
    return (f"{held} {dtype} vectors, but {said}: labsrc embed writes float32{digits}. Re-run `{embed}` "
            "(the 'embed' extra), or cast them back to float32 (np.save(path, np.load(path).astype(np.float32)), "
            "then write checksums.json again)")


def _recast_error(folder: Path, name: str, matrix: np.ndarray) -> InvalidRecord | None:
    """A checksum mismatch whose matrix is of another dtype than ``MODEL.json`` records: the cause is the cast.

    Vectors saved as float16 (half the size) no longer match the digest of the float32 file
    ``labsrc embed`` wrote, which reads as "a bit flip, an edit" unless the dtype is named.
    """
    try:
        recorded = load_json(Path(folder) / "MODEL.json")
    except InvalidRecord:
        return None
    dtype = recorded.get("dtype") if isinstance(recorded, dict) else None
    if not isinstance(dtype, str) or str(matrix.dtype) == dtype:
        return None
    message = cast_fix("holds", str(matrix.dtype), f"MODEL.json says dtype {dtype!r}", embed_command(folder))
    return InvalidRecord(f"{message} (its SHA-256 is not the one checksums.json records for that reason)",
                         path=Path(folder) / name, field="dtype")
