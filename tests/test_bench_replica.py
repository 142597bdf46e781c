"""Smoke test: the read-replica benchmark runs end to end on a tiny collection.

It checks the script's shape (what it prints and the JSON it writes), never its
timings: benchmarks are not timed tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from beir_fixture import write_tiny_beir
from pg_support import requires_postgres

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_replica.py"

pytestmark = requires_postgres


def test_bench_replica_runs_on_a_tiny_collection(tmp_path: Path):
    tiny = write_tiny_beir(tmp_path)
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--scifact", str(tiny), "--chunks", "60", "--requests", "8",
         "--clients", "1,2", "--check", "5", "--json", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("every lane on the replica == the primary's: 5 requests") == 2  # exact, then hnsw
    assert "caught up in" in done.stdout
    result = json.loads(out.read_text())
    assert (result["chunks"], result["dim"], result["permission_sets"], result["equality_checked"]) == (60, 3, 40, 5)
    assert set(result["throughput"]) == set(result["gain"]) == {"exact", "hnsw"}
    for mode, configs in result["throughput"].items():
        assert set(configs) == {"primary", "replica", "primary+replica"}
        for runs in configs.values():
            assert set(runs) == {"1", "2"}
            assert all(r["requests"] == 8 and r["rps"] > 0 and 0 < r["p50_ms"] <= r["p95_ms"] for r in runs.values())
            assert all(r["own_share"] >= 0 and r["other_share"] >= 0 for r in runs.values())
        assert set(result["gain"][mode]) == {"1", "2"}
    assert set(result["replay"]) == {"load", "hnsw"}
    for replay in result["replay"].values():
        assert replay["wal_bytes"] > 0 and replay["behind_bytes"] >= 0 and replay["waited_s"] >= 0
