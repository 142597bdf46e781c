"""Which boundary holds what a build starts: a PID namespace where the kernel gives one, else a subreaper.

A subreaper (:func:`~labsrc.gate.reaping.protect_worker`) keeps a helper in the
worker's tree only while the helper plays along: ``clone(CLONE_PARENT)`` makes
it the gate's child, and ``prctl(PR_SET_CHILD_SUBREAPER, 0)`` before a double
fork hands it to init. A PID namespace is a boundary no process can leave:
every process created inside stays inside (``setsid``, ``CLONE_PARENT``, double
forks, nested namespaces included), orphans go to the namespace's init, and
when that init dies the kernel kills every process in it. So where the kernel
allows it, the worker (:func:`~labsrc.gate.worker_loop.run_worker`) calls
:func:`enter_namespace` before any user code runs::

    gate ── worker (in the gate's namespace: dies with the gate, waits for the init, reaps it)
              └── init (pid 1 of the build's namespace: reads a pipe only the worker holds, so it
                    │   ends with the worker; it reaps nothing, and ignores every signal from inside)
                    └── the factory's process (pid 2: builds, answers the gate's pipe)
                          └── whatever the retriever starts, however it starts it

When the build ends the gate freezes and names the namespace's processes as it
always did (:func:`~labsrc.gate.reaping.contain`, :func:`namespace_of`), then
kills them and the init (:func:`end_namespace`): nothing started in the build
outlives it.

The namespace gets a ``/proc`` of its own (in a mount namespace of its own,
private, so nothing is mounted outside): ``os.getpid()`` and a ``Popen``'s
``pid`` are the namespace's numbers, and ``/proc/<pid>`` must show those
processes, or a library that reads it (psutil) would read, and could signal,
another process of the machine. As root the worker unshares ``CLONE_NEWPID |
CLONE_NEWNS``; as another user ``CLONE_NEWUSER`` too, its own uid and gid mapped
to themselves. :func:`containment_kind` measures once per process which works
(a trial namespace in a forked child: 15-30 ms for a 100 MB gate, once) and
says what a build gets:

=================  ==============================================================================
``pid-namespace``  the kernel's boundary above; nothing a build starts survives it
``subreaper``      Linux without it (a container's seccomp filter, user namespaces switched off, a
                   ``/proc`` that may not be mounted again): the worker is a child subreaper and
                   carries a token (:mod:`~labsrc.gate.reaping`)
``process-group``  no ``/proc`` (macOS): the worker's process group is killed, nothing is named
=================  ==============================================================================
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
import warnings
from collections.abc import Collection
from dataclasses import dataclass
from multiprocessing.connection import Connection

from labsrc.gate import procfs

__all__ = [
    "KINDS",
    "Namespace",
    "containment_kind",
    "end_namespace",
    "enter_namespace",
    "exit_status",
    "namespace_of",
]

#: Every containment a build can have, strongest first.
KINDS = ("pid-namespace", "subreaper", "process-group")

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x2, 0x4, 0x8
_MS_REC = 0x4000
_MS_PRIVATE = 0x40000
_PR_SET_PDEATHSIG = 1

#: Tried in this order: root has what a PID namespace needs; anyone else gets it in a user namespace of their own.
_FLAG_CHOICES = (_CLONE_NEWPID | _CLONE_NEWNS, _CLONE_NEWUSER | _CLONE_NEWPID | _CLONE_NEWNS)

#: Seconds the trial namespace may take before the platform counts as one without.
_PROBE_TIMEOUT_S = 5.0

#: ``/proc/<pid>/stat`` field 52, ``exit_code`` (Linux 3.5+), counted after the command name.
_EXIT_CODE_FIELD = 49


@dataclass(frozen=True)
class _Measured:
    pid: int  # the process that measured: a forked child (a gate inside a build) measures again
    kind: str
    flags: int = 0  # what the worker unshares; 0 without a namespace


_MEASURED: _Measured | None = None
_LOCK = threading.Lock()
_LIBC = None


def _new_lock_after_fork() -> None:  # a fork while another thread measured must not leave the child a held lock
    global _LOCK
    _LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_after_fork)


def containment_kind() -> str:
    """What contains this process's builds: ``"pid-namespace"``, ``"subreaper"`` or ``"process-group"`` (:data:`KINDS`).

    Measured by the first call in each process (a trial namespace in a forked
    child) and cached: every build of a gate run gets the same. A build whose
    worker the kernel refused its namespace all the same says so in
    :attr:`~labsrc.gate.workers.IsolatedBuild.containment`.
    """
    global _MEASURED
    with _LOCK:
        if _MEASURED is None or _MEASURED.pid != os.getpid():
            _MEASURED = _measure()
        return _MEASURED.kind


def _measure() -> _Measured:
    if not (sys.platform.startswith("linux") and os.path.isdir("/proc/self")):  # as reaping.SUPPORTED
        return _Measured(os.getpid(), "process-group")
    if _libc() is None or not hasattr(os, "fork") or _nspid("self") is None:  # no NSpid: the gate could not tell
        return _Measured(os.getpid(), "subreaper")  # the namespace's processes apart (Linux < 4.1)
    for flags in _FLAG_CHOICES:
        if _try_namespace(flags):
            return _Measured(os.getpid(), "pid-namespace", flags)
    return _Measured(os.getpid(), "subreaper")


def _libc():  # ctypes.CDLL | None; loaded in the gate, before a worker forks
    global _LIBC
    if _LIBC is None:
        try:
            import ctypes

            _LIBC = ctypes.CDLL(None, use_errno=True)
            _LIBC.unshare, _LIBC.mount, _LIBC.prctl  # noqa: B018 (an AttributeError here means: not this libc)
        except (ImportError, OSError, AttributeError):
            _LIBC = False
    return _LIBC or None


def _try_namespace(flags: int) -> bool:
    """What a worker does, in a throwaway child: unshare, then be pid 1 of the namespace and see its own ``/proc``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() in a threaded process: the child runs no Python
        try:  # of the gate's beyond os and ctypes calls, and ends in os._exit
            child = os.fork()
        except OSError:
            return False
    if child == 0:
        code = 1
        try:
            if _unshare(flags):
                init = os.fork()
                if init == 0:
                    _libc().prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)  # ends with a trial that hung
                    os._exit(0 if os.getpid() == 1 and _mount_proc() and _proc_is_ours() else 1)
                code = 0 if os.waitpid(init, 0)[1] == 0 else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + _PROBE_TIMEOUT_S
    pause = 0.0002
    while True:
        done, status = os.waitpid(child, os.WNOHANG)
        if done:
            return status == 0
        if time.monotonic() >= deadline:  # a trial that hangs is a namespace this platform cannot give
            procfs.send(child, signal.SIGKILL)
            os.waitpid(child, 0)
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.01)


