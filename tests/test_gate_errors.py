"""What a retriever raises is a finding of the gate, never bad input to it (issue 59).

Exit 2 is for the gate's own input (a malformed file, a factory that cannot be imported, a main build that
cannot be made, so there is nothing to judge); what the retriever raises in a search, or in any build after
the main one, whatever its class (the lab's own ``InvalidArgument`` included), is exit 1 with the 'search
errors' or 'build errors' gate naming the case or the build, the exception and the user's file and line. The
same holds in the pytest form. Every run is on the starter folder (``labsrc init``), whose caller 'vic' may see
nothing: the caller a retriever is most likely to mishandle.
"""

from __future__ import annotations

import json

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from labsrc.cli.main import main
from labsrc.gate.config import load_gate_config
from labsrc.testing.gate_items import FAILED, PASSED, gate_outcome
from labsrc.testing.pytest_gate import GateSuite
from labsrc.testing.starter import STARTER_GATE_COMMAND, write_starter

RETRIEVERS = '''
from labsrc import bm25_rank
from labsrc.errors import InvalidArgument
from my_retriever import MyRetriever


class NoTopKForNobody(MyRetriever):
    def search(self, query, caller, on_date, top_k):
        if not caller.acl_tags:  # a caller who may see nothing: a bad argument to the lab's own BM25
            return bm25_rank(query, [], 0)
        return super().search(query, caller, on_date, top_k)


def top_k_zero(chunks, vectors):
    return NoTopKForNobody(chunks, vectors)


def raises_on_nothing(chunks, vectors):
    if not chunks:
        raise ValueError("no chunks to index")
    return MyRetriever(chunks, vectors)


def lab_error_on_nothing(chunks, vectors):
    if not chunks:
        raise InvalidArgument("cannot index an empty collection")
    return MyRetriever(chunks, vectors)


def lab_error_always(chunks, vectors):
    raise InvalidArgument("top_k must be > 0, got 0")


class RaisesWhenRebuilt(MyRetriever):
    def search(self, query, caller, on_date, top_k):
        from my_retriever import may_see
        if all(may_see(caller, chunk, on_date) for chunk in self.chunks):  # only on a build of its permitted chunks
            raise RuntimeError("index shard offline")
        return super().search(query, caller, on_date, top_k)


def raises_when_rebuilt(chunks, vectors):
    return RaisesWhenRebuilt(chunks, vectors)
'''


@pytest.fixture(scope="module")
def starter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("errors")
    write_starter(folder)
    (folder / "team_retrievers.py").write_text(RETRIEVERS, encoding="utf-8")
    return folder


def gate(folder: Path, factory: str, *extra: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    """The starter's own gate command (its config, its data), run in this process from the starter folder."""
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    argv = shlex.split(STARTER_GATE_COMMAND)[1:]
    argv[argv.index("--retriever") + 1] = f"team_retrievers:{factory}"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*argv, "--no-progress", *extra])
    return code, out.getvalue(), err.getvalue()


def where(folder: Path, statement: str) -> str:
    """``(path:line)`` of the line of team_retrievers.py that holds ``statement``, as errors name it."""
    [number] = [n for n, line in enumerate(RETRIEVERS.splitlines(), start=1) if statement in line]
    return f"({folder / 'team_retrievers.py'}:{number})"


def line_of(out: str, gate_name: str) -> str:
    [line] = [line for line in out.splitlines() if re.match(rf"^(PASS|FAIL|NOT TESTED)\s+{re.escape(gate_name)}  ", line)]
    return line


