"""Driver errors as lab errors: one line that names the server and the cause, never a raw psycopg traceback.

=========================================  ======================  ===================================
what went wrong                            psycopg raises          the engine raises
=========================================  ======================  ===================================
a lock held too long (``lock_timeout``)    ``LockNotAvailable``    ``LabError`` naming the timeout
a statement too slow (``statement_timeout``)  ``QueryCanceled``    ``LabError`` naming the timeout
no connection in time, server gone         ``OperationalError``    ``LabError`` naming the server
                                           (no SQLSTATE, class 08,
                                           a shutdown),
                                           ``PoolTimeout``
any other server error (``lastval``         its own class           ``LabError`` with its SQLSTATE
before ``nextval``: SQLSTATE 55000)
a value over a size limit                  ``ProgramLimitExceeded``  ``InvalidArgument``
a value PostgreSQL cannot store            ``DataError``,          ``InvalidArgument``
                                           ``UnicodeEncodeError``
=========================================  ======================  ===================================

The CLI maps every :class:`~labsrc.errors.LabError` to exit status 2 and prints its one line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from labsrc.errors import InvalidArgument, LabError
from labsrc.records.checks import check_utf8

if TYPE_CHECKING:
    from labsrc.engines.pool import Timeouts

__all__ = ["check_storable", "driver_errors", "dsn_statement_timeout", "first_line", "hide_password", "server_name", "translate"]

# A password in a URL (``scheme://user:PASSWORD@host``) or a key/value DSN (``password=PASSWORD``, maybe quoted).
_URL_PASSWORD = re.compile(r"://[^:/@\s]*:([^@]*)@")
_KEYWORD_PASSWORD = re.compile(r"password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def check_storable(value: str, what: str) -> None:
    """Refuse what PostgreSQL text cannot store, before the driver does: a NUL, or a lone surrogate (not UTF-8).

    ``what`` names the value in the message (``"caller region 'EU'"``, ``"chunk 'c1': field 'text'"``).
    """
    if "\x00" in value:
        raise InvalidArgument(f"{what} contains a NUL character, which PostgreSQL text cannot store")
    check_utf8(value, what, "PostgreSQL's")


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message (psycopg adds DETAIL and HINT lines)."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__


def hide_password(text: str, dsn: str) -> str:
    """``text`` with every password written in ``dsn`` replaced by ``***`` (a driver's message may quote the DSN,
    or the part of it that it could not parse)."""
    secrets = set()
    for match in (*_URL_PASSWORD.finditer(dsn), *_KEYWORD_PASSWORD.finditer(dsn)):
        value = match.group(1)
        secrets.update({value, value.strip("'")})
    for secret in sorted((v for v in secrets if v), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def server_name(dsn: str) -> str:
    """Where a DSN points, without its password: ``host:port/dbname`` or ``socket DIR, database DB``."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(dsn)
    except Exception:  # not a DSN at all: say so with its text, any password in it hidden
        return repr(hide_password(dsn[:80], dsn))
    host = str(params.get("host") or params.get("hostaddr") or "localhost")
    port = str(params.get("port") or "5432")
    database = str(params.get("dbname") or params.get("user") or "")
    if host.startswith("/"):
        return f"socket {host}, database {database}" if database else f"socket {host}"
    return f"{host}:{port}/{database}" if database else f"{host}:{port}"


#: ``statement_timeout`` set in a DSN's ``options`` (``-c statement_timeout=1``, ``--statement-timeout=5s``).
_OPTION_TIMEOUT = re.compile(r"(?:-c\s*|--)statement[_-]timeout=(\S+)")


def dsn_statement_timeout(dsn: str | None) -> str | None:
    """The ``statement_timeout`` a DSN's own ``options`` set (``"1"``, ``"5s"``), or None (none, or not a DSN)."""
    if not dsn:
        return None
    try:
        from psycopg.conninfo import conninfo_to_dict

        options = conninfo_to_dict(dsn).get("options") or ""
    except Exception:  # not a DSN: nothing it sets
        return None
    found = _OPTION_TIMEOUT.findall(str(options))
    return found[-1] if found else None  # the last one given wins, as in PostgreSQL


