"""Each driver error is named for what it is (issue 57): a server error is not "unreachable", and a
statement timeout is not claimed to be the lab's 30 s when another setting struck."""

from __future__ import annotations

import pytest

psycopg = pytest.importorskip("psycopg", reason="the postgres extra: pip install 'hybrid-retrieval-lab[postgres]'")

from psycopg import errors  # noqa: E402

from labsrc.engines.errors import translate  # noqa: E402
from labsrc.engines.pool import Timeouts  # noqa: E402

SERVER = "db.example:5432/lab"
TIMEOUTS = Timeouts(connect=2.0, statement=30.0)


def line(exc: BaseException) -> str:
    return str(translate(exc, SERVER, TIMEOUTS))


def test_a_server_error_psycopg_files_as_operational_is_not_unreachable():
    exc = errors.ObjectNotInPrerequisiteState("lastval is not yet defined in this session")
    assert isinstance(exc, psycopg.OperationalError) and exc.sqlstate == "55000"
    assert line(exc) == ("PostgreSQL at db.example:5432/lab: ObjectNotInPrerequisiteState: "
                         "lastval is not yet defined in this session (SQLSTATE 55000)")


@pytest.mark.parametrize("exc", [
    psycopg.OperationalError("connection refused"),  # the client's own: no SQLSTATE
    errors.AdminShutdown("terminating connection due to administrator command"),  # 57P01
    errors.ConnectionFailure("connection to server was lost"),  # class 08
])
def test_a_connection_failure_is_unreachable_with_the_connect_timeout(exc):
    assert line(exc).startswith("PostgreSQL at db.example:5432/lab is unreachable (connect timeout 2 s): ")


def test_a_statement_timeout_names_whose_it_may_be_and_a_cancel_is_a_cancel():
    timeout = errors.QueryCanceled("canceling statement due to statement timeout")
    assert line(timeout) == (
        "PostgreSQL at db.example:5432/lab: a statement ran past the statement timeout (30 s for the lab's readers; "
        "the owner's is the server's, the role's or the DSN's own): canceling statement due to statement timeout"
    )
    cancel = errors.QueryCanceled("canceling statement due to user request")
    assert line(cancel) == ("PostgreSQL at db.example:5432/lab: a statement was cancelled: "
                            "canceling statement due to user request")


@pytest.mark.parametrize("name", ["connect", "statement", "lock"])
def test_a_timeout_past_a_day_is_refused_before_it_reaches_the_server(name):
    from labsrc.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match=rf"^timeouts\.{name} must be at most 86,400 seconds \(a day\), not 1e\+300$"):
        Timeouts(**{name: 1e300})


@pytest.mark.parametrize(("dsn", "setting"), [
    ("postgresql://owner@db.example/lab?options=-c%20statement_timeout%3D1", "1"),
    ("host=db.example dbname=lab options='-c statement_timeout=5s -c lock_timeout=1s'", "5s"),
    ("host=db.example dbname=lab options='--statement-timeout=250ms'", "250ms"),
])
def test_a_statement_timeout_the_dsn_sets_is_named_as_the_dsns(dsn, setting):
    from labsrc.engines.errors import dsn_statement_timeout

    assert dsn_statement_timeout(dsn) == setting
    exc = errors.QueryCanceled("canceling statement due to statement timeout")
    assert str(translate(exc, SERVER, TIMEOUTS, dsn)) == (
        f"PostgreSQL at db.example:5432/lab: a statement ran past a statement timeout: the DSN's own options set "
        f"statement_timeout={setting} (the lab's readers have 30 s): canceling statement due to statement timeout"
    )


def test_a_dsn_without_the_option_or_no_dsn_at_all_sets_none():
    from labsrc.engines.errors import dsn_statement_timeout

    assert dsn_statement_timeout("host=db.example options='-c lock_timeout=1s'") is None
    assert dsn_statement_timeout("not a dsn ===") is None and dsn_statement_timeout(None) is None
