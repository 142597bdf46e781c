"""The load's text analysis, in worker processes, rendered as the staging table's ``COPY`` text.

Loading spends most of its Python time here: the lab's analyzer on every
chunk, then each chunk's distinct terms and counts written as a row of
``lab_load_terms (chunk_id, terms text[], tfs int4[])``. Both are pure Python
and CPU-bound, so a large corpus is split into one contiguous slice per core,
and each slice is analysed by a process of its own (``python -m
labsrc.engines.analysis_pool``, fed a pickle on stdin). A worker sends back
its chunks' analysed lengths and its rows already in PostgreSQL's text
``COPY`` format: one ``bytes`` object, not millions of Python strings to
pickle. The slices are joined in order, so the rows are the ones one process
writes, byte for byte.

Plain subprocesses, not :mod:`multiprocessing`: a ``spawn`` or ``forkserver``
pool re-imports the caller's ``__main__`` (a script without a main guard would
run again in every worker), and ``fork`` is unsafe once the caller has
threads. The analyzer must pickle (the lab's :class:`~labsrc.lanes.analysis.Analyzer`
does; a lambda does not). If it does not, if the corpus is small, or if a
worker fails in any way (an analyzer that raises, a killed process,
unreadable output), the analysis runs here in-process instead, which raises
the analyzer's own error with its own traceback.

Measured on 100,000 SciFact chunks, 2 cores: see docs/postgres.md, "Loading".
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Sequence

from labsrc.engines.server import package_root

__all__ = ["PARALLEL_FROM", "analyse_for_copy", "staging_rows"]

#: Fewest chunks analysed in worker processes (below it, starting them costs more than they save).
PARALLEL_FROM = 20_000

Analyse = Callable[[str], list[str]]

# Text COPY escapes backslash and the three control characters that end a field or a row (PostgreSQL docs,
# "COPY", "Text Format"); an array element is double-quoted with backslash and quote escaped ("Arrays",
# "Array Value Input"), so any term, even "NULL", "{" or "", is one element.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_ELEMENT_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"'})


def staging_rows(pairs: Sequence[tuple[str, str]], analyzer: Analyse) -> tuple[list[int], bytes]:
    """Each ``(chunk_id, text)``'s analysed length, and its staging row in text ``COPY`` format (UTF-8).

    A row is ``chunk_id<TAB>{"term",...}<TAB>{tf,...}``: the distinct terms in first-occurrence order
    with their counts. The server unnests them into ``lab_postings`` (:mod:`labsrc.engines.loading`).
    """
    lengths: list[int] = []
    lines: list[str] = []
    for chunk_id, text in pairs:
        analysed = analyzer(text)
        lengths.append(len(analysed))
        counts = Counter(analysed)
        # One escape pass over the row's terms rather than one per term (211 -> 153 us a SciFact chunk): NUL
        # stands for the separator while escaping, then becomes '","'. No storable term holds a NUL (PostgreSQL
        # text cannot), but an analyzer's term that does is escaped term by term and refused by the server.
        joined = "\0".join(counts)
        if joined.count("\0") == max(len(counts) - 1, 0):
            terms = '"' + joined.translate(_ELEMENT_ESCAPES).replace("\0", '","') + '"' if counts else ""
        else:
            terms = ",".join('"' + term.translate(_ELEMENT_ESCAPES) + '"' for term in counts)
        tfs = ",".join(map(str, counts.values()))
        lines.append(f"{chunk_id.translate(_COPY_ESCAPES)}\t{{{terms.translate(_COPY_ESCAPES)}}}\t{{{tfs}}}\n")
    return lengths, "".join(lines).encode("utf-8")


def _usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the OS says, else every CPU)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def analyse_for_copy(
    pairs: Sequence[tuple[str, str]], analyzer: Analyse, *, workers: int | None = None
) -> tuple[list[int], list[tuple[int, bytes]]]:
    """:func:`staging_rows` over every ``(chunk_id, text)``, in worker processes when it pays.

    Returns the analysed lengths in input order and the ``COPY`` text in slices, each with its row count,
    to be written in order.
    ``workers`` defaults to the number of CPUs this process may use.
    """
    count = max(1, min(_usable_cpus() if workers is None else workers, len(pairs)))
    if count > 1 and len(pairs) >= PARALLEL_FROM:
        try:
            payload_analyzer = pickle.dumps(analyzer)
        except Exception:  # noqa: BLE001 - any analyzer that does not pickle is analysed here
            payload_analyzer = None
        if payload_analyzer is not None:
            bounds = [len(pairs) * i // count for i in range(count + 1)]
            slices = [list(pairs[a:b]) for a, b in zip(bounds, bounds[1:])]
            results = _in_workers(payload_analyzer, slices)
            if results is not None:
                return [n for lengths, _ in results for n in lengths], [(len(ls), blob) for ls, blob in results]
    lengths, blob = staging_rows(pairs, analyzer)
    return lengths, [(len(lengths), blob)]


def _in_workers(analyzer: bytes, slices: list[list[tuple[str, str]]]) -> list[tuple[list[int], bytes]] | None:
    """Each slice analysed by a process of its own; ``None`` if any of them failed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root(), os.environ.get("PYTHONPATH")]))}
    outputs: list[bytes | None] = [None] * len(slices)
    processes: list[subprocess.Popen] = []

    def run(i: int, process: subprocess.Popen, payload: bytes) -> None:
        try:
            out, _ = process.communicate(payload)
        except (OSError, ValueError):
            return
        if process.returncode == 0:
            outputs[i] = out

    try:
        for _ in slices:
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "labsrc.engines.analysis_pool"],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                )  # fmt: skip
            )
        threads = [
            threading.Thread(target=run, args=(i, p, pickle.dumps((analyzer, s))), daemon=True)
            for i, (p, s) in enumerate(zip(processes, slices))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    except OSError:
        return None
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    results: list[tuple[list[int], bytes]] = []
    for out, pairs in zip(outputs, slices):
        try:
            lengths, blob = pickle.loads(out) if out is not None else (None, None)
        except Exception:  # noqa: BLE001 - unreadable output: analyse here instead
            return None
        if not isinstance(lengths, list) or not isinstance(blob, bytes) or len(lengths) != len(pairs):
            return None
        results.append((lengths, blob))
    return results


def _serve() -> None:
    """A worker: read ``(pickled analyzer, pairs)`` from stdin, write ``(lengths, COPY text)`` to stdout."""
    analyzer_bytes, pairs = pickle.loads(sys.stdin.buffer.read())
    result = staging_rows(pairs, pickle.loads(analyzer_bytes))
    sys.stdout.buffer.write(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    _serve()
