"""Processes as Linux's ``/proc`` shows them, and the watchdog's loop: standard library only, nothing from labsrc.

:mod:`labsrc.gate.reaping` finds what a worker started with these functions, and
the watchdog runs :func:`watch` in a fresh interpreter (``python -I -S``) that
executes this one file: it imports ``os``, ``select`` and ``time`` and nothing
else, so the watchdog starts in the time the interpreter needs. (``signal``
would import ``enum`` and double that: signal numbers are passed in as ints.)
"""

from __future__ import annotations

import os
import select
import time

__all__ = [
    "TOKEN_VARIABLE",
    "descendants",
    "describe",
    "process_table",
    "send",
    "stat_fields",
    "state",
    "tree",
    "wait_for",
    "watch",
    "with_token",
]

#: The environment variable every worker sets; its value names the gate process and the worker.
TOKEN_VARIABLE = "LABSRC_GATE_WORKER"

#: A leftover's command line is cut to this many characters.
CMDLINE_CHARS = 80


def _read(path: str, limit: int = 4096) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name: state, ppid, pgrp, session, ...; None if gone."""
    data = _read(f"/proc/{pid}/stat")
    if not data:
        return None
    return data.rpartition(b")")[2].split()


def state(pid: int) -> str:
    """'R', 'S', 'T', 'Z', ... and 'X' when there is no such process."""
    fields = stat_fields(pid)
    return fields[0].decode("ascii", "replace") if fields else "X"


def process_table() -> dict[int, tuple[int, int]]:
    """Every process we can see: pid -> (ppid, pgrp)."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = stat_fields(int(name))
            if fields and len(fields) > 2:
                table[int(name)] = (int(fields[1]), int(fields[2]))
    return table


def _children(pid: int) -> set[int] | None:
    """Children of ``pid`` from ``/proc/<pid>/task/*/children``; None when the kernel has no such file."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return set()  # gone
    found: set[int] = set()
    for tid in tasks:
        data = _read(f"/proc/{pid}/task/{tid}/children", 1 << 20)
        if data is None:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # a thread that just ended
            return None
        found.update(int(child) for child in data.split())
    return found


def tree(root: int) -> dict[int, tuple[int, int]]:
    """Every process below ``root``: pid -> (ppid, pgrp).

    From the ``children`` files where the kernel has them (``CONFIG_PROC_CHILDREN``,
    the usual case): a cost in the size of the tree, a few reads for a worker
    that started nothing. The kernel lists children reliably only for stopped
    threads, which is why :func:`labsrc.gate.reaping.contain` stops a process
    before it asks for its children (and walks again until nothing new shows).
    Without them, from :func:`process_table` (every process on the machine).
    """
    found: dict[int, tuple[int, int]] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        children = _children(pid)
        if children is None:
            table = process_table()
            return {p: table[p] for p in descendants(root, table)}
        for child in children - found.keys() - {root}:
            fields = stat_fields(child)
            if fields and len(fields) > 2:
                found[child] = (int(fields[1]), int(fields[2]))
                todo.append(child)
    return found


def descendants(root: int, table: dict[int, tuple[int, int]]) -> set[int]:
    """Every process below ``root`` in ``table`` (children, their children, ...), ``root`` excluded."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if pid not in found and pid != root:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def with_token(prefix: str, table: dict[int, tuple[int, int]]) -> set[int]:
    """Processes whose environment holds ``TOKEN_VARIABLE=<prefix>...``, with their descendants.

    ``/proc/<pid>/environ`` is the environment a process was *started* with: a
    program the worker ran (``subprocess``, ``exec``) carries the token; a bare
    ``os.fork`` of the worker shows the gate's and is found as a descendant only.
    """
    needle = ("\0" + TOKEN_VARIABLE + "=" + prefix).encode()
    found = set()
    me = os.getpid()
    for pid in table:
        if pid != me:
            data = _read(f"/proc/{pid}/environ", 1 << 18)
            if data and needle in b"\0" + data:
                found.add(pid)
    for pid in list(found):
        found |= descendants(pid, table)
    return found


def describe(pid: int) -> str:
    """``pid NNN `cmdline``` (arguments joined by spaces, cut to about 80 characters)."""
    data = _read(f"/proc/{pid}/cmdline") or b""
    text = " ".join(w.decode("utf-8", "replace") for w in data.split(b"\0") if w)
    if not text:
        text = "[" + (_read(f"/proc/{pid}/comm") or b"?").decode("utf-8", "replace").strip() + "]"
    text = "".join(ch if ch.isprintable() else " " for ch in text)
    if len(text) > CMDLINE_CHARS:
        text = text[: CMDLINE_CHARS - 3] + "..."
    return f"pid {pid} `{text}`"


def send(pid: int, sig: int, group: bool = False) -> bool:
    """``kill`` (``killpg`` with ``group``); False when the process is gone or not ours to signal."""
    try:
        (os.killpg if group else os.kill)(pid, sig)
        return True
    except OSError:
        return False


def watch(gate: int, prefix: str, sigcont: int, sigkill: int, fd: int = 0, interval: float = 0.05) -> None:
    """The watchdog's life: resume the gate whenever it is stopped; clean up after it when it dies.

    ``fd`` is the read end of a pipe only the gate writes to: ``+PID`` when a
    worker starts, ``-PID`` when it is gone. The gate is gone when its
    ``/proc`` entry is (or it is a zombie), or when we are no longer its child;
    end of file alone is not enough (a process the gate forked may hold the
    pipe) but ends the watch too. Then the workers' groups still listed, and
    every process carrying a token of this gate (``prefix``), are killed: the
    workers themselves died with the gate (``PR_SET_PDEATHSIG``).

    Any stop of the gate is undone, Ctrl-Z included: a gate that a worker's
    ``SIGSTOP`` or ``killpg`` stopped looks exactly like one a terminal
    stopped. SIGCONT goes to the gate and to its process group (the other
    side of a pipe, ``labsrc gate | tee``, must run for the gate to write).
    """
    groups: set[int] = set()
    pending = b""
    while True:
        try:
            ready, _, _ = select.select([fd], [], [], interval)
        except InterruptedError:
            continue
        if ready:
            data = os.read(fd, 4096)
            if not data:
                break
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                if line[:1] == b"+":
                    groups.add(int(line[1:]))
                elif line[:1] == b"-":
                    groups.discard(int(line[1:]))
        fields = stat_fields(gate)
        if fields is None or fields[0] in (b"Z", b"X") or os.getppid() != gate:
            break
        if fields[0] == b"T":
            send(gate, sigcont)
            send(int(fields[2]), sigcont, group=True)
    # A dying process closes its descriptors before it becomes a zombie: give it a second to finish.
    deadline = time.monotonic() + 1.0
    while os.getppid() == gate and state(gate) not in "ZX":
        if time.monotonic() >= deadline:
            return  # our pipe closed, yet the gate lives: nothing of ours to clean up
        time.sleep(0.01)
    for group in sorted(groups):
        send(group, sigkill, group=True)
    for pid in sorted(with_token(prefix, process_table())):
        send(pid, sigkill)


def wait_for(pids: set[int], states: str, deadline: float) -> None:
    """Until every process in ``pids`` is in one of ``states``, a zombie or gone, or ``deadline`` (monotonic)."""
    waiting = set(pids)
    pause = 0.0002
    while waiting:
        waiting = {pid for pid in waiting if state(pid) not in states + "ZX"}
        if not waiting or time.monotonic() >= deadline:
            return
        time.sleep(pause)
        pause = min(pause * 2, 0.01)
