"""What the store's owner needs on a server it does not run: the grants a managed PostgreSQL gives its admin role.

The owner is the DSN's user. A managed service (the big clouds' offerings and
the hosted Postgres services) gives its admin ``CREATEROLE`` and ``CREATE`` on
the database, never ``SUPERUSER``, and installs allow-listed extensions on
request. That is all a store needs:

=========================  ===============================================  =====================================
step                       needs                                            grant (as the service's admin)
=========================  ===============================================  =====================================
pgvector                   the extension in the database (not "trusted",    ``CREATE EXTENSION vector``
                           so only a superuser or the service installs it)
schema and tables          ``CREATE`` on the database                       ``GRANT CREATE ON DATABASE db TO owner``
reader role                ``CREATEROLE``                                   ``ALTER ROLE owner CREATEROLE``
=========================  ===============================================  =====================================

Everything else follows from those: the owner owns the schema and everything
in it; it creates the reader role, so it holds ``ADMIN`` on it and makes
itself a member (:func:`~labsrc.engines.schema.create_reader_role`), which is
what ending the reader's sessions, removing what the reader made and dropping
the role take (``pg_terminate_backend``, ``lo_unlink``, ``DROP OWNED BY``). A
superuser owner works too, and skips nothing.

:func:`owner_step` turns a refusal at one of those steps into one line naming
the grant that would allow it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from labsrc.engines.errors import first_line
from labsrc.errors import LabError

__all__ = ["OWNER_GRANTS", "owner_step"]

#: For each step the owner takes: what it does, and the statement a service's admin runs so the owner may do it.
OWNER_GRANTS = {
    "pgvector": (
        "install pgvector in database {database}",
        "CREATE EXTENSION vector, run as the service's admin or a superuser (pgvector is not a trusted extension)",
    ),
    "schema": ("create the store's schema", "GRANT CREATE ON DATABASE {database} TO {owner}"),
    "role": ("create the store's reader role", "ALTER ROLE {owner} CREATEROLE"),
}


@contextmanager
def owner_step(conn: Any, step: str) -> Iterator[None]:
    """Run one of :data:`OWNER_GRANTS`' steps; a refusal becomes a :class:`LabError` naming the grant it lacks."""
    import psycopg

    try:
        yield
    except psycopg.errors.InsufficientPrivilege as exc:
        names = {"database": _quoted(conn.info.dbname), "owner": _quoted(conn.info.user)}
        doing, grant = (text.format(**names) for text in OWNER_GRANTS[step])
        raise LabError(f"the owner {names['owner']} may not {doing} ({first_line(exc)}); allow it with {grant}") from exc


def _quoted(name: str) -> str:
    """``name`` as an SQL identifier, quoted only when it has to be."""
    if name.isidentifier() and name == name.lower() and name.isascii():
        return name
    return '"' + name.replace('"', '""') + '"'
