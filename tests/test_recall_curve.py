"""Recall@k at several k from one gate run, per lane, written as numbers and curves (issue 59, part 3).

The lesson's built retriever (``release_gate``, no worker processes) gives the arithmetic: each point is the
mean over the positive cases of ``|expected ∩ lane[:k]| / |expected|``, asked at that k. The starter's gate
(``labsrc gate --recall-at``) gives the files a team gets.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

import labsrc
from labsrc.cli.main import main
from labsrc.errors import InvalidArgument
from labsrc.evaluation.metrics import recall_at_k
from labsrc.gate.config import GateConfig
from labsrc.gate.gates import release_gate
from labsrc.gate.recall_curve import check_recall_at, parse_recall_at
from labsrc.reports import curve_frame, plot_recall_curves, write_report
from labsrc.retriever.policy import PolicyRetriever

FAST = GateConfig(top_k=2, on_date=None, repetitions=1, warmup=0)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


class DepthAware(PolicyRetriever):
    """Answers at top_k 1 with the lowest-ranked of its top 3: a ranking that depends on the depth asked."""

    def search(self, query, caller, on_date, top_k=2, *, query_kind="adhoc"):  # type: ignore[override]
        if top_k != 1:
            return super().search(query, caller, on_date, top_k, query_kind=query_kind)
        deeper = super().search(query, caller, on_date, 3, query_kind=query_kind)
        return type(deeper)(deeper.sparse[-1:], deeper.dense[-1:], deeper.fused[-1:], deeper.trace)


class RaisesDeep(PolicyRetriever):
    """Raises for the 'paraphrase' case's query when asked 3 deep."""

    def search(self, query, caller, on_date, top_k=2, *, query_kind="adhoc"):  # type: ignore[override]
        if top_k == 3 and "reconditioned" in query.lower():
            raise RuntimeError("index shard 3 unavailable")
        return super().search(query, caller, on_date, top_k, query_kind=query_kind)


@pytest.fixture(scope="module")
def curved(data: labsrc.Lesson):
    retriever = PolicyRetriever(data.chunks, data.vectors)
    return retriever, release_gate(retriever, data.cases, data.callers, FAST, on_date=data.eval_date, measure=False,
                                   recall_at=(3, 1, 2))


def test_each_point_is_the_mean_recall_of_a_request_at_that_k(curved, data: labsrc.Lesson) -> None:
    retriever, run = curved
    curve = run.recall_curve
    assert curve.ks == (1, 2, 3) and curve.lanes == ("bm25", "dense", "hybrid") and curve.top_k == 2
    positives = [c for c in data.cases if c.kind == "positive"]
    assert curve.cases == len(positives) == 3 and curve.errors == ()
    callers = {c.actor_id: c for c in data.callers}
    for lane, field in (("bm25", "sparse"), ("dense", "dense"), ("hybrid", "fused")):
        expected = []
        for k in curve.ks:
            per_case = []
            for case in positives:
                got = retriever.search(case.query, callers[case.caller], case.on_date or data.eval_date, k)
                per_case.append(recall_at_k([c.chunk_id for c, _ in getattr(got, field)], case.expected, k))
            expected.append(sum(per_case) / len(per_case))
        assert curve.means()[lane] == pytest.approx(tuple(expected))
    # At top_k the curve is the gate's own recall.
    assert {lane: values[1] for lane, values in curve.means().items()} == pytest.approx(dict(run.recall))
    # The lesson: bm25 finds exact-code and shared-language at 2, dense paraphrase and shared-language; fusion all 3.
    assert curve.means()["hybrid"][1] == 1.0 and curve.means()["bm25"][1] == pytest.approx(2 / 3)


def test_a_ranking_that_depends_on_depth_is_measured_as_it_answers(data: labsrc.Lesson) -> None:
    plain = release_gate(PolicyRetriever(data.chunks, data.vectors), data.cases, data.callers, FAST,
                         on_date=data.eval_date, measure=False, recall_at=(1, 2))
    aware = release_gate(DepthAware(data.chunks, data.vectors), data.cases, data.callers, FAST,
                         on_date=data.eval_date, measure=False, recall_at=(1, 2))
    # A prefix of the top-2 answer would give the same Recall@1 for both; asked at k = 1, they differ.
    assert aware.recall_curve.means()["hybrid"][1] == plain.recall_curve.means()["hybrid"][1] == 1.0
    assert aware.recall_curve.means()["hybrid"][0] < plain.recall_curve.means()["hybrid"][0]


