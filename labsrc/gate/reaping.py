"""Nothing outlives the gate: what a worker started is found and killed, and a stopped gate is resumed.

A worker's process group is not a fence. A factory can start a helper in a
session of its own (``subprocess.Popen(..., start_new_session=True)``) or by a
double fork (fork, ``setsid``, fork, exit); ``killpg`` misses the first, and the
second is handed to init, out of the worker's tree. So on Linux each worker is
made a *child subreaper* (:func:`protect_worker`): the kernel hands every orphan
among its descendants to the worker instead of init, and every process the
factory started stays in the worker's tree for as long as the worker lives. The
worker never ends by itself; when its build ends, :func:`contain` freezes its
group, walks the tree from the worker's pid (``/proc/*/stat``), freezes every
descendant (``SIGSTOP``: a frozen process cannot fork a new one while we look),
names those outside the worker's group (the escapees), kills them all and waits
until none is left. A worker that died before that (``os._exit`` in user code,
a crash) left its orphans to init: they are found by the token every worker puts
in its environment (:data:`~labsrc.gate.procfs.TOKEN_VARIABLE`), which every
program it starts inherits unless it is given an environment of its own.

Helpers that do not play along escape both (``clone(CLONE_PARENT)``, or
``prctl(PR_SET_CHILD_SUBREAPER, 0)`` and a double fork with a cleared
environment): where the kernel allows it the factory runs in a PID namespace of
its build's own, which no process leaves (:mod:`~labsrc.gate.containment`), and
these two are the fallback.

A factory can also stop the gate itself: ``os.kill(os.getppid(), signal.SIGSTOP)``
stops its parent for good, since nothing else would ever resume it. While builds
are alive a watchdog process (:class:`_Watchdog`, running
:func:`~labsrc.gate.procfs.watch`) reads the gate's state in ``/proc`` every
50 ms and sends ``SIGCONT`` to the gate and its process group when it finds them
stopped. The watchdog is not a descendant of any worker, runs in a session of
its own (a ``killpg`` of the gate's group does not stop it), and is killed a
second after the last build ends (at once at the end of :func:`keep_watchdog`),
or ends with the gate process, killing then the groups of the workers alive.

Without ``/proc`` (macOS) none of this runs: the worker's process group is
killed as before, nothing is named and no watchdog starts.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from labsrc.gate import containment, procfs
from labsrc.gate.procfs import TOKEN_VARIABLE

if TYPE_CHECKING:
    import subprocess

__all__ = [
    "SUPPORTED",
    "TOKEN_VARIABLE",
    "WATCHDOG",
    "Contained",
    "contain",
    "flush_c_streams",
    "keep_watchdog",
    "preload",
    "protect_worker",
    "watchdog_pid",
    "worker_token",
]

#: Linux with ``/proc`` and ``prctl``: subreapers, the descendant walk and the watchdog all work.
SUPPORTED = sys.platform.startswith("linux") and os.path.isdir("/proc/self")

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36

#: How long :func:`contain` waits, per phase, for a process that does not stop or die.
CONTAIN_TIMEOUT_S = 2.0

#: The watchdog's polling period: about the longest the gate stays stopped.
WATCH_INTERVAL_S = 0.05

#: Seconds the watchdog outlives the last build, so that the builds of a gate run, made one after
#: the other, share one (starting an interpreter costs 15-30 ms of CPU; a second is far below a run).
WATCHDOG_LINGER_S = 1.0

# Per gate process: part of every worker's token, so a process of another gate is never taken for ours.
_NONCE = os.urandom(4).hex()


def _gate_prefix(gate_pid: int) -> str:
    return f"{_NONCE}.{gate_pid}."


def worker_token(gate_pid: int, worker_pid: int) -> str:
    """The value of :data:`TOKEN_VARIABLE` in the environment of a worker (and of what it starts)."""
    return f"{_gate_prefix(gate_pid)}{worker_pid}"


# -- the worker's side ------------------------------------------------------------------------------------------

_LIBC = None
_C_STDOUT = None


def preload() -> None:
    """Load libc in the gate process before it forks a worker, which then calls ``prctl`` without loading it."""
    global _LIBC, _C_STDOUT
    if _LIBC is None:
        try:
            import ctypes

            _LIBC = ctypes.CDLL(None, use_errno=True)
        except (ImportError, OSError):
            _LIBC = False
            return
        for name in ("stdout", "__stdoutp"):  # glibc and musl; macOS
            try:
                _C_STDOUT = ctypes.c_void_p.in_dll(_LIBC, name)
                break
            except ValueError:
                continue


def _prctl(option: int, value: int) -> bool:
    if not _LIBC or not SUPPORTED:
        return False
    try:
        return int(_LIBC.prctl(option, value, 0, 0, 0)) == 0
    except (AttributeError, OSError, TypeError):
        return False


def flush_c_streams() -> None:
    """``fflush(stdout)``: what C code printed through stdio reaches the capture file before the worker is killed.

    C's stdout is fully buffered when it is a file. Only stdout (stderr is not
    buffered): ``fflush(NULL)`` would take the lock of every stream, and one a
    thread is blocked reading from would block the worker with it.
    """
    if not _LIBC or _C_STDOUT is None or not _C_STDOUT.value:
        return
    try:
        _LIBC.fflush(_C_STDOUT)
    except (AttributeError, OSError, TypeError):
        pass


def protect_worker(gate_pid: int) -> bool:
    """In a freshly forked worker: become a child subreaper and die with the gate; False where unsupported.

    ``PR_SET_PDEATHSIG`` sends SIGKILL when the *thread* that forked the worker
    ends (so a gate that builds from a thread must keep it until the build is
    closed, as every gate run does), and so when the gate process dies. The
    check of ``getppid()`` after it closes the window in which the gate died first.
    """
    subreaper = _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    if _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL)) and os.getppid() != gate_pid:
        os._exit(1)
    return subreaper


# -- the gate's side: containment --------------------------------------------------------------------------------

class Contained(NamedTuple):
    """What :func:`contain` found: the escapees, named, and the wait status of a namespace's factory process."""

    escapees: tuple[str, ...]
    status: int | None = None  # None: it was alive, or there is no namespace (the worker is the caller's to reap)


