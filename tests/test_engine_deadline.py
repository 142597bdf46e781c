"""The client-side deadline's watchdog, without a server: it cuts exactly the connections that overran.

A connection here is one end of a socket pair; "cut" means the watchdog shut it
down, which the other end sees as end-of-file. Many threads share the one
watchdog at once: a deadline cancelled in time is never cut (not even just
after ``watch`` returned, when a real connection would be back in the pool),
and one that passed is always cut, and says so.
"""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from labsrc.engines.deadline import DeadlineExpired, watch


class FakeConnection:
    """What the watchdog reads of a psycopg connection: ``pgconn.socket``, a file descriptor."""

    def __init__(self) -> None:
        self.ours, self.theirs = socket.socketpair()

        class PgConn:
            socket = self.ours.fileno()

        self.pgconn = PgConn()

    def was_cut(self) -> bool:
        """Whether our end was shut down (the peer reads end-of-file at once instead of waiting)."""
        self.theirs.settimeout(0.2)
        try:
            return self.theirs.recv(1) == b""
        except TimeoutError:
            return False

    def close(self) -> None:
        self.ours.close()
        self.theirs.close()


def test_a_block_that_overruns_is_cut_and_says_so():
    conn = FakeConnection()
    try:
        started = time.monotonic()
        with pytest.raises(DeadlineExpired, match="0.2 s"):  # the block ended normally, on a cut connection
            with watch(conn, 0.2) as deadline:
                conn.ours.settimeout(30)
                assert conn.ours.recv(1) == b""  # a read blocked on the socket returns once the deadline passes
        assert deadline.expired and time.monotonic() - started < 10
        assert conn.was_cut()
    finally:
        conn.close()


def test_sixty_four_threads_share_the_watchdog_and_only_the_overruns_are_cut():
    def one(i: int) -> tuple[bool, bool, bool]:
        conn = FakeConnection()
        try:
            overrun = i % 4 == 0
            try:
                with watch(conn, 0.15 if overrun else 5.0) as deadline:
                    if overrun:
                        conn.ours.settimeout(30)
                        conn.ours.recv(1)
                    else:
                        time.sleep(0.01 * (i % 7))
            except DeadlineExpired:
                assert overrun
            time.sleep(0.05)  # a cancelled deadline must stay cancelled after watch() returned
            return overrun, deadline.expired, conn.was_cut()
        finally:
            conn.close()

    with ThreadPoolExecutor(max_workers=64) as pool:
        results = list(pool.map(one, range(256)))
    assert all(expired == overrun and cut == overrun for overrun, expired, cut in results), results
    assert sum(overrun for overrun, _, _ in results) == 64
    assert threading.active_count() < 70  # one watchdog thread, not one per deadline


def test_a_block_that_finishes_after_its_deadline_raises_so_its_connection_is_not_used_again():
    """The cause of requests reported as "unreachable" on a live server: a pool reset under a 2 ms deadline
    finished its last statement, the deadline passed before the block ended, the watchdog cut the socket, and
    the connection went back to the pool looking fine. Now the block raises, and a pool discards the connection."""
    conn = FakeConnection()
    try:
        with pytest.raises(DeadlineExpired, match="connection was cut"):
            with watch(conn, 0.05):
                time.sleep(0.3)  # no read on the socket: nothing inside the block notices the cut
        assert conn.was_cut()
    finally:
        conn.close()


@pytest.mark.parametrize("engine_loaded", [True, False])
def test_psycopgs_own_log_lines_never_reach_stderr_once_the_engine_is_loaded(engine_loaded):
    """psycopg logs what the engine reports itself as one LabError ("error ignored terminating
    <psycopg.Pipeline [BAD]>", a pool's discarded connection); with no logging configured, Python's last-resort
    handler would print each to stderr. Without the engine loaded, the same lines do reach it."""
    import subprocess
    import sys

    code = (
        ("import labsrc.engines.pool\n" if engine_loaded else "")
        + "import logging\n"
        + "logging.getLogger('psycopg').warning('error ignored terminating <psycopg.Pipeline [BAD]>: lost')\n"
        + "logging.getLogger('psycopg.pool').warning('discarding closed connection')\n"
    )
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stderr
    if engine_loaded:
        assert err == ""
    else:
        assert "error ignored terminating" in err and "discarding closed connection" in err
