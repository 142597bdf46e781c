"""Reports: files, schema, DataFrames, and the promise that no chunk text ever leaves the store."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import labsrc
from labsrc.datasets.lesson import fixtures_dir
from labsrc.errors import InvalidArgument
from labsrc.gate.config import GateConfig, load_gate_config
from labsrc.gate.gates import release_gate
from labsrc.reports.report import (
    REPORT_FILES,
    REPORT_SCHEMA,
    REPORT_SCHEMA_VERSION,
    candidates_frame,
    cases_frame,
    gates_frame,
    latency_frame,
    recall_frame,
    report_dict,
    report_markdown,
    write_report,
)
from labsrc.records.policy import Caller
from labsrc.retriever.policy import PolicyRetriever

LESSON_CONFIG = load_gate_config(fixtures_dir() / "lesson" / "gate.json")
#: The lesson's config with one warm-up round: its 20 timed repetitions stay, since a p95 over a few samples is
#: their largest, and one slow sample on a loaded machine would fail the latency gate these tests expect to pass.
FAST = GateConfig(**{**LESSON_CONFIG.to_dict(), "on_date": LESSON_CONFIG.on_date, "warmup": 1})


class BoundaryBypass(PolicyRetriever):
    """A deliberately unsafe retriever: it searches as an EU caller holding every tag."""

    def search(self, query, caller, on_date, top_k=2, *, query_kind="adhoc"):  # type: ignore[override]
        everything = Caller(caller.actor_id, "EU", {"support:eu", "merchant:vip-ops"})
        return super().search(query, everything, on_date, top_k, query_kind=query_kind)


@pytest.fixture(scope="module")
def passing(data: labsrc.Lesson):
    return release_gate(PolicyRetriever(data.chunks, data.vectors), data.cases, data.callers, FAST)


@pytest.fixture(scope="module")
def failing(data: labsrc.Lesson):
    return release_gate(BoundaryBypass(data.chunks, data.vectors), data.cases, data.callers, FAST)


@pytest.fixture(scope="module")
def passing_dir(passing, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("passing")
    write_report(passing, out)
    return out


@pytest.fixture(scope="module")
def failing_dir(failing, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("failing")
    write_report(failing, out)
    return out


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# --- files --------------------------------------------------------------------------------


def test_every_report_file_is_written(passing_dir: Path) -> None:
    assert sorted(p.name for p in passing_dir.iterdir()) == sorted(REPORT_FILES)
    for name in ("recall.png", "latency.png"):
        assert (passing_dir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("which", ["passing_dir", "failing_dir"])
def test_no_report_file_contains_any_chunk_text(which: str, request: pytest.FixtureRequest, data) -> None:
    out: Path = request.getfixturevalue(which)
    texts = [c.text for c in data.chunks]
    for path in sorted(out.iterdir()):
        raw = path.read_bytes()
        for text in texts:
            for form in (text, json.dumps(text)[1:-1], json.dumps(text, ensure_ascii=False)[1:-1]):
                assert form.encode("utf-8") not in raw, f"{path.name} contains the text of a chunk"


def test_write_report_refuses_a_file_as_folder(passing, tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.write_text("x")
    with pytest.raises(InvalidArgument, match="not a directory"):
        write_report(passing, target)


# --- report.json ------------------------------------------------------------------------------


def test_report_json_schema(passing_dir: Path, passing) -> None:
    doc = json.loads((passing_dir / "report.json").read_text(encoding="utf-8"))
    assert doc["schema"] == REPORT_SCHEMA and doc["schema_version"] == REPORT_SCHEMA_VERSION == 1
    assert list(doc) == [
        "schema", "schema_version", "generator", "passed", "on_date", "subject", "noninterference", "probes", "config",
        "versions", "recall", "significance", "gates", "omitted_gates", "cases", "latency", "cases_sha256",
    ]
    assert doc["passed"] is True and doc["on_date"] == "2026-05-27"
    assert doc["config"] == FAST.to_dict()
    assert doc["versions"]["dense"] == "fixture-embeddings-v1"
    assert doc["versions"]["dense_model"]["name"] == "fixture-embeddings-v1"
    assert doc["recall"]["k"] == 2
    assert doc["recall"]["lanes"] == pytest.approx({"bm25": 2 / 3, "dense": 2 / 3, "hybrid": 3 / 3})
    assert doc["recall"]["curve"] is None and doc["omitted_gates"] == []  # no recall_at; every lane reported
    assert [g["name"] for g in doc["gates"]][-1] == "latency p50/p95"
    assert [c["name"] for c in doc["cases"]] == [c.case.name for c in passing.outcomes]
    assert set(doc["latency"]["stages"]) == {"authorize", "bm25", "dense", "fusion"}
    assert doc["latency"]["requests"] == FAST.repetitions * len(passing.outcomes)


def test_report_json_cases_carry_ids_recall_and_leaks(passing_dir: Path) -> None:
    cases = {c["name"]: c for c in json.loads((passing_dir / "report.json").read_text())["cases"]}
    assert cases["paraphrase"]["ids"] == {
        "bm25": [], "dense": ["eu-refurb-v2-rule", "eu-footwear-v1-rule"],
        "hybrid": ["eu-refurb-v2-rule", "eu-footwear-v1-rule"],
    }
    assert cases["paraphrase"]["recall"] == {"bm25": 0.0, "dense": 1.0, "hybrid": 1.0}
    assert cases["restricted-merchant-code"]["leaked"] == []
    assert cases["absent-gift-card"]["returned"] == []


def test_report_json_is_stable_apart_from_timings(data) -> None:
    def build():
        run = release_gate(PolicyRetriever(data.chunks, data.vectors), data.cases, data.callers, FAST, measure=False)
        return json.dumps(report_dict(run), sort_keys=False)

    assert build() == build()


def test_reports_say_three_cases_are_too_few_for_a_significance_test(passing_dir: Path) -> None:
    doc = json.loads((passing_dir / "report.json").read_text(encoding="utf-8"))
    assert doc["significance"]["metric"] == "recall@2" and doc["significance"]["queries"] == 3
    assert doc["significance"]["comparisons"] == []  # no p-value is printed for 3 pairs
    assert "2/2^3 = 0.25" in doc["significance"]["note"]
    for name in ("report.md", "report.html"):
        assert "no significance test: with 3 positive cases none is meaningful" in (passing_dir / name).read_text()


def test_failing_report_says_so(failing_dir: Path) -> None:
    doc = json.loads((failing_dir / "report.json").read_text())
    assert doc["passed"] is False
    failed = {g["name"]: g["failing_cases"] for g in doc["gates"] if not g["passed"]}
    assert failed["restricted exclusion"] == ["restricted-merchant-code"]
    assert failed["wrong_region exclusion"] == ["no-access-caller"]


# --- JSONL artifacts ------------------------------------------------------------------------------


def test_passing_lesson_has_no_failed_traces(passing_dir: Path) -> None:
    assert (passing_dir / "failed_traces.jsonl").read_text() == ""


def test_failed_traces_are_compact_and_complete(failing_dir: Path, failing) -> None:
    traces = {t["case"]: t for t in read_jsonl(failing_dir / "failed_traces.jsonl")}
    assert set(traces) == {o.case.name for o in failing.failed_outcomes}
    trace = traces["restricted-merchant-code"]
    assert trace["leaked"] == ["merchant-vip-refurb"]
    # The bypass returns a hidden id, so the boundary gate fails on the same case (sorted by gate name).
    assert trace["failed_gates"] == ["boundary on every returned id", "restricted exclusion"]
    assert trace["versions"]["fusion"] == "rrf-k60"
    assert set(trace["timings_ms"]) == {"authorize", "bm25", "dense", "fusion"}
    (candidate,) = trace["candidates"]
    assert candidate == {
        "chunk_id": "merchant-vip-refurb",
        "bm25_rank": 1, "dense_rank": None, "hybrid_rank": 1,
        "bm25_probe_rank": 1, "dense_probe_rank": None, "hybrid_probe_rank": 1,
    }
    assert not {"text", "title", "snippet"} & set(trace)


def test_candidates_jsonl_is_the_reranker_input(passing_dir: Path, passing) -> None:
    records = {r["case"]: r for r in read_jsonl(passing_dir / "candidates.jsonl")}
    assert list(records) == [o.case.name for o in passing.outcomes]
    shared = records["shared-language"]
    assert shared["query"] == "damaged refurbished laptop replacement after delivery"
    assert [c["chunk_id"] for c in shared["candidates"]] == ["eu-refurb-v2-rule", "eu-footwear-v1-rule"]
    top = shared["candidates"][0]
    assert top["rank"] == 1 and top["rrf_score"] == pytest.approx(1 / 61 + 1 / 61)
    assert top["bm25_rank"] == 1 and top["bm25_score"] == pytest.approx(2.932610, abs=1e-6)
    assert top["dense_rank"] == 1 and top["dense_score"] == pytest.approx(0.987803, abs=1e-6)
    code = records["exact-code"]["candidates"][0]
    assert code["dense_rank"] is None and code["dense_score"] is None
    assert records["restricted-merchant-code"]["candidates"] == []


# --- DataFrames and Markdown --------------------------------------------------------------------


def test_recall_frame_per_case_and_lane(passing) -> None:
    frame = recall_frame(passing)
    assert list(frame.columns) == ["bm25", "dense", "hybrid"]
    assert frame.to_dict(orient="index") == {
        "exact-code": {"bm25": 1.0, "dense": 0.0, "hybrid": 1.0},
        "paraphrase": {"bm25": 0.0, "dense": 1.0, "hybrid": 1.0},
        "shared-language": {"bm25": 1.0, "dense": 1.0, "hybrid": 1.0},
    }
    assert frame.mean().to_dict() == pytest.approx({"bm25": 2 / 3, "dense": 2 / 3, "hybrid": 1.0})


def test_candidates_frame(passing) -> None:
    frame = candidates_frame(passing)
    assert list(frame.columns) == ["case", "rank", "chunk_id", "rrf_score", "bm25_rank", "bm25_score",
                                   "dense_rank", "dense_score"]
    para = frame[frame["case"] == "paraphrase"]
    assert list(para["rrf_score"]) == pytest.approx([1 / 61, 1 / 62])
    assert para["bm25_rank"].isna().all() and list(para["dense_rank"]) == [1, 2]


def test_gates_and_cases_frames(passing) -> None:
    gates = gates_frame(passing)
    assert gates["passed"].all() and len(gates) == len(passing.gates)
    assert gates.set_index("gate").loc["superseded exclusion", "what a failure means"] == "the freshness filter regressed"
    cases = cases_frame(passing)
    assert list(cases["case"]) == [o.case.name for o in passing.outcomes]
    assert cases["passed"].all()


def test_latency_frame_empty_when_not_measured(data) -> None:
    run = release_gate(PolicyRetriever(data.chunks, data.vectors), data.cases, data.callers, FAST, measure=False)
    frame = latency_frame(run)
    assert isinstance(frame, pd.DataFrame) and frame.empty
    assert "Not measured." in report_markdown(run)


def test_markdown_summary(passing) -> None:
    text = report_markdown(passing)
    assert text.startswith("# Release gate report\n")
    # The lesson has no not_yet_effective case (all five chunks are in force on its date).
    assert ("**PASS**: 10 of 10 tested gates pass, 1 gate NOT TESTED for retriever `PolicyRetriever` on 2026-05-27"
            in text)
    assert "| bm25 | 0.67 |" in text and "| hybrid | 1.00 |" in text
    assert "| restricted exclusion | PASS |" in text
