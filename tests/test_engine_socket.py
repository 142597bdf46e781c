"""The embedded server's socket: in a directory only the server's user can open, and gone after stop() (issue 32).

The server trusts local connections, so its socket is a superuser's door to every
chunk, hidden ones included. pgserver, left to choose, put it under
``$XDG_RUNTIME_DIR/python_PostgresServer/<hash>`` when the data directory's path
was too long for a socket, ``chmod 0777`` as root, and left that directory (and
its lock file) behind. Each case here starts a real server: in a subprocess when
``TMPDIR`` and ``XDG_RUNTIME_DIR`` are changed (so nothing cached in this process,
such as ``tempfile.tempdir``, decides), and finds the socket three ways: the DSN's
``host``, ``postmaster.pid`` and ``SHOW unix_socket_directories``.
"""

from __future__ import annotations

import json
import os
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

from labsrc.engines.socket_dir import SUN_PATH_BYTES, make_socket_directory, socket_path_fits

WAIT_S = 90.0  # generous: a shared machine; a start takes a few seconds

CHILD = r'''
import json, sys, warnings
import psycopg
from labsrc.engines import EmbeddedServer

server = EmbeddedServer()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from pgserver.postgres_server import PostgresServer  # where pgserver itself would have put socket and lock
with psycopg.connect(server.dsn, connect_timeout=10) as conn:
    shown = conn.execute("SHOW unix_socket_directories").fetchone()[0]
print(json.dumps({"dsn": server.dsn, "shown": shown, "data": str(server.data_directory),
                  "pgserver_runtime": str(PostgresServer.runtime_path)}), flush=True)
if sys.stdin.readline().strip() == "stop":  # the test looks around first (or kills us here)
    server.stop()
    print("stopped", flush=True)
'''


class Child:
    """A Python subprocess whose stdout lines arrive with a timeout (a reader thread), stderr kept in a file."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self._stderr = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(
            [sys.executable, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def line(self, timeout: float = WAIT_S) -> str:
        """The child's next line, or the test fails with what the child said on stderr."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            line = None
        if line is None:
            self.kill()
            self._stderr.seek(0)
            pytest.fail(f"no line from the child within {timeout:g} s; its stderr: {self._stderr.read()[-3000:]}")
        return line.strip()

    def send(self, text: str) -> None:
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def wait(self, timeout: float = WAIT_S) -> int:
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=WAIT_S)

    def close(self) -> None:
        self.kill()
        self._stderr.close()


def server_uid(pgdata: Path) -> int:
    """The user PostgreSQL runs as: ours, or as root pgserver's ``pgserver`` user (PostgreSQL refuses root)."""
    uid = pgdata.stat().st_uid
    if os.geteuid() != 0:
        assert uid == os.geteuid()
    else:
        import pwd

        assert uid == pwd.getpwnam("pgserver").pw_uid
    return uid


def socket_directory(dsn: str, pgdata: Path, shown: str) -> Path:
    """The socket's directory, the same from the DSN, from ``postmaster.pid`` and from the server itself."""
    from psycopg.conninfo import conninfo_to_dict

    from_dsn = Path(conninfo_to_dict(dsn)["host"])
    from_pid_file = Path((pgdata / "postmaster.pid").read_text().splitlines()[4])  # line 5: the socket directory
    assert from_dsn == from_pid_file == Path(shown)
    return from_dsn


def assert_private(socket_dir: Path, pgdata: Path, port: int = 5432) -> None:
    """Mode 0700, a real directory owned by the server's user, holding the socket; no ancestor others may write
    to without the sticky bit (which is what keeps them from swapping our directory, as in /tmp)."""
    info = socket_dir.lstat()
    assert stat.S_ISDIR(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o700
    assert info.st_uid == server_uid(pgdata)
    sockets = [p for p in socket_dir.iterdir() if stat.S_ISSOCK(p.lstat().st_mode)]
    assert [p.name for p in sockets] == [f".s.PGSQL.{port}"]
    for parent in socket_dir.parents:
        mode = parent.stat().st_mode
        assert not mode & stat.S_IWOTH or mode & stat.S_ISVTX, f"{parent} is world-writable ({oct(mode)})"


def wait_until_gone(*paths: Path) -> None:
    deadline = time.monotonic() + WAIT_S
    while any(p.exists() for p in paths) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p for p in paths if p.exists()] == []


@pytest.fixture
def long_env():
    """``TMPDIR`` on a path over 100 characters, and an ``XDG_RUNTIME_DIR`` of the test's own (mode 0700)."""
    # Not under tmp_path: as root, PostgreSQL runs as another user, which must traverse the path,
    # and every pytest session (another worktree's too) resets /tmp/pytest-of-<user> to mode 0700.
    base = Path(tempfile.mkdtemp(prefix="labsrc-socket-test-"))
    base.chmod(0o755)
    long_tmp = base / ("t" * 50) / ("u" * 50)
    long_tmp.mkdir(parents=True)
    for path in (long_tmp, long_tmp.parent):
        path.chmod(0o755)
    runtime = base / "xdg"
    runtime.mkdir(mode=0o700)
    assert len(str(long_tmp)) > 100
    env = {**os.environ, "TMPDIR": str(long_tmp), "XDG_RUNTIME_DIR": str(runtime)}
    yield env, long_tmp, runtime
    shutil.rmtree(base, ignore_errors=True)


def start_child(env: dict[str, str]) -> tuple[Child, dict]:
    child = Child(["-c", CHILD], env=env)
    return child, json.loads(child.line())


