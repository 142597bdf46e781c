"""``labsrc gate --retriever``: retrievers written outside the project, on a corpus the lab does not ship.

The corpus and the four retrievers live in ``tests/outside/`` and use nothing of
the lab but the records the plug-in contract hands them. The issue's "done when":
a post-filtering retriever that over-fetches exits 1 on noninterference; one that
ignores dates exits 1 naming the returned chunk and why; one that filters first
but takes idf from every stored chunk exits 1 on its scores; one that filters
first and ranks only the permitted chunks exits 0.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

OUTSIDE = Path(__file__).parent / "outside"
RETRIEVERS = OUTSIDE / "retrievers.py"
sys.path.insert(0, str(OUTSIDE))
from corpus import write_corpus  # noqa: E402
from gate_cli import run_gate as gate  # noqa: E402
from gate_cli import status  # noqa: E402


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    return write_corpus(tmp_path_factory.mktemp("hr"))


def test_filter_first_that_ranks_only_permitted_chunks_exits_0(corpus) -> None:
    code, out, err = gate(corpus, "--retriever", f"{RETRIEVERS}:filter_first")
    assert code == 0, out + err
    for name in ("boundary on every returned id", "noninterference by rebuild", "noninterference by bait"):
        assert status(out, name) == "PASS"
    # Only the fused list is reported, so the lane gates are not made (no PASS, no FAIL, no NOT TESTED), and
    # the report says so; no significance line compares lanes it never measured.
    table = [line for line in out.splitlines() if line.startswith(("PASS  ", "FAIL  ", "NOT TESTED  "))]
    assert not [line for line in table if "bm25" in line or "dense" in line or "each lane" in line]
    assert status(out, "recall@2 hybrid") == "PASS"
    assert ("not made: recall@2 bm25, recall@2 dense, hybrid >= each lane (the retriever returns only its fused "
            "list, so its lanes cannot be measured)") in out
    assert "bm25     not reported (fused list only)" in out
    assert "hybrid vs bm25" not in out and "no significance test: the retriever returns only its fused list" in out


def test_post_filter_that_over_fetches_keeps_recall_but_fails_noninterference(corpus) -> None:
    code, out, _ = gate(corpus, "--retriever", f"{RETRIEVERS}:post_filter")
    assert code == 1
    assert status(out, "recall@2 hybrid") == "PASS"  # its recall is fine ...
    assert status(out, "boundary on every returned id") == "PASS"  # ... it never returns a hidden id ...
    assert status(out, "noninterference by rebuild") == "FAIL"  # ... but hidden chunks move its scores
    assert "case 'remote-days': hybrid: scores differ by up to" in out


def test_retriever_that_ignores_dates_is_named_with_the_chunk_its_rank_and_why(corpus) -> None:
    code, out, _ = gate(corpus, "--retriever", f"{RETRIEVERS}:ignores_dates")
    assert code == 1
    assert status(out, "boundary on every returned id") == "FAIL"
    # A positive case: no case lists north-leave-v3 as forbidden, the boundary check finds it anyway.
    assert "case 'leave-weeks': 'north-leave-v3' at rank 2 of the fused list: not yet effective" in out
    assert "case 'old-leave': 'north-leave-v1' at rank 1 of the fused list: superseded" in out


def test_filter_first_with_idf_from_every_stored_chunk_fails_on_its_scores(corpus) -> None:
    code, out, _ = gate(corpus, "--retriever", f"{RETRIEVERS}:global_idf")
    assert code == 1
    assert status(out, "boundary on every returned id") == "PASS"
    assert status(out, "noninterference by rebuild") == "FAIL"
    assert status(out, "noninterference by bait") == "FAIL"
    findings = [line for line in out.splitlines() if line.startswith("      case ")]
    assert findings and all("scores differ by up to" in line for line in findings)  # ids right, scores moved


def with_mode(corpus, tmp_path, mode: str) -> dict[str, Path]:
    """The corpus files with the gate config's ``noninterference`` set to ``mode``."""
    path = tmp_path / "gate.json"
    path.write_text(json.dumps({**json.loads(corpus["gate.json"].read_text()), "noninterference": mode}))
    return {**corpus, "gate.json": path}


def test_ids_mode_forgives_scores_but_not_ids(corpus, tmp_path) -> None:
    ids_only = with_mode(corpus, tmp_path, "ids")
    code, out, _ = gate(ids_only, "--retriever", f"{RETRIEVERS}:global_idf")
    assert code == 0, out  # same ids, same order: only the scores moved
    code, out, _ = gate(ids_only, "--retriever", f"{RETRIEVERS}:ignores_dates")
    assert code == 1 and status(out, "noninterference by rebuild") == "FAIL"


def test_off_mode_leaves_the_noninterference_gates_out(corpus, tmp_path) -> None:
    code, out, _ = gate(with_mode(corpus, tmp_path, "off"), "--retriever", f"{RETRIEVERS}:global_idf")
    assert code == 0 and "noninterference" not in out


def test_module_name_form_imports_from_the_current_directory(corpus, monkeypatch) -> None:
    monkeypatch.chdir(OUTSIDE)
    monkeypatch.delitem(sys.modules, "retrievers", raising=False)
    code, out, _ = gate(corpus, "--retriever", "retrievers:filter_first")
    assert code == 0, out
    assert "retriever retrievers:filter_first" in out.splitlines()[0]  # the header names what was judged