def test_a_case_that_raises_at_one_k_is_left_out_of_every_point_and_fails_search_errors(data) -> None:
    run = release_gate(RaisesDeep(data.chunks, data.vectors), data.cases, data.callers, FAST, on_date=data.eval_date,
                       measure=False, recall_at=(1, 2, 3))
    curve = run.recall_curve
    assert curve.cases == 2 and "paraphrase" not in curve.per_case
    # The error names the retriever's own line (file:line), as every search error does.
    (error,) = curve.errors
    assert error.startswith("case 'paraphrase': left out, its search at k=3 raised RuntimeError: index shard 3 "
                            "unavailable (") and "test_recall_curve.py:" in error
    errors = {g.name: g for g in run.gates}["search errors"]
    assert not errors.passed and errors.failing_cases == ("paraphrase",)
    assert errors.findings[0].startswith("case 'paraphrase' at k=3 (Recall@k curve): RuntimeError: index shard 3 "
                                         "unavailable")
    assert not run.passed


def test_the_report_carries_the_numbers_a_table_and_the_curves(curved, data: labsrc.Lesson, tmp_path: Path) -> None:
    retriever, run = curved
    paths = write_report(run, tmp_path / "r")
    doc = json.loads(paths["report.json"].read_text(encoding="utf-8"))
    assert doc["recall"]["curve"]["k"] == [1, 2, 3] and doc["recall"]["curve"]["cases"] == 3
    assert doc["recall"]["curve"]["lanes"]["hybrid"] == list(run.recall_curve.means()["hybrid"])
    assert set(doc["recall"]["curve"]["per_case"]) == {"exact-code", "paraphrase", "shared-language"}
    width, height = png_size(paths["recall_curve.png"])
    assert width > 400 and height > 200
    html = paths["report.html"].read_text(encoding="utf-8")
    assert "<h3>Recall@k at each k (3 positive cases)</h3>" in html and 'alt="Recall@k curves per lane"' in html
    assert "| k | bm25 | dense | hybrid |" in paths["report.md"].read_text(encoding="utf-8")
    # A later run without recall_at leaves no stale curve behind.
    plain = release_gate(retriever, data.cases, data.callers, FAST, on_date=data.eval_date, measure=False)
    assert curve_frame(plain) is None
    assert "recall_curve.png" not in write_report(plain, tmp_path / "r")
    assert not (tmp_path / "r" / "recall_curve.png").exists()


def test_recall_at_is_checked_and_parsed() -> None:
    assert check_recall_at([10, 1, 5, 1]) == (1, 5, 10)
    assert parse_recall_at(" 1, 2,5 ,10") == (1, 2, 5, 10)
    for bad, message in (([0], "not 0"), ("1,2", "a list of whole numbers"), ([1.5], "not 1.5"),
                         (list(range(1, 30)), "at most 20 values of k, got 29"), ([True], "not True")):
        with pytest.raises(InvalidArgument, match=message):
            check_recall_at(bad)
    with pytest.raises(InvalidArgument, match="--recall-at: each k must be a whole number from 1 to 10,000, not 0"):
        parse_recall_at("0,1")


def test_plot_recall_curves_refuses_what_it_cannot_draw() -> None:
    import pandas as pd

    with pytest.raises(InvalidArgument, match="pandas DataFrame"):
        plot_recall_curves({"bm25": [0.5]})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="distinct k >= 1 in ascending order"):
        plot_recall_curves(pd.DataFrame({"bm25": [0.5, 0.4]}, index=[5, 2]))
    with pytest.raises(InvalidArgument, match="nothing to draw"):
        plot_recall_curves(pd.DataFrame({"bm25": []}))


def test_labsrc_gate_recall_at_on_the_starter_writes_the_curves(tmp_path: Path, capsys, monkeypatch) -> None:
    folder = tmp_path / "starter"
    assert main(["init", str(folder)]) == 0
    monkeypatch.chdir(folder)
    capsys.readouterr()
    code = main(["gate", "--chunks", "data/chunks.jsonl", "--callers", "data/callers.json", "--cases",
                 "data/cases.jsonl", "--retriever", "my_retriever:build", "--config", "data/gate.json",
                 "--probe-budget", "40", "--no-progress", "--recall-at", "1,2,5,10", "--out", "reports/gate"])
    out = capsys.readouterr().out
    assert code == 0, out
    doc = json.loads((folder / "reports" / "gate" / "report.json").read_text(encoding="utf-8"))
    curve = doc["recall"]["curve"]
    assert curve["k"] == [1, 2, 5, 10] and curve["cases"] == 11 and set(curve["lanes"]) == {"bm25", "dense", "hybrid"}
    assert curve["lanes"]["hybrid"][1] == doc["recall"]["lanes"]["hybrid"] == 1.0
    for lane in curve["lanes"].values():  # a deeper list never finds less, for a retriever that filters first
        assert lane == sorted(lane)
    frame_text = "\n".join(line for line in out.splitlines() if line.startswith(("Recall@k over", "lane    ", "hybrid ")))
    assert "Recall@k over 11 positive cases" in frame_text and "     @1     @2     @5    @10" in frame_text
    assert png_size(folder / "reports" / "gate" / "recall_curve.png")[0] > 400
    assert 'alt="Recall@k curves per lane"' in (folder / "reports" / "gate" / "report.html").read_text(encoding="utf-8")
