"""The plug-in contract: what observe() accepts, what it refuses, and where errors point."""

from __future__ import annotations

import datetime as dt
import math
import sys
from pathlib import Path

import pytest

import labsrc
from labsrc.audit.plugin import load_factory, parse_spec
from labsrc.evaluation.subject import SubjectError, build_subject, describe_exception, observe

DAY = dt.date(2026, 5, 27)
ME = labsrc.Caller("me", "EU", {"t"})


class Returns:
    def __init__(self, value):
        self.value = value

    def search(self, query, caller, on_date, top_k):
        return self.value


def test_pairs_are_the_fused_list_and_the_request_is_timed() -> None:
    seen = observe(Returns([("a", 2), ("b", 1.5)]), "q", ME, DAY, 2)
    assert seen.lanes == {"hybrid": (("a", 2.0), ("b", 1.5))} and not seen.lanes_reported
    assert set(seen.timings_ms) == {"request"} and seen.timings_ms["request"] >= 0


def test_a_retrieval_result_keeps_its_lanes_and_trace(data: labsrc.Lesson) -> None:
    seen = observe(labsrc.PolicyRetriever(data.chunks, data.vectors), "RPL-14", data.luna, data.eval_date, 2)
    assert seen.lanes_reported and seen.ids("bm25") == ("eu-refurb-v2-rule",)
    assert seen.trace is not None and "timings_ms" not in seen.trace
    assert set(seen.timings_ms) == {"authorize", "bm25", "dense", "fusion"}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("a", "search returned str"),
        ([("a",)], "result 1 is ('a',)"),
        ([(1, 0.5)], "result 1 has chunk_id 1"),
        ([("a", math.nan)], "has score nan"),
        ([("a", True)], "has score True"),
        ([("a", 1.0), ("a", 0.5)], "the same chunk more than once: 'a' again at rank 2"),
        ([("a", 1.0), ("b", 0.5), ("c", 0.1)], "returned 3 results for top_k=2"),
    ],
)
def test_a_broken_answer_becomes_the_cases_error(value, message) -> None:
    seen = observe(Returns(value), "q", ME, DAY, 2)
    assert seen.error is not None and message in seen.error and seen.ids("hybrid") == ()


def test_an_exception_points_at_the_users_own_line(tmp_path) -> None:
    plugin = tmp_path / "mine.py"
    plugin.write_text("class R:\n    def search(self, q, c, d, k):\n        return {}['missing']\n\ndef make(c, v):\n    return R()\n")
    subject = build_subject(load_factory(f"{plugin}:make"), (), None)
    seen = observe(subject, "q", ME, DAY, 2)
    assert seen.error == f"KeyError: 'missing' ({plugin}:3)"


def test_query_kind_is_passed_only_to_searches_that_take_it(data: labsrc.Lesson) -> None:
    kinds = []

    class Takes:
        def search(self, query, caller, on_date, top_k, *, query_kind="adhoc"):
            kinds.append(query_kind)
            return []

    observe(Takes(), "q", ME, DAY, 2, query_kind="restricted")
    observe(Returns([]), "q", ME, DAY, 2, query_kind="restricted")  # would raise TypeError if passed
    assert kinds == ["restricted"]


def test_build_subject_wraps_errors_and_checks_for_search() -> None:
    def broken(chunks, vectors):
        raise ValueError("bad")

    with pytest.raises(SubjectError, match=r"raised while building \(build, 0 chunks\): ValueError: bad \(.*test_subject.py:\d+\)"):
        build_subject(broken, (), None)
    with pytest.raises(SubjectError, match="has no search"):
        build_subject(lambda c, v: object(), (), None)
    with pytest.raises(SubjectError, match="must be callable"):
        build_subject("not callable", (), None)  # type: ignore[arg-type]


@pytest.mark.parametrize("spec", ["nocolon", "mod:", ":make", "mod:not-a-name"])
def test_malformed_specs_are_refused(spec) -> None:
    with pytest.raises(SubjectError, match="MODULE:FACTORY"):
        parse_spec(spec)


def test_dotted_factory_and_module_names(tmp_path) -> None:
    assert load_factory("labsrc:PolicyRetriever") is labsrc.PolicyRetriever
    assert load_factory("labsrc.retriever.policy:PolicyRetriever.search") is labsrc.PolicyRetriever.search
    with pytest.raises(SubjectError, match="no such file"):
        load_factory(f"{tmp_path}/absent.py:make")


def test_the_pytest_form_finds_a_module_in_a_parent_of_the_test_folder(tmp_path, monkeypatch) -> None:
    # A project: my_gate_retriever_x.py at its root, tests/ below, pytest run from anywhere.
    from labsrc.testing.pytest_gate import OPTION, module_folders

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "my_gate_retriever_x.py").write_text("def build(chunks, vectors):\n    return None\n")
    tests = tmp_path / "tests"
    tests.mkdir()
    folders = module_folders(tests)
    assert folders == (tests, tmp_path)  # stops at the folder with pyproject.toml
    monkeypatch.chdir("/")
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "my_gate_retriever_x", raising=False)
    factory = load_factory("my_gate_retriever_x:build", option=OPTION, folders=folders)
    assert factory.__module__ == "my_gate_retriever_x" and sys.path[0] == str(tmp_path)
    with pytest.raises(SubjectError) as info:
        load_factory("absent_gate_retriever_y:build", option=OPTION, folders=folders)
    assert str(info.value) == (
        f"gate_tests retriever: no module named 'absent_gate_retriever_y' (looked on sys.path and in {tests}, "
        f"{tmp_path}: put absent_gate_retriever_y.py in one of them, or name the file, relative to the test file "
        "(path/to/file.py:FACTORY))"
    )
    monkeypatch.delitem(sys.modules, "my_gate_retriever_x")


def test_the_command_line_form_still_names_its_option() -> None:
    with pytest.raises(SubjectError, match=r"^--retriever: no module named 'absent_gate_retriever_z' \(run from"):
        load_factory("absent_gate_retriever_z:build")


def test_describe_exception_without_traceback() -> None:
    assert describe_exception(ValueError("plain")) == "ValueError: plain"


def test_the_labs_own_error_raised_inside_a_search_is_that_searchs_failure() -> None:
    # Issue 59: a retriever calling labsrc.bm25_rank(..., top_k=0) raised InvalidArgument, and the gate ended
    # with exit 2 as if its own input were bad. The gate checks its input before it asks; what a search
    # raises is the search's error, whatever its class, named with the user's file and line.
    class Refuses:
        def search(self, query, caller, on_date, top_k):
            return labsrc.bm25_rank(query, [], 0)

    observation = observe(Refuses(), "q", ME, DAY, 2)
    assert observation.error is not None and observation.contract is None
    assert observation.error.startswith("InvalidArgument: top_k must be > 0, got 0 (")
    assert f"{Path(__file__).name}:" in observation.error and observation.lanes["hybrid"] == ()