def contain(worker: int, token: str | None = None, timeout: float = CONTAIN_TIMEOUT_S,
            namespace: bool = False) -> Contained:
    """Freeze, find and kill every process ``worker`` (a child of ours) started; the escapees, named.

    The worker's group is stopped first, then the worker's descendants, round
    after round until a walk of the tree finds no process it had not stopped
    (one forked between a walk and its stop is found by the next walk). Then all
    are killed, and we wait until none is alive. Escapees are the descendants
    outside the worker's process group, named ``pid NNN `cmdline``` in pid
    order. The worker itself is left stopped, not killed: the caller kills its
    group and reaps it. Each phase waits at most ``timeout`` seconds for a
    process that does not stop or die (one in uninterruptible sleep, or one we
    may not signal, such as a setuid program); every walk still happens.

    A worker that already ended left its orphans to init; then the processes
    whose environment holds ``token`` are taken instead (with their descendants).

    With ``namespace``, the PID namespace the worker made is all in its tree
    (:mod:`~labsrc.gate.containment`): the build's own group is then the
    factory process's, neither it nor the init is an escapee, an escapee is
    named by its pid inside (the number the retriever's code knew), and the
    namespace is ended with its init, the factory process's status read first.
    """
    layout = containment.namespace_of(worker) if namespace else None
    group = worker if layout is None or layout.first is None else layout.first  # the build's own process group
    quiet = set() if layout is None else {layout.init, group}  # never named: the init, the factory's process
    if not procfs.send(worker, signal.SIGSTOP, group=True):
        procfs.send(worker, signal.SIGSTOP)
    procfs.wait_for({worker}, "Tt", _deadline(timeout))
    alive = procfs.state(worker) not in "ZX"
    stopped: set[int] = set()
    escapees: dict[int, tuple[int, str]] = {}  # pid -> (its number where the retriever started it, its name)
    deadline = _deadline(timeout)
    for _ in range(1000):  # every round stops all it found, so the tree cannot keep growing
        if alive:
            table = procfs.tree(worker)
            found = set(table)
        else:
            table = procfs.process_table()
            found = procfs.with_token(token + "\0", table) if token else set()  # the NUL: worker 12 is not 123
        new = found - stopped - {worker}
        if not new:
            break
        for pid in sorted(new):
            procfs.send(pid, signal.SIGSTOP)
            # A helper that already ended is a zombie (of the subreaper's, the init's) until it dies: not a leftover.
            if table.get(pid, (0, group))[1] != group and pid not in quiet and procfs.state(pid) not in "ZX":
                local = pid if layout is None else layout.local(pid)
                escapees[pid] = (local, f"pid {local}" + procfs.describe(pid)[len(f"pid {pid}"):])
        stopped |= new
        procfs.wait_for(new, "Tt", deadline)
    named = tuple(name for _, name in sorted(escapees.values()))
    if layout is not None:
        return Contained(named, containment.end_namespace(layout, worker, stopped, timeout))
    for pid in sorted(stopped):
        procfs.send(pid, signal.SIGKILL)
    procfs.wait_for(stopped, "", _deadline(timeout))
    return Contained(named)


def _deadline(seconds: float) -> float:
    return time.monotonic() + seconds


# -- the gate's side: the watchdog -------------------------------------------------------------------------------

_WATCHDOG_CODE = (
    "import sys\n"
    "path = sys.argv[1]\n"
    "space = {'__name__': 'labsrc_gate_watchdog'}\n"
    "exec(compile(open(path, encoding='utf-8').read(), path, 'exec'), space)\n"
    "space['watch'](int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), 0, float(sys.argv[6]))\n"
)

