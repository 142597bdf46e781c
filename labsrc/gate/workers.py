"""Every build in its own process: a retriever the lab did not build, contained and on a clock.

The gate's comparisons mean something only if each build is what the factory
makes of the chunks it is handed *now*. A factory called twice in one process can
reuse what its first call left behind (a module-level cache, a class attribute,
a client's session), and then a rebuild agrees with the build it should check.
So every build the gate makes (:class:`IsolatedBuild`) lives in a fresh worker
process, forked from the gate before any build ran there:

* no Python object, module global or cache survives from one build to the next;
  a factory can still share a server it reconnects to (a DSN, a URL);
* what the retriever returns comes back as plain data (ids, scores, the trace),
  checked inside the worker, in time linear in ``top_k`` (an endless iterator or
  a million pairs cost no more than ``top_k + 1`` items);
* the build and every search are on a clock (``build_timeout_s``,
  ``search_timeout_s``): a search that does not answer in time fails its case
  with "timed out after N s", the worker is killed, and the next search gets a
  fresh build;
* whatever user code raises (``SystemExit`` and ``KeyboardInterrupt`` too) is a
  failure of that build or that search, never the end of the gate's process;
* the worker runs in its own process group with its own temporary folder, and
  :meth:`IsolatedBuild.close` kills the group (threads the factory started,
  processes it spawned) and removes the folder: nothing is left behind;
* on Linux the factory runs in a PID namespace of its own where the machine
  allows one (:mod:`~labsrc.gate.containment`), which no process it starts can
  leave, and the worker is a child subreaper that dies with the gate: when the
  build ends every process it started is found, killed and named in
  :attr:`IsolatedBuild.leftovers` (:mod:`~labsrc.gate.reaping`), and while a
  build is alive a watchdog resumes the gate if anything stops it;
* what the retriever prints (fd 1 and 2, its child processes' too) goes to a
  capture file of the build's (:mod:`~labsrc.gate.capture`), never into the
  gate's verdict lines; the gate reads it when the build ends
  (:attr:`IsolatedBuild.output`) and nothing of it stays on disk.

Workers are forked (POSIX ``fork``), so a factory needs no pickling: a closure,
a notebook's function or a bound method works. Platforms without ``fork`` are
refused with a clear error. Without Linux's ``/proc`` and ``prctl`` (macOS) the
worker's process group is killed as before, ``leftovers`` stays empty and no
watchdog runs; the capture of the output works on every platform.
"""

from __future__ import annotations

import datetime as dt
import os
import pickle
import shutil
import signal
import tempfile
import time
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection, Pipe
from typing import Any

from labsrc.evaluation.plain import loads_plain
from labsrc.gate import containment, reaping
from labsrc.gate.capture import OUTPUT_LIMIT_BYTES, capture_file, read_capture
from labsrc.gate.config import DEFAULT_BUILD_TIMEOUT_S, DEFAULT_SEARCH_TIMEOUT_S, check_timeout
from labsrc.evaluation.subject import BuildError, Factory, Observation, Request, SubjectError, subject_name
from labsrc.gate.worker_loop import run_worker, unplain_observation
from labsrc.lanes.dense import DenseSource
from labsrc.records.policy import PolicyChunk

__all__ = [
    "IsolatedBuild",
    "OUTPUT_LIMIT_BYTES",
    "live_workers",
]

#: Seconds a worker gets to close its retriever before its process group is killed.
_CLOSE_GRACE_S = 10.0


_LIVE: weakref.WeakSet[IsolatedBuild] = weakref.WeakSet()


def live_workers() -> int:
    """How many worker processes are running now (tests check that none outlive a run)."""
    me = os.getpid()
    return sum(1 for build in list(_LIVE) if build.alive and build._owner == me)


