"""Case files: the lesson's cases load, and every malformed line names file, line and field."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from labsrc.datasets.lesson import fixtures_dir
from labsrc.errors import InvalidRecord
from labsrc.records.cases import CASE_KINDS, NEGATIVE_KINDS, Case, load_cases

LESSON_CASES = fixtures_dir() / "lesson" / "cases.jsonl"
CHUNK_IDS = {"eu-refurb-v2-rule", "eu-refurb-v1-rule", "merchant-vip-refurb", "eu-footwear-v1-rule", "eu-carrier-loss-v1"}
CALLER_IDS = {"luna-48291", "visitor-9000"}

GOOD = {"name": "c1", "query": "RPL-14", "caller": "luna-48291", "kind": "positive", "expected": ["eu-refurb-v2-rule"]}


def write_cases(tmp_path: Path, *records: object) -> Path:
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


def test_lesson_cases_cover_every_kind_its_chunks_allow() -> None:
    cases = load_cases(LESSON_CASES, chunk_ids=CHUNK_IDS, caller_ids=CALLER_IDS)
    # The lesson's five chunks are all in force by 2026-05-27, so none can be not yet effective
    # (fixtures/policies has that case: us-holiday-returns-2026).
    assert sorted({c.kind for c in cases}) == sorted(set(CASE_KINDS) - {"not_yet_effective", "permitted_only"})
    positives = [c for c in cases if c.kind == "positive"]
    assert [c.name for c in positives] == ["exact-code", "paraphrase", "shared-language"]
    assert all(c.expected == ("eu-refurb-v2-rule",) for c in positives)


def test_lesson_restricted_case_forbids_the_hidden_merchant_rule() -> None:
    cases = {c.name: c for c in load_cases(LESSON_CASES)}
    assert cases["restricted-merchant-code"].query == "VIP-RPL-1"
    assert "merchant-vip-refurb" in cases["restricted-merchant-code"].forbidden
    assert cases["superseded-wording"].forbidden == ("eu-refurb-v1-rule",)


def test_a_case_reads_every_field(tmp_path: Path) -> None:
    record = {**GOOD, "on_date": "2026-05-01", "notes": "why this case exists"}
    (case,) = load_cases(write_cases(tmp_path, record))
    assert case == Case(
        name="c1", query="RPL-14", caller="luna-48291", kind="positive",
        expected=("eu-refurb-v2-rule",), on_date=dt.date(2026, 5, 1), notes="why this case exists",
    )


def test_to_dict_round_trips(tmp_path: Path) -> None:
    original = load_cases(LESSON_CASES)
    again = load_cases(write_cases(tmp_path, *[c.to_dict() for c in original]))
    assert again == original


def test_an_absent_case_may_forbid_ids_but_expects_none(tmp_path: Path) -> None:
    record = {"name": "a", "query": "gift card", "caller": "luna-48291", "kind": "absent"}
    (case,) = load_cases(write_cases(tmp_path, record))
    assert case.kind == "absent" and case.expected == () and case.forbidden == ()
    (case,) = load_cases(write_cases(tmp_path, {**record, "forbidden": ["eu-footwear-v1-rule"]}))
    assert case.forbidden == ("eu-footwear-v1-rule",)


def test_blank_lines_are_skipped_and_lines_still_count(tmp_path: Path) -> None:
    path = write_cases(tmp_path, GOOD, "", {**GOOD, "name": "c2", "kind": "oops"})
    with pytest.raises(InvalidRecord) as info:
        load_cases(path)
    assert info.value.line == 3 and info.value.field == "kind"


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"kind": "maybe"}, "kind", "valid kinds"),
        ({"name": ""}, "name", "empty"),
        ({"caller": 7}, "caller", "string"),
        ({"expected": []}, "expected", "at least one"),
        ({"expected": "eu-refurb-v2-rule"}, "expected", "list"),
        ({"expected": ["a", "a"]}, "expected", "more than once"),
        ({"forbidden": ["eu-refurb-v1-rule"]}, "forbidden", "not forbidden"),
        ({"on_date": "27/05/2026"}, "on_date", "ISO date"),
        ({"surprise": 1}, "surprise", "unknown field"),
        ({"kind": "restricted", "expected": []}, "forbidden", "must list"),
    ],
)
def test_malformed_cases_name_file_line_and_field(tmp_path: Path, change: dict, field: str, message: str) -> None:
    record = {**GOOD, **change}
    if change.get("expected") == [] and change.get("kind") == "restricted":
        record.pop("expected")
    path = write_cases(tmp_path, GOOD | {"name": "first"}, record)
    with pytest.raises(InvalidRecord, match=message) as info:
        load_cases(path)
    assert (info.value.path, info.value.line, info.value.field) == (str(path), 2, field)
    assert f"{path}, line 2, field {field!r}" in str(info.value)


def test_a_negative_case_expects_nothing(tmp_path: Path) -> None:
    record = {"name": "n", "query": "q", "caller": "luna-48291", "kind": "superseded",
              "forbidden": ["eu-refurb-v1-rule"], "expected": ["eu-refurb-v2-rule"]}
    with pytest.raises(InvalidRecord, match="use 'forbidden'") as info:
        load_cases(write_cases(tmp_path, record))
    assert info.value.field == "expected"


def test_duplicate_names_are_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidRecord, match="first seen on line 1") as info:
        load_cases(write_cases(tmp_path, GOOD, GOOD))
    assert info.value.line == 2


def test_malformed_json_names_the_line(tmp_path: Path) -> None:
    with pytest.raises(InvalidRecord, match="malformed JSON") as info:
        load_cases(write_cases(tmp_path, GOOD, '{"name": "broken",'))
    assert info.value.line == 2


def test_unknown_chunk_id_is_an_error_not_a_silent_miss(tmp_path: Path) -> None:
    path = write_cases(tmp_path, {**GOOD, "expected": ["eu-refurb-v3-rule"]})
    with pytest.raises(InvalidRecord, match="unknown chunk id") as info:
        load_cases(path, chunk_ids=CHUNK_IDS, caller_ids=CALLER_IDS)
    assert (info.value.line, info.value.field) == (1, "expected")


def test_unknown_forbidden_id_is_an_error(tmp_path: Path) -> None:
    record = {"name": "r", "query": "q", "caller": "luna-48291", "kind": "restricted", "forbidden": ["ghost"]}
    with pytest.raises(InvalidRecord, match="unknown chunk id") as info:
        load_cases(write_cases(tmp_path, record), chunk_ids=CHUNK_IDS)
    assert info.value.field == "forbidden"


def test_unknown_caller_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidRecord, match="unknown caller 'mallory'") as info:
        load_cases(write_cases(tmp_path, {**GOOD, "caller": "mallory"}), caller_ids=CALLER_IDS)
    assert info.value.field == "caller"


def test_missing_file_is_an_invalid_record(tmp_path: Path) -> None:
    with pytest.raises(InvalidRecord, match="cannot open"):
        load_cases(tmp_path / "nope.jsonl")


def test_case_kinds_are_the_documented_ones() -> None:
    assert CASE_KINDS == ("positive", "restricted", "superseded", "not_yet_effective", "wrong_region", "absent", "permitted_only")
    assert set(NEGATIVE_KINDS) < set(CASE_KINDS) and "absent" not in NEGATIVE_KINDS


def test_case_is_frozen_and_stores_tuples() -> None:
    case = Case("n", "q", "c", "positive", expected=["a"])  # type: ignore[arg-type]
    assert case.expected == ("a",)
    with pytest.raises(AttributeError):
        case.name = "other"  # type: ignore[misc]