def _unshare(flags: int) -> bool:
    """``unshare(flags)`` in this (single-threaded) process, ids mapped, mounts made private; False if refused."""
    libc = _libc()
    if libc is None:
        return False
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(flags) != 0:
        return False
    try:
        if flags & _CLONE_NEWUSER:  # the same uid and gid inside: files, ``os.getuid()`` and ``~`` look as before
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
                try:
                    os.write(fd, text.encode())
                finally:
                    os.close(fd)
    except OSError:
        return False
    # Private before anything is mounted: with shared propagation (systemd's default) the build's /proc would be
    # mounted over the machine's.
    return libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) == 0


def _mount_proc() -> bool:
    """In the namespace's init: a ``/proc`` that shows the namespace (numbers as ``os.getpid()`` gives them)."""
    libc = _libc()
    return libc is not None and libc.mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None) == 0


def _proc_is_ours() -> bool:
    try:
        return os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        return False


# -- the worker's side -------------------------------------------------------------------------------------------

def enter_namespace(conn: Connection) -> bool:
    """In a freshly forked worker, before user code: go on as pid 2 of a PID namespace of the build's own.

    Returns True in the process that runs the factory (pid 2; it leads a
    process group of its own and holds ``conn``, the gate's pipe, alone), and
    False, having changed nothing, where the kernel refuses the namespace (the
    worker goes on as the subreaper it is). It never returns in the worker
    itself, which waits for the init and ends with it, nor in the init, which
    waits for the worker to die. Raises OSError when the namespace was made
    but its processes could not be (the build fails with the reason).
    """
    if _MEASURED is None or not _MEASURED.flags or not _unshare(_MEASURED.flags):
        return False
    watch_end, alive_end = os.pipe()  # the init reads end of file when the worker is gone, however it went
    init = os.fork()
    if init == 0:
        os.close(alive_end)
        _become_init(conn, watch_end)  # returns only in the factory's process
        return True
    os.close(watch_end)
    conn.close()  # the factory's process holds it alone: when that process ends, the gate reads end of file
    _wait_for_init(init)
    return False  # never reached


def _wait_for_init(init: int) -> None:
    """The worker's life after :func:`enter_namespace`: wait for the init (the gate kills it), reap it, end."""
    code = 0
    while True:
        try:
            _, status = os.waitpid(init, 0)
            code = max(os.waitstatus_to_exitcode(status), 0)
            break
        except ChildProcessError:
            break
        except BaseException:  # a signal handler of the gate's, inherited: the worker only ever waits
            continue
    os._exit(code)


