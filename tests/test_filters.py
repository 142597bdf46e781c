import json
import sqlite3

import pytest

import labsrc
from labsrc.patterns.filters import FILTER_OPERATORS, compile_filter_sql, matches_filter

ROWS = [
    {"region": "EU", "days": 14, "tier": "std", "tags": ["refunds", "laptops"], "owner": {"team": "eu-support"}},
    {"region": "EU", "days": 30, "tier": "vip", "tags": ["footwear"], "active": True},
    {"region": "US", "days": 30.5, "tier": "std", "active": False, "path": "us/returns.md"},
    {"region": "APAC", "days": "30", "tier": None},
    {"region": "EU"},
]

CASES = [
    ({"region": "EU"}, [0, 1, 4]),
    ({"region": {"$eq": "EU"}}, [0, 1, 4]),
    ({"region": {"$ne": "EU"}}, [2, 3]),
    ({"days": {"$gt": 14}}, [1, 2]),  # "30" is text, never a number
    ({"days": {"$gte": 14, "$lt": 30.5}}, [0, 1]),
    ({"days": {"$lte": 14}}, [0]),
    ({"days": 30}, [1]),
    ({"days": "30"}, [3]),
    ({"region": {"$in": ["US", "APAC"]}}, [2, 3]),
    ({"region": {"$nin": ["US", "APAC"]}}, [0, 1, 4]),
    ({"tier": {"$nin": ["std"]}}, [1, 3, 4]),  # missing and null fields are "not in"
    ({"path": {"$prefix": "us/"}}, [2]),
    ({"path": {"$exists": True}}, [2]),
    ({"active": {"$exists": False}}, [0, 3, 4]),
    ({"active": True}, [1]),
    ({"active": 1}, []),  # True is not 1
    ({"tier": None}, [3, 4]),  # null or missing
    ({"tags": "refunds"}, [0]),  # a list field matches any element
    ({"tags": {"$in": ["footwear", "laptops"]}}, [0, 1]),
    ({"tags": {"$ne": "refunds"}}, [1, 2, 3, 4]),
    ({"owner.team": {"$prefix": "eu-"}}, [0]),
    ({"$or": [{"region": "US"}, {"tier": "vip"}]}, [1, 2]),
    ({"$and": [{"region": "EU"}, {"days": {"$exists": True}}]}, [0, 1]),
    ({"region": "EU", "tier": "std"}, [0]),  # several fields are ANDed
    ({"$or": [{"$and": [{"region": "EU"}, {"days": 14}]}, {"days": "30"}]}, [0, 3]),
    ({}, [0, 1, 2, 3, 4]),
]


@pytest.fixture()
def db():
    connection = sqlite3.connect(":memory:")
    connection.execute("CREATE TABLE rows (id INTEGER, metadata TEXT)")
    connection.executemany("INSERT INTO rows VALUES (?, ?)", [(i, json.dumps(r)) for i, r in enumerate(ROWS)])
    yield connection
    connection.close()


@pytest.mark.parametrize(("where", "expected"), CASES)
def test_in_memory_semantics(where, expected):
    assert [i for i, row in enumerate(ROWS) if matches_filter(row, where)] == expected


@pytest.mark.parametrize(("where", "expected"), CASES)
def test_sql_selects_the_same_rows(db, where, expected):
    sql, params = compile_filter_sql(where)
    got = [i for (i,) in db.execute(f"SELECT id FROM rows WHERE {sql} ORDER BY id", params)]
    assert got == expected


def test_values_and_paths_are_bound_parameters():
    sql, params = compile_filter_sql({"region": "EU", "owner.team": {"$prefix": "x"}})
    assert "EU" not in sql and "owner" not in sql and "team" not in sql
    assert "EU" in params and '$."owner"."team"' in params and "x" in params
    assert sql.count("?") == len(params)


def test_hostile_value_cannot_inject(db):
    hostile = "EU' OR 1=1; DROP TABLE rows; --"
    sql, params = compile_filter_sql({"region": hostile})
    assert hostile not in sql
    assert db.execute(f"SELECT id FROM rows WHERE {sql}", params).fetchall() == []
    assert db.execute("SELECT COUNT(*) FROM rows").fetchone()[0] == len(ROWS)  # table still there
    # LIKE wildcards in a prefix are ordinary characters.
    sql, params = compile_filter_sql({"path": {"$prefix": "%"}})
    assert db.execute(f"SELECT id FROM rows WHERE {sql}", params).fetchall() == []


