"""Smoke test: the BM25 speed benchmark runs end to end on a tiny collection.

It checks the script's shape (what it prints and the JSON it writes), never its
timings: benchmarks are not timed tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from beir_fixture import write_tiny_beir

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_bm25.py"


def test_bench_bm25_runs_on_a_tiny_collection(tmp_path: Path):
    pytest.importorskip("bm25s", reason="the benchmark's baseline bm25s is a dev extra")
    pytest.importorskip("rank_bm25", reason="the benchmark's baseline rank-bm25 is a dev extra")
    tiny = write_tiny_beir(tmp_path)
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--data", str(tiny), "--json", str(out), "--repeats", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "labsrc / bm25s     query throughput" in done.stdout
    assert "hybrid per query" in done.stdout
    result = json.loads(out.read_text())
    assert set(result["qps"]) == {"labsrc", "bm25s", "rank_bm25"}
    assert set(result["build_s"]) == {"labsrc", "bm25s", "rank_bm25"}
    assert all(value > 0 for value in [*result["qps"].values(), *result["build_s"].values()])
    assert result["ratios"]["qps_vs_bm25s"] == pytest.approx(result["qps"]["labsrc"] / result["qps"]["bm25s"])
    assert result["config"]["documents"] == 5 and result["config"]["top_k"] == 5  # top-k capped at the corpus size
    assert result["hybrid_ms"]["n"] == 2  # the two test queries, one repeat
    assert result["hybrid_ms"]["p50"] <= result["hybrid_ms"]["p95"]
    assert set(result["targets"]) == {"qps_vs_bm25s", "qps_vs_rank_bm25", "build_speedup_vs_bm25s", "hybrid_p95_ms"}


def test_bench_bm25_without_data_exits_2(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--data", str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2
    assert "no BEIR collection" in done.stderr
