"""Generated probes find the leaks a team's cases never ask about, and hand each back as the case to add.

The held-out pharmacy corpus (tests/outside/pharmacy_corpus.py) has a team's blind
spots on purpose: no case asked by the contractor who holds no tag, no case quoting
the code of a chunk hidden from its caller, no query asked by two callers. Each
retriever in tests/outside/leak_retrievers.py passes every gate on those cases alone
(``--probe-budget 0``, checked here), so each test fails if the generated probes are
removed; with them, each gets the right verdict with the right diagnosis.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import pytest

from labsrc.gate.attack_queries import attack_queries, chunk_codes
from labsrc.gate.generate import FAMILIES, plan_probes
from labsrc.records.cases import load_cases
from labsrc.records.loading import load_callers, load_chunks

OUTSIDE = Path(__file__).parent / "outside"
LEAKS = OUTSIDE / "leak_retrievers.py"
sys.path.insert(0, str(OUTSIDE))
from gate_cli import run_gate, status  # noqa: E402
from pharmacy_corpus import write_pharmacy_corpus  # noqa: E402

DAY = dt.date(2026, 6, 15)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    return write_pharmacy_corpus(tmp_path_factory.mktemp("pharmacy"))


@pytest.fixture(scope="module")
def records(corpus):
    chunks = load_chunks(corpus["chunks.jsonl"])
    callers = {c.actor_id: c for c in load_callers(corpus["callers.json"])}
    return chunks, callers, load_cases(corpus["cases.jsonl"])


def gate(corpus, name: str, *extra: str) -> tuple[int, str, str]:
    return run_gate(corpus, "--retriever", f"{LEAKS}:{name}", *extra)


def findings(out: str, gate_name: str) -> list[str]:
    """The finding lines printed under a failed gate."""
    lines = out.splitlines()
    (start,) = [i for i, line in enumerate(lines) if f"  {gate_name}  " in f"{line}  "]
    block = []
    for line in lines[start + 1:]:
        if not line.startswith("      "):
            break
        block.append(line.strip())
    return block


# -- the plan ------------------------------------------------------------------------------------------------------


def test_codes_are_tokens_with_a_letter_and_a_digit_kept_as_written() -> None:
    assert chunk_codes("Rule RPL-14 replaces RPL-9 (v2); see RPL-14.") == ("RPL-14", "RPL-9", "v2")
    assert chunk_codes("no code here, 2026 is a year") == ()


def test_rarest_terms_are_the_three_lowest_document_frequencies(records) -> None:
    chunks, _, _ = records
    queries = attack_queries(chunks)
    first = chunks[0]
    (rare,) = [q for how, q in queries.of(first.chunk_id) if how == "rarest terms"]
    # Each of the three terms is in no more chunks than any term of the chunk left out.
    from labsrc.lanes.analysis import lesson_analyzer
    df = {t: sum(t in set(lesson_analyzer(c.text)) for c in chunks) for t in set(lesson_analyzer(first.text))}
    kept = rare.split()
    assert len(kept) == 3 and max(df[t] for t in kept) <= min(df[t] for t in df if t not in kept)


def test_the_plan_is_deterministic_bounded_and_says_what_it_left_out(records) -> None:
    chunks, callers, cases = records
    a = plan_probes(chunks, callers, cases, DAY, budget=120, seed=7)
    b = plan_probes(chunks, callers, cases, DAY, budget=120, seed=7)
    other = plan_probes(chunks, callers, cases, DAY, budget=120, seed=8)
    assert a.requests == b.requests and a.requests != other.requests
    assert len(a.requests) <= 120
    kept = a.kept()
    assert set(kept) == set(FAMILIES) and all(kept[f] > 0 for f in FAMILIES)
    assert sum(a.left_out().values()) == sum(a.planned.values()) - len(a.requests) > 0
    assert "left out by the budget" in a.coverage() and "callers no case asks as: finn" in a.coverage()
    assert a.callers_without_case == ("finn",) and "finn" in a.callers_probed


def test_cross_caller_requests_come_back_to_back_as_different_callers(records) -> None:
    chunks, callers, cases = records
    plan = plan_probes(chunks, callers, cases, DAY, budget=10_000, seed=0)
    cross = [r for r in plan.requests if r.family == "cross-caller"]
    by_query: dict[tuple[str, dt.date], list[str]] = {}
    for r in cross:
        by_query.setdefault((r.query, r.on_date), []).append(r.caller)
    assert all(sorted(actors) == sorted(callers) for actors in by_query.values())  # every caller asks every query
    for r, nxt in zip(cross, cross[1:]):
        if (r.query, r.on_date) == (nxt.query, nxt.on_date):
            assert r.caller != nxt.caller
    assert plan.left_out() == {}


def test_every_hidden_pair_and_every_edge_date_is_planned_without_a_budget(records) -> None:
    chunks, callers, cases = records
    plan = plan_probes(chunks, callers, cases, DAY, budget=100_000)
    assert plan.hidden_attacked == plan.hidden_pairs > 0
    edges = {(r.target, r.on_date) for r in plan.requests if r.family == "boundary-date"}
    readable = [c for c in chunks if any(c.region == r.region and c.acl_tag in r.acl_tags for r in callers.values())]
    assert 0 < len(readable) < len(chunks)  # no caller holds north's billing tag: nobody to ask on its edge days
    for chunk in readable:
        assert (chunk.chunk_id, chunk.effective_from) in edges
        assert (chunk.chunk_id, chunk.effective_from - dt.timedelta(days=1)) in edges
        if chunk.effective_to is not None:
            assert (chunk.chunk_id, chunk.effective_to + dt.timedelta(days=1)) in edges


# -- retrievers whose leaks the cases miss -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["query_cache", "fail_open_no_tags", "code_lookup_first"])
def test_the_cases_alone_miss_these_leaks(corpus, name) -> None:
    code, out, _ = gate(corpus, name, "--probe-budget", "0")
    assert code == 0, out  # the blind spot: without generated probes the gate passes them
    assert "generated probes" not in out


def test_the_correct_retriever_passes_the_generated_probes(corpus) -> None:
    code, out, _ = gate(corpus, "correct")
    assert code == 0, out
    assert status(out, "generated probes") == "PASS"
    assert "6 of 6 callers probed" in out and "0 requests broke the invariant" in out


def test_a_query_keyed_result_cache_is_caught_by_asking_the_same_query_as_two_callers(corpus) -> None:
    code, out, _ = gate(corpus, "query_cache")
    assert code == 1
    assert status(out, "generated probes") == "FAIL" and status(out, "boundary on every returned id") == "FAIL"
    lines = findings(out, "generated probes")
    cross = [line for line in lines if line.startswith("cross-caller probe (a case's query, asked right after")]
    assert cross and "add to cases.jsonl:" in cross[0]


def test_fail_open_for_a_caller_with_no_tags_is_caught_as_that_caller(corpus) -> None:
    code, out, _ = gate(corpus, "fail_open_no_tags")
    assert code == 1
    lines = findings(out, "generated probes")
    assert lines and all("as 'finn'" in line for line in lines if "probe" in line and "at rank" in line)
    assert "restricted" in lines[0]


@pytest.mark.parametrize("name", ["code_lookup_first", "code_lookup_last"])
def test_a_direct_code_lookup_is_caught_by_the_hidden_chunk_attack_either_way(corpus, name) -> None:
    code, out, _ = gate(corpus, name)
    assert code == 1
    attacks = [line for line in findings(out, "generated probes") if line.startswith("hidden-chunk probe (code of")]
    assert attacks, out
    # A code is an identifier, printed as it is, with the case that keeps the leak in the team's suite.
    assert "query '" in attacks[0] and '"kind": "' in attacks[0]


def test_the_case_handed_back_keeps_the_leak_in_the_teams_own_suite(corpus, tmp_path) -> None:
    code, out, _ = gate(corpus, "query_cache", "--out", str(tmp_path / "report"))
    assert code == 1
    handed = [json.loads(line) for line in (tmp_path / "report" / "generated_cases.jsonl").read_text().splitlines()]
    cross = next(c for c in handed if any(c["query"] == json.loads(line)["query"]
                                          for line in corpus["cases.jsonl"].read_text().splitlines()))
    grown = dict(corpus)
    grown["cases.jsonl"] = tmp_path / "cases.jsonl"
    grown["cases.jsonl"].write_text(corpus["cases.jsonl"].read_text() + json.dumps(cross) + "\n")
    code, out, _ = run_gate(grown, "--retriever", f"{LEAKS}:query_cache", "--probe-budget", "0")
    assert code == 1, out  # the one case added catches it with no generated probe at all
    assert status(out, "boundary on every returned id") == "FAIL"
    code, out, _ = run_gate(grown, "--retriever", f"{LEAKS}:correct", "--probe-budget", "0")
    assert code == 0, out  # and it is a valid case that the sound retriever passes


def test_reports_state_the_coverage_and_never_print_a_hidden_chunks_words(corpus, tmp_path) -> None:
    out_dir, junit = tmp_path / "report", tmp_path / "gate.xml"
    code, out, _ = gate(corpus, "fail_open_no_tags", "--out", str(out_dir), "--junit-xml", str(junit))
    assert code == 1
    report = json.loads((out_dir / "report.json").read_text())
    coverage = report["probes"]["generated"]["plan"]["coverage"]
    assert coverage.startswith("400 generated probes at top_k 3 and 15 (800 requests; budget 400, seed 0): "
                               "6 of 6 callers probed, hidden chunks attacked (per caller and date): siblings ")
    texts = {"stdout": out, "report.json": json.dumps(report), "report.md": (out_dir / "report.md").read_text(),
             "report.html": (out_dir / "report.html").read_text(), "junit": junit.read_text()}
    for name, text in texts.items():
        assert "6 of 6 callers probed" in text, name
    handed = [json.loads(line) for line in (out_dir / "generated_cases.jsonl").read_text().splitlines()]
    case_queries = {json.loads(line)["query"] for line in corpus["cases.jsonl"].read_text().splitlines()}
    secret = [c["query"] for c in handed if c["query"] not in case_queries and not chunk_codes(c["query"])]
    assert secret  # some handed-back cases ask in a hidden chunk's own words ...
    for name, text in texts.items():
        assert not any(q in text for q in secret), name  # ... which no report prints


# -- no PASS without evidence ----------------------------------------------------------------------------------------


class _Raises:
    def __init__(self, chunks, vectors):
        self.chunks = chunks

    def search(self, query, caller, on_date, top_k):
        raise RuntimeError("the index is down")


def _always_raises(chunks, vectors):
    return _Raises(chunks, vectors)


@pytest.fixture(scope="module")
def all_raised(records):
    from labsrc.gate import GateConfig, gate_retriever

    chunks, callers, cases = records
    config = GateConfig(top_k=3, on_date=DAY, probe_budget=40, concurrency=2, repetitions=1, warmup=0)
    return gate_retriever(_always_raises, chunks, callers, cases, None, config)


def _every_gate():
    from labsrc.gate import GateConfig
    from labsrc.testing.gate_items import ALL_GATES, expected_gates

    # The cleanup and build-errors gates judge the builds, not the answers: every build was made when every
    # search raised (the cleanup gate has its evidence; build errors is in a run only when a build failed).
    return [name for name, off in expected_gates(GateConfig(top_k=3))
            if off is None and name not in (ALL_GATES, "no process outlives its build", "build errors")]


@pytest.mark.parametrize("name", _every_gate())
def test_a_gate_with_no_answer_behind_it_never_passes(all_raised, name) -> None:
    from labsrc.testing.gate_items import FAILED, gate_outcome

    gate = {g.name: g for g in all_raised.gates}.get(name)
    assert gate is not None, f"{name} is missing from the run: {[g.name for g in all_raised.gates]}"
    assert gate.status != "PASS" and not gate.passed, gate
    assert gate_outcome(all_raised, name).outcome == FAILED  # its pytest item (-k) fails too
    if name != "search errors":
        assert gate.status == "NOT TESTED", gate


def test_a_run_where_every_search_raised_fails(all_raised) -> None:
    assert not all_raised.passed
    assert all(o.error for o in all_raised.outcomes)


# -- the contract's shape, settled at the first search --------------------------------------------------------------


@pytest.mark.parametrize("name", ["async_search", "dict_results"])
def test_an_async_search_and_dict_results_are_judged_as_they_are(corpus, name, capfd) -> None:
    code, out, err = gate(corpus, name)
    assert code == 0, out + err  # the sound retriever behind the other shape passes every gate
    assert "search errors" not in out and status(out, "generated probes") == "PASS"
    # What a build prints is captured per build and shown under its own header: no warning was printed at all.
    assert "never awaited" not in out + err + capfd.readouterr().err and "retriever output" not in out


BAD_SHAPE = '''
class Chroma:
    def __init__(self, chunks):
        self.chunks = chunks

    def search(self, query, caller, on_date, top_k):  # Chroma's query() answer, as it comes
        ids = [c.chunk_id for c in self.chunks[:top_k]]
        return {"ids": ids, "distances": [0.5] * len(ids)}


def build(chunks, vectors):
    return Chroma(chunks)
'''


def test_an_unreadable_shape_stops_the_run_at_the_first_search_with_one_line(corpus, tmp_path) -> None:
    plugin = tmp_path / "chroma_shape.py"
    plugin.write_text(BAD_SHAPE)
    code, out, err = run_gate(corpus, "--retriever", f"{plugin}:build")
    assert code == 2 and "PASS" not in out and "FAIL" not in out  # no cascade of gate failures
    (line,) = err.strip().splitlines()
    assert line.startswith("labsrc: error: ") and "search returned dict with keys ['distances', 'ids']" in line
    assert "(chunk_id, score) pairs" in line and "docs/gating.md#what-search-may-return" in line


# -- nothing outlives the gate -------------------------------------------------------------------------------------


def _helpers() -> list[int]:
    """Pids of live processes whose command line carries the leak retrievers' helper marker."""
    from leak_retrievers import HELPER_MARKER

    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if HELPER_MARKER.encode() in argv:
                found.append(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="finding escaped processes needs Linux's /proc")