def test_hostile_field_and_column_names_are_refused():
    with pytest.raises(labsrc.InvalidArgument, match="invalid filter field"):
        compile_filter_sql({"region') OR 1=1 --": "x"})
    with pytest.raises(labsrc.InvalidArgument, match="identifier"):
        compile_filter_sql({"region": "EU"}, column="metadata; DROP TABLE rows")


def test_unknown_operator_lists_the_valid_ones():
    with pytest.raises(labsrc.InvalidArgument) as err:
        matches_filter({}, {"days": {"$regex": "1.*"}})
    message = str(err.value)
    assert "'$regex'" in message
    assert all(op in message for op in FILTER_OPERATORS)
    with pytest.raises(labsrc.InvalidArgument, match=r"\$nor"):
        compile_filter_sql({"$nor": []})


@pytest.mark.parametrize(
    "bad",
    [
        {"days": {"$in": "EU"}},
        {"days": {"$gt": True}},
        {"days": {"$gt": None}},
        {"days": {"$exists": 1}},
        {"days": {"$prefix": 3}},
        {"$or": []},
        {"days": {}},
        {"days": {"nested": 1}},
        {"days": float("nan")},
        "region = 'EU'",
    ],
)
def test_malformed_filters_are_errors(bad):
    with pytest.raises(labsrc.InvalidArgument):
        matches_filter({}, bad)
    with pytest.raises(labsrc.InvalidArgument):
        compile_filter_sql(bad)


def test_no_filter_matches_everything():
    assert matches_filter({"a": 1}, None) is True
    assert compile_filter_sql(None) == ("1", [])


def test_inputs_are_not_mutated():
    where = {"tags": {"$in": ["a"]}}
    row = {"tags": ["a"]}
    matches_filter(row, where)
    compile_filter_sql(where)
    assert where == {"tags": {"$in": ["a"]}} and row == {"tags": ["a"]}


# --- property: the two back ends agree on arbitrary rows and filters ----------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([-1.5, 0.0, 2.5]), st.sampled_from(["", "a", "ab", "b", "3"]))
FIELDS = st.sampled_from(["x", "y", "o.z"])
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3))
ROW = st.fixed_dictionaries({}, optional={"x": VALUES, "y": VALUES, "o": st.fixed_dictionaries({}, optional={"z": VALUES})})
ORDERED = st.one_of(st.integers(-3, 3), st.sampled_from(["a", "ab", "b"]))
CONDITION = st.one_of(
    SCALARS,
    st.builds(lambda v: {"$ne": v}, SCALARS),
    st.builds(lambda op, v: {op: v}, st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), ORDERED),
    st.builds(lambda op, v: {op: v}, st.sampled_from(["$in", "$nin"]), st.lists(SCALARS, max_size=3)),
    st.builds(lambda v: {"$prefix": v}, st.sampled_from(["", "a", "b"])),
    st.builds(lambda v: {"$exists": v}, st.booleans()),
)
LEAF = st.dictionaries(FIELDS, CONDITION, min_size=1, max_size=2)
FILTER = st.recursive(LEAF, lambda inner: st.builds(lambda op, subs: {op: subs}, st.sampled_from(["$and", "$or"]), st.lists(inner, min_size=1, max_size=3)), max_leaves=6)


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(ROW, min_size=1, max_size=6), where=FILTER)
def test_sql_and_memory_agree(rows, where):
    connection = sqlite3.connect(":memory:")
    connection.execute("CREATE TABLE rows (id INTEGER, metadata TEXT)")
    connection.executemany("INSERT INTO rows VALUES (?, ?)", [(i, json.dumps(r)) for i, r in enumerate(rows)])
    sql, params = compile_filter_sql(where)
    got = [i for (i,) in connection.execute(f"SELECT id FROM rows WHERE {sql} ORDER BY id", params)]
    connection.close()
    assert got == [i for i, row in enumerate(rows) if matches_filter(row, where)]
