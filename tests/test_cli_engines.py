"""``--engine postgres`` and ``--dsn``: the same gate table, report and exit codes as in memory."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from pg_support import requires_postgres
from test_cli import FAST, FILES, LESSON, copy_cases, gate_args, write_vector_dir

import labsrc
import labsrc.evaluation
from labsrc.cli.main import main
from labsrc.engines import INSTALL_POSTGRES

#: A latency row: its timings vary, and its budgets are the engine's own (labsrc.evaluation.budgets).
TIMING = re.compile(r"^(authorize|bm25|dense|fusion)\s+[\d.]+\s+[\d.]+\s+[\d.]+/[\d.]+", re.MULTILINE)
BUDGETS = re.compile(r"^(authorize|bm25|dense|fusion)\s+[\d.]+\s+[\d.]+\s+([\d.]+)/([\d.]+)", re.MULTILINE)


def without_timings(out: str) -> str:
    out = out.replace("(retriever memory,", "(retriever X,").replace("(retriever postgres,", "(retriever X,")
    return TIMING.sub(r"\1 <ms>", out.replace("/memory", "/X").replace("/postgres", "/X"))


@requires_postgres
def test_report_is_the_same_on_both_engines(tmp_path: Path, capsys) -> None:
    runs, budgets = {}, {}
    for engine in ("memory", "postgres"):
        code = main(["report", "--engine", engine, "--out", str(tmp_path / engine), *FAST])
        out = capsys.readouterr().out
        runs[engine] = (code, without_timings(out))
        budgets[engine] = {stage: (float(p50), float(p95)) for stage, p50, p95 in BUDGETS.findall(out)}
    assert runs["postgres"] == runs["memory"]
    # The lesson's config holds the in-memory budgets; on the engine, a round trip a stage, its own apply.
    assert budgets["memory"] == {s: (b, b) for s, b in labsrc.RETRIEVAL_BUDGET_MS.items()}
    assert budgets["postgres"] == {s: (b, b) for s, b in labsrc.evaluation.POSTGRES_BUDGET_MS.items()}
    assert runs["postgres"][0] == 0 and "all tested gates pass" in runs["postgres"][1]
    docs = {e: json.loads((tmp_path / e / "report.json").read_text()) for e in runs}
    assert docs["postgres"]["recall"] == docs["memory"]["recall"]
    assert [c["ids"] for c in docs["postgres"]["cases"]] == [c["ids"] for c in docs["memory"]["cases"]]


@requires_postgres
def test_gate_fails_the_same_way_on_both_engines(tmp_path: Path, server, capsys) -> None:
    # A positive case whose words match nothing: a real recall failure (exit 1), not a misuse (exit 2).
    bad = json.dumps({"name": "vague", "query": "qwerty zxcv", "caller": "luna-48291", "kind": "positive",
                      "expected": ["eu-refurb-v2-rule"]})
    cases = copy_cases(tmp_path, bad)
    # Budgets no machine misses: on a loaded machine the engine's p95 once passed its 10 ms authorize budget
    # while memory's did not, and the two tables differed for a reason this test is not about.
    config = tmp_path / "gate.json"
    config.write_text(json.dumps({
        "p50_budget_ms": dict.fromkeys(("authorize", "bm25", "dense", "fusion"), 60_000),
        "p95_budget_ms": dict.fromkeys(("authorize", "bm25", "dense", "fusion"), 60_000),
    }))  # fmt: skip
    outs = {}
    for extra in (["--engine", "memory"], ["--engine", "postgres", "--dsn", server.dsn]):
        code = main(["gate", *FILES, "--cases", str(cases), "--config", str(config), "--date", "2026-05-27", *FAST, *extra])
        outs[extra[1]] = (code, without_timings(capsys.readouterr().out))
    assert outs["postgres"] == outs["memory"]
    assert outs["postgres"][0] == 1 and "FAIL" in outs["postgres"][1] and "vague" in outs["postgres"][1]


@requires_postgres
def test_gate_on_postgres_with_a_vector_directory_missing_hidden_chunks(tmp_path: Path, server, capsys) -> None:
    # The folder embeds only the chunks some caller can see; the engine stores the others without a vector.
    visible = ["eu-refurb-v2-rule", "eu-footwear-v1-rule", "eu-carrier-loss-v1"]
    folder = write_vector_dir(tmp_path, visible, ["paraphrase"])
    args = gate_args(LESSON / "cases.jsonl", "--out", str(tmp_path / "out"), "--engine", "postgres", "--dsn", server.dsn)
    args[args.index("--vectors") + 1] = str(folder)
    main(args)
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    paraphrase = next(c for c in doc["cases"] if c["name"] == "paraphrase")
    assert paraphrase["ids"]["dense"] == ["eu-refurb-v2-rule"]
    assert doc["versions"]["engine"] == "postgres"


@requires_postgres
def test_search_prints_the_same_ranking(capsys) -> None:
    query = "damaged refurbished laptop replacement after delivery"
    outs = {}
    for engine in ("memory", "postgres"):
        assert main(["search", query, "--as", "luna-48291", "--engine", engine]) == 0
        outs[engine] = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("versions:")]
    assert outs["postgres"] == outs["memory"]


def test_dsn_without_the_postgres_engine_exits_2(capsys) -> None:
    assert main(["search", "RPL-14", "--as", "luna-48291", "--dsn", "postgresql://x@/db"]) == 2
    assert "--dsn applies to --engine postgres only" in capsys.readouterr().err


def test_without_the_extra_the_engine_exits_2_with_the_install_command(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # what `import psycopg` sees when it is not installed
    assert main(["report", "--engine", "postgres", *FAST]) == 2
    err = capsys.readouterr().err
    assert INSTALL_POSTGRES in err and "Traceback" not in err


@requires_postgres
def test_an_unreachable_dsn_exits_2(tmp_path: Path, capsys) -> None:
    dsn = f"postgresql://nobody@/postgres?host={tmp_path}&connect_timeout=2"
    assert main(["search", "RPL-14", "--as", "luna-48291", "--engine", "postgres", "--dsn", dsn]) == 2
    assert "cannot connect to PostgreSQL" in capsys.readouterr().err


# --- a build that fails names the engine as the user chose it, not a class inside the lab -----


@pytest.mark.parametrize("command", [["report", *FAST], ["gate", *FILES, "--cases", str(LESSON / "cases.jsonl"), *FAST]])
def test_a_postgres_build_that_fails_names_the_engine(command: list[str], capsys) -> None:
    pytest.importorskip("psycopg", reason="psycopg (the postgres extra)")
    # Port 1 refuses at once: the build fails inside the engine's factory, in the gate's worker for `gate`.
    assert main([*command, "--engine", "postgres", "--dsn", "postgresql://nouser@127.0.0.1:1/x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("labsrc: error: the postgres engine raised while building (every stored chunk, 5 chunks): ")
    assert "cannot connect to PostgreSQL" in err
    assert "SharedServerFactory" not in err and "labsrc.audit" not in err and err.count("\n") == 1


def test_a_memory_build_that_fails_names_the_engine(monkeypatch, capsys) -> None:
    def broken(chunks, vectors, **kwargs):
        raise MemoryError("no room for the index")

    monkeypatch.setattr("labsrc.cli.engines.PolicyRetriever", broken)
    assert main(["gate", *FILES, "--cases", str(LESSON / "cases.jsonl"), "--engine", "memory", *FAST]) == 2
    err = capsys.readouterr().err
    assert err.startswith("labsrc: error: the memory engine raised while building (")
    assert "MemoryError: no room for the index" in err and "functools" not in err