def _become_init(conn: Connection, watch_end: int) -> None:
    """Pid 1: fork the factory's process (and return there), then wait for the worker to die, reaping nothing.

    Nothing inside can stop or end it (the kernel delivers a signal from the
    namespace to its init only if the init handles it, and it handles none);
    the gate kills it from outside. It reaps nothing, so the factory's process
    stays a zombie the gate reads its exit status from (:func:`exit_status`).
    """
    try:
        _libc().prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)  # the worker's death ends the namespace
        _mount_proc()  # a failed mount fails the build, in the factory's process
        # A group of its own. Not the worker's: a group without a number inside makes ``os.getpgid(1)`` 0 in the
        # factory, and ``os.killpg(0, sig)`` reaches the factory's own group. Nor any group led by another process
        # of the namespace: while the init holds that pid as its group, the kernel's teardown of the namespace
        # (which waits until no pid of it is in use) never ends.
        os.setpgid(0, 0)
        first = os.fork()
    except BaseException:
        os._exit(1)
    if first == 0:
        os.close(watch_end)
        os.setpgid(0, 0)  # the build's own group: what the factory starts in it is killed, not named
        if not _proc_is_ours():
            raise OSError("the build's PID namespace has no /proc of its own (mounting it failed)")
        return
    try:
        conn.close()
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        while os.read(watch_end, 1):
            pass
    finally:
        os._exit(0)


# -- the gate's side ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Namespace:
    """A build's PID namespace as the gate sees it: host pids (the gate's numbering) and the namespace's depth."""

    init: int  #: pid 1 inside
    first: int | None  #: pid 2 inside: the process that ran the factory (None if the gate cannot find it)
    level: int  #: the namespace's place in ``/proc/<pid>/status`` ``NSpid`` lists (1 below the gate's)

    def local(self, pid: int) -> int:
        """``pid``'s number inside the build's namespace (what the retriever's own code saw), or ``pid``."""
        numbers = _nspid(pid)
        return numbers[self.level] if numbers is not None and len(numbers) > self.level else pid


def _nspid(pid: int | str) -> tuple[int, ...] | None:
    """``NSpid`` of ``/proc/<pid>/status``: the process's pid in the gate's namespace, then in each one below."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"NSpid:"):
                    return tuple(int(n) for n in line.split()[1:])
    except (OSError, ValueError):
        return None
    return None


def namespace_of(worker: int) -> Namespace | None:
    """The namespace ``worker`` (a child of ours) made with :func:`enter_namespace`, or None (it made none)."""
    init = _first_child(worker)  # the worker forks nothing else
    mine, numbers = _nspid("self"), (None if init is None else _nspid(init))
    if numbers is None or mine is None or len(numbers) != len(mine) + 1 or numbers[-1] != 1:
        return None
    return Namespace(init, _first_child(init), len(mine))  # the init forks the factory's process first


def _first_child(pid: int) -> int | None:
    """The oldest child of ``pid``, a single-threaded process: the first in the kernel's list, zombies included."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", "rb") as f:
            children = f.read().split()
    except FileNotFoundError:  # a kernel without CONFIG_PROC_CHILDREN: the lowest pid (pids are handed out in order)
        children = sorted(p for p, (ppid, _) in procfs.process_table().items() if ppid == pid)
    except OSError:
        return None
    return int(children[0]) if children else None


def exit_status(pid: int) -> int | None:
    """The wait status of ``pid`` if it is a zombie (``/proc/<pid>/stat``'s ``exit_code``), else None."""
    fields = procfs.stat_fields(pid)
    if not fields or fields[0] != b"Z" or len(fields) <= _EXIT_CODE_FIELD:
        return None
    return int(fields[_EXIT_CODE_FIELD])


def end_namespace(namespace: Namespace, worker: int, members: Collection[int], timeout: float) -> int | None:
    """Kill the namespace, once :func:`~labsrc.gate.reaping.contain` stopped and named ``members``; the factory's status.

    The wait status of the process that ran the factory is read first, if it
    had ended (a zombie: the init reaps nothing). Then every member and the
    init are killed at once (the kernel kills anything left inside when the
    init dies), and the worker, resumed, reaps the init and ends, so that no
    zombie of the build outlives it. Waits at most ``timeout`` seconds for that.
    """
    status = exit_status(namespace.first) if namespace.first is not None else None
    for pid in sorted({*members, namespace.init}):
        procfs.send(pid, signal.SIGKILL)
    procfs.send(worker, signal.SIGCONT)
    _wait_until_ended(worker, timeout)
    return status


def _wait_until_ended(pid: int, timeout: float) -> None:
    """Until ``pid`` (a child of ours, not reaped here) has ended, or ``timeout`` seconds.

    A pidfd wakes us the moment it ends (Linux 5.3+); polling ``/proc`` backs off to 10 ms a look.
    """
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        procfs.wait_for({pid}, "", time.monotonic() + timeout)
        return
    try:
        select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
