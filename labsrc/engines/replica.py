"""A streaming read replica of a PostgreSQL server on this machine, in a temporary directory.

:class:`StreamingReplica` copies a running primary (usually an
:class:`~labsrc.engines.server.EmbeddedServer`) with ``pg_basebackup -R -X
stream`` over the primary's Unix socket and starts the copy with ``pg_ctl`` as
a hot standby on a socket directory of its own: PostgreSQL's own physical
streaming replication, the same WAL stream a managed read replica replays. Every
row, role, RLS policy and signing key the primary holds reaches the replica, so
a store loaded on the primary can be searched there
(:meth:`PostgresRetriever.on_replicas <labsrc.engines.postgres.PostgresRetriever.on_replicas>`)::

    with EmbeddedServer() as primary, StreamingReplica(primary) as replica:
        engine = PostgresRetriever(chunks, vectors, dsn=primary.dsn)
        replica.wait_for_replay(timeout=60)             # the load has reached the replica
        with engine.on_replicas(replica.dsn) as served:
            served.search("damaged laptop refund", luna, day, top_k=3)

What the primary must allow, and why the embedded one needs no change:
``wal_level = replica`` and ``max_wal_senders`` > 0 (PostgreSQL's defaults,
10 senders) and a ``replication`` line in ``pg_hba.conf`` for local
connections (``initdb --auth=trust`` writes one). :class:`StreamingReplica`
checks the first two and names the setting when one is missing. The replica's
WAL receiver keeps a *temporary* replication slot on the primary
(``wal_receiver_create_temp_slot``), so the primary keeps the WAL a lagging
replica still needs, and the slot disappears with the replica's connection:
nothing is left on the primary, however the replica ends.

Hygiene, as for :class:`~labsrc.engines.server.EmbeddedServer`: the directory
is mode 0700 (owned by the server's user; as root that is pgserver's
unprivileged user, since PostgreSQL refuses to run as root), :meth:`stop`
stops the server and deletes the directory, and a reaper process
(:mod:`labsrc.engines.reaper`) deletes it however this process ends. Every wait
has a timeout, and every failure is one :class:`~labsrc.errors.LabError` line.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labsrc.engines.errors import first_line, hide_password, server_name
from labsrc.engines.server import (
    EmbeddedServer,
    _finish_reaper,
    _import,
    _start_reaper,
    require_psycopg,
)
from labsrc.engines.socket_dir import make_socket_directory
from labsrc.errors import InvalidArgument, LabError

__all__ = ["Replay", "StreamingReplica", "replay_lsn_behind", "wait_for_lsn"]

#: How long to wait for a replica to start or stop, by default (seconds).
START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Replay:
    """One :meth:`StreamingReplica.wait_for_replay`: the primary's WAL position and how far behind the replica was.

    ``lsn`` is the primary's ``pg_current_wal_lsn()`` when the wait began; ``behind_bytes`` how many WAL bytes
    the replica still had to replay then; ``waited_s`` how long replaying them took (0.0 when caught up).
    """

    lsn: str
    behind_bytes: int
    waited_s: float


def replay_lsn_behind(conn: Any, lsn: str, *, server: str) -> int:
    """Bytes of WAL the standby on ``conn`` has yet to replay to reach ``lsn`` (0 once it has).

    Raises :class:`~labsrc.errors.InvalidArgument` when ``conn`` is not on a standby (``server`` names it).
    """
    row = conn.execute(
        "SELECT pg_catalog.pg_is_in_recovery(), pg_catalog.pg_wal_lsn_diff(%s::pg_lsn, "
        "coalesce(pg_catalog.pg_last_wal_replay_lsn(), '0/0'::pg_lsn))::bigint",
        (lsn,),
    ).fetchone()
    if not row[0]:
        raise InvalidArgument(f"PostgreSQL at {server} is not a standby (pg_is_in_recovery() is false): it replays no WAL")
    return max(0, int(row[1]))


def wait_for_lsn(conn: Any, lsn: str, timeout: float, *, server: str) -> float:
    """Poll the standby on ``conn`` (autocommit) until it has replayed WAL up to ``lsn``; the seconds waited.

    Raises a one-line :class:`~labsrc.errors.LabError` after ``timeout`` seconds, naming how far it got.
    """
    start = time.perf_counter()
    pause = 0.002
    while True:
        behind = replay_lsn_behind(conn, lsn, server=server)
        waited = time.perf_counter() - start
        if behind == 0:
            return waited
        if waited > timeout:
            row = conn.execute("SELECT status FROM pg_catalog.pg_stat_wal_receiver").fetchone()
            receiver = "not running: is the primary up?" if row is None else row[0] or "status hidden from this role"
            raise LabError(
                f"the replica at {server} has not replayed the primary's WAL up to {lsn} within {timeout:g} s "
                f"({behind:,} bytes behind; WAL receiver {receiver})"
            )
        time.sleep(pause)
        pause = min(0.05, pause * 2)


class StreamingReplica:
    """A hot-standby copy of ``primary`` that replays its WAL as it is written; :meth:`stop` deletes it.

    Parameters
    ----------
    primary:
        The server to copy: an :class:`~labsrc.engines.server.EmbeddedServer`, or the DSN of a server on this
        machine that accepts replication connections from this user.
    directory:
        Where to create the replica's temporary directory (default: the system's temporary directory).
    port:
        The replica's port. It listens on a Unix socket in its own directory only (no TCP), so the port just
        names the socket file; it need not differ from the primary's.
    timeout:
        Seconds that copying and starting may take, each (``pg_basebackup``, ``pg_ctl start``).
    """

    def __init__(
        self,
        primary: EmbeddedServer | str,
        directory: str | Path | None = None,
        *,
        port: int = 5433,
        timeout: float = START_TIMEOUT_S,
    ) -> None:
        if isinstance(primary, EmbeddedServer):
            primary_dsn, primary_data = primary.dsn, primary.data_directory
        elif isinstance(primary, str):
            primary_dsn, primary_data = primary, None
        else:
            raise InvalidArgument(f"primary must be an EmbeddedServer or a DSN str, not {type(primary).__name__}")
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise InvalidArgument(f"port must be an int in [1, 65535], not {port!r}")
        self._psycopg = require_psycopg()
        self.primary_dsn = primary_dsn
        self.port = port
        self.timeout = float(timeout)
        #: The replica's ``application_name`` on the primary (``pg_stat_replication``) and its ``cluster_name``.
        self.name = f"labsrc_replica_{secrets.token_hex(4)}"
        self._bin = Path(_import("pgserver", "the streaming replica").__file__).parent / "pginstall" / "bin"
        self._tmp = Path(tempfile.mkdtemp(prefix="labsrc-replica-", dir=directory))  # mode 0700
        self._reaper: subprocess.Popen | None = None
        self._socket: Path | None = None
        self._running = False
        try:
            self._as_user = _server_user(primary_data)
            # The socket's directory: 0700, and short enough for a Unix socket whatever TMPDIR is
            # (labsrc.engines.socket_dir); the reaper deletes it with the rest.
            self._socket = make_socket_directory(self._tmp)
            if self._as_user is not None:
                os.chown(self._tmp, self._as_user["uid"], self._as_user["gid"])
                os.chown(self._socket, self._as_user["uid"], self._as_user["gid"])
            self._reaper = _start_reaper(self._tmp, self._socket)
            self._check_primary()
            self._copy()
            self._configure()
            self._start()
            self.dsn: str = self._psycopg.conninfo.make_conninfo(
                "", host=str(self._socket), port=str(port), user="postgres", dbname="postgres"
            )
        except Exception as exc:
            self.stop()
            if isinstance(exc, LabError):
                raise
            raise LabError(f"could not start a streaming replica in {self._tmp}: {first_line(exc)}") from exc
        except BaseException:  # KeyboardInterrupt during the copy: leave nothing behind
            self.stop()
            raise

    @property
    def data_directory(self) -> Path:
        """The replica's data directory, which :meth:`stop` deletes."""
        return self._tmp / "pgdata"

    # --- start-up ----------------------------------------------------------------------

    def _open(self, dsn: str, which: str) -> Any:
        """An autocommit connection to ``dsn`` (10 s connect timeout), or a one-line error naming ``which`` server."""
        try:
            return self._psycopg.connect(dsn, autocommit=True, connect_timeout=10)
        except self._psycopg.Error as exc:
            raise LabError(f"cannot connect to the {which} at {server_name(dsn)}: {hide_password(first_line(exc), dsn)}") from exc

    def _primary(self) -> Any:
        return self._open(self.primary_dsn, "primary")

    def _connect(self) -> Any:
        return self._open(self.dsn, "replica")

    def _check_primary(self) -> None:
        """The primary's settings replication needs: a one-line error naming the one to change."""
        with self._primary() as conn:
            wal_level, senders, in_recovery = conn.execute(
                "SELECT current_setting('wal_level'), current_setting('max_wal_senders')::int, pg_is_in_recovery()"
            ).fetchone()
        where = server_name(self.primary_dsn)
        if in_recovery:
            raise InvalidArgument(f"the primary at {where} is itself a standby; copy its primary instead")
        if wal_level not in ("replica", "logical"):
            raise LabError(f"the primary at {where} has wal_level = {wal_level}; set it to 'replica' (ALTER SYSTEM SET "
                           "wal_level = replica, then restart the primary)")  # fmt: skip
        if senders < 1:
            raise LabError(f"the primary at {where} has max_wal_senders = 0; set it to 10 (ALTER SYSTEM, then restart)")

    def _run(self, args: list[str], what: str) -> None:
        """Run a PostgreSQL program as the server's user, with a timeout; a one-line error on failure."""
        with tempfile.TemporaryFile("w+") as out:  # a file, not a pipe: a forked postmaster could hold a pipe open
            try:
                done = subprocess.run(
                    [str(self._bin / args[0]), *args[1:]], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    timeout=self.timeout + 10, check=False, **_user_kwargs(self._as_user),
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                raise LabError(f"{what} took longer than {self.timeout:g} s (replica in {self._tmp})") from None
            out.seek(0)
            output = out.read()
        if done.returncode != 0:
            lines = [line for line in output.splitlines() if line.strip() and not line.startswith("WARNING")]
            detail = lines[-1].strip() if lines else f"exit status {done.returncode}"
            log = self._tmp / "server.log"
            if log.exists():  # pg_ctl says "could not start server"; the server's log says why
                fatal = [line for line in log.read_text(errors="replace").splitlines() if "FATAL" in line]
                detail = fatal[-1].strip() if fatal else detail
            if "REPLICATION attribute" in output:  # an owner as managed services grant it: not a replication role
                user = self._psycopg.conninfo.conninfo_to_dict(self.primary_dsn).get("user") or "the DSN's user"
                detail = detail.removeprefix("DETAIL:").strip().rstrip(".") + (f"; allow it with ALTER ROLE {user} REPLICATION (a superuser's statement; on a managed "
                           "service, use its own read replicas and pass them to on_replicas)")
            raise LabError(f"{what} failed (replica in {self._tmp}): {detail}")

    def _copy(self) -> None:
        conninfo = self._psycopg.conninfo.make_conninfo(self.primary_dsn, application_name=self.name)
        self._run(
            # -c fast: checkpoint at once instead of spreading it; -X stream: WAL streams during the copy;
            # -R: write primary_conninfo and standby.signal; --no-sync: a throwaway copy needs no fsync.
            ["pg_basebackup", "-D", str(self.data_directory), "-R", "-X", "stream", "-c", "fast",
             "--no-sync", "--no-manifest", "-d", conninfo],
            "pg_basebackup from the primary",
        )  # fmt: skip
        # The primary's own leftovers: pgserver's log and handle list, the socket's lock file.
        for leftover in ("log", ".handle_pids.json", "backup_label.old"):
            (self.data_directory / leftover).unlink(missing_ok=True)
        for lock in self.data_directory.glob(".s.PGSQL.*.lock"):
            lock.unlink()

    def _configure(self) -> None:
        """Append the replica's own settings to ``postgresql.auto.conf`` (after ``-R``'s ``primary_conninfo``)."""
        settings = {
            "listen_addresses": "",  # no TCP, like the embedded primary
            "unix_socket_directories": str(self._socket),
            "unix_socket_permissions": "0700",
            "port": str(self.port),
            "cluster_name": self.name,
            "hot_standby": "on",  # serve read-only queries while replaying
            "hot_standby_feedback": "on",  # the primary's VACUUM keeps rows a replica query still reads
            "wal_receiver_create_temp_slot": "on",  # the primary keeps WAL we still need; gone with our connection
        }
        lines = "".join(f"{name} = '{value.replace(chr(39), chr(39) * 2)}'\n" for name, value in settings.items())
        with open(self.data_directory / "postgresql.auto.conf", "a", encoding="utf-8") as conf:
            conf.write(lines)

    def _start(self) -> None:
        self._running = True  # from here on, stop() asks pg_ctl to stop it
        self._run(
            ["pg_ctl", "-D", str(self.data_directory), "-l", str(self._tmp / "server.log"), "-w",
             "-t", str(max(1, round(self.timeout))), "start"],
            "starting the replica (pg_ctl start)",
        )  # fmt: skip

    # --- replication -----------------------------------------------------------------------

    def _primary_lsn(self) -> str:
        with self._primary() as conn:
            return conn.execute("SELECT pg_catalog.pg_current_wal_lsn()::text").fetchone()[0]

    def wait_for_replay(self, timeout: float = 60.0) -> Replay:
        """Wait until the replica has replayed the primary's WAL up to the primary's current LSN.

        Everything committed on the primary before the call (a store's load, its indexes, a dropped schema)
        is visible on the replica when it returns. Raises :class:`~labsrc.errors.LabError` after ``timeout`` s.
        """
        target = self._primary_lsn()
        with self._connect() as conn:
            behind = replay_lsn_behind(conn, target, server=server_name(self.dsn))
            waited = wait_for_lsn(conn, target, timeout, server=server_name(self.dsn))
        return Replay(lsn=target, behind_bytes=behind, waited_s=waited)

    def lag_bytes(self) -> int:
        """Bytes of WAL between the primary's current position and what the replica has replayed (0 = caught up)."""
        target = self._primary_lsn()
        with self._connect() as conn:
            return replay_lsn_behind(conn, target, server=server_name(self.dsn))

    def lag_s(self) -> float:
        """The replica's replay lag in seconds as the primary measures it (``pg_stat_replication.replay_lag``:
        from the primary flushing WAL to the replica having applied it); 0.0 once it has caught up and is idle."""
        with self._primary() as conn:
            row = conn.execute(
                "SELECT extract(epoch FROM replay_lag)::float8 FROM pg_catalog.pg_stat_replication "
                "WHERE application_name = %s",
                (self.name,),
            ).fetchone()
        if row is None:
            raise LabError(f"the replica {self.name} is not streaming from the primary at {server_name(self.primary_dsn)}")
        return 0.0 if row[0] is None else float(row[0])

    # --- lifecycle ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the replica and delete its directory (safe to call twice, and after the replica died)."""
        if self._running:
            self._running = False
            try:
                self._run(["pg_ctl", "-D", str(self.data_directory), "-m", "fast", "-w", "-t", "30", "stop"], "stopping")
            except LabError:  # already dead, or slow: the reaper finishes the job
                pass
        reaper, self._reaper = self._reaper, None
        _finish_reaper(reaper, self._tmp, *([self._socket] if self._socket is not None else []))

    def __enter__(self) -> StreamingReplica:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"StreamingReplica(dsn={getattr(self, 'dsn', None)!r}, name={self.name!r}, running={self._running})"


def _server_user(primary_data: Path | None) -> dict[str, Any] | None:
    """``None`` when not root; as root, the unprivileged user the primary runs as (PostgreSQL refuses root)."""
    if os.geteuid() != 0:
        return None
    import pwd

    if primary_data is not None and primary_data.stat().st_uid != 0:
        entry = pwd.getpwuid(primary_data.stat().st_uid)
    else:
        try:
            entry = pwd.getpwnam("pgserver")  # the user pgserver runs PostgreSQL as when started by root
        except KeyError:
            raise LabError("PostgreSQL cannot run as root and there is no 'pgserver' user; run as another user") from None
    return {"name": entry.pw_name, "uid": entry.pw_uid, "gid": entry.pw_gid, "home": entry.pw_dir}


def _user_kwargs(user: dict[str, Any] | None) -> dict[str, Any]:
    """``subprocess`` arguments that run a program as ``user`` (no root groups kept), or none."""
    if user is None:
        return {}
    return {"user": user["uid"], "group": user["gid"], "extra_groups": [], "env": {**os.environ, "HOME": user["home"]}}
