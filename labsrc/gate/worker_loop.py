"""The worker process's side of an isolated build: build once, then answer requests over a pipe as plain data.

:class:`~labsrc.gate.workers.IsolatedBuild` forks a process that runs
:func:`run_worker` and nothing else. It puts itself in a process group of its
own, becomes a child subreaper that dies with the gate (Linux,
:func:`~labsrc.gate.reaping.protect_worker`), ignores the terminal's Ctrl-C,
points ``TMPDIR`` at a folder the gate removes, sends its stdout and stderr to
the build's capture file, enters a PID namespace of its own where it can (the
factory then runs as the namespace's pid 2, :mod:`~labsrc.gate.containment`), calls the factory, and serves ``search``,
``concurrently``, ``versions`` and ``close`` requests until the pipe closes.
Whatever user code raises, even ``SystemExit`` or the lab's own ``LabError``, becomes the answer's error. It
never ends by itself while the gate lives: it waits for the gate to stop and
kill it, so that what it started is still in its tree when the gate looks
(:func:`~labsrc.gate.reaping.contain`). It always ends in ``os._exit``, so
neither ``atexit`` handlers nor non-daemon threads keep it alive.
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

from labsrc.errors import MissingDependency
from labsrc.evaluation.subject import (
    Factory,
    Observation,
    Request,
    SubjectError,
    close_subject,
    describe_exception,
    observe_request,
    subject_versions,
)
from labsrc.evaluation.plain import plain_score, plain_value
from labsrc.gate import reaping
from labsrc.lanes.dense import DenseSource
from labsrc.records.policy import PolicyChunk

__all__ = ["plain_observation", "run_worker", "unplain_observation"]


def plain_observation(observation: Observation) -> tuple[Any, ...]:
    """An observation as plain tuples and dicts (mapping proxies do not pickle).

    ``(lanes, trace, timings_ms, error, contract, payload)``: new fields are appended, never inserted, so the
    order read by :func:`unplain_observation` stays the one every earlier field was written in. Every value
    is a builtin already (:mod:`~labsrc.evaluation.plain` reduced the answer in :func:`observe`): the gate
    unpickles builtins only.
    """
    lanes = {lane: tuple(pairs) for lane, pairs in observation.lanes.items()}
    trace = None if observation.trace is None else dict(observation.trace)
    return (lanes, trace, dict(observation.timings_ms), observation.error, observation.contract,
            observation.payload)


def unplain_observation(data: tuple[Any, ...]) -> Observation:
    """The observation :func:`plain_observation` sent; fields an older sender did not append read as empty."""
    lanes, trace, timings, error, *rest = data
    return Observation(lanes, trace, timings, error=error, contract=rest[0] if rest else None,
                       payload=rest[1] if len(rest) > 1 else ())


def _built_info(subject: Any, vectors: DenseSource | None) -> dict[str, Any]:
    """What the gate reads of a build, as plain data: its ``rrf_k`` and its dense model's record."""
    rrf_k = getattr(subject, "rrf_k", None)
    try:
        fusion = None if rrf_k is None else plain_score(rrf_k, "rrf_k")
    except Exception:
        fusion = None
    source = getattr(subject, "vectors", None) or vectors
    try:
        model = plain_value(dict(getattr(source, "model", None) or {}), "the dense model")
    except Exception:  # a model record that is not plain data names no model
        model = {}
    return {"rrf_k": fusion, "dense_model": model}


def _observe_contained(subject: Any, request: Request) -> Observation:
    """:func:`observe`, with ``SystemExit`` and ``KeyboardInterrupt`` from user code turned into the case's error.

    Everything a search raises is its request's error, the lab's own errors included: the gate checked
    its input before any build, so a :class:`~labsrc.errors.LabError` here is what the retriever's code
    raised (``labsrc.bm25_rank(..., top_k=0)``), judged as a failed search, never the end of the run.
    """
    try:
        return observe_request(subject, request)
    except BaseException as exc:  # SystemExit(0) from a plug-in must not end the worker as a success
        return Observation({"hybrid": ()}, None, {}, error=describe_exception(exc))