def test_a_lab_error_in_a_search_fails_search_errors_with_exit_1_not_exit_2(starter, monkeypatch) -> None:
    code, out, err = gate(starter, "top_k_zero", monkeypatch=monkeypatch)
    assert code == 1, err
    assert "labsrc: error:" not in err
    assert line_of(out, "search errors").startswith("FAIL  search errors")
    assert "1 case of 18 raised" in line_of(out, "search errors")
    at = where(starter, "return bm25_rank(query, [], 0)")
    assert f"case 'visitor-gets-nothing': InvalidArgument: top_k must be > 0, got 0 {at}" in out
    # The generated probes asked as 'vic' raised too: each is a line of the same gate, naming the probe.
    assert re.search(r"cross-caller probe \(.*\): as 'vic' on 2026-06-15, query '.*', for 'generated probes': "
                     rf"InvalidArgument: top_k must be > 0, got 0 {re.escape(at)}", out)
    assert "failed gate 'search errors': cases visitor-gets-nothing" in out


@pytest.mark.parametrize(("factory", "error"), [
    ("raises_on_nothing", "ValueError: no chunks to index"),
    ("lab_error_on_nothing", "InvalidArgument: cannot index an empty collection"),
])
def test_a_build_that_raises_for_a_caller_with_nothing_to_see_is_its_own_finding(starter, monkeypatch, factory,
                                                                                    error) -> None:
    code, out, err = gate(starter, factory, "--probe-budget", "20", monkeypatch=monkeypatch)
    assert code == 1 and "labsrc: error:" not in err, err
    assert line_of(out, "build errors").startswith(
        "FAIL  build errors                            1 of 13 builds failed (raised, timed out or ended while building)")
    assert (f"build 'rebuild vic 2026-06-15', made for 'noninterference by rebuild': team_retrievers:{factory} "
            f"raised while building (over vic's 0 permitted chunks on 2026-06-15, 0 chunks): {error} "
            f"{where(starter, error.split(': ')[1])}") in out
    # The rebuild gate is not where the failure is filed: it compared the other cases and says why not this one.
    rebuild = line_of(out, "noninterference by rebuild")
    assert rebuild.startswith("PASS") and "not compared: 1 case: its build failed (see 'build errors')" in rebuild
    assert "failed gate 'build errors': cases visitor-gets-nothing" in out


def test_a_search_that_raises_only_on_a_rebuild_is_a_search_error_not_a_difference(starter, monkeypatch) -> None:
    code, out, err = gate(starter, "raises_when_rebuilt", "--probe-budget", "0", monkeypatch=monkeypatch)
    assert code == 1, err
    errors = line_of(out, "search errors")
    assert errors.startswith("FAIL  search errors") and "every case answered; 18 other requests raised" in errors
    assert ("case 'vpn-from-home' on build 'rebuild dana 2026-06-15' (over dana's 6 permitted chunks on 2026-06-15), "
            "for 'noninterference by rebuild': RuntimeError: index shard offline "
            f"{where(starter, 'index shard offline')}") in out
    # No PASS without evidence, and no case called a difference: none was compared, each says why.
    rebuild = line_of(out, "noninterference by rebuild")
    assert rebuild.startswith("NOT TESTED  noninterference by rebuild              not compared: 12 cases: its search "
                              "raised on the build over dana's 6 permitted chunks on 2026-06-15 (see 'search errors'); ")
    assert "differ" not in rebuild


def test_a_main_build_that_raises_a_lab_error_is_a_failing_build_not_bad_input(starter, tmp_path, monkeypatch) -> None:
    # Without the main build no case is asked, but what the retriever raised is still a finding (exit 1), whatever
    # the exception's class: the 'build errors' line names the factory, the build and the user's file and line,
    # and the report is written, saying that nothing was measured.
    reports = tmp_path / "new" / "reports"
    code, out, err = gate(starter, "lab_error_always", "--out", str(reports), monkeypatch=monkeypatch)
    assert code == 1 and "labsrc: error" not in err and "Traceback" not in err
    assert (f"      build 'main' (every stored chunk, 15 chunks), made for every gate: team_retrievers:lab_error_always "
            f"raised while building (every stored chunk, 15 chunks): InvalidArgument: top_k must be > 0, got 0 "
            f"{where(starter, 'must be > 0, got 0')}") in out.splitlines()
    assert "hybrid   not measured (no case was asked)" in out
    report = json.loads((reports / "report.json").read_text(encoding="utf-8"))
    assert [g["name"] for g in report["gates"]] == ["build errors", "no process outlives its build"]
    assert report["recall"]["lanes"] == {"bm25": None, "dense": None, "hybrid": None} and report["cases"] == []


