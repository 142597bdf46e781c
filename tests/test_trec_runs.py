"""Run files reproduce labsrc's figures in trec_eval's implementation (pytrec_eval), lane by lane.

trec_eval re-sorts each query by score and breaks exact ties by document id
*descending*; labsrc breaks them by id ascending. The writer makes scores strictly
decreasing in rank order, so both rankings, and so every figure, are identical.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from ranx_oracle import ranx_jobs
from beir_fixture import write_tiny_beir

from labsrc.cli.main import main
from labsrc.evaluation.benchmark import trec_scores, write_trec_run
from labsrc.evaluation.metrics import evaluate_run

pytrec_eval = pytest.importorskip("pytrec_eval", reason="pytrec_eval (pip install pytrec-eval-terrier, dev extra)")

SCIFACT = Path(os.environ.get("LABSRC_SCIFACT_DIR", Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "beir" / "scifact"))


def read_run(path: Path) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        qid, _, doc, _, score, _ = line.split()
        run.setdefault(qid, {})[doc] = float(score)
    return run


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        qid, doc, grade = line.split("\t")
        qrels.setdefault(qid, {})[doc] = int(grade)
    return qrels


def trec_eval_figures(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    """nDCG@10, Recall@100 and MRR@10 as trec_eval computes them, averaged over every judged query
    (a query with no results scores 0, as in labsrc). MRR@10 is recip_rank on the run cut at 10."""
    def by_score(scores: dict[str, float]) -> list[tuple[str, float]]:
        return sorted(scores.items(), key=lambda pair: (-pair[1], tuple(-ord(c) for c in pair[0])))  # trec_eval's order

    top10 = {qid: dict(by_score(scores)[:10]) for qid, scores in run.items()}
    full = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"}).evaluate(run)
    cut = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    n = len(qrels)
    return {
        "ndcg@10": sum(full.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels) / n,
        "recall@100": sum(full.get(q, {}).get("recall_100", 0.0) for q in qrels) / n,
        "mrr@10": sum(cut.get(q, {}).get("recip_rank", 0.0) for q in qrels) / n,
    }


def test_trec_scores_are_strictly_decreasing_and_move_only_ties() -> None:
    ranked = [("a", 0.5), ("b", 0.5), ("c", 0.5), ("d", 0.25)]
    scores = trec_scores(ranked)
    assert scores[0] == 0.5 and scores[3] == 0.25  # untied scores are written as they are
    assert scores[0] > scores[1] > scores[2] > scores[3]
    assert 0 < 0.5 - scores[2] < 1e-7  # two float32 ulps below 0.5 (2 * 2**-25 = 6.0e-8)
    assert trec_scores([("a", 0.5), ("b", 0.5 - 1e-12)])[1] < 0.5 - 1e-9  # equal in float32: moved


def test_a_tie_is_ranked_the_labs_way_by_trec_eval(tmp_path: Path) -> None:
    # Two docs tie; labsrc ranks "a" (the relevant one) first, trec_eval's tie rule would put "b" first.
    run, qrels = {"q": {"a": 1.0, "b": 1.0}}, {"q": {"a": 1}}
    assert evaluate_run(run, qrels, ["ndcg@10"])["ndcg@10"] == 1.0
    naive = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)["q"]["ndcg_cut_10"]
    assert naive == pytest.approx(1 / math.log2(3))  # "a" at rank 2: 1/log2(3) = 0.6309
    written = read_run(write_trec_run(run, tmp_path / "tie.trec", "t"))
    assert pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(written)["q"]["ndcg_cut_10"] == 1.0


def check_every_lane(data: Path, out: Path, *extra: str) -> dict[str, dict[str, float]]:
    figures, runs = out / "m.json", out / "runs"
    assert main(["beir", "--data", str(data), "--no-progress", "--json", str(figures), "--run-dir", str(runs),
                 *extra]) == 0
    printed = json.loads(figures.read_text(encoding="utf-8"))
    qrels = read_qrels(data / "qrels" / "test.tsv")
    lanes = printed["config"]["lanes"]
    assert sorted(p.stem for p in runs.glob("*.trec")) == sorted(lanes)
    jobs = []
    for lane in lanes:
        written = read_run(runs / f"{lane}.trec")
        theirs = trec_eval_figures(written, qrels)
        for metric, value in theirs.items():
            assert value == pytest.approx(printed[lane][metric], abs=1e-12), (lane, metric)
        jobs.append({"evaluate": {"qrels": qrels, "run": written, "metrics": list(theirs), "make_comparable": False}})
    # ranx reads the same files to the same figures (it scores every judged query, as labsrc does);
    # without numba, in one child process (tests/ranx_oracle.py).
    for lane, scored in zip(lanes, ranx_jobs(jobs)):
        for metric, value in scored.items():
            assert value == pytest.approx(printed[lane][metric], abs=1e-9), ("ranx", lane, metric)
    return printed


def test_tiny_beir_run_files_reproduce_every_lane(tmp_path: Path, capsys) -> None:
    printed = check_every_lane(write_tiny_beir(tmp_path), tmp_path, "--depth", "5")
    assert list(printed["config"]["lanes"]) == ["bm25", "dense", "rrf", "convex"]
    capsys.readouterr()


@pytest.mark.skipif(not (SCIFACT / "vectors").is_dir(), reason=f"SciFact with vectors not found at {SCIFACT}")
def test_scifact_run_files_reproduce_every_lane(tmp_path: Path, capsys) -> None:
    printed = check_every_lane(SCIFACT, tmp_path, "--alpha", "0.5")
    capsys.readouterr()
    # RRF ties are frequent on SciFact: the lab's figure, which trec_eval now reproduces (0.7132 before the fix).
    assert printed["rrf"]["ndcg@10"] == pytest.approx(0.7147, abs=5e-5)
