"""The Chroma subject: a ``where`` filter applied before the nearest neighbours are taken.

Chroma's Rust core does not survive ``fork``: a process that has used a client
hangs in any forked child that uses one, and the gate forks a worker per build.
So nothing here touches Chroma in the test process. One fresh interpreter runs
the gate first (its workers fork from a process that has only *imported*
chromadb), then the hand-made checks, and prints what it measured as JSON; the
tests below read it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from optional import require  # noqa: E402

require("chromadb")

_SCRIPT = textwrap.dedent('''
    import datetime as dt, json, os, socket, tempfile
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import chromadb  # imported, not used, before the gate forks its workers

    import labsrc
    from labsrc.audit.chroma_filter import ChromaFilter
    from labsrc.audit import audit_row
    from labsrc.gate import gate_retriever

    out = {}
    data = labsrc.lesson()
    run = gate_retriever(ChromaFilter, data.chunks, data.callers, data.cases, data.vectors, measure=False,
                         label="chroma-filter")
    row = audit_row("chroma-filter", "lesson", run)
    out["statuses"] = dict(row.statuses)
    out["why"] = dict(row.why)
    out["probes"] = {g.name: g.passed for g in run.gates}

    connects = []
    real_connect = socket.socket.connect
    def spy(self, address):  # record any connection attempt (telemetry, a model download)
        connects.append(repr(address))
        return real_connect(self, address)
    socket.socket.connect = spy

    day = dt.date(2026, 5, 1)
    eu = labsrc.Caller("agent-1", "EU", frozenset({"support:eu"}))

    def chunk(i, **kw):
        fields = dict(chunk_id=i, document_id=i, parent_id=i, version=i, region="EU", acl_tag="support:eu",
                      effective_from=dt.date(2026, 1, 1), effective_to=None, text=f"text of {i}")
        fields.update(kw)
        return labsrc.PolicyChunk(**fields)

    class Vectors:  # the nearest vectors to the query belong to hidden chunks
        version = "hand-made-3d"
        table = {"h-us": [1.0, 0.0, 0.0], "h-old": [0.99, 0.1, 0.0], "h-vip": [0.98, 0.15, 0.0],
                 "a-near": [0.6, 0.8, 0.0], "b-far": [0.0, 0.6, 0.8], "c-far": [0.0, 0.0, 1.0]}
        def document_matrix(self, chunks):
            return np.array([self.table[c.chunk_id] for c in chunks])
        def query_vector(self, query):
            return np.array([1.0, 0.0, 0.0]) if query.strip() else np.zeros(3)

    visible = [chunk("a-near"), chunk("b-far"), chunk("c-far")]
    hidden = [chunk("h-us", region="US"), chunk("h-old", effective_to=dt.date(2026, 3, 31)),
              chunk("h-vip", acl_tag="merchant:vip-ops")]
    full = ChromaFilter(visible + hidden, Vectors())
    out["full"] = full.search("anything", eu, day, 3)
    out["full_deep"] = full.search("anything", eu, day, 10)
    out["blank"] = full.search("  ", eu, day, 3)
    out["no_tags"] = full.search("anything", labsrc.Caller("x", "EU", frozenset()), day, 3)
    alone = ChromaFilter(visible, Vectors())
    out["alone"] = alone.search("anything", eu, day, 3)
    out["alone_sees_full"] = [c.name for c in alone.client.list_collections()]

    lesson = ChromaFilter(data.chunks, data.vectors)
    requests = [(c.query, data.luna, data.eval_date, k) for c in data.cases for k in (2, 5)]
    single = [lesson.search(*r) for r in requests]
    with ThreadPoolExecutor(16) as pool:
        together = list(pool.map(lambda r: lesson.search(*r), requests * 4))
    out["threads_agree"] = together == single * 4
    out["lesson_pairs"] = [lesson.search(c.query, data.luna, data.eval_date, 2) for c in data.cases]
    out["versions"] = lesson.versions(data.eval_date)
    empty = ChromaFilter((), None)
    out["empty"] = empty.search("anything", data.luna, data.eval_date, 2)

    folders = [s.folder for s in (full, alone, lesson, empty)]
    for s in (full, alone, lesson, empty):
        s.close()
    out["folders_left"] = [f for f in folders if os.path.exists(f)]
    out["folders_in_tmpdir"] = all(f.startswith(tempfile.gettempdir()) for f in folders)
    out["connects"] = connects
    print("RESULT " + json.dumps(out))
''')


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("chroma")
    env = {**os.environ, "TMPDIR": str(folder), "ANONYMIZED_TELEMETRY": "False"}
    done = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    line = [l for l in done.stdout.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):]) | {"cwd_left": sorted(p.name for p in folder.iterdir())}


def test_only_permitted_ids_even_when_the_nearest_vectors_are_hidden(measured) -> None:
    assert [i for i, _ in measured["full"]] == ["a-near", "b-far", "c-far"]
    assert [i for i, _ in measured["full_deep"]] == ["a-near", "b-far", "c-far"]
    assert measured["full"][0][1] == pytest.approx(0.6)  # 1 - cosine distance


def test_hidden_chunks_change_nothing(measured) -> None:
    assert [i for i, _ in measured["full"]] == [i for i, _ in measured["alone"]]
    assert [s for _, s in measured["full"]] == pytest.approx([s for _, s in measured["alone"]], abs=1e-6)


def test_two_builds_in_one_process_do_not_share_a_collection(measured) -> None:
    assert len(measured["alone_sees_full"]) == 1


def test_answers_pairs_and_handles_blank_queries_and_an_empty_corpus(measured) -> None:
    pairs = measured["lesson_pairs"]
    assert any(pairs) and all(len(p) <= 2 and all(isinstance(i, str) and isinstance(s, float) for i, s in p)
                              for p in pairs)
    assert all(p == sorted(p, key=lambda x: (-x[1], x[0])) for p in pairs)
    assert measured["blank"] == measured["no_tags"] == measured["empty"] == []
    assert measured["versions"]["retriever"].startswith("chromadb 1.")


def test_sixteen_threads_get_the_answers_one_gets(measured) -> None:
    assert measured["threads_agree"] is True


def test_close_removes_its_folder_and_nothing_reaches_the_network(measured) -> None:
    assert measured["folders_left"] == [] and measured["folders_in_tmpdir"] is True
    assert measured["cwd_left"] == []  # nothing written where it ran (no ./chroma)
    assert measured["connects"] == []


def test_gate_verdicts_on_the_lesson(measured) -> None:
    statuses = measured["statuses"]
    assert {g: statuses[g] for g in ("exclusion", "boundary on every returned id", "noninterference by rebuild",
                                     "noninterference by bait")} == dict.fromkeys(
        ("exclusion", "boundary on every returned id", "noninterference by rebuild", "noninterference by bait"),
        "PASS")
    # Dense only: the rare code 'RPL-14' has no useful vector, so the lexical case finds nothing.
    assert statuses["recall"] == "FAIL"
    assert measured["why"]["recall"].startswith("case 'exact-code'")
    probes = measured["probes"]
    assert probes["factory indexes what it is handed"] and probes["repeatable builds"]
    assert probes["same answers under concurrent requests"]
