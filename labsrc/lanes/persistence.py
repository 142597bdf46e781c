"""Saving a BM25 index to a directory and loading it back with identical scores.

The on-disk layout mirrors :class:`~labsrc.lanes.sparse.BM25Index`'s compressed sparse
rows, one file per array, so loading is a handful of ``np.load`` calls and the
large arrays can be memory-mapped (``mmap_mode="r"``): they stay in the OS's page
cache instead of being copied into the process (a load still reads every byte
once, to check its checksum and its values).

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
``checksums.json``     ``{"sha256": {file name: hex digest}}`` of every other file
=====================  ===============================================================

Saves are atomic: the files are written into a new folder beside the target,
fsynced, and that folder is put in place of the target in one step
(:mod:`labsrc.lanes.index_files`). A save killed at any point leaves the old
index or the new one loadable, never neither. A load reads each file once, from
the one folder that stood at the path when it began, and checks those bytes'
SHA-256 against ``checksums.json`` (written last, inside the same swap) before
it parses them: a file that changed after the save, a bit flip included, is
refused with an :class:`~labsrc.errors.InvalidRecord` naming it (field
``sha256``), and a save racing the load gives the old index, the new one, or a
refusal naming the race, never a mix. An index saved before the lab recorded
checksums has none and loads unchecked, as a ``vectors/`` folder without one
does, with an :class:`~labsrc.records.pinned.UncheckedFolderWarning` saying so
(``BM25Index.load(folder).save(folder)`` adds them). The digests cost one read
of every byte on each save and load (about 10 ms for SciFact's 12.5 MB, 1.2 GB/s
here). Loads then check every array
(positions in range and ascending per term, ``ptr`` increasing, impacts finite
and positive, ids unique) and refuse a bad one with an
:class:`~labsrc.errors.InvalidRecord` naming the file and field. Indexes saved
in format 2 (positions and impacts in two files) still load.

The analyzer must be an :class:`~labsrc.lanes.analysis.Analyzer`:
it is stored as its constructor fields (pattern, stopwords, normal form, case
folding, stemmer, name, dashes), so the loaded index tokenises queries exactly as the
saved one did. An index saved before the analyzer read Unicode dashes as ``-``
has no ``dashes`` in ``params.json`` and loads with ``dashes=False``, analysing
queries as it did (on ASCII text the two are the same); save a rebuilt index to
fold them. An arbitrary function cannot be described reproducibly, and
saving one is an error rather than a silent change of behaviour on load. A
token pattern is a regular expression, that is, code: a load restores only the
lab's own patterns (``TRUSTED_TOKEN_PATTERNS``: the lesson's and the prose
analyzer's) from ``params.json``. An index saved with another pattern loads when
the caller passes the same analyzer, ``load_bm25_index(folder, analyzer=mine)``;
any other pattern in the file is refused, naming the file, the field and the value.

A save writes into a staging folder beside the target,
``.<name>.staging-<host>-<pid>-<hex>``, and swaps it in. When a save is killed,
its staging folder stays until the next save or load of the same target, which
removes it once that process is gone (never a live concurrent save's).

Everything is plain ``.npy`` and JSON: ``allow_pickle`` stays off, so loading a
directory can never run code.
"""

from __future__ import annotations

from pathlib import Path

from labsrc.errors import InvalidArgument
from labsrc.lanes.analysis import Analyzer
from labsrc.lanes.index_files import (
    INDEX_FORMAT,
    TRUSTED_TOKEN_PATTERNS,
    analyzer_from_description,
    describe_analyzer,
)
from labsrc.lanes.sparse import BM25Index

__all__ = [
    "INDEX_FORMAT",
    "TRUSTED_TOKEN_PATTERNS",
    "analyzer_from_description",
    "describe_analyzer",
    "load_bm25_index",
    "save_bm25_index",
]


def save_bm25_index(index: BM25Index, directory: str | Path) -> Path:
    """Write ``index`` to ``directory`` (created if needed), atomically, and return its path.

    The same as ``index.save(directory)``. An earlier save in the same directory
    stays loadable until the new one is complete, then its files are removed.
    """
    if not isinstance(index, BM25Index):
        raise InvalidArgument(f"save_bm25_index needs a BM25Index, not {type(index).__name__}")
    return index.save(directory)


def load_bm25_index(directory: str | Path, mmap: bool = True, *, analyzer: Analyzer | None = None) -> BM25Index:
    """Load an index written by :func:`save_bm25_index`; it scores exactly as the saved one.

    The same as ``BM25Index.load(directory, mmap=mmap, analyzer=analyzer)``. With
    ``mmap=True`` the arrays are read-only memory maps of the files (checked once
    on load, then paged in by the OS as queries touch them). Indexes saved in
    format versions 2 and 3 load too. ``analyzer``: the analyzer the index was
    saved with, needed only when its token pattern is not one of the lab's.
    """
    return BM25Index.load(directory, mmap=mmap, analyzer=analyzer)