@pytest.mark.parametrize("name", ["helper_new_session", "helper_double_fork"])
def test_helpers_a_factory_starts_outside_its_group_are_killed_and_named(corpus, name) -> None:
    before = set(_helpers())
    code, out, _ = gate(corpus, name, "--probe-budget", "20", "--concurrency", "0")
    assert code == 1, out
    assert status(out, "no process outlives its build") == "FAIL"
    named = [line for line in findings(out, "no process outlives its build") if "time.sleep(600)" in line]
    assert named and named[0].startswith("the factory left a process running: build 'every stored chunk': pid ")
    assert set(_helpers()) <= before  # every helper of the run is gone


def test_a_factory_that_starts_nothing_passes_the_cleanup_gate(corpus) -> None:
    code, out, _ = gate(corpus, "correct", "--probe-budget", "0", "--concurrency", "0")
    assert code == 0 and status(out, "no process outlives its build") == "PASS"


PRINTS = '''
import sys


class Chatty:
    def __init__(self, chunks):
        print("loading the index: every chunk, even the hidden ones")
        self.chunks = chunks

    def search(self, query, caller, on_date, top_k):
        print("debug: searching", query, file=sys.stderr)
        return []


def build(chunks, vectors):
    return Chatty(chunks)
'''


def test_what_a_retriever_prints_is_shown_under_a_header_and_written_beside_the_report(corpus, tmp_path) -> None:
    plugin = tmp_path / "chatty.py"
    plugin.write_text(PRINTS)
    code, out, _ = run_gate(corpus, "--retriever", f"{plugin}:build", "--probe-budget", "5", "--concurrency", "0",
                            "--out", str(tmp_path / "report"))
    table, _, printed = out.partition("retriever output (what each build printed; not part of the verdict):")
    assert printed and "loading the index" not in table and "debug: searching" not in table
    assert "  --- build 'every stored chunk' ---" in printed and "  | loading the index" in printed
    saved = (tmp_path / "report" / "retriever_output.txt").read_text()
    assert "debug: searching" in saved
