"""The embedded server's reaper: a tiny watchdog process that deletes the data directory whatever happens.

The data directory holds every chunk's text, hidden ones included, so it must
not outlive the process that started it. Cleanup code in that process cannot
promise this: ``SIGTERM`` and ``SIGKILL`` skip ``atexit`` and ``finally``, and a
``SIGINT`` can land in the middle of ``initdb``. So before the server is
created, :class:`~labsrc.engines.server.EmbeddedServer` starts this module as
its own process (in its own session, so a terminal's Ctrl-C does not reach it)
with a pipe from the parent on its standard input. It waits for the pipe to
close, which happens however the parent ends (``stop()``, exit, a signal, a
crash), then stops every PostgreSQL process serving the directory (fast
shutdown, then ``SIGKILL``) and deletes the directory, and any further
directories it was given: the server's socket directory, when that had to live
elsewhere (:mod:`labsrc.engines.socket_dir`). ``stop()`` closes the pipe itself
and waits for the reaper, so when it returns the directories are gone.

Run as ``python -m labsrc.engines.reaper DIRECTORY [ALSO ...]``.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from pathlib import Path

__all__ = ["reap"]

_SERVER_PROGRAMS = frozenset({"postgres", "initdb", "pg_ctl", "pg_basebackup"})

#: How long a fast shutdown may take before the server's processes are killed.
SHUTDOWN_GRACE_S = 5.0


def _postmaster_pid(pgdata: Path) -> int | None:
    try:
        return int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def _server_processes(directory: Path) -> list:
    """PostgreSQL's own processes (postmaster, initdb, pg_ctl, pg_basebackup) whose command line names ``directory``."""
    import psutil

    found = []
    needle = str(directory)
    for proc in psutil.process_iter(attrs=["pid", "name", "cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if proc.info.get("name") in _SERVER_PROGRAMS and any(needle in part for part in cmdline):
            found.append(proc)
    return found


def reap(directory: str | Path, *also: str | Path) -> None:
    """Stop whatever PostgreSQL serves ``directory/pgdata``, then delete ``directory`` and ``also`` (idempotent)."""
    import psutil

    directory = Path(directory)
    pid = _postmaster_pid(directory / "pgdata")
    if pid is not None:
        try:
            os.kill(pid, signal.SIGINT)  # "fast" shutdown: roll back sessions, stop at once
        except (ProcessLookupError, PermissionError):
            pass
    procs = _server_processes(directory)
    _, alive = psutil.wait_procs(procs, timeout=SHUTDOWN_GRACE_S if pid is not None else 0.5)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=SHUTDOWN_GRACE_S)
    paths = [directory, *map(Path, also)]
    for _ in range(20):  # a dying backend may still create a file; try again briefly
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)
        if not any(path.exists() for path in paths):
            return
        time.sleep(0.1)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m labsrc.engines.reaper DIRECTORY [ALSO ...]", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the pipe closing ends the wait
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        while sys.stdin.buffer.read(4096):
            pass
    finally:
        reap(*argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
