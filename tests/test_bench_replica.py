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
    assert "every lane on the replica == the primary's: 5 requests" in done.stdout
    assert "caught up in" in done.stdout
    result = json.loads(out.read_text())
    assert (result["chunks"], result["dim"], result["permission_sets"], result["equality_checked"]) == (60, 3, 40, 5)
    assert set(result["throughput"]) == {"primary", "replica", "primary+replica"}
    for runs in result["throughput"].values():
        assert set(runs) == {"1", "2"}
        assert all(run["requests"] == 8 and run["rps"] > 0 and 0 < run["p50_ms"] <= run["p95_ms"] for run in runs.values())
    assert set(result["gain"]) == {"1", "2"}
    assert result["load_wal_bytes"] > 0 and result["replay_after_load"]["behind_bytes"] >= 0
    assert result["replay_after_load"]["waited_s"] >= 0