class IsolatedBuild:
    """``factory(chunks, vectors)`` built in a fresh worker process, searched over a pipe, on a clock.

    Raises :class:`~labsrc.evaluation.subject.SubjectError` when the build fails,
    returns something without ``search``, or takes longer than ``build_timeout_s``.
    :meth:`search` never raises for the retriever's failures: a search that raises
    or breaks the contract gives an observation with ``error`` set; one that takes
    longer than ``search_timeout_s`` gives "timed out after N s", and the worker is
    killed; the next call builds again in a fresh worker (``restarts`` counts them).
    What the retriever raised is its search's error whatever its class, the lab's own
    :class:`~labsrc.errors.LabError` included: it is never raised again here.

    When a worker ends (:meth:`close`, or a kill after a timeout), two things
    are kept, over every restart: :attr:`leftovers`, the processes the factory
    or retriever started outside the worker's process group that were still
    running (``pid NNN `cmdline```; each was killed), and :attr:`output`, what
    the retriever printed to stdout and stderr (the last 64 KiB of each worker;
    each restart's part starts with a ``--- restart N ---`` line). A build that
    fails raises a :class:`~labsrc.evaluation.subject.SubjectError` carrying the
    same two as its ``output`` and ``leftovers`` attributes. :attr:`containment` names what held its
    processes (:func:`~labsrc.gate.containment.containment_kind`: ``"pid-namespace"`` where it can).
    """

    def __init__(
        self,
        factory: Factory,
        chunks: Sequence[PolicyChunk],
        vectors: DenseSource | None,
        *,
        what: str = "build",
        build_timeout_s: float = DEFAULT_BUILD_TIMEOUT_S,
        search_timeout_s: float = DEFAULT_SEARCH_TIMEOUT_S,
    ) -> None:
        if not callable(factory):
            raise SubjectError(
                f"the factory must be callable as factory(chunks, vectors), not {type(factory).__name__}"
            )
        if not hasattr(os, "fork"):
            raise SubjectError("the gate builds each retriever in a forked worker process; this platform has no fork()")
        self.factory = factory
        self.chunks = tuple(chunks)
        self.vectors = vectors
        self.what = what
        self.build_timeout_s = check_timeout(build_timeout_s, "build_timeout_s")
        self.search_timeout_s = check_timeout(search_timeout_s, "search_timeout_s")
        self.restarts = 0
        self.info: Mapping[str, Any] = {}
        self.leftovers: tuple[str, ...] = ()
        self._outputs: list[str] = []
        self._pid: int | None = None
        self._conn: Connection | None = None
        self._tmp: str | None = None
        self._capture: int | None = None
        self._owner = os.getpid()  # a copy of this object in a forked child must not touch the worker
        self._broken: str | None = None  # why a restart failed: every later search reports it
        self._asking = False  # a request was sent and its answer never read (Ctrl-C while a search ran)
        _LIVE.add(self)
        self._start()

    # -- process management -----------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self._pid is not None

    @property
    def output(self) -> str:
        """What the retriever printed (stdout and stderr, in the order written) in every worker that ended."""
        return "".join(self._outputs)

    def _start(self) -> None:
        self._tmp = tempfile.mkdtemp(prefix="labsrc-gate-")
        self._capture = capture_file()
        reaping.preload()
        self.containment = containment.containment_kind()  # measured once per process, before any fork
        enter = containment.enter_namespace if self.containment == "pid-namespace" else None
        gate = os.getpid()
        parent_end, child_end = Pipe(duplex=True)
        reaping.WATCHDOG.acquire()
        # Descriptors of the gate's no worker may keep: the watchdog's pipe (a worker holding it would hide the
        # gate's death from the watchdog) and the capture files of the other builds this process has alive.
        others = [b._capture for b in list(_LIVE) if b is not self and b._owner == gate and b._capture is not None]
        private = (*reaping.WATCHDOG.fds, *others)
        with warnings.catch_warnings():
            # Python 3.12+ warns that fork() in a threaded process may deadlock the child; the child
            # touches no lock the parent's threads hold before it runs the factory, and it is on a clock.
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                pid = os.fork()
            except BaseException:
                reaping.WATCHDOG.release()
                os.close(self._capture)
                self._capture = None
                parent_end.close()
                child_end.close()
                raise
        if pid == 0:  # the worker
            run_worker(child_end, parent_end, self.factory, self.chunks, self.vectors, self._tmp, gate_pid=gate,
                       output_fd=self._capture, close_fds=private, token=reaping.worker_token(gate, os.getpid()),
                       enter_namespace=enter)
        child_end.close()
        self._pid, self._conn = pid, parent_end
        try:
            os.setpgid(pid, pid)  # also set by the child: no window in which a kill misses the group
        except OSError:
            pass
        reaping.WATCHDOG.tell_started(pid)
        name = subject_name(self.factory)
        try:
            kind, payload = self._receive(self.build_timeout_s)
        except TimeoutError:
            self._kill()
            raise self._failed(
                f"{name} did not finish building ({self.what}, {len(self.chunks)} chunks) within "
                f"{self.build_timeout_s:g} s (build_timeout_s)"
            ) from None
        except EOFError:
            status = self._kill()
            raise self._failed(f"{name}'s worker process ended while building ({self.what}){status}") from None
        if kind == "spec_error":  # the module named by MODULE:FACTORY could not be imported in the worker: input
            self._kill()
            raise self._failed(payload, SubjectError)
        if kind in ("build_error", "build_refused"):  # refused: a missing extra, or no search(): not a finding
            self._kill()
            raise self._failed(f"{name} raised while building ({self.what}, {len(self.chunks)} chunks): {payload}",
                               BuildError if kind == "build_error" else SubjectError)
        if enter is not None and containment.namespace_of(pid) is None:
            self.containment = "subreaper"  # the kernel refused this worker its namespace: it built as the subreaper
        self.info = payload

    def _failed(self, message: str, kind: type[SubjectError] = BuildError) -> SubjectError:
        """The build's error, carrying what its workers printed and left (``output``, ``leftovers``).

        A build that fails in ``__init__`` returns no object to read them from,
        and what a factory printed before it raised is often the reason.
        """
        error = kind(message)
        error.output = self.output  # type: ignore[attr-defined]
        error.leftovers = self.leftovers  # type: ignore[attr-defined]
        return error

    def _receive(self, timeout: float, on_progress: Callable[[], None] | None = None) -> tuple[str, Any]:
        """The next message that is not a heartbeat; ``timeout`` counts from the last sign of life."""
        conn = self._conn
        if conn is None:
            raise EOFError
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not conn.poll(remaining):
                raise TimeoutError
            try:
                kind, payload = loads_plain(conn.recv_bytes())  # builtins only: no class of the retriever's runs here
            except (OSError, ValueError, TypeError, AttributeError, ImportError, pickle.UnpicklingError):
                raise EOFError from None  # a torn or foreign message
            if kind != "progress":
                return kind, payload
            deadline = time.monotonic() + timeout
            if on_progress is not None:
                on_progress()

    def _kill(self) -> str:
        """Find and kill what the worker started, kill its group, reap it, keep its output; a note on how it ended.

        The pipe is closed only after the worker is stopped: a worker that saw it
        close would end, and hand what it started to init before we looked.
        """
        note = ""
        if os.getpid() != self._owner:  # a fork of the gate (a worker, a user's child) holds a copy of this object
            return note
        pid, self._pid = self._pid, None
        self._asking = False  # whatever was asked of this worker goes with it
        ended: int | None = None  # the wait status of the process that ran the factory, when it is not the worker
        if pid is not None:
            if reaping.SUPPORTED:
                try:
                    escapees, ended = reaping.contain(pid, reaping.worker_token(os.getpid(), pid),
                                                      namespace=self.containment == "pid-namespace")
                    self.leftovers += escapees
                except OSError:  # /proc unreadable (hidepid): the group is still killed below
                    pass
            for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
                try:
                    target()
                    break
                except OSError:
                    continue
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if pid is not None:
            try:
                _, status = os.waitpid(pid, 0)
                status = status if ended is None else ended
                if os.WIFEXITED(status) and os.WEXITSTATUS(status):
                    note = f" (exit status {os.WEXITSTATUS(status)})"
                elif os.WIFSIGNALED(status) and os.WTERMSIG(status) != signal.SIGKILL:
                    note = f" (killed by signal {os.WTERMSIG(status)})"
            except ChildProcessError:
                pass
            reaping.WATCHDOG.release(pid)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        if self._capture is not None:
            fd, self._capture = self._capture, None
            text = read_capture(fd)
            if text and self.restarts:
                text = f"--- restart {self.restarts} ---\n" + text
            if text and not text.endswith("\n"):
                text += "\n"
            if text:
                self._outputs.append(text)
        return note

    def close(self) -> None:
        """Close the retriever in its worker (best effort, on a clock), then kill what is left. Idempotent.

        A worker still busy with a request whose answer was never read (the gate was interrupted while a
        search ran) cannot close before that search ends: it is killed at once, not after the grace period.
        """
        if self._conn is not None and not self._asking:
            try:
                self._conn.send(("close", None))
                self._receive(_CLOSE_GRACE_S)
            except (TimeoutError, EOFError, OSError):
                pass
        self._kill()
        _LIVE.discard(self)

    def __enter__(self) -> IsolatedBuild:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # a forgotten build must not leave a process behind
        try:
            self._kill()
        except Exception:
            pass

    # -- requests -----------------------------------------------------------------------------
    def _call(self, op: str, payload: Any, timeout: float, on_progress: Callable[[], None] | None = None) -> Any:
        """Send one request and return its result; TimeoutError or EOFError when none came."""
        if self._conn is None:
            raise EOFError
        try:
            self._conn.send((op, payload))
        except OSError:
            raise EOFError from None
        self._asking = True
        _, result = self._receive(timeout, on_progress)
        self._asking = False
        return result

    def _ensure(self) -> str | None:
        """A running worker, building again after a kill; the reason when it cannot."""
        if self._broken is not None:
            return self._broken
        if self._pid is None:
            self.restarts += 1
            try:
                self._start()
            except SubjectError as exc:
                self._broken = f"the build could not be restarted after its worker was stopped: {exc}"
                return self._broken
        return None

    def search(self, request: Request) -> Observation:
        """One ``search`` call in the worker, as an observation (see the class docs)."""
        broken = self._ensure()
        if broken is not None:
            return Observation({"hybrid": ()}, None, {}, error=broken)
        try:
            return unplain_observation(self._call("search", request, self.search_timeout_s))
        except TimeoutError:
            self._kill()
            return Observation(
                {"hybrid": ()}, None, {},
                error=f"timed out after {self.search_timeout_s:g} s (search_timeout_s); the worker was killed",
            )
        except EOFError:
            status = self._kill()
            return Observation({"hybrid": ()}, None, {}, error=f"the worker process ended during search{status}")

    def concurrently(
        self, requests: Sequence[Request], threads: int, on_progress: Callable[[], None] | None = None
    ) -> tuple[list[Observation] | None, str | None]:
        """Every request from ``threads`` threads at once: ``(observations, None)`` or ``(None, why not)``.

        The clock is ``search_timeout_s`` since the last request that finished.
        """
        broken = self._ensure()
        if broken is not None:
            return None, broken
        try:
            results = self._call("concurrently", (tuple(requests), threads), self.search_timeout_s, on_progress)
        except TimeoutError:
            self._kill()
            return None, (f"no request finished within {self.search_timeout_s:g} s (search_timeout_s) while "
                          f"{threads} threads searched at once; the worker was killed")
        except EOFError:
            status = self._kill()
            return None, f"the worker process ended while {threads} threads searched at once{status}"
        return [unplain_observation(r) for r in results], None

    def versions(self, on_date: dt.date, fallback: str) -> dict[str, str]:
        """The retriever's own ``versions(on_date)``, or ``{"retriever": fallback}``."""
        if self._ensure() is None:
            try:
                return dict(self._call("versions", (on_date, fallback), self.search_timeout_s))
            except (TimeoutError, EOFError):
                self._kill()
        return {"retriever": fallback}