def translate(exc: BaseException, server: str, timeouts: Timeouts, dsn: str | None = None) -> LabError:
    """The :class:`LabError` (or :class:`InvalidArgument`) that names ``exc``'s cause in one line.

    ``dsn``: the connection string the owner's session came from, so a statement timeout its own
    ``options`` set is named as the DSN's.
    """
    import psycopg
    from psycopg import errors

    cause = first_line(exc)
    if isinstance(exc, UnicodeError):
        return InvalidArgument(f"PostgreSQL at {server} cannot take a value: {cause} (text must be valid UTF-8)")
    if isinstance(exc, errors.LockNotAvailable):
        return LabError(
            f"PostgreSQL at {server}: waited longer than the lock timeout ({timeouts.lock:g} s) "
            f"for a lock another session holds: {cause}"
        )
    if isinstance(exc, errors.QueryCanceled):
        if "statement timeout" not in cause:  # cancelled by a request (pg_cancel_backend, a client's cancel)
            return LabError(f"PostgreSQL at {server}: a statement was cancelled: {cause}")
        # Which timeout struck is the session's: the lab sets the readers'; the owner's comes from the
        # server, the role, the database or the DSN's own options (options=-c statement_timeout=...).
        own = dsn_statement_timeout(dsn)
        if own is not None:
            return LabError(
                f"PostgreSQL at {server}: a statement ran past a statement timeout: the DSN's own options set "
                f"statement_timeout={own} (the lab's readers have {timeouts.statement:g} s): {cause}"
            )
        return LabError(
            f"PostgreSQL at {server}: a statement ran past the statement timeout ({timeouts.statement:g} s for "
            f"the lab's readers; the owner's is the server's, the role's or the DSN's own): {cause}"
        )
    if isinstance(exc, errors.ProgramLimitExceeded):
        return InvalidArgument(f"PostgreSQL at {server} refused a value over its size limit: {cause}")
    if isinstance(exc, psycopg.DataError):
        return InvalidArgument(f"PostgreSQL at {server} refused a value: {cause}")
    if _is_pool_timeout(exc):
        return LabError(
            f"PostgreSQL at {server}: no connection within the connect timeout ({timeouts.connect:g} s): {cause}"
        )
    if isinstance(exc, psycopg.OperationalError) and _is_connection_failure(exc):
        return LabError(
            f"PostgreSQL at {server} is unreachable (connect timeout {timeouts.connect:g} s): {cause}"
        )
    state = f" (SQLSTATE {exc.sqlstate})" if getattr(exc, "sqlstate", None) else ""
    return LabError(f"PostgreSQL at {server}: {type(exc).__name__}: {cause}{state}")


#: SQLSTATEs of a server going away or refusing sessions: class 08 (connection exception) and the shutdowns.
_CONNECTION_STATES = ("57P01", "57P02", "57P03")


def _is_connection_failure(exc: BaseException) -> bool:
    """A failure to reach or keep the server: no SQLSTATE (the client's own: refused, timed out, closed),
    class 08, or a shutdown. psycopg files other server errors under OperationalError too (SQLSTATE 55000,
    ``lastval is not yet defined in this session``), and those are not the network's."""
    state = getattr(exc, "sqlstate", None)
    return state is None or state.startswith("08") or state in _CONNECTION_STATES


def _is_pool_timeout(exc: BaseException) -> bool:
    try:
        from psycopg_pool import PoolTimeout
    except ImportError:  # pragma: no cover - the postgres extra installs it
        return False
    return isinstance(exc, PoolTimeout)


@contextmanager
def driver_errors(server: str, timeouts: Timeouts, dsn: str | None = None) -> Iterator[None]:
    """Re-raise psycopg's (and the pool's) errors inside the block as :func:`translate` says."""
    import psycopg

    try:
        from psycopg_pool import PoolTimeout
    except ImportError:  # pragma: no cover
        PoolTimeout = psycopg.OperationalError  # noqa: N806
    try:
        yield
    except (psycopg.Error, PoolTimeout, UnicodeError) as exc:
        raise translate(exc, server, timeouts, dsn) from exc
