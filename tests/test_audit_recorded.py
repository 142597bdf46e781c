"""The recorded audit (``fixtures/audit/rows.jsonl``): what docs/audit.md's table and notebook 13 show.

It is the ``--rows`` file of one ``labsrc audit`` over every subject on the lesson, the
policy corpus and SciFact. These tests hold docs/audit.md to it, hold it to the datasets
it claims to have audited (a changed fixture makes its digest stale: run the audit
again), and check what the issue asks of it: every subject on every dataset, the
controls passing every gate, and no row that could not run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from labsrc.audit import AUDIT_GATES, SUBJECTS, audit_markdown, load_dataset, load_rows
from labsrc.datasets.beir import find_dataset_dir, missing_data_reason
from labsrc.datasets.lesson import fixtures_dir
from labsrc.version import __version__

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "fixtures" / "audit" / "rows.jsonl"
DATASETS = ("lesson", "policies", "scifact")
REGENERATE = ("labsrc audit --data lesson=fixtures/lesson policies=fixtures/policies scifact=DIR "
              "--rows fixtures/audit/rows.jsonl")


@pytest.fixture(scope="module")
def rows():
    return load_rows(RECORDED)


def test_the_documented_table_is_the_recorded_audit(rows) -> None:
    assert audit_markdown(rows) in (ROOT / "docs" / "audit.md").read_text(encoding="utf-8"), (
        f"docs/audit.md's table is not {RECORDED.name}'s; paste the table `{REGENERATE}` prints")


def test_every_subject_on_every_dataset_in_the_registry_order(rows) -> None:
    assert [(r.subject, r.dataset) for r in rows] == [(s, d) for s in SUBJECTS for d in DATASETS]
    assert [r.description for r in rows] == [SUBJECTS[s].description for s in SUBJECTS for _ in DATASETS]
    assert {r.lab_version for r in rows} == {__version__}


def test_every_row_ran_and_the_controls_pass_every_gate(rows) -> None:
    assert [r for r in rows if r.error or "ERROR" in r.statuses.values()] == []
    for row in rows:
        assert set(row.statuses) == set(AUDIT_GATES)
        if SUBJECTS[row.subject].control:
            assert set(row.statuses.values()) == {"PASS"} and row.exit_code == 0, row


@pytest.mark.parametrize("name", ["lesson", "policies"])
def test_the_recorded_rows_are_of_the_fixtures_as_they_are(rows, name) -> None:
    digest = load_dataset(name, fixtures_dir() / name).digest
    stale = sorted({r.subject for r in rows if r.dataset == name and r.digest != digest})
    assert not stale, f"fixtures/{name} changed since the recorded audit ({stale}); run `{REGENERATE}`"


@pytest.mark.skipif(find_dataset_dir("scifact") is None, reason=missing_data_reason("scifact"))
def test_the_recorded_rows_are_of_scifact_as_it_is(rows) -> None:
    digest = load_dataset("scifact", find_dataset_dir("scifact")).digest
    assert {r.digest for r in rows if r.dataset == "scifact"} == {digest}
