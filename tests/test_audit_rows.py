"""The audit's rows file (``labsrc audit --rows``): each finished row kept at once, kept rows reused only
for the same subject, dataset content and lab version, a malformed file named by line and field."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import subprocess
import sys

import pytest

from labsrc.audit import AuditRow, audit_cost, load_dataset, load_rows, run_audit, save_rows
from labsrc.cli.main import main
from labsrc.datasets.lesson import fixtures_dir
from labsrc.errors import InvalidRecord


@pytest.fixture(scope="module")
def lesson_data():
    return load_dataset("lesson", fixtures_dir() / "lesson")


def _row(subject: str, dataset: str = "lesson", **changes) -> AuditRow:
    base = AuditRow(subject, dataset, {"recall": "PASS"}, {}, 0, digest="d", description="x", seconds=1.5)
    return dataclasses.replace(base, **changes)


def test_rows_round_trip_through_the_file(tmp_path) -> None:
    rows = [_row("a"), _row("b", why={"recall": "recall@10 hybrid: 0.5 < 0.8"}, exit_code=1, statuses={"recall": "FAIL"})]
    path = save_rows(rows, tmp_path / "rows.jsonl")
    assert load_rows(path) == rows
    assert len(path.read_text().splitlines()) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["rows.jsonl"]  # nothing left beside it


@pytest.mark.parametrize(("line", "field", "value"), [
    ('{"subject": 3}', "subject", "3"),
    ('not json', None, "malformed JSON"),
    ('[1]', None, "JSON object"),
])
def test_a_malformed_line_is_named_by_file_line_and_field(tmp_path, line, field, value) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(_row("a").to_dict()) + "\n" + line + "\n")
    with pytest.raises(InvalidRecord) as error:
        load_rows(path)
    assert error.value.line == 2 and error.value.field == field and value in str(error.value)
    assert str(path) in str(error.value)


def test_an_unknown_status_is_refused(tmp_path) -> None:
    record = _row("a").to_dict() | {"statuses": {"recall": "MAYBE"}}
    (tmp_path / "rows.jsonl").write_text(json.dumps(record) + "\n")
    with pytest.raises(InvalidRecord, match="MAYBE"):
        load_rows(tmp_path / "rows.jsonl")


def test_each_row_is_kept_as_soon_as_it_is_done_and_reused_next_time(tmp_path, lesson_data) -> None:
    path = tmp_path / "rows.jsonl"
    seen_when_starting: dict[str, list[str]] = {}

    def heard(what: str) -> None:
        seen_when_starting[what] = [r.subject for r in load_rows(path)] if path.exists() else []

    first = run_audit([lesson_data], ["policy-retriever", "tantivy-filter"], progress=heard, rows_file=path)
    # tantivy started with the control's row already on disk.
    assert seen_when_starting["tantivy-filter on lesson"] == ["policy-retriever"]
    assert load_rows(path) == first and all(r.seconds is not None and r.seconds > 0 for r in first)
    # Mark the kept tantivy row: a reused row comes back as kept, marks and all; nothing is re-run.
    marked = [dataclasses.replace(r, why={**r.why, "recall": "kept, not re-run"}) if r.subject == "tantivy-filter"
              else r for r in first]
    save_rows(marked, path)
    heard_again: list[str] = []
    again = run_audit([lesson_data], ["tantivy-filter"], progress=heard_again.append, rows_file=path)
    assert again[0].why["recall"] == "kept, not re-run"
    assert heard_again == [f"tantivy-filter on lesson: the row kept in {path}, not run again"]
    # This run's row first, then the file's other rows: the control's row stays.
    assert [r.subject for r in load_rows(path)] == ["tantivy-filter", "policy-retriever"]


@pytest.mark.parametrize("stale", ["digest", "lab_version", "description"])
def test_a_kept_row_for_other_data_code_or_settings_is_run_again(tmp_path, lesson_data, stale) -> None:
    path = tmp_path / "rows.jsonl"
    kept = run_audit([lesson_data], ["policy-retriever"], rows_file=path)[0]
    save_rows([dataclasses.replace(kept, why={"recall": "stale"}, **{stale: "something else"})], path)
    fresh = run_audit([lesson_data], ["policy-retriever"], rows_file=path)[0]
    assert "recall" not in fresh.why and getattr(fresh, stale) != "something else"
    assert load_rows(path) == [fresh]


def test_an_error_row_is_tried_again(tmp_path, lesson_data) -> None:
    # Kept when the extra was missing; once it is installed, the row runs.
    path = tmp_path / "rows.jsonl"
    kept = run_audit([lesson_data], ["policy-retriever"], rows_file=path)[0]
    failed = dataclasses.replace(kept, statuses=dict.fromkeys(kept.statuses, "ERROR"), exit_code=2,
                                 error="the audit extra is missing")
    save_rows([failed], path)
    again = run_audit([lesson_data], ["policy-retriever"], rows_file=path)[0]
    assert again.error is None and set(again.statuses.values()) == {"PASS"}


def test_the_digest_follows_the_dataset_content(lesson_data) -> None:
    again = load_dataset("lesson", fixtures_dir() / "lesson")
    assert again.digest == lesson_data.digest and len(again.digest) == 64
    fewer = dataclasses.replace(lesson_data, cases=lesson_data.cases[1:])
    other = load_dataset("lesson", fixtures_dir() / "policies")
    assert other.digest != lesson_data.digest
    # The digest is computed from the content; a dataset edited in code keeps its old digest unless recomputed.
    from labsrc.audit import dataset_digest
    from labsrc.lanes.sources import visible_chunks

    visible = visible_chunks(fewer.chunks, fewer.callers, fewer.cases, fewer.config.eval_date())
    assert dataset_digest(fewer.chunks, fewer.callers, fewer.cases, fewer.config, fewer.vectors, visible) != lesson_data.digest


def test_the_digest_follows_the_evaluation_date_of_an_unpinned_config(lesson_data, monkeypatch) -> None:
    # A config that pins no date is judged on today's: the same records on another day are another dataset.
    import datetime as dt

    from labsrc.audit import dataset_digest
    from labsrc.gate.config import GateConfig

    unpinned = dataclasses.replace(lesson_data.config, on_date=None)
    args = (lesson_data.chunks, lesson_data.callers, lesson_data.cases, unpinned, None, lesson_data.chunks)
    digests = []
    for day in (dt.date(2026, 5, 1), dt.date(2026, 5, 2), dt.date(2026, 5, 1)):
        monkeypatch.setattr(GateConfig, "eval_date", lambda self, day=day: day)
        digests.append(dataset_digest(*args))
    assert digests[0] != digests[1] and digests[0] == digests[2]


def test_the_digest_does_not_depend_on_the_hash_seed() -> None:
    # A caller's tags are a frozenset, whose order follows PYTHONHASHSEED: the digest must not.
    script = ("from labsrc.audit import load_dataset; from labsrc.datasets.lesson import fixtures_dir; "
              "print(load_dataset('policies', fixtures_dir() / 'policies').digest)")
    digests = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip() for seed in ("1", "2", "3")}
    assert len(digests) == 1 and len(digests.pop()) == 64


def test_audit_cost_sums_the_rows() -> None:
    line = audit_cost([_row("a", seconds=60.0), _row("b", seconds=30.0), _row("c", seconds=None)])
    assert line == "3 audit rows: 90 s of gate runs (1.5 min); longest a on lesson, 60 s"


def test_cli_refuses_a_malformed_rows_file_in_one_line(tmp_path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"subject": "policy-retriever"}\n')
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["audit", "--subjects", "policy-retriever", "--data", f"lesson={fixtures_dir() / 'lesson'}",
                     "--rows", str(path), "--no-progress"])
    assert code == 2
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and "line 1" in lines[0] and "'dataset'" in lines[0], err.getvalue()
