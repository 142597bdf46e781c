import json
import shutil
from pathlib import Path

import pytest

import labsrc
from labsrc.patterns.needles import (
    NEEDLE_THRESHOLD,
    load_needles,
    needle_accuracy,
    needle_chunks,
    needle_gate,
    needle_retriever,
)

NEEDLES = Path(__file__).resolve().parent.parent / "fixtures" / "needles"


def test_shipped_corpus_loads_and_every_answer_is_in_its_document():
    corpus = load_needles(NEEDLES)
    assert len(corpus.documents) == 8 and 15 <= len(corpus.questions) <= 30
    for question in corpus.questions:
        assert question.answer in corpus.documents[question.doc_id]
    assert load_needles() == corpus  # the default path is the repository's fixtures/needles


def test_needle_accuracy_meets_the_threshold():
    corpus = load_needles(NEEDLES)
    report = needle_accuracy(needle_retriever(corpus), corpus.questions, k=3)
    answered = sum(o.found for o in report.outcomes)
    print(f"needle accuracy@3: {answered}/{len(report.outcomes)} = {report.accuracy:.1%}; missed {report.missed}")
    assert report.accuracy == answered / len(corpus.questions)
    assert report.accuracy >= NEEDLE_THRESHOLD == 0.85
    gate = needle_gate(report)
    assert gate.passed and gate.failing_cases == report.missed


def test_gate_fails_below_the_threshold():
    corpus = load_needles(NEEDLES)
    report = needle_accuracy(needle_retriever(corpus), corpus.questions, k=1)
    strict = needle_gate(report, threshold=1.0)
    assert not strict.passed and strict.failing_cases == report.missed and report.missed


def test_every_chunk_belongs_to_a_document():
    corpus = load_needles(NEEDLES)
    chunks = needle_chunks(corpus)
    assert {c["doc_id"] for c in chunks} == set(corpus.documents)
    assert all(len(c["text"]) <= 500 for c in chunks)


def test_a_drifted_answer_is_a_load_error(tmp_path):
    copy = tmp_path / "needles"
    shutil.copytree(NEEDLES, copy)
    lines = (copy / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[1])
    record["answer"] = "this sentence is in no document"
    lines[1] = json.dumps(record)
    (copy / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(labsrc.InvalidRecord) as err:
        load_needles(copy)
    assert err.value.line == 2 and err.value.field == "answer"


def test_the_documented_needle_example_runs_as_written():
    # Issue 30: the README's example used an undefined `questions`.
    import re
    from pathlib import Path

    import labsrc.patterns

    page = (Path(__file__).resolve().parents[1] / "docs" / "production-patterns.md").read_text(encoding="utf-8")
    row = next(line for line in page.splitlines() if line.startswith("| Needle accuracy gate |"))
    setup, call = re.findall(r"`([^`]+)`", row)[:2]
    namespace = {name: getattr(labsrc.patterns, name) for name in labsrc.patterns.__all__}
    exec(setup, namespace)
    result = eval(call, namespace)
    assert result.passed and "26/28 answered (92.9%)" in str(result)