@requires_postgres
def test_a_long_tmpdir_puts_the_socket_in_a_private_directory_and_stop_removes_it(long_env):
    env, long_tmp, runtime = long_env
    child, info = start_child(env)
    try:
        pgdata = Path(info["data"])
        assert pgdata.is_relative_to(long_tmp)  # the data went where TMPDIR says
        # The setup pgserver got wrong: its own choice would have been here, and the data directory is too long.
        assert Path(info["pgserver_runtime"]).is_relative_to(runtime)
        assert not socket_path_fits(pgdata)
        socket_dir = socket_directory(info["dsn"], pgdata, info["shown"])
        assert not socket_dir.is_relative_to(runtime)
        assert len(os.fsencode(socket_dir / ".s.PGSQL.5432")) < SUN_PATH_BYTES
        assert_private(socket_dir, pgdata)
        assert list(runtime.iterdir()) == []  # pgserver made nothing there: no socket directory, no lock file
        child.send("stop")
        assert child.line() == "stopped"
        assert child.wait() == 0
        assert not socket_dir.exists()
        assert list(long_tmp.iterdir()) == []
        assert list(runtime.iterdir()) == []
    finally:
        child.close()


@requires_postgres
def test_sigkill_leaves_no_socket_directory(long_env):
    env, long_tmp, runtime = long_env
    child, info = start_child(env)
    try:
        socket_dir = socket_directory(info["dsn"], Path(info["data"]), info["shown"])
        assert socket_dir.exists()
        child.proc.send_signal(signal.SIGKILL)
        assert child.wait() == -signal.SIGKILL
        wait_until_gone(socket_dir, Path(info["data"]))  # the reaper's work
        assert list(long_tmp.iterdir()) == []
        assert list(runtime.iterdir()) == []
    finally:
        child.close()


@requires_postgres
def test_default_environment_socket_is_private_and_the_dsn_works():
    import psycopg

    from labsrc.engines import EmbeddedServer

    server = EmbeddedServer()
    try:
        with psycopg.connect(server.dsn, connect_timeout=10) as conn:
            shown = conn.execute("SHOW unix_socket_directories").fetchone()[0]
            assert conn.execute("SELECT 1 + 1").fetchone()[0] == 2
        socket_dir = socket_directory(server.dsn, server.data_directory, shown)
        assert socket_dir == server.socket_directory
        assert_private(socket_dir, server.data_directory)
    finally:
        server.stop()
    assert not socket_dir.exists()
    assert not server.data_directory.exists()


# --- the directory itself, without a server -------------------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o000])
def test_a_socket_directory_is_mode_0700_whatever_the_umask(tmp_path, umask):
    previous = os.umask(umask)
    try:
        made = make_socket_directory(tmp_path)
    finally:
        os.umask(previous)
    try:
        if socket_path_fits(tmp_path / "socket"):  # else (a long TMPDIR) a directory under /tmp, as below
            assert made == tmp_path / "socket"
        assert stat.S_IMODE(made.stat().st_mode) == 0o700 and made.stat().st_uid == os.geteuid()
    finally:
        made.rmdir()


def test_a_directory_too_long_for_a_socket_gets_a_short_private_one(tmp_path):
    near = tmp_path / ("n" * 120)
    near.mkdir()
    made = make_socket_directory(near)
    try:
        assert not made.is_relative_to(near) and made.name.startswith("labsrc-pgs-")
        assert socket_path_fits(made)
        assert stat.S_IMODE(made.stat().st_mode) == 0o700 and made.stat().st_uid == os.geteuid()
    finally:
        made.rmdir()


@pytest.mark.parametrize(
    ("path", "fits"),
    [("/tmp/labsrc-pg-abc/socket", True), ("/tmp/" + "x" * 200, False), ("/tmp/with space/socket", False),
     ("/tmp/a,b/socket", False), ("/tmp/quote'/socket", False)],
)  # fmt: skip
def test_socket_path_fits(path, fits):
    assert socket_path_fits(path) is fits


REPLICA_CHILD = r'''
import json, sys
import psycopg
from labsrc.engines import EmbeddedServer, StreamingReplica

with EmbeddedServer() as server, StreamingReplica(server) as replica:
    with psycopg.connect(replica.dsn, connect_timeout=10) as conn:
        shown = conn.execute("SHOW unix_socket_directories").fetchone()[0]
        standby = conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]
    print(json.dumps({"dsn": replica.dsn, "shown": shown, "data": str(replica.data_directory), "standby": standby}),
          flush=True)
    sys.stdin.readline()  # the test looks around first
print("stopped", flush=True)
'''


@requires_postgres
def test_a_replica_under_a_long_tmpdir_gets_a_private_socket_directory_too(long_env):
    env, long_tmp, runtime = long_env
    child = Child(["-c", REPLICA_CHILD], env=env)
    try:
        info = json.loads(child.line())
        assert info["standby"] is True
        pgdata = Path(info["data"])
        assert pgdata.is_relative_to(long_tmp) and not socket_path_fits(pgdata)  # its own directory is too long
        socket_dir = Path(info["shown"])
        assert f"host={socket_dir}" in info["dsn"] or str(socket_dir) in info["dsn"]
        assert len(os.fsencode(socket_dir / ".s.PGSQL.5433")) < SUN_PATH_BYTES
        assert_private(socket_dir, pgdata, port=5433)
        child.send("stop")
        assert child.line() == "stopped"
        assert child.wait() == 0
        wait_until_gone(socket_dir)
        assert list(long_tmp.iterdir()) == []
    finally:
        child.close()
