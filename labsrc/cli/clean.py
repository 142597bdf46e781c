"""``labsrc engines clean``: drop the schemas and roles that dead processes left on a PostgreSQL server.

A store on a server given by ``--dsn`` drops its ``lab_<hex>`` schema and
reader role when it closes; a process killed before that leaves them behind
(:mod:`labsrc.engines.orphans`). This command finds the ones the DSN's user
made (named like a store's, marked by the lab, owned by that user, no live
session holding their lock, the reader role proven the store's) and drops
them, one line each. Run it as the user that made the stores: schemas of other
owners that look orphaned are listed as skipped, with whose they are. It never
drops what something outside the schema depends on (another role's view), nor
a role with sessions or objects in another database: those are listed as
skipped, with why. Nor does it wait on another role: every statement gives up
after the lock timeout (5 s), and a schema whose drop met another role's lock
is listed as skipped naming the role and what it holds. A live store's schema
and a schema the lab did not make are never touched.

Exit status: 0 done (also when there was nothing to drop, or something was
skipped), 2 a bad or unreachable DSN (one line on stderr). The module is
named for the action: ``engines.py`` holds the other commands' ``--engine``
options.
"""

from __future__ import annotations

import argparse

from labsrc.cli.outputs import one_line
from labsrc.errors import InvalidArgument

__all__ = ["register", "run_clean"]


def run_clean(args: argparse.Namespace) -> int:
    from labsrc.engines.errors import driver_errors, first_line, hide_password, server_name
    from labsrc.engines.orphans import clean_orphans, reader_role
    from labsrc.engines.owner import connect_owner
    from labsrc.engines.pool import DEFAULT_TIMEOUTS
    from labsrc.engines.server import require_psycopg

    psycopg = require_psycopg()
    where = server_name(args.dsn)
    try:
        conn = connect_owner(psycopg, args.dsn, DEFAULT_TIMEOUTS)  # every statement under a lock and a statement timeout
    except (psycopg.Error, UnicodeError) as exc:
        raise InvalidArgument(f"cannot connect to PostgreSQL at {where}: {hide_password(first_line(exc), args.dsn)}") from exc
    with conn, driver_errors(where, DEFAULT_TIMEOUTS, args.dsn):
        cleaned = clean_orphans(conn)
    for schema in cleaned.dropped:
        role = reader_role(schema)
        if role in cleaned.roles:
            print(f"dropped schema {schema} and role {role} (left by a process that is gone)")
        else:
            print(f"dropped schema {schema} (left by a process that is gone before it created role {role})")
    for each in cleaned.skipped:
        print(one_line(f"skipped {each.schema}: {each.reason}"))
    if cleaned.objects:
        print(f"removed {cleaned.objects:,} large object(s) taken over from the readers of stores that are gone")
    if cleaned.objects_held:
        held = ", ".join(map(str, cleaned.objects_held[:3])) + (" and others" if len(cleaned.objects_held) > 3 else "")
        print(f"kept large object(s) {held}: another role holds a lock on them (they are yours, readable by no one else)")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "engines",
        help="look after the PostgreSQL engine's servers (drop what dead processes left behind)",
        description="Maintenance for the PostgreSQL engine on servers given by DSN.",
    )
    sub = parser.add_subparsers(dest="engines_command", required=True, metavar="ACTION")
    clean = sub.add_parser(
        "clean",
        help="drop the schemas and reader roles that your killed processes left on a server",
        description=(
            "Find the lab's store schemas (lab_ and 8 hex digits) that the DSN's user made and whose owning "
            "process is gone (no session holds the store's advisory lock), and drop each with its reader role, "
            "one line per schema. Run it as the user that made the stores: a store made by alice is cleaned by "
            "alice, and other owners' schemas that look orphaned are listed as skipped. A schema that something "
            "outside it depends on (another role's view), or whose role has sessions or objects in another "
            "database, or that another role holds a lock on (each statement gives up after 5 s), is left in place "
            "and listed as skipped with why, naming the role. Live stores and schemas the lab did "
            "not make are never touched. Exit status: 0 done (also with nothing to drop, or something "
            "skipped), 2 a bad or unreachable DSN."
        ),
    )
    clean.add_argument("--dsn", metavar="URL", required=True, help="the server, e.g. postgresql://user@host/db")
    clean.set_defaults(func=run_clean)