# Popen objects of a parent's watchdog, seen in a forked child: kept referenced so that their __del__ never
# runs there (it would warn about a process that is the parent's to end).
_INHERITED: list[object] = []


class _Watchdog:
    """The gate process's watchdog: started by the first build, killed when no build has been alive for a second.

    :func:`keep_watchdog` holds it across builds and kills it as soon as it is
    left (a gate run wraps itself in it: nothing it started outlives it).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner = os.getpid()
        self._process: subprocess.Popen[bytes] | None = None
        self._pipe: int | None = None
        self._users = 0
        self._timer: threading.Timer | None = None
        self.starts = 0  # how many watchdogs this process started (tests and the overhead measurement read it)

    def _reset_in_child(self) -> None:
        """After a fork, nothing of the parent's watchdog is ours (its lock may even be held by a parent's thread)."""
        if self._process is not None:
            _INHERITED.append(self._process)
        self.__init__()  # type: ignore[misc]

    @property
    def fds(self) -> tuple[int, ...]:
        """Descriptors a worker must close: holding the pipe's write end, it would hide the gate's death."""
        return () if self._pipe is None or os.getpid() != self._owner else (self._pipe,)

    @property
    def pid(self) -> int | None:
        process = self._process  # read once: another thread's _stop() may clear it meanwhile
        if os.getpid() != self._owner or process is None:
            return None
        return process.pid

    def _start(self) -> None:
        path = os.path.abspath(procfs.__file__)
        if not SUPPORTED or not sys.executable or not os.path.isfile(path):
            return
        import subprocess

        read_end, write_end = os.pipe()
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _WATCHDOG_CODE, path, str(self._owner), _gate_prefix(self._owner),
                 str(int(signal.SIGCONT)), str(int(signal.SIGKILL)), str(WATCH_INTERVAL_S)],
                stdin=read_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True,
                start_new_session=True,
            )
        except OSError:
            os.close(write_end)
            return
        finally:
            os.close(read_end)
        self._pipe = write_end
        self.starts += 1

    def _stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        process, pipe = self._process, self._pipe
        if process is not None:
            with contextlib.suppress(OSError):
                process.kill()
            process.wait()
        # Forgotten only once reaped: ``pid`` (read without the lock) says None only when the process is gone.
        self._process = self._pipe = None
        if pipe is not None:
            os.close(pipe)

    def _stop_if_idle(self) -> None:
        with self._lock:
            if self._users == 0 and os.getpid() == self._owner:
                self._stop()

    def _tell(self, message: str) -> None:
        if self._pipe is None:
            return
        try:
            os.write(self._pipe, message.encode() + b"\n")
        except OSError:  # the watchdog was killed from outside: the next build starts another
            self._stop()

    def acquire(self) -> None:
        """One more user (a build about to fork its worker, or :func:`keep_watchdog`); starts it when needed."""
        if os.getpid() != self._owner:
            self._reset_in_child()
        with self._lock:
            self._users += 1
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._process is not None and self._process.poll() is not None:
                self._stop()
            if self._process is None:
                self._start()

    def tell_started(self, worker: int) -> None:
        """A worker now leads process group ``worker``: the watchdog kills the group if the gate dies first."""
        if os.getpid() == self._owner:
            with self._lock:
                self._tell(f"+{worker}")

    def release(self, worker: int | None = None, linger: float = WATCHDOG_LINGER_S) -> None:
        """One user fewer (``worker``'s group is gone); after the last, the watchdog is killed ``linger`` s later."""
        if os.getpid() != self._owner:
            return
        with self._lock:
            if worker is not None:
                self._tell(f"-{worker}")
            self._users = max(0, self._users - 1)
            if self._users or self._process is None:
                return
            # Inside a worker (a gate run by a factory) a lingering watchdog would be named as the outer build's
            # leftover: it goes at once.
            if linger <= 0 or TOKEN_VARIABLE in os.environ:
                self._stop()
            elif self._timer is None:
                self._timer = threading.Timer(linger, self._stop_if_idle)
                self._timer.daemon = True
                self._timer.start()

    def shutdown(self) -> None:
        """Kill the watchdog now, whoever holds it (at interpreter exit)."""
        if os.getpid() == self._owner:
            with self._lock:
                self._stop()


WATCHDOG = _Watchdog()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=WATCHDOG._reset_in_child)
# At exit the watchdog is killed and reaped before the process ends (a CLI run that ends while it lingers): the
# end of its pipe would end it too, but a moment later, after the process it belongs to is gone.
atexit.register(WATCHDOG.shutdown)


@contextlib.contextmanager
def keep_watchdog() -> Iterator[None]:
    """One watchdog for every build made inside (a gate run), killed as soon as the block is left."""
    WATCHDOG.acquire()
    try:
        yield
    finally:
        WATCHDOG.release(linger=0)


def watchdog_pid() -> int | None:
    """The pid of this process's running watchdog, or None."""
    return WATCHDOG.pid
