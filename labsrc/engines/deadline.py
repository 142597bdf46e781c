"""Client-side deadlines: a request ends on time even when the server does not answer at all.

``statement_timeout`` and ``lock_timeout`` are the server's own clocks. A
server that does not run (stopped with ``SIGSTOP``, a frozen VM, a network
partition that drops packets without a reset) enforces neither, and libpq
waits on the socket forever. So every request also runs under a deadline kept
in this process: one watchdog thread holds the open deadlines, and when one
passes it shuts the request's socket down (``shutdown(SHUT_RDWR)`` on a
duplicate of the connection's file descriptor). The blocked read returns at
once, psycopg raises, and the request ends with a :class:`~labsrc.errors.LabError`
that names the server and the deadline. The connection is broken by then, so
the pool discards it and opens a new one when the server answers again.

Shutting a socket down does not close its descriptor, so nothing else can be
handed the same number while libpq still holds it. The watchdog never blocks
on a lock a request holds, and a deadline that is cancelled before it passes
costs one heap entry.
"""

from __future__ import annotations

import heapq
import itertools
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from labsrc.engines.errors import first_line
from labsrc.errors import LabError

__all__ = ["Deadline", "DeadlineExpired", "request_deadline", "watch"]


class DeadlineExpired(LabError):
    """A block under :func:`watch` ended after its deadline had passed and cut its connection."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the client-side deadline of {seconds:g} s passed as the work ended; its connection was cut")
        self.seconds = seconds


class Deadline:
    """One request's deadline: :attr:`expired` is set once the watchdog has cut its connection."""

    __slots__ = ("at", "conn", "expired", "seconds")

    def __init__(self, conn: Any, seconds: float) -> None:
        self.conn = conn
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self.expired = False


class _Watchdog:
    """A daemon thread that cuts the connection of every deadline that passes (one per process)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Deadline]] = []
        self._order = itertools.count()
        self._live: set[int] = set()
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, deadline: Deadline) -> int:
        with self._condition:
            key = next(self._order)
            heapq.heappush(self._heap, (deadline.at, key, deadline))
            self._live.add(key)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="labsrc-deadlines", daemon=True)
                self._thread.start()
            self._condition.notify()
            return key

    def remove(self, key: int) -> None:
        with self._condition:
            self._live.discard(key)

    def _run(self) -> None:
        while True:
            with self._condition:
                while self._heap and self._heap[0][1] not in self._live:
                    heapq.heappop(self._heap)  # cancelled before it passed
                if not self._heap:
                    self._condition.wait(timeout=60.0)
                    continue
                at, key, deadline = self._heap[0]
                wait = at - time.monotonic()
                if wait > 0:
                    self._condition.wait(timeout=wait)
                    continue
                heapq.heappop(self._heap)
                self._live.discard(key)
                deadline.expired = True
                # Cut under the lock: once remove() returns, a deadline either has been cut or never will be,
                # so a connection already back in the pool is never cut under another request.
                _cut(deadline.conn)


def _cut(conn: Any) -> None:
    """Shut ``conn``'s socket down from outside, so a read blocked on it returns (the descriptor stays open)."""
    try:
        fd = conn.pgconn.socket
    except Exception:  # already closed: nothing is blocked on it
        return
    try:
        duplicate = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        duplicate.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        duplicate.close()


_WATCHDOG = _Watchdog()


@contextmanager
def watch(conn: Any, seconds: float) -> Iterator[Deadline]:
    """Cut ``conn`` if the block has not finished ``seconds`` from now; check :attr:`Deadline.expired` after an error.

    A block that ends normally after its deadline passed raises :class:`DeadlineExpired`: its connection is cut,
    and must not be used again (a pool's reset that raises makes the pool discard the connection).
    """
    deadline = Deadline(conn, seconds)
    key = _WATCHDOG.add(deadline)
    try:
        yield deadline
    finally:
        _WATCHDOG.remove(key)
    if deadline.expired:
        # The block's last statement finished, but the deadline passed before the block ended, and the socket
        # is shut down: a connection that looked fine would fail its next statement (libpq: "server closed the
        # connection unexpectedly"), and be reported as an unreachable server. Say what happened instead.
        raise DeadlineExpired(seconds)


@contextmanager
def request_deadline(conn: Any, seconds: float, server: str) -> Iterator[None]:
    """Cut ``conn`` if the block outlasts ``seconds`` (:func:`watch`), and say so in one line naming ``server``."""
    import psycopg

    try:
        with watch(conn, seconds) as deadline:
            try:
                yield
            except psycopg.Error as exc:
                if deadline.expired:
                    raise LabError(
                        f"PostgreSQL at {server} did not answer within the request deadline ({seconds:g} s "
                        f"= connect + statement timeout); the server may be stopped or overloaded: {first_line(exc)}"
                    ) from exc
                raise
    except DeadlineExpired as exc:
        raise LabError(
            f"PostgreSQL at {server} answered just after the request deadline ({seconds:g} s = connect + "
            "statement timeout); the request's connection was cut and will be replaced"
        ) from exc