def test_the_pytest_form_judges_what_the_retriever_raised_as_the_command_line_does(starter, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(starter))
    config = load_gate_config(starter / "data" / "gate.json")
    data = starter / "data"

    def suite(factory: str) -> GateSuite:
        return GateSuite(str(data / "chunks.jsonl"), str(data / "callers.json"), str(data / "cases.jsonl"),
                         f"{starter / 'team_retrievers.py'}:{factory}", None, config)

    run = suite("top_k_zero").run()  # a run, not the bad-input error every item would fail with
    item = gate_outcome(run, "search errors")
    assert item.outcome == FAILED
    assert "  case 'visitor-gets-nothing': InvalidArgument: top_k must be > 0, got 0 (" in item.message
    assert gate_outcome(run, "build errors").outcome == PASSED
    run = suite("lab_error_on_nothing").run()
    item = gate_outcome(run, "build errors")
    assert item.outcome == FAILED and "InvalidArgument: cannot index an empty collection" in item.message
    assert item.message.startswith("FAIL build errors: 1 of 13 builds failed")
    assert gate_outcome(run, "noninterference by rebuild").outcome == PASSED
    assert gate_outcome(run, "search errors").outcome == PASSED


def test_a_canary_build_that_raises_is_a_build_error_and_nothing_is_compared(data) -> None:
    import labsrc

    def no_strangers(chunks, vectors):
        made_up = [c.chunk_id for c in chunks if c.chunk_id.startswith("canary")]
        if made_up:  # the canary build: a chunk no stored file holds
            raise KeyError(f"unknown chunk {made_up[0]}")
        return labsrc.PolicyRetriever(chunks, vectors)

    config = labsrc.GateConfig(top_k=2, on_date=data.eval_date, probe_budget=0, repetitions=1, warmup=0)
    run = labsrc.gate_retriever(no_strangers, data.chunks, data.callers, data.cases, data.vectors, config)
    gates = {g.name: g for g in run.gates}
    [line] = gates["build errors"].findings
    assert line.startswith("build 'canary', made for 'factory indexes what it is handed': ")
    assert "raised while building (with a canary chunk added and " in line and "KeyError: 'unknown chunk canary" in line
    canary = gates["factory indexes what it is handed"]
    assert canary.status == "NOT TESTED" and canary.detail.endswith(": its build failed (see 'build errors')")
    for name in ("noninterference by rebuild", "noninterference by bait"):
        assert gates[name].status == "NOT TESTED"
        assert gates[name].detail.startswith("not compared: the factory could not be shown to index what it is handed")
    assert "search errors" not in gates and not run.passed


def test_the_pytest_form_of_a_failed_main_build_passes_no_item(starter, monkeypatch) -> None:
    from labsrc.testing.gate_items import FAILED, expected_gates

    monkeypatch.syspath_prepend(str(starter))
    config = load_gate_config(starter / "data" / "gate.json")
    data = starter / "data"
    run = GateSuite(str(data / "chunks.jsonl"), str(data / "callers.json"), str(data / "cases.jsonl"),
                    f"{starter / 'team_retrievers.py'}:lab_error_always", None, config).run()
    assert run.unbuilt is not None and not run.passed and run.outcomes == ()
    items = {name: gate_outcome(run, name, off) for name, off in expected_gates(config)}
    passing = [name for name, item in items.items() if item.outcome != FAILED]
    assert passing == ["no process outlives its build"]  # the only gate with evidence behind it
    assert "InvalidArgument: top_k must be > 0, got 0" in items["build errors"].message
    assert items["search errors"].message == ("NOT TESTED search errors: the main build failed, so no case was "
                                              "asked (see 'build errors'); it cannot pass")
