"""The audit: real retrievers through the gate, and the table ``labsrc audit`` prints.

What each subject passes or fails is a measured fact about that library's
design; these tests pin the findings the README and notebook 13 report, so a
change in either side shows up here.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

import pytest

import labsrc
from labsrc.audit import AUDIT_GATES, SUBJECTS, audit_frame, audit_markdown, load_dataset, plot_audit, run_audit
from labsrc.audit.langchain_ensemble import LangChainEnsemble
from labsrc.audit.qdrant_filter import QdrantFilter
from labsrc.audit.tantivy_filter import TantivyFilter
from labsrc.cli.main import main
from labsrc.datasets.lesson import fixtures_dir
from pg_support import requires_postgres

IN_MEMORY = ("policy-retriever", "langchain-ensemble", "tantivy-filter", "qdrant-filter")


@pytest.fixture(scope="module")
def lesson_data():
    return load_dataset("lesson", fixtures_dir() / "lesson")


@pytest.fixture(scope="module")
def rows(lesson_data):
    return {r.subject: r for r in run_audit([lesson_data], IN_MEMORY)}


@pytest.mark.parametrize("subject", [LangChainEnsemble, TantivyFilter, QdrantFilter])
def test_every_subject_answers_pairs_and_handles_an_empty_corpus(subject, data: labsrc.Lesson) -> None:
    built = subject(data.chunks, data.vectors)
    hits = built.search("RPL-14 damaged refurbished laptop", data.luna, data.eval_date, 2)
    assert len(hits) <= 2 and all(isinstance(i, str) and isinstance(s, float) for i, s in hits)
    assert subject((), None).search("anything", data.luna, data.eval_date, 2) == []


def test_every_subject_keeps_hidden_chunks_out_of_its_results(rows) -> None:
    # Each filters by metadata the way its documentation says, and none returns a hidden id.
    assert {name: row.statuses["boundary on every returned id"] for name, row in rows.items()} == dict.fromkeys(IN_MEMORY, "PASS")


def test_the_control_passes_every_gate(rows) -> None:
    assert set(rows["policy-retriever"].statuses.values()) == {"PASS"} and rows["policy-retriever"].exit_code == 0


def test_tantivy_scores_with_statistics_over_every_stored_chunk(rows) -> None:
    row = rows["tantivy-filter"]
    assert row.statuses["noninterference by rebuild"] == "FAIL"
    assert "scores differ by up to" in row.why["noninterference by rebuild"]


def test_langchain_post_filters_so_bait_shortens_its_lists(rows) -> None:
    row = rows["langchain-ensemble"]
    assert row.statuses["noninterference by bait"] == "FAIL"
    assert "(a short list)" in row.why["noninterference by bait"]


def test_qdrant_filters_inside_the_search_and_passes_on_the_lesson(rows) -> None:
    row = rows["qdrant-filter"]
    assert row.statuses["noninterference by rebuild"] == row.statuses["noninterference by bait"] == "PASS"


def test_table_and_plot(rows) -> None:
    ordered = [rows[name] for name in IN_MEMORY]
    frame = audit_frame(ordered)
    assert list(frame["subject"]) == list(IN_MEMORY)
    assert frame.loc[frame.subject == "tantivy-filter", "why"].item().startswith("noninterference by rebuild: case ")
    markdown = audit_markdown(ordered)
    assert markdown.splitlines()[0].startswith("| subject | dataset | recall | exclusion | boundary")
    assert len(markdown.splitlines()) == 2 + len(IN_MEMORY)
    figure = plot_audit(ordered)
    assert len(figure.axes[0].patches) == len(IN_MEMORY) * len(AUDIT_GATES)
    import matplotlib.pyplot as plt

    plt.close(figure)


def test_cli_writes_the_table(tmp_path) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["audit", "--subjects", "policy-retriever", "qdrant-filter", "--data", f"lesson={fixtures_dir() / 'lesson'}",
                     "--json", str(tmp_path / "audit.json"), "--no-progress"])
    assert code == 0, err.getvalue()
    records = json.loads((tmp_path / "audit.json").read_text())
    assert [r["subject"] for r in records] == ["policy-retriever", "qdrant-filter"]
    assert out.getvalue().startswith("| subject | dataset |")


def test_unknown_subject_is_misuse() -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as stop:
        main(["audit", "--subjects", "nope"])
    assert stop.value.code == 2


@requires_postgres
def test_pgvector_subjects_and_the_postgres_control(lesson_data) -> None:
    names = ("postgres-exact", "pgvector-hnsw-off", "pgvector-hnsw-on")
    found = {r.subject: r for r in run_audit([lesson_data], names)}
    assert set(found["postgres-exact"].statuses.values()) == {"PASS"}
    for name in names:
        assert found[name].statuses["boundary on every returned id"] == "PASS", found[name]


def test_subject_registry_names_its_extra() -> None:
    assert {s.extra for s in SUBJECTS.values()} <= {"", "audit", "postgres"}
    assert [s.name for s in SUBJECTS.values() if s.control] == ["policy-retriever", "postgres-exact"]


def test_each_gate_run_reports_its_phases_under_its_subject_and_dataset(lesson_data) -> None:
    heard: list[tuple[str, int, int]] = []
    run_audit([lesson_data], ["policy-retriever"], bars=lambda phase, done, total: heard.append((phase, done, total)))
    phases = {phase for phase, _, _ in heard}
    assert "policy-retriever on lesson: cases" in phases and "policy-retriever on lesson: concurrency" in phases
    # Each phase counts up to its total.
    assert all(0 < done <= total for _, done, total in heard)
    assert ("policy-retriever on lesson: cases", len(lesson_data.cases), len(lesson_data.cases)) in heard


def test_without_the_audit_extra_the_audit_exits_2_naming_the_subject_and_the_extra(monkeypatch) -> None:
    # The import really fails, as it does when installed without extras (sys.modules[name] = None makes
    # `import qdrant_client` raise ImportError), in the gate's forked build worker too.
    monkeypatch.setitem(sys.modules, "qdrant_client", None)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["audit", "--subjects", "qdrant-filter", "--data", f"lesson={fixtures_dir() / 'lesson'}", "--no-progress"])
    assert code == 2
    assert "| qdrant-filter | lesson | ERROR |" in out.getvalue()
    [line] = err.getvalue().strip().splitlines()
    assert line.startswith("labsrc: error: 1 of 1 audit rows could not run (qdrant-filter): the qdrant-filter subject "
                           "raised while building (every stored chunk, 5 chunks): MissingDependency: the Qdrant subject "
                           "needs the audit extra: pip install 'hybrid-retrieval-lab[audit]'")
    assert "labsrc.audit." not in line  # the subject as the user named it, not the class inside the lab


def test_a_subject_that_cannot_run_makes_the_audit_exit_2_naming_it(monkeypatch, tmp_path) -> None:
    # Installed without the audit extra: the table still prints, with the row as ERROR, and the exit
    # status says the audit is incomplete, in one line that names the subject and the extra.
    import dataclasses

    from labsrc.audit import table
    from labsrc.errors import MissingDependency

    def missing(config):
        raise MissingDependency("the Qdrant subject needs the audit extra: pip install 'hybrid-retrieval-lab[audit]'")

    patched = {**SUBJECTS, "qdrant-filter": dataclasses.replace(SUBJECTS["qdrant-filter"], make=missing)}
    monkeypatch.setattr(table, "SUBJECTS", patched)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["audit", "--subjects", "policy-retriever", "qdrant-filter", "--data", f"lesson={fixtures_dir() / 'lesson'}",
                     "--json", str(tmp_path / "audit.json"), "--no-progress"])
    assert code == 2
    assert [line.split(" | ")[0] for line in out.getvalue().splitlines()[2:]] == ["| policy-retriever", "| qdrant-filter"]
    assert "| qdrant-filter | lesson | ERROR |" in out.getvalue()
    lines = err.getvalue().strip().splitlines()
    assert lines == ["labsrc: error: 1 of 2 audit rows could not run (qdrant-filter): the Qdrant subject needs the audit "
                     "extra: pip install 'hybrid-retrieval-lab[audit]'"]
    assert [r["subject"] for r in json.loads((tmp_path / "audit.json").read_text())] == ["policy-retriever", "qdrant-filter"]


def _inner_imports(module_name: str) -> set[str]:
    """The modules a subject's module imports inside its functions (its lazily imported library)."""
    import ast
    import importlib

    tree = ast.parse(open(importlib.import_module(module_name).__file__, encoding="utf-8").read())
    found = set()
    for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        for node in ast.walk(function):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
    return {m for m in found if not m.startswith(("labsrc", "importlib"))}


