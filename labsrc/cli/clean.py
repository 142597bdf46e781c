"""``labsrc engines clean``: drop the schemas and roles that dead processes left on a PostgreSQL server.

A store on a server given by ``--dsn`` drops its ``lab_<hex>`` schema and
reader role when it closes; a process killed before that leaves them behind
(:mod:`labsrc.engines.orphans`). This command finds them (named like a
store's, marked by the lab, and no live session holding their lock) and drops
them, printing one line per schema dropped. A live store's schema and a schema
the lab did not make are never touched.

Exit status: 0 done (also when there was nothing to drop), 2 a bad or
unreachable DSN, or an orphan that could not be dropped (one line each on
stderr). The module is named for the action: ``engines.py`` holds the other
commands' ``--engine`` options.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from labsrc.cli.outputs import one_line
from labsrc.errors import InvalidArgument

__all__ = ["register", "run_clean"]


def run_clean(args: argparse.Namespace) -> int:
    from labsrc.engines.errors import driver_errors, first_line, hide_password, server_name
    from labsrc.engines.orphans import drop_orphans, reader_role
    from labsrc.engines.pool import DEFAULT_TIMEOUTS
    from labsrc.engines.server import require_psycopg

    psycopg = require_psycopg()
    where = server_name(args.dsn)
    try:
        conn = psycopg.connect(args.dsn, autocommit=True, connect_timeout=DEFAULT_TIMEOUTS.connect_s)
    except (psycopg.Error, UnicodeError) as exc:
        raise InvalidArgument(f"cannot connect to PostgreSQL at {where}: {hide_password(first_line(exc), args.dsn)}") from exc
    with conn, driver_errors(where, DEFAULT_TIMEOUTS), warnings.catch_warnings(record=True) as failures:
        warnings.simplefilter("always", RuntimeWarning)
        dropped = drop_orphans(conn)
    for schema in dropped:
        print(f"dropped schema {schema} and role {reader_role(schema)} (left by a process that is gone)")
    for failure in failures:
        print(f"labsrc: error: {one_line(str(failure.message))}", file=sys.stderr)
    return 2 if failures else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "engines",
        help="look after the PostgreSQL engine's servers (drop what dead processes left behind)",
        description="Maintenance for the PostgreSQL engine on servers given by DSN.",
    )
    sub = parser.add_subparsers(dest="engines_command", required=True, metavar="ACTION")
    clean = sub.add_parser(
        "clean",
        help="drop the schemas and reader roles that killed processes left on a server",
        description=(
            "Find the lab's store schemas (lab_ and 8 hex digits) on the server whose owning process is gone "
            "(no session holds the store's advisory lock) and drop each with its reader role, one line per "
            "schema. Live stores and schemas the lab did not make are never touched. "
            "Exit status: 0 done (also with nothing to drop), 2 a bad or unreachable DSN, or an orphan that "
            "could not be dropped."
        ),
    )
    clean.add_argument("--dsn", metavar="URL", required=True, help="the server, e.g. postgresql://user@host/db")
    clean.set_defaults(func=run_clean)