def _concurrently(subject: Any, requests: Sequence[Request], threads: int, send: Callable[[Any], None]) -> list[Any]:
    """Every request from ``threads`` threads at once, started together; each result as plain data."""
    results: list[Any] = [None] * len(requests)
    lock = threading.Lock()
    position = iter(range(len(requests)))
    barrier = threading.Barrier(threads)

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
            results[i] = plain_observation(_observe_contained(subject, requests[i]))
            send(("progress", None))

    workers = [threading.Thread(target=serve, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return results


def _flush() -> None:
    """Push what user code printed into the capture file: the worker is killed, never left to exit and flush."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BaseException:  # a stream user code replaced or closed: its output is its own business
            pass
    reaping.flush_c_streams()


def _serve(conn: Connection, factory: Factory, chunks: tuple[PolicyChunk, ...], vectors: DenseSource | None) -> None:
    lock = threading.Lock()

    def send(message: Any) -> None:
        with lock:
            conn.send(message)

    def reply(message: Any) -> None:
        _flush()
        send(message)

    try:
        subject = factory(chunks, vectors)
    except SubjectError as exc:  # MODULE:FACTORY imported here and failed: its own one line, as it is
        reply(("spec_error", str.__str__(str(exc))))
        return
    except MissingDependency as exc:  # an extra not installed: the environment's, not the retriever's doing
        reply(("build_refused", describe_exception(exc)))
        return
    except BaseException as exc:
        reply(("build_error", describe_exception(exc)))
        return
    if not callable(getattr(subject, "search", None)):  # not a retriever at all: the plug-in contract, not a finding
        kind = type(subject).__name__
        reply(("build_refused", f"returned {kind}, which has no search(query, caller, on_date, top_k) method"))
        return
    reply(("built", _built_info(subject, vectors)))
    while True:
        try:
            op, payload = conn.recv()
        except (EOFError, OSError):
            return
        if op == "search":
            reply(("result", plain_observation(_observe_contained(subject, payload))))
        elif op == "concurrently":
            requests, threads = payload
            reply(("result", _concurrently(subject, requests, threads, send)))
        elif op == "versions":
            on_date, fallback = payload
            reply(("result", subject_versions(subject, on_date, fallback)))
        elif op == "close":
            close_subject(subject)
            reply(("closed", None))
            return


def _capture_output(output_fd: int | None) -> None:
    """fd 1 and 2 (and ``sys.stdout``/``sys.stderr``) into the build's capture file; stdin from /dev/null.

    Without a capture file, the old way: Jupyter's streams belong to the
    kernel's process, so the worker writes to the real ones when there are any.
    With one, ``sys.__stdout__`` is never needed: a notebook started without
    standard streams (``None``) works the same.
    """
    if output_fd is None:
        sys.stdout = sys.__stdout__ or sys.stdout
        sys.stderr = sys.__stderr__ or sys.stderr
        return
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # a retriever that reads stdin gets EOF, not the gate's terminal
    if null != 0:
        os.close(null)
    os.dup2(output_fd, 1)
    os.dup2(output_fd, 2)
    if output_fd not in (0, 1, 2):
        os.close(output_fd)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)


def _await_end(conn: Connection) -> None:
    """Wait for the gate to kill us (or for the pipe to close): ending now would orphan what the factory started."""
    while True:
        try:
            conn.recv()
        except BaseException:  # EOFError: the gate is gone or done with us
            return


def run_worker(conn: Connection, parent_end: Connection, factory: Factory, chunks: tuple[PolicyChunk, ...],
               vectors: DenseSource | None, tmp: str, *, gate_pid: int | None = None, output_fd: int | None = None,
               close_fds: Sequence[int] = (), token: str | None = None,
               enter_namespace: Callable[[Connection], bool] | None = None) -> None:
    """The worker process's whole life; it always ends in ``os._exit`` (no atexit, no thread joins).

    ``gate_pid`` is the process that forked it (to die with it), ``output_fd``
    the build's capture file for stdout and stderr, ``close_fds`` the gate's
    descriptors no worker may hold (the watchdog's pipe, other builds' capture
    files), and ``token`` goes in the environment of everything it starts
    (:data:`~labsrc.gate.reaping.TOKEN_VARIABLE`). ``enter_namespace``
    (:func:`~labsrc.gate.containment.enter_namespace`) is called last, before
    any user code: where it makes a PID namespace, the factory runs as its pid 2
    and this process only waits (:mod:`~labsrc.gate.containment`).
    """
    code = 0
    started = False
    try:
        parent_end.close()
        for fd in close_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        os.setpgid(0, 0)  # its own process group: close() kills whatever the factory started
        if gate_pid is not None:
            reaping.protect_worker(gate_pid)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the gate's to handle
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.environ["TMPDIR"] = tmp
        tempfile.tempdir = tmp
        if token is not None:
            os.environ[reaping.TOKEN_VARIABLE] = token
        _capture_output(output_fd)
        if enter_namespace is not None:
            enter_namespace(conn)  # returns in the process that runs the factory, whichever that is
        started = True
        _serve(conn, factory, chunks, vectors)
    except BaseException as exc:
        code = 1
        if not started:  # the gate waits for the build's first answer: it must not wait for its clock
            try:
                conn.send(("build_error", f"the worker process could not start: {describe_exception(exc)}"))
            except BaseException:
                pass
    finally:
        try:
            _flush()
            if gate_pid is not None:
                _await_end(conn)
        finally:
            os._exit(code)
