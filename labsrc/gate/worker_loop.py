"""The worker process's side of an isolated build: build once, then answer requests over a pipe as plain data.

:class:`~labsrc.gate.workers.IsolatedBuild` forks a process that runs
:func:`run_worker` and nothing else. It puts itself in a process group of its
own, ignores the terminal's Ctrl-C, points ``TMPDIR`` at a folder the gate
removes, calls the factory, and serves ``search``, ``concurrently``, ``versions``
and ``close`` requests until the pipe closes. Whatever user code raises, even
``SystemExit``, becomes the answer's error; the process always ends in
``os._exit``, so neither ``atexit`` handlers nor non-daemon threads keep it alive.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

from labsrc.errors import LabError
from labsrc.evaluation.subject import (
    Factory,
    Observation,
    Request,
    close_subject,
    describe_exception,
    observe_request,
    subject_versions,
)
from labsrc.lanes.dense import DenseSource
from labsrc.records.policy import PolicyChunk

__all__ = ["plain_observation", "run_worker", "unplain_observation"]


def plain_observation(observation: Observation) -> tuple[Any, ...]:
    """An observation as plain tuples and dicts (mapping proxies do not pickle)."""
    lanes = {lane: tuple(pairs) for lane, pairs in observation.lanes.items()}
    trace = None if observation.trace is None else dict(observation.trace)
    return lanes, trace, dict(observation.timings_ms), observation.error


def unplain_observation(data: tuple[Any, ...]) -> Observation:
    lanes, trace, timings, error = data
    return Observation(lanes, trace, timings, error=error)


def _observe_contained(subject: Any, request: Request) -> Observation:
    """:func:`observe`, with ``SystemExit`` and ``KeyboardInterrupt`` from user code turned into the case's error."""
    try:
        return observe_request(subject, request)
    except LabError:
        raise
    except BaseException as exc:  # SystemExit(0) from a plug-in must not end the worker as a success
        return Observation({"hybrid": ()}, None, {}, error=describe_exception(exc))


def _concurrently(subject: Any, requests: Sequence[Request], threads: int, send: Callable[[Any], None]) -> list[Any]:
    """Every request from ``threads`` threads at once, started together; each result as plain data."""
    results: list[Any] = [None] * len(requests)
    lock = threading.Lock()
    position = iter(range(len(requests)))
    barrier = threading.Barrier(threads)
    failure: list[BaseException] = []

    def serve() -> None:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return
        while True:
            with lock:
                i = next(position, None)
            if i is None:
                return
            try:
                results[i] = plain_observation(_observe_contained(subject, requests[i]))
            except BaseException as exc:  # a LabError: the lab's refusal of bad input
                failure.append(exc)
                results[i] = plain_observation(Observation({"hybrid": ()}, None, {}, error=describe_exception(exc)))
            send(("progress", None))

    workers = [threading.Thread(target=serve, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if failure:
        raise failure[0]
    return results


def _serve(conn: Connection, factory: Factory, chunks: tuple[PolicyChunk, ...], vectors: DenseSource | None) -> None:
    lock = threading.Lock()

    def send(message: Any) -> None:
        with lock:
            conn.send(message)

    try:
        subject = factory(chunks, vectors)
    except BaseException as exc:
        send(("build_error", describe_exception(exc)))
        return
    if not callable(getattr(subject, "search", None)):
        send(("build_error", f"returned {type(subject).__name__}, which has no search(query, caller, on_date, top_k) method"))
        return
    rrf_k = getattr(subject, "rrf_k", None)
    source = getattr(subject, "vectors", None) or vectors
    model = dict(getattr(source, "model", None) or {})
    send(("built", {"rrf_k": None if rrf_k is None else float(rrf_k), "dense_model": model}))
    while True:
        try:
            op, payload = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if op == "search":
                send(("result", plain_observation(_observe_contained(subject, payload))))
            elif op == "concurrently":
                requests, threads = payload
                send(("result", _concurrently(subject, requests, threads, send)))
            elif op == "versions":
                on_date, fallback = payload
                send(("result", subject_versions(subject, on_date, fallback)))
            elif op == "close":
                close_subject(subject)
                send(("closed", None))
                return
        except LabError as exc:
            send(("lab_error", (type(exc).__name__, str(exc))))


def run_worker(conn: Connection, parent_end: Connection, factory: Factory, chunks: tuple[PolicyChunk, ...],
           vectors: DenseSource | None, tmp: str) -> None:
    """The worker process's whole life; it always ends in ``os._exit`` (no atexit, no thread joins)."""
    code = 0
    try:
        parent_end.close()
        os.setpgid(0, 0)  # its own process group: close() kills whatever the factory started
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the gate's to handle
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.environ["TMPDIR"] = tmp
        tempfile.tempdir = tmp
        # Jupyter's streams belong to the kernel's process; the worker writes to the real ones.
        sys.stdout = sys.__stdout__ or sys.stdout
        sys.stderr = sys.__stderr__ or sys.stderr
        _serve(conn, factory, chunks, vectors)
    except BaseException:
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        os._exit(code)
