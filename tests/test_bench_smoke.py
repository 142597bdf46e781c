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
    assert "(the fastest peer)" in done.stdout
    assert "hybrid per query" in done.stdout
    result = json.loads(out.read_text())
    assert {"labsrc index", "labsrc permitted", "bm25s numpy", "rank-bm25"} <= set(result["qps"])
    assert all(value > 0 for value in [*result["qps"].values(), *result["build_s"].values()])
    peers = {name: qps for name, qps in result["qps"].items() if not name.startswith("labsrc")}
    assert result["fastest_peer"] == max(peers, key=peers.get)
    assert result["ratios"]["labsrc index"] == pytest.approx(result["qps"]["labsrc index"] / max(peers.values()))
    assert result["config"]["documents"] == 5 and result["config"]["top_k"] == 5  # top-k capped at the corpus size
    assert result["hybrid_ms"]["n"] == 2  # the two test queries, one repeat
