"""Nothing left on disk: the embedded server's data directory never outlives its process, however that ends.

The directory holds every chunk's text, hidden ones included. Each case runs a
real Python process (a subprocess) that starts an embedded server under a
directory of the test's own, ends it one way or another, and the test then
waits (generously) for that directory to be empty: close() after the server was
killed, SIGINT during start-up, SIGTERM, SIGKILL, and interpreter exit without
close(). While it exists the data directory is readable by its owner only.
"""

from __future__ import annotations

import queue
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from pg_support import requires_postgres

pytestmark = requires_postgres

WAIT_S = 90.0  # generous: a shared machine; the reaper usually needs well under a second

CHILD = r'''
import os, signal, sys, time
import labsrc
from labsrc.engines import EmbeddedServer, PostgresRetriever

mode, base = sys.argv[1], sys.argv[2]
# Ctrl-C as in a terminal: a job started in the background (nohup ... &) inherits SIGINT ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)

if mode == "sigint-during-start-up":
    import pgserver.postgres_server as ps
    real_pg_ctl = ps.pg_ctl
    def pg_ctl_then_hang(args, **kwargs):
        out = real_pg_ctl(args, **kwargs)  # the server is up: the worst moment to be interrupted
        if "start" in args:
            print("server started, start-up not finished", flush=True)
            time.sleep(600)
        return out
    ps.pg_ctl = pg_ctl_then_hang
    try:
        EmbeddedServer(directory=base)
    except KeyboardInterrupt:
        print("interrupted during start-up", flush=True)
        sys.exit(130)
    print("start-up finished (not expected)", flush=True)
    sys.exit(0)

server = EmbeddedServer(directory=base)
data = labsrc.lesson()
engine = PostgresRetriever(data.chunks, data.vectors, dsn=server.dsn)
assert engine.search("RPL-14", data.luna, data.eval_date, 2).fused
print("ready", server.data_directory, flush=True)
if mode == "killed-then-close":
    pid = int((server.data_directory / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    engine.close()
    server.stop()
    print("closed", flush=True)
elif mode == "exit-without-close":
    pass  # the interpreter exits with the server running and the retriever open
else:  # wait for the test's signal
    time.sleep(600)
'''


@pytest.fixture
def base():
    # Not under tmp_path: as root, pgserver runs PostgreSQL as another user, which must traverse the path,
    # and every pytest session (another worktree's too) resets /tmp/pytest-of-<user> to mode 0700.
    parent = Path(tempfile.mkdtemp(prefix="labsrc-cleanup-test-"))
    parent.chmod(0o755)
    yield parent / "base"
    shutil.rmtree(parent, ignore_errors=True)


def run_child(mode: str, base: Path) -> subprocess.Popen:
    base.mkdir()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, mode, str(base)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in child.stdout], daemon=True).start()
    child.lines = lines  # type: ignore[attr-defined]
    return child


def wait_for_line(child: subprocess.Popen, prefix: str) -> str:
    """The child's next line, within WAIT_S: a child that hangs (or never prints) fails the test, never hangs it."""
    try:
        line = child.lines.get(timeout=WAIT_S)  # type: ignore[attr-defined]
    except queue.Empty:
        child.kill()
        pytest.fail(f"no {prefix!r} line within {WAIT_S:g} s; the child said: {child.communicate(timeout=WAIT_S)[1][-3000:]}")
    if not line.startswith(prefix):
        child.kill()
        pytest.fail(f"expected {prefix!r}, got {line!r}; the child said: {child.communicate(timeout=WAIT_S)[1][-3000:]}")
    return line.strip()


def assert_left_nothing(child: subprocess.Popen, base: Path) -> None:
    child.wait(timeout=WAIT_S)
    deadline = time.monotonic() + WAIT_S
    while any(base.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(base.iterdir()) == []


def assert_owner_only(line: str) -> None:
    pgdata = Path(line.split(" ", 1)[1])
    assert (pgdata / "PG_VERSION").exists()
    assert stat.S_IMODE(pgdata.stat().st_mode) == 0o700


def test_close_after_the_server_was_killed_leaves_nothing(base):
    child = run_child("killed-then-close", base)
    assert_owner_only(wait_for_line(child, "ready"))
    assert wait_for_line(child, "closed") == "closed"  # close() did not raise
    assert_left_nothing(child, base)
    assert child.returncode == 0


def test_sigint_during_start_up_leaves_nothing(base):
    child = run_child("sigint-during-start-up", base)
    wait_for_line(child, "server started")
    assert any(base.glob("*/pgdata/PG_VERSION"))  # there was something to clean
    child.send_signal(signal.SIGINT)
    assert wait_for_line(child, "interrupted") == "interrupted during start-up"
    assert_left_nothing(child, base)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_terminated_process_leaves_nothing(base, signum):
    child = run_child("wait", base)
    assert_owner_only(wait_for_line(child, "ready"))
    child.send_signal(signum)
    assert_left_nothing(child, base)
    assert child.returncode == -signum
    # The reaper also stopped the server itself, not only deleted its files.
    deadline = time.monotonic() + WAIT_S
    while _postgres_serving(base) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _postgres_serving(base) == []


STOP_INTERRUPTED = r'''
import os, signal, sys, tempfile, warnings
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, also when started in the background
tempfile.tempdir = sys.argv[1]  # the embedded server's directories go under the test's own
with warnings.catch_warnings():  # platformdirs warns of no XDG_RUNTIME_DIR; labsrc imports pgserver the same way
    warnings.simplefilter("ignore")
    import pgserver.postgres_server as ps
from labsrc.cli.main import main
real_cleanup = ps.PostgresServer.cleanup
def cleanup_with_ctrl_c(self):
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C lands while the server is stopping
    print("ctrl-c sent", flush=True)
    return real_cleanup(self)
ps.PostgresServer.cleanup = cleanup_with_ctrl_c
status = main(["search", "RPL-14", "--as", "luna-48291", "--engine", "postgres"])
print("status", status, flush=True)
sys.exit(status)
'''


def test_ctrl_c_while_the_engine_stops_ends_as_interrupted_with_no_server_left(base):
    base.mkdir()
    child = subprocess.run(
        [sys.executable, "-c", STOP_INTERRUPTED, str(base)], capture_output=True, text=True, timeout=WAIT_S
    )
    assert child.stdout.splitlines()[-2:] == ["ctrl-c sent", "status 130"], child.stderr
    assert child.returncode == 130
    assert child.stderr.strip().splitlines() == ["labsrc: interrupted"]  # one line, no traceback
    assert "RPL-14" in child.stdout  # the search itself finished and printed
    deadline = time.monotonic() + WAIT_S
    while (any(base.iterdir()) or _postgres_serving(base)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(base.iterdir()) == [] and _postgres_serving(base) == []


def test_interpreter_exit_without_close_leaves_nothing(base):
    child = run_child("exit-without-close", base)
    assert_owner_only(wait_for_line(child, "ready"))
    assert_left_nothing(child, base)
    assert child.returncode == 0


def _postgres_serving(base: Path) -> list[int]:
    """Pids of postgres processes whose command line names a path under ``base`` (Linux /proc; [] elsewhere)."""
    pids: list[int] = []
    if not Path("/proc").is_dir():
        return pids
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(base) in cmdline and "postgres" in cmdline and "-c" not in cmdline.split():
                pids.append(int(entry.name))
    return pids

