"""``labsrc.testing.gate_tests``: the release gate as pytest items, with the verdicts of ``labsrc gate``.

A team's project is written into a temporary folder: the HR corpus of
tests/outside/corpus.py, tests/outside/retrievers.py copied beside a short test
file, and a few gate configs. pytest runs that file in a subprocess with
``--junitxml``; ``labsrc gate --junit-xml`` runs on the same files in process.
Each gate's item must end as the command line judged the gate: PASS ↔ passed,
FAIL ↔ failed, a NOT TESTED that fails the run ↔ failed, one that does not ↔ skipped.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from labsrc.gate.config import GateConfig
from labsrc.gate.gates import GateRun
from labsrc.gate.verdicts import GateResult, not_tested
from labsrc.testing import ALL_GATES, expected_gates, gate_id, gate_outcome

OUTSIDE = Path(__file__).parent / "outside"
sys.path.insert(0, str(OUTSIDE))
from corpus import CONFIG, write_corpus  # noqa: E402
from gate_cli import run_gate, status  # noqa: E402

#: Small clocks and few threads: the corpus is ten chunks, so a hang fails in a minute, not five.
QUICK = {**CONFIG, "build_timeout_s": 60, "search_timeout_s": 10, "concurrency": 4}

#: What the team writes. Paths are relative to this file's folder; pytest runs from elsewhere.
TEAM_TESTS = '''\
from labsrc.testing import gate_tests

DATA = dict(chunks="data/chunks.jsonl", callers="data/callers.json", cases="data/cases.jsonl")

test_filter_first = gate_tests(**DATA, retriever="team_retrievers.py:filter_first", config="data/gate.json")
test_post_filter = gate_tests(**DATA, retriever="team_retrievers.py:post_filter", config="data/gate_bm25.json")
test_ignores_dates = gate_tests(**DATA, retriever="team_retrievers.py:ignores_dates", config="data/gate_required.json")

from team_retrievers import filter_first  # noqa: E402  (the factory itself, not its MODULE:FACTORY name)

test_callable = gate_tests(**DATA, retriever=filter_first, config="data/gate.json")

test_bad_chunks = gate_tests(**{**DATA, "chunks": "data/bad_chunks.jsonl"}, retriever="team_retrievers.py:filter_first")
test_bad_config = gate_tests(**DATA, retriever="team_retrievers.py:filter_first", config="data/bad_gate.json")
test_bad_factory = gate_tests(**DATA, retriever="team_retrievers.py:no_such_factory")
'''

#: scenario (the team's test function) -> (retriever, config file)
SCENARIOS = {
    # Filters first, reports only its fused list: every gate passes, the lane gates are not made (skipped).
    "filter_first": ("filter_first", "gate.json"),
    # Over-fetches then filters: noninterference FAILs; the config asks bm25 recall it cannot measure (NOT TESTED, fails).
    "post_filter": ("post_filter", "gate_bm25.json"),
    # Ignores dates: the boundary FAILs; under require_cases its unreported lanes still make no gate (skipped).
    "ignores_dates": ("ignores_dates", "gate_required.json"),
}
MISUSE = {
    "bad_chunks": {"chunks.jsonl": "bad_chunks.jsonl", "retriever": "filter_first"},
    "bad_config": {"gate.json": "bad_gate.json", "retriever": "filter_first"},
    "bad_factory": {"retriever": "no_such_factory"},
}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("team")
    data = write_corpus(root / "data")
    (root / "data" / "gate.json").write_text(json.dumps(QUICK))
    (root / "data" / "gate_bm25.json").write_text(json.dumps({**QUICK, "min_recall": {"hybrid": 1.0, "bm25": 0.5}}))
    (root / "data" / "gate_required.json").write_text(json.dumps({**QUICK, "require_cases": True}))
    (root / "data" / "bad_gate.json").write_text(json.dumps({**QUICK, "topk": 2}))
    lines = data["chunks.jsonl"].read_text().splitlines()
    lines[2] = lines[2].replace('"region": "north", ', "")  # line 3 loses its region
    (root / "data" / "bad_chunks.jsonl").write_text("\n".join(lines) + "\n")
    shutil.copy(OUTSIDE / "retrievers.py", root / "team_retrievers.py")
    (root / "test_release_gate.py").write_text(TEAM_TESTS)
    return root


def run_pytest(project: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict[str, tuple[str, str]]]:
    """pytest on the team's file, from the folder above it; each item's (outcome, failure or skip text)."""
    xml = project / f"junit{len(extra)}.xml"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-q",
               f"--junitxml={xml}", str(project / "test_release_gate.py"), *extra]
    # Only pytest's own plugins: this environment's (nbval, hypothesis, ...) add seconds and nothing to check.
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run(command, cwd=project.parent, env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc, junit_outcomes(xml)


def junit_outcomes(path: Path) -> dict[str, tuple[str, str]]:
    """testcase name -> (passed | failed | skipped, message and body of its failure or skip)."""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        verdict, text = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                verdict = "skipped" if child.tag == "skipped" else "failed"
                text = f"{child.get('message', '')}\n{child.text or ''}"
        out[case.get("name")] = (verdict, text)
    return out


@pytest.fixture(scope="module")
def items(project) -> dict[str, tuple[str, str]]:
    proc, outcomes = run_pytest(project)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # some gates fail
    assert "Traceback" not in proc.stdout + proc.stderr
    return outcomes


def cli(project: Path, retriever: str, **files: str) -> tuple[int, str, str, Path]:
    corpus = {name: project / "data" / files.get(name, name)
              for name in ("chunks.jsonl", "callers.json", "cases.jsonl", "gate.json")}
    xml = project / f"cli-{retriever}-{len(files)}.xml"
    code, out, err = run_gate(corpus, "--retriever", f"{project / 'team_retrievers.py'}:{retriever}", "--junit-xml", str(xml))
    return code, out, err, xml


@pytest.fixture(scope="module")
def verdicts(project) -> dict[str, tuple[int, str, dict[str, str]]]:
    """scenario -> (exit status, printed table, gate name -> passed | failed | skipped) of ``labsrc gate``."""
    out = {}
    for scenario, (retriever, config) in SCENARIOS.items():
        code, table, err, xml = cli(project, retriever, **{"gate.json": config})
        assert code in (0, 1), err
        gates = {name: verdict for name, (verdict, _) in junit_outcomes(xml).items()}
        # The CLI's JUnit also has one testcase per failing case of a gate (classname labsrc.gate.<gate>): not gates.
        named = {line.get("name") for line in ET.parse(xml).getroot().iter("testcase") if line.get("classname") == "labsrc.gate"}
        out[scenario] = (code, table, {name: gates[name] for name in named})
    return out


def scenario_items(items, scenario: str) -> dict[str, tuple[str, str]]:
    prefix = f"test_{scenario}["
    return {name[len(prefix):-1]: value for name, value in items.items() if name.startswith(prefix)}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_gate_item_ends_as_labsrc_gate_judged_it(items, verdicts, scenario) -> None:
    code, table, gates = verdicts[scenario]
    mine = scenario_items(items, scenario)
    assert gates, table
    for name, verdict in gates.items():
        assert gate_id(name) in mine, f"no item for gate {name!r}"
        assert mine[gate_id(name)][0] == verdict, (name, mine[gate_id(name)])
    # The last item is the exit status; the others have no line in the table, and none of them passes a failing run.
    assert mine["all-gates"][0] == ("passed" if code == 0 else "failed")
    for extra in set(mine) - {gate_id(name) for name in gates} - {"all-gates"}:
        assert extra in ("build-errors", "search-errors") and mine[extra][0] == "passed", (extra, mine[extra])


def test_the_honest_retriever_passes_and_its_unmeasured_lanes_are_skipped(items, verdicts) -> None:
    code, table, gates = verdicts["filter_first"]
    assert code == 0, table
    mine = scenario_items(items, "filter_first")
    assert mine["boundary-on-every-returned-id"][0] == mine["noninterference-by-rebuild"][0] == "passed"
    # Its lanes are not reported, so their gates are not made: no line in the table, a skipped item saying why.
    assert "recall@2 bm25  " not in table and "not made: recall@2 bm25, recall@2 dense, hybrid >= each lane" in table
    verdict, reason = mine["recall-2-bm25"]
    assert verdict == "skipped" and reason.startswith("recall@2 bm25: not made, the retriever returns only its fused "
                                                      "list, so its lanes cannot be measured")
    assert {verdict for verdict, _ in mine.values()} == {"passed", "skipped"}


def test_a_leaky_retriever_fails_its_gates_with_the_findings(items, verdicts) -> None:
    code, table, _ = verdicts["post_filter"]
    assert code == 1
    mine = scenario_items(items, "post_filter")
    assert status(table, "noninterference by rebuild") == "FAIL"
    verdict, message = mine["noninterference-by-rebuild"]
    assert verdict == "failed" and "case 'remote-days': hybrid: scores differ by up to" in message
    assert "case 'remote-days': hybrid: scores differ by up to" in table
    # The config asks for bm25 recall, which a fused-list retriever cannot show: NOT TESTED, and failing, as in the CLI.
    assert status(table, "recall@2 bm25") == "NOT TESTED"
    verdict, message = mine["recall-2-bm25"]
    assert verdict == "failed" and "could not be measured never passes" in message
    assert "noninterference by rebuild" in mine["all-gates"][1]


def test_a_retriever_that_ignores_dates_is_named_with_the_chunk(items, verdicts) -> None:
    code, table, _ = verdicts["ignores_dates"]
    assert code == 1 and status(table, "boundary on every returned id") == "FAIL"
    mine = scenario_items(items, "ignores_dates")
    verdict, message = mine["boundary-on-every-returned-id"]
    assert verdict == "failed"
    assert "case 'leave-weeks': 'north-leave-v3' at rank 2 of the fused list: not yet effective" in message
    # require_cases is on, and the lanes it never reported make no gate for it to fail: the item is skipped.
    verdict, message = mine["recall-2-dense"]
    assert verdict == "skipped" and "not made, the retriever returns only its fused list" in message
    assert "recall-2-dense" not in [name for name, (v, _) in mine.items() if v == "failed"]


def test_a_factory_given_as_a_callable_gets_the_same_items(items) -> None:
    by_name = scenario_items(items, "filter_first")
    by_callable = scenario_items(items, "callable")
    assert {k: v[0] for k, v in by_callable.items()} == {k: v[0] for k, v in by_name.items()}


@pytest.mark.parametrize("scenario", sorted(MISUSE))
def test_bad_input_fails_each_item_with_the_command_lines_one_line_error(project, items, scenario) -> None:
    files = dict(MISUSE[scenario])
    code, _, err, _ = cli(project, files.pop("retriever"), **files)
    assert code == 2
    message = err.strip().removeprefix("labsrc: error: ")
    mine = scenario_items(items, scenario)
    assert mine and all(verdict == "failed" for verdict, _ in mine.values())
    for _, text in mine.values():
        # The command line's message in pytest's words: its prefix and the argument's name, nothing else changed.
        in_pytest = f"release gate input: {message.replace('--retriever', 'gate_tests retriever')}"
        assert text.splitlines()[0].removeprefix("Failed: ") == in_pytest  # pytest adds "Failed: "
        assert "Traceback" not in text and "labsrc/" not in text.replace(str(project), "")
    expected = {"bad_chunks": "bad_chunks.jsonl, line 3, field 'region'", "bad_config": "field 'topk'",
                "bad_factory": "no_such_factory"}[scenario]
    assert expected in message


def test_k_selects_one_gate_item(project) -> None:
    proc, outcomes = run_pytest(project, "-k", "test_ignores_dates and boundary")
    assert list(outcomes) == ["test_ignores_dates[boundary-on-every-returned-id]"]
    assert outcomes["test_ignores_dates[boundary-on-every-returned-id]"][0] == "failed"
    assert proc.returncode == 1 and "1 failed" in proc.stdout


def test_importing_labsrc_does_not_import_pytest() -> None:
    code = "import sys, labsrc, labsrc.testing, labsrc.cli.main; sys.exit('pytest' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=120, check=False).returncode == 0


def test_gate_ids_are_what_pytest_k_can_name() -> None:
    assert gate_id("recall@2 bm25") == "recall-2-bm25"
    assert gate_id("hybrid >= each lane") == "hybrid-each-lane"
    assert gate_id("wrong_region exclusion") == "wrong-region-exclusion"
    assert gate_id("latency p50/p95") == "latency-p50-p95"


def test_gates_the_config_turns_off_are_listed_with_the_setting() -> None:
    names = dict(expected_gates(GateConfig(top_k=3, hybrid_rule="off", noninterference="off", concurrency=0)))
    assert names["recall@3 hybrid"] is None
    assert names["hybrid vs each lane"] == "hybrid_rule is 'off' in the gate config"
    assert names["noninterference by bait"] == "noninterference is 'off' in the gate config"
    assert names["same answers under concurrent requests"] == "concurrency is 0 in the gate config"
    assert list(names)[-1] == ALL_GATES
    assert "hybrid > each lane" in dict(expected_gates(GateConfig(hybrid_rule="strict")))


def a_run(*gates: GateResult, config: GateConfig | None = None) -> GateRun:
    return GateRun(config or GateConfig(), dt.date(2026, 6, 15), (), gates, {}, {}, {})


def test_a_gate_that_was_not_measured_never_passes() -> None:
    config = GateConfig()
    blocking = GateResult("noninterference by rebuild", False, "not compared: ...", family="rebuild", tested=False)
    optional = not_tested("abstention", "abstention", "absent cases", config)
    run = a_run(blocking, optional, config=config)
    assert gate_outcome(run, "noninterference by rebuild").outcome == "failed"
    assert gate_outcome(run, "abstention").outcome == "skipped"
    assert gate_outcome(run, ALL_GATES).outcome == "failed"
    # Expected but absent (no case answered, so no latency): failed, not passed.
    assert gate_outcome(run, "latency p50/p95").outcome == "failed"
    assert gate_outcome(run, "search errors").outcome == "passed"  # no case raised
    assert gate_outcome(run, "noninterference by bait", "noninterference is 'off'").outcome == "skipped"
    required = GateConfig(require_cases=True)
    run = a_run(not_tested("abstention", "abstention", "absent cases", required), config=required)
    assert gate_outcome(run, "abstention").outcome == gate_outcome(run, ALL_GATES).outcome == "failed"