def test_the_labs_own_retrievers_are_factories_as_they_are(corpus) -> None:
    code, out, _ = gate(corpus, "--retriever", "labsrc:PolicyRetriever")
    assert code == 0, out
    assert status(out, "recall@2 bm25") in ("PASS", "FAIL") and "not reported" not in out  # lanes reported


def test_reports_carry_the_new_gates(corpus, tmp_path) -> None:
    out_dir, junit = tmp_path / "report", tmp_path / "junit.xml"
    code, _, _ = gate(corpus, "--retriever", f"{RETRIEVERS}:ignores_dates", "--out", str(out_dir), "--junit-xml", str(junit))
    assert code == 1
    report = json.loads((out_dir / "report.json").read_text())
    gates = {g["name"]: g for g in report["gates"]}
    assert gates["boundary on every returned id"]["status"] == "FAIL"
    assert "case 'leave-weeks': 'north-leave-v3' at rank 2 of the fused list: not yet effective: takes effect 2026-09-01" in gates[
        "boundary on every returned id"]["findings"]
    case = next(c for c in report["cases"] if c["name"] == "leave-weeks")
    assert case["hidden_returned"][0] == {"chunk_id": "north-leave-v3", "lane": "hybrid", "rank": 2,
                                          "reasons": ["not yet effective"], "probe": False,
                                          "details": ["not yet effective: takes effect 2026-09-01"], "where": ""}
    assert case["rebuild"]["lanes"]["hybrid"]["extra"] == ["north-leave-v3"]
    assert report["noninterference"] == "exact" and report["subject"].endswith("retrievers.py:ignores_dates")
    markdown = (out_dir / "report.md").read_text()
    assert "### Findings" in markdown and "not yet effective" in markdown
    assert "not yet effective" in (out_dir / "report.html").read_text()
    xml = junit.read_text()
    assert 'name="noninterference by rebuild"' in xml and "at rank 2 of the fused list: not yet effective" in xml
    traces = [json.loads(line) for line in (out_dir / "failed_traces.jsonl").read_text().splitlines()]
    assert any(t.get("hidden_returned") for t in traces)
    assert "north-leave-v3" not in json.dumps([t.get("versions") for t in traces])
    for text in (xml, markdown, json.dumps(report)):
        assert "Parental leave policy" not in text  # ids, ranks, scores and reasons: never chunk text


# --- misuse: exit 2 with one line, the user's own error and file:line -----------------------


@pytest.mark.parametrize(
    ("source", "spec", "expected"),
    [
        ("import not_a_real_module_xyz\n", "make", "No module named 'not_a_real_module_xyz' (%s:1)"),
        ("def make(chunks, vectors:\n", "make", "SyntaxError"),
        ("def make(chunks, vectors):\n    return 42\n", "make", "returned int, which has no search("),
        ("x = 1\n", "make", "has no 'make'"),
    ],
)
def test_a_factory_that_cannot_be_imported_or_built_exits_2_with_its_own_error(corpus, tmp_path, source, spec, expected) -> None:
    plugin = tmp_path / "team_retriever.py"
    plugin.write_text(source)
    code, out, err = gate(corpus, "--retriever", f"{plugin}:{spec}")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert (expected % plugin if "%s" in expected else expected) in err


def test_a_users_factory_that_raises_is_a_failing_build_named_by_its_file_and_name(corpus, tmp_path) -> None:
    # What the retriever raised is a finding of the run (exit 1), never the gate's input (exit 2): the factory
    # imported, ran, and its build failed. The lab's engines are named as typed ("the postgres engine"); a user's
    # factory keeps its own name.
    plugin = tmp_path / "team_retriever.py"
    plugin.write_text("def make(chunks, vectors):\n    raise ValueError('no index here')\n")
    code, out, err = gate(corpus, "--retriever", f"{plugin}:make", "--junit-xml", str(tmp_path / "gate.xml"))
    assert code == 1 and "Traceback" not in err and "labsrc: error" not in err
    assert status(out, "build errors") == "FAIL"
    assert (f"build 'main' (every stored chunk, 10 chunks), made for every gate: team_retriever.py:make raised while "
            f"building (every stored chunk, 10 chunks): ValueError: no index here ({plugin}:2)") in out
    assert "bm25     not measured (no case was asked)" in out and "GATES FAILED" in out
    assert 'name="build errors"' in (tmp_path / "gate.xml").read_text(encoding="utf-8")


def test_retriever_and_engine_together_is_misuse(corpus) -> None:
    code, _, err = gate(corpus, "--retriever", f"{RETRIEVERS}:filter_first", "--engine", "postgres")
    assert code == 2 and "--retriever judges your own retriever" in err


def test_a_search_that_raises_fails_its_case_and_the_run_goes_on(corpus, tmp_path) -> None:
    plugin = tmp_path / "flaky.py"
    plugin.write_text(
        f"import sys\nsys.path.insert(0, {str(OUTSIDE)!r})\nfrom retrievers import FilterFirst\n\n"
        "class Flaky(FilterFirst):\n"
        "    def search(self, query, caller, on_date, top_k):\n"
        "        if 'pension' in query:\n"
        "            raise RuntimeError('vector store timed out')\n"
        "        return super().search(query, caller, on_date, top_k)\n"
    )
    code, out, _ = gate(corpus, "--retriever", f"{plugin}:Flaky")
    assert code == 1
    assert status(out, "search errors") == "FAIL"
    assert f"case 'no-pension': RuntimeError: vector store timed out ({plugin}:8)" in out
    assert status(out, "recall@2 hybrid") == "PASS"  # the other cases ran
