"""The gate judges retrievers as teams run them: isolated builds, timeouts, canary, repeat builds, concurrency.

A held-out corpus (tests/outside/field_corpus.py: IT runbooks, four callers, a
chunk that takes effect one day after the evaluation date) and retrievers of the
shapes teams run (tests/outside/field_retrievers.py), each written outside the
lab. Every test names the probe it depends on: without that probe the retriever
would get a PASS it does not deserve (or, for the noisy one, a leak it does not have).
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import pytest

from labsrc.gate.workers import live_workers

OUTSIDE = Path(__file__).parent / "outside"
FIELD = OUTSIDE / "field_retrievers.py"
sys.path.insert(0, str(OUTSIDE))
from field_corpus import write_field_corpus  # noqa: E402
from gate_cli import run_gate, status  # noqa: E402
from http_service import RetrievalService  # noqa: E402


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    return write_field_corpus(tmp_path_factory.mktemp("field"))


@pytest.fixture(autouse=True)
def own_index(corpus, monkeypatch):
    # ignores_chunks opens "its own index": the same records, read from the file, whatever it is handed.
    monkeypatch.setenv("FIELD_INDEX", str(corpus["chunks.jsonl"]))


def gate(corpus, spec: str, *extra: str) -> tuple[int, str, str]:
    return run_gate(corpus, "--retriever", spec, *extra)


def leftovers() -> list[str]:
    return glob.glob(os.path.join(tempfile.gettempdir(), "labsrc-gate-*"))


#: For the tests about something other than the generated probes (answers, timeouts, services, containment): a
#: small budget keeps the generated-probes gate in the run at a tenth of its default cost.
FEW_PROBES = ("--probe-budget", "40")
NEW_GATES = ("factory indexes what it is handed", "repeatable builds", "same answers under concurrent requests")


def test_the_correct_retriever_passes_every_probe(corpus) -> None:
    before = set(leftovers())
    code, out, err = gate(corpus, f"{FIELD}:correct")
    assert code == 0, out + err
    for name in (*NEW_GATES, "boundary on every returned id", "noninterference by rebuild", "noninterference by bait"):
        assert status(out, name) == "PASS", name
    assert live_workers() == 0 and set(leftovers()) <= before  # no worker, no temporary folder left behind


def test_a_module_level_statistics_cache_is_caught_because_each_build_has_its_own_process(corpus) -> None:
    # In one process the rebuild would reuse the first build's statistics and agree with it.
    code, out, _ = gate(corpus, f"{FIELD}:module_cache")
    assert code == 1
    assert status(out, "factory indexes what it is handed") == "PASS"  # it does index what it is handed ...
    assert status(out, "repeatable builds") == "PASS"
    assert status(out, "noninterference by rebuild") == "FAIL"  # ... but its scores counted hidden chunks
    assert "case 'eu-failover-steps': hybrid: scores differ by up to" in out


def test_a_factory_that_ignores_its_chunks_fails_the_canary_and_nothing_is_compared(corpus) -> None:
    code, out, _ = gate(corpus, f"{FIELD}:ignores_chunks")
    assert code == 1
    assert status(out, "factory indexes what it is handed") == "FAIL"
    assert "the factory ignored the chunks it was handed: the canary" in out
    assert "withheld from a build, still came back for case" in out
    # Every comparison across builds would be equal (nothing the gate changes reaches it): never a PASS.
    assert status(out, "noninterference by rebuild") == "NOT TESTED"
    assert status(out, "noninterference by bait") == "NOT TESTED"
    assert "a gate that could not be measured never passes, so the run fails" in out


def test_a_retriever_that_keeps_the_caller_on_the_instance_fails_under_concurrent_requests(corpus) -> None:
    code, out, _ = gate(corpus, f"{FIELD}:thread_unsafe")
    assert code == 1
    assert status(out, "same answers under concurrent requests") == "FAIL"
    # A chunk of another caller came back: a boundary failure, naming the caller who may see it.
    assert status(out, "boundary on every returned id") == "FAIL"
    assert "(under concurrent requests, which '" in out and "may see)" in out
    # One request at a time it is correct: the probe, not the replay, found it.
    assert status(out, "noninterference by rebuild") == "PASS"


def test_a_hanging_search_fails_its_case_and_the_run_ends_within_its_timeouts(corpus) -> None:
    start = time.monotonic()
    code, out, _ = gate(corpus, f"{FIELD}:hangs", "--search-timeout", "1.5", *FEW_PROBES)
    elapsed = time.monotonic() - start
    assert code == 1
    assert "case 'apac-latency': timed out after 1.5 s (search_timeout_s); the worker was killed" in out
    assert status(out, "search errors") == "FAIL"
    # The hanging case is asked once on the main build and once each on its rebuild and bait builds;
    # the other cases still ran (the worker was rebuilt) and pass.
    assert status(out, "boundary on every returned id") == "PASS"
    # Every request holding the word waits out its 1.5 s: the case on the main, rebuild and bait builds, and the
    # generated probes that ask it (as every caller, at both depths); the rest of the run gets 30 s.
    asked = int(re.search(r"\((\d+) requests; budget", out).group(1))
    answered = int(re.search(r"(\d+) generated requests answered", out).group(1))
    assert 0 <= asked - answered < asked, out
    assert elapsed < (3 + asked - answered) * 1.5 + 30, (elapsed, asked - answered)
    assert live_workers() == 0


def test_score_noise_is_reported_as_not_reproducible_never_as_a_leak(corpus, tmp_path) -> None:
    code, out, _ = gate(corpus, f"{FIELD}:noisy_scores")
    assert code == 1
    assert status(out, "repeatable builds") == "FAIL"
    assert "scores are not reproducible (up to 0.00" in out and "set noninterference to 'ids'" in out
    for name in ("noninterference by rebuild", "noninterference by bait"):
        assert status(out, name) == "PASS"  # compared on ids and order: no leak
        assert "(ids): 0 differ" in next(line for line in out.splitlines() if name in line)
    # Declared: an approximate index whose scores wobble. Then the run passes.
    config = json.loads(corpus["gate.json"].read_text()) | {"noninterference": "ids"}
    (tmp_path / "gate.json").write_text(json.dumps(config))
    code, out, _ = gate({**corpus, "gate.json": tmp_path / "gate.json"}, f"{FIELD}:noisy_scores")
    assert code == 0, out
    assert status(out, "repeatable builds") == "PASS"


def test_an_off_by_one_date_check_fails_the_boundary_with_the_rule_and_the_date(corpus) -> None:
    code, out, _ = gate(corpus, f"{FIELD}:off_by_one_date")
    assert code == 1
    assert status(out, "boundary on every returned id") == "FAIL"
    assert "'eu-cert-rotation-v2' at rank 1 of the fused list: not yet effective: takes effect 2026-06-16" in out
    # Bait is a boundary failure too, not only a bait-gate difference (the report holds every finding).
    assert status(out, "noninterference by bait") == "FAIL"


def test_bait_a_retriever_returns_fails_the_boundary_gate_in_the_report(corpus, tmp_path) -> None:
    out_dir = tmp_path / "report"
    code, _, _ = gate(corpus, f"{FIELD}:off_by_one_date", "--out", str(out_dir), "--junit-xml", str(tmp_path / "j.xml"))
    assert code == 1
    report = json.loads((out_dir / "report.json").read_text())
    boundary = next(g for g in report["gates"] if g["name"] == "boundary on every returned id")
    bait = [f for f in boundary["findings"] if "(bait build)" in f]
    # Each bait chunk it returned takes effect the day after its case's date, and says so.
    assert bait and all(": not yet effective: takes effect 20" in f for f in bait)
    assert any("'bait-001-not-yet-effective' at rank 1 of the fused list (bait build): not yet effective: takes "
               "effect 2026-06-16" in f for f in bait)
    assert report["probes"]["canary"]["passed"] and report["probes"]["builds"] >= 3
    xml = (tmp_path / "j.xml").read_text()
    for name in NEW_GATES:
        assert f'name="{name}"' in xml


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("exit_in_search", "SystemExit: 0"),
        ("endless", "search returned more results for top_k=2"),
        ("million_pairs", "search returned 1000000 results for top_k=2"),
    ],
)
def test_hostile_answers_fail_their_cases_and_the_run_ends_with_a_verdict(corpus, spec, expected) -> None:
    code, out, _ = gate(corpus, f"{FIELD}:{spec}", *FEW_PROBES)
    assert code == 1
    assert status(out, "search errors") == "FAIL" and expected in out
    assert "GATES FAILED" in out
    assert live_workers() == 0


def test_a_factory_that_raises_system_exit_is_a_failing_build_with_its_own_line(corpus) -> None:
    # SystemExit(0) in the factory neither ends the gate nor reads as success: its build failed (exit 1).
    code, out, err = gate(corpus, f"{FIELD}:exit_in_factory")
    assert code == 1 and "Traceback" not in err and "labsrc: error" not in err
    (line,) = [line for line in out.splitlines() if "raised while building" in line]
    assert "SystemExit: 0" in line and "field_retrievers.py:" in line and line.startswith("      build 'main' (")
    assert out.startswith("Release gate") and "FAIL  build errors" in out


def test_a_factory_that_starts_a_thread_or_rewrites_its_chunks_is_contained(corpus) -> None:
    code, out, _ = gate(corpus, f"{FIELD}:starts_thread", *FEW_PROBES)
    assert code == 0, out  # the run ends: the worker and its non-daemon thread are gone
    assert live_workers() == 0
    # Rewriting the boundary fields happens in the worker's copy: the gate's own records still hide them.
    code, out, _ = gate(corpus, f"{FIELD}:rewrites_chunks", *FEW_PROBES)
    assert code == 1
    assert status(out, "boundary on every returned id") == "FAIL"
    assert "superseded: ended 2025-12-31" in out


# --- a retriever behind HTTP ----------------------------------------------------------------


HTTP = OUTSIDE / "http_retriever.py"


def records(corpus) -> list[dict]:
    return [json.loads(line) for line in corpus["chunks.jsonl"].read_text().splitlines()]


def test_a_retriever_behind_http_is_gated_through_a_ten_line_factory(corpus, monkeypatch) -> None:
    with RetrievalService() as service:
        monkeypatch.setenv("LAB_RETRIEVER_URL", service.url)
        code, out, err = gate(corpus, f"{HTTP}:http_retriever", *FEW_PROBES)
    assert code == 0, out + err
    for name in NEW_GATES:
        assert status(out, name) == "PASS"


def test_a_service_whose_index_endpoint_does_nothing_is_caught_by_the_canary(corpus, monkeypatch) -> None:
    with RetrievalService(default_chunks=records(corpus), ignore_index_requests=True) as service:
        monkeypatch.setenv("LAB_RETRIEVER_URL", service.url)
        code, out, _ = gate(corpus, f"{HTTP}:http_retriever", *FEW_PROBES)
    assert code == 1
    assert status(out, "factory indexes what it is handed") == "FAIL"
    assert "the factory ignored the chunks it was handed" in out
    assert status(out, "noninterference by rebuild") == "NOT TESTED"


def test_a_slow_service_times_out_on_the_gates_clock(corpus, monkeypatch) -> None:
    with RetrievalService(delay_s=30) as service:
        monkeypatch.setenv("LAB_RETRIEVER_URL", service.url)
        start = time.monotonic()
        code, out, _ = gate(corpus, f"{HTTP}:http_retriever", "--search-timeout", "1", "--concurrency", "0", *FEW_PROBES)
        elapsed = time.monotonic() - start
    assert code == 1
    assert "timed out after 1 s (search_timeout_s)" in out
    assert elapsed < 120, elapsed  # 15 cases x (main, repeat, canary) at 1 s each, not 30 s each


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in glob.glob(f"/proc/{pid}/task/*/children"):
        with open(task) as f:
            found |= {int(p) for p in f.read().split()}
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads a process's children from Linux's /proc")
def test_sigterm_during_a_hang_ends_the_run_and_leaves_no_worker_or_folder(corpus, tmp_path) -> None:
    # A CI job cancelled mid-run: SIGTERM to the gate. It unwinds like Ctrl-C, so its workers and folders go too.
    import signal
    import subprocess

    own_tmp = tmp_path / "tmp"
    own_tmp.mkdir()
    argv = [sys.executable, "-m", "labsrc.cli", "gate", "--chunks", str(corpus["chunks.jsonl"]),
            "--callers", str(corpus["callers.json"]), "--cases", str(corpus["cases.jsonl"]),
            "--config", str(corpus["gate.json"]), "--no-progress", "--retriever", f"{FIELD}:hangs",
            "--search-timeout", "120"]
    env = {**os.environ, "TMPDIR": str(own_tmp), "FIELD_INDEX": str(corpus["chunks.jsonl"])}
    gate_process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (workers := _children(gate_process.pid)) or not list(own_tmp.glob("labsrc-gate-*")):
            assert gate_process.poll() is None and time.monotonic() < deadline, "no worker started"
            time.sleep(0.1)
        time.sleep(1.0)  # the worker is now inside the search that hangs
        gate_process.send_signal(signal.SIGTERM)
        out, err = gate_process.communicate(timeout=30)
    finally:
        if gate_process.poll() is None:
            gate_process.kill()
            gate_process.communicate()
    assert gate_process.returncode == 143, err
    assert err.strip().splitlines()[-1] == "labsrc: terminated"
    assert list(own_tmp.iterdir()) == []
    for pid in workers:
        assert not os.path.exists(f"/proc/{pid}") or "Z" in open(f"/proc/{pid}/stat").read().split()[2], pid