#: Libraries a preloading subject leaves to each build because their import starts a thread (LanceDB's event
#: loop): the test below checks that it does, so the exception stays justified.
STARTS_A_THREAD = {"lancedb-hybrid": {"lancedb", "lancedb.index"}, "lancedb-postfilter": {"lancedb", "lancedb.index"}}


@pytest.mark.parametrize("name", [n for n, s in SUBJECTS.items() if s.preload])
def test_a_preloaded_subject_names_every_library_its_factory_imports_and_starts_no_thread(name) -> None:
    # Preloading saves each forked build the import (LangChain 1.8 s, Chroma 3.8 s a build); a module missing
    # from the list is imported again in every build, and an import that started a thread would not survive fork.
    import subprocess

    subject = SUBJECTS[name]
    module = {"langchain-ensemble": "langchain_ensemble", "tantivy-filter": "tantivy_filter",
              "qdrant-filter": "qdrant_filter", "llamaindex-fusion": "llamaindex_bm25",
              "chroma-filter": "chroma_filter", "lancedb-hybrid": "lancedb_hybrid",
              "lancedb-postfilter": "lancedb_hybrid"}[name]
    left = STARTS_A_THREAD.get(name, set())
    assert _inner_imports(f"labsrc.audit.{module}") - left <= set(subject.preload)
    probe = (
        "import json, os, sys, threading, numpy, labsrc.audit\n"
        "from labsrc.audit.subjects import SUBJECTS\nfrom labsrc.gate.config import GateConfig\n"
        "def threads(): return sorted(open(f'/proc/self/task/{t}/comm').read().strip() for t in os.listdir('/proc/self/task'))\n"
        "before = threads()\n"
        f"SUBJECTS[{name!r}].factory(GateConfig())\n"
        "missing = [m for m in SUBJECTS[%r].preload if m not in sys.modules]\n"
        "after, python_threads = threads(), threading.active_count()\n"
        "for m in %r: __import__(m)\n"
        "print(json.dumps([before, after, python_threads, missing, threads()]))\n"
        % (name, sorted(left))
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True)
    before, after, python_threads, missing, with_left = json.loads(out.stdout.strip().splitlines()[-1])
    assert (python_threads, missing) == (1, []), out.stdout
    # No new thread, except jemalloc's background thread (pyarrow's allocator, also started by `import pandas`):
    # jemalloc's own fork handlers (pthread_atfork) reset its locks in a forked child, which then runs without it.
    new = list(after)
    for thread in before:
        new.remove(thread)
    assert set(new) <= {"jemalloc_bg_thd"}, out.stdout
    if left:  # what the build imports itself does start a thread, so it could not have been preloaded
        assert len(with_left) > len(after), out.stdout
