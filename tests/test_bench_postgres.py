"""Smoke test: the PostgreSQL side-by-side benchmark runs end to end on a tiny synthetic corpus.

It checks the script's shape (what it prints and the JSON it writes), never its
timings: benchmarks are not timed tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pg_support import SKIP_REASON

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_postgres.py"
CONFIGURATIONS = {"memory", "engine-exact", "engine-hnsw", "engine-hnsw-off", "baseline"}

pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=f"the benchmark runs PostgreSQL: {SKIP_REASON}")


def run_bench(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp_path / "bench.json"
    command = [sys.executable, str(SCRIPT), "--chunks", "300", "--requests", "20", "--clients", "1,2", "--dim", "16"]
    done = subprocess.run([*command, *extra, "--json", str(out)], capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr
    return done, json.loads(out.read_text(encoding="utf-8"))


def test_bench_postgres_runs_every_configuration_on_a_tiny_corpus(tmp_path: Path):
    done, result = run_bench(tmp_path)
    for heading in ("load (s)", "latency at 1 client", "requests/s by concurrent clients", "p95 over p95"):
        assert heading in done.stdout
    assert "engine-exact lanes == in-memory lanes (ids and scores): 20 of 20 requests" in done.stdout
    configurations = result["configurations"]
    assert set(configurations) == CONFIGURATIONS
    for name, row in configurations.items():
        assert name in done.stdout
        assert set(row["rps"]) == {"1", "2"} and all(rps > 0 for rps in row["rps"].values())
        assert set(row["stages"]) == {"authorize", "bm25", "dense", "fusion"}
        assert row["p95_ms"] >= row["p50_ms"] > 0
    for name in ("engine-hnsw", "engine-hnsw-off", "baseline"):
        assert 0.0 <= configurations[name]["recall_at_10"] <= 1.0
        assert 0 <= configurations[name]["short_lists"] <= 20
    assert "recall_at_10" not in configurations["engine-exact"]  # exact is the truth, not measured against itself
    assert configurations["engine-exact"]["load_s"]["PostgresRetriever(...)"] > 0
    assert configurations["engine-hnsw"]["load_s"]["HNSW index (first with_dense)"] >= 0
    assert {"binary COPY, tsvector generated", "gin index", "hnsw index", "btree index", "total"} <= set(configurations["baseline"]["load_s"])
    assert set(result["ratios"]) == {
        "engine-exact / memory", "engine-hnsw / memory", "engine-hnsw-off / memory",
        "engine-hnsw / baseline", "engine-exact / baseline",
    }  # fmt: skip
    assert result["equality"] == {"checked": 20, "differing": 0}
    assert (result["chunks"], result["dim"], result["requests"], result["clients"]) == (300, 16, 20, [1, 2])


def test_bench_postgres_without_the_baseline(tmp_path: Path):
    done, result = run_bench(tmp_path, "--no-baseline")
    assert set(result["configurations"]) == CONFIGURATIONS - {"baseline"}
    assert "baseline" not in done.stdout
    assert set(result["ratios"]) == {"engine-exact / memory", "engine-hnsw / memory", "engine-hnsw-off / memory"}
    assert result["equality"]["checked"] == 20 and result["equality"]["differing"] == 0


def test_bench_postgres_refuses_bad_clients():
    command = [sys.executable, str(SCRIPT), "--clients", "1,x"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "--clients must be comma-separated integers" in done.stderr
