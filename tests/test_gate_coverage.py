"""Generated probes aimed where leaks live, asked at two depths, with a coverage floor that can fail.

labsrc/gate/generate.py deals the hidden-chunk family's budget by tier (siblings of
what the caller may see, chunks sharing a rare term with it, the rest), asks every
probe at ``top_k`` and at ``deep_top_k(top_k)``, and sizes the default budget from
the corpus; ``min_coverage`` fails the generated-probes gate when a tier's share
attacked is below it. The last test gates a document-level ACL bug on a generated
corpus of 3,000 chunks (benchmarks/bench_gate_scale.py) at the default budget.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import labsrc
from labsrc.errors import InvalidArgument, InvalidRecord
from labsrc.gate.config import (AUTO_PROBE_BUDGET, DEFAULT_PROBE_BUDGET, GateConfig, deep_top_k, default_probe_budget,
                                load_gate_config)
from labsrc.gate.generate import PROBE_TIERS, hidden_tiers, plan_probes, rare_df
from labsrc.gate.generated import GeneratedCheck
from labsrc.gate.plan import plan_gate
from labsrc.gate.probe_rules import generated_gate
from labsrc.records.cases import Case
from labsrc.records.policy import Caller, PolicyChunk

sys.path.insert(0, str(Path(__file__).parent / "outside"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from bench_gate_scale import EVAL_DATE, document_acl, scale_callers, scale_cases, scale_corpus  # noqa: E402
from gate_cli import run_gate, status  # noqa: E402

DAY = dt.date(2026, 6, 15)
EVE = Caller("eve", "EU", frozenset({"support"}))  # sees the EU support chunks in force
NED = Caller("ned", "US", frozenset({"support"}))  # sees the US support chunks in force


def chunk(chunk_id: str, document: str, parent: str, region: str, tag: str, text: str,
          start: dt.date = dt.date(2026, 1, 1), end: dt.date | None = None) -> PolicyChunk:
    return PolicyChunk(chunk_id, document, parent, f"{document}/{start}", region, tag, start, end, text)


#: Seven chunks; the comments give each one's tier for eve (EU support) on DAY.
CHUNKS = (
    chunk("eu-refund-v2", "refund", "refund-eu-v2", "EU", "support", "Rule RPL-14: refund to the doorstep within 14 days"),
    # sibling: the same document, superseded on DAY
    chunk("eu-refund-v1", "refund", "refund-eu-v1", "EU", "support", "Rule RPL-14: refund within 30 days",
          dt.date(2025, 1, 1), dt.date(2025, 12, 31)),
    # sibling: the same document, another region's edition (ned's own)
    chunk("us-refund-v2", "refund", "refund-us-v2", "US", "support", "Rule RPL-14: refund within 21 days"),
    # sibling by parent: another document, but the parent of a chunk eve sees
    chunk("eu-refund-annex", "refund-annex", "refund-eu-v2", "EU", "legal", "Annex storage fees"),
    # shared: restricted, and its code RPL-14 is in a chunk eve sees
    chunk("eu-memo", "memo", "memo", "EU", "legal", "Memo RPL-14 exceptions"),
    # shared: restricted, and 'chargeback' (one of its rarest terms) is in a case's query
    chunk("eu-audit", "audit", "audit", "EU", "legal", "Audit chargeback ledger"),
    # the rest: restricted, nothing in common with what eve sees or the cases ask
    chunk("eu-payroll", "payroll", "payroll", "EU", "legal", "Payroll bonus schedule"),
)
CALLERS = {"eve": EVE, "ned": NED}
CASES = (Case("doorstep", "doorstep chargeback", "eve", "positive", expected=("eu-refund-v2",), on_date=DAY),)


def tiers_of(actor: str) -> dict[str, set[str]]:
    return {tier: set(ids) for tier, ids in hidden_tiers(CHUNKS, CALLERS, CASES, DAY)[(actor, DAY)].items()}


# -- the tiers -------------------------------------------------------------------------------------------------------


def test_each_hidden_chunk_is_in_one_tier_per_caller_and_date() -> None:
    assert tiers_of("eve") == {
        "sibling": {"eu-refund-v1", "us-refund-v2", "eu-refund-annex"},  # document refund, or parent refund-eu-v2
        "shared": {"eu-memo", "eu-audit"},  # rpl-14 is in eu-refund-v2; chargeback is in the case's query
        "rest": {"eu-payroll"},
    }
    # ned sees us-refund-v2 only: the EU editions are his siblings; the annex's parent and document he sees
    # nothing of, and its terms (annex, storage, fees) are in no chunk he sees: the rest.
    assert tiers_of("ned") == {
        "sibling": {"eu-refund-v2", "eu-refund-v1"},
        "shared": {"eu-memo", "eu-audit"},  # rpl-14 is in us-refund-v2 too
        "rest": {"eu-refund-annex", "eu-payroll"},
    }


def test_a_term_in_too_many_chunks_shares_nothing() -> None:
    assert (rare_df(29), rare_df(20_000), rare_df(100_000)) == (5, 20, 100)  # max(5, floor(0.001 * chunks))
    # Six more chunks eve sees holding 'chargeback': 7 chunks hold it, more than rare_df(13) == 5.
    more = tuple(chunk(f"eu-faq-{n}", f"faq-{n}", f"faq-{n}", "EU", "support", f"chargeback question {n}")
                 for n in range(6))
    tiers = hidden_tiers(CHUNKS + more, CALLERS, CASES, DAY)[("eve", DAY)]
    assert "eu-audit" in tiers["rest"] and "eu-memo" in tiers["shared"]


def test_the_budget_deals_two_siblings_then_one_shared_then_one_of_the_rest() -> None:
    plan = plan_probes(CHUNKS, CALLERS, CASES, DAY, budget=10_000, seed=3)
    targets = list(dict.fromkeys((r.caller, r.target, r.tier) for r in plan.requests if r.family == "hidden-chunk"))
    tiers = [tier for _, _, tier in targets]
    # Siblings 3 + 2, shared 2 + 2, the rest 1 + 2 over eve and ned: 2:1:1 while each tier lasts, then what is left.
    assert tiers[:8] == ["sibling", "sibling", "shared", "rest", "sibling", "sibling", "shared", "rest"]
    assert tiers[8:] == ["sibling", "shared", "rest", "shared"]  # the siblings, then the rest, run out
    assert plan.tiers == {"sibling": 5, "shared": 4, "rest": 3} == plan.attacked()
    assert plan.hidden_pairs == 12
    # The callers take turns within a tier: eve's first sibling, then ned's.
    assert [caller for caller, _, tier in targets if tier == "sibling"][:2] == ["eve", "ned"]


def test_a_small_budget_goes_to_the_siblings_first_and_the_line_says_so() -> None:
    plan = plan_probes(CHUNKS, CALLERS, CASES, DAY, budget=8, seed=0, top_k=2)
    hidden = [r for r in plan.requests if r.family == "hidden-chunk"]
    assert hidden and hidden[0].tier == "sibling"
    attacked = plan.attacked()
    assert attacked["sibling"] >= attacked["shared"] >= attacked["rest"]
    assert (f"hidden chunks attacked (per caller and date): siblings {attacked['sibling']} of 5, "
            f"sharing a code or rare term {attacked['shared']} of 4, the rest {attacked['rest']} of 3") in plan.coverage()
    assert plan.to_dict()["tiers"]["sibling"] == {"targets": 5, "attacked": attacked["sibling"],
                                                  "share": pytest.approx(attacked["sibling"] / 5)}


# -- two depths ------------------------------------------------------------------------------------------------------


def test_every_probe_is_asked_at_top_k_and_at_the_deep_k_on_both_builds() -> None:
    assert (deep_top_k(1), deep_top_k(2), deep_top_k(3), deep_top_k(4)) == (10, 10, 15, 20)  # max(10, 5 * top_k)
    config = GateConfig(top_k=3, on_date=DAY, probe_budget=20)  # of the 28 probes planned
    plan = plan_gate(CHUNKS, CALLERS, CASES, config, DAY, label="t")
    probes = plan.generated.requests
    main = [a.request for a in plan.asks("generated") if a.key.startswith("generated ")]
    assert [r.top_k for r in main] == [3] * len(probes) + [15] * len(probes)  # the budget counts probes
    assert [(r.query, r.caller.actor_id, r.on_date) for r in main[len(probes):]] == \
        [(p.query, p.caller, p.on_date) for p in probes]
    rebuilt = [a for a in plan.asks("generated") if a.key.startswith("rebuild generated ")]
    assert {a.request.top_k for a in rebuilt} == {3, 15}  # the rebuild is asked the deep request too
    assert "20 generated probes at top_k 3 and 15 (40 requests; budget 20, seed 0)" in plan.generated.coverage()


class PadsBeyondTen:
    """Filter-first BM25, but a list shorter than k is padded from the unfiltered ranking when k >= 10."""

    def __init__(self, chunks, vectors):
        self.chunks = tuple(chunks)

    def search(self, query, caller, on_date, top_k):
        permitted = labsrc.permitted_chunks(caller, self.chunks, on_date)
        hits = labsrc.bm25_rank(query, permitted, top_k) if permitted else []
        if top_k >= 10 and len(hits) < top_k:
            have = {c.chunk_id for c, _ in hits}
            hits += [(c, s / 100) for c, s in labsrc.bm25_rank(query, self.chunks, top_k) if c.chunk_id not in have]
        return [(c.chunk_id, s) for c, s in hits[:top_k]]


def test_a_list_padded_from_an_unfiltered_ranking_beyond_k_10_is_caught_by_a_deep_generated_probe() -> None:
    config = GateConfig(top_k=2, on_date=DAY, hybrid_rule="off", concurrency=0, repetitions=1, warmup=0)
    # 'doorstep' is a word of eu-refund-v2 alone, which eve may see: even at full depth the unfiltered
    # ranking adds nothing hidden to the case's list, so replaying the case cannot see the padding.
    cases = (Case("doorstep", "doorstep", "eve", "positive", expected=("eu-refund-v2",), on_date=DAY),)
    alone = labsrc.gate_retriever(PadsBeyondTen, CHUNKS, CALLERS, cases, None, replace(config, probe_budget=0),
                                  measure=False)
    assert alone.passed, [(g.name, g.detail) for g in alone.gates if not g.passed]
    run = labsrc.gate_retriever(PadsBeyondTen, CHUNKS, CALLERS, cases, None, config, measure=False)
    generated = run.probes.generated
    assert not run.passed and {g.name: g.status for g in run.gates}["generated probes"] == "FAIL"
    leaks = generated.of_kind("boundary")
    assert leaks and all(f.request.deep and f.request.top_k == 10 for f in leaks)  # never at top_k 2
    assert " at top_k 10 (deep), query " in leaks[0].describe()


# -- the floor -------------------------------------------------------------------------------------------------------


def check(plan) -> GeneratedCheck:
    return GeneratedCheck(plan, answered=len(plan.asked), compared=0)


def test_min_coverage_fails_the_gate_naming_the_tier_its_share_and_the_floor() -> None:
    short = plan_probes(CHUNKS, CALLERS, CASES, DAY, budget=8, top_k=2, min_coverage={"rest": 0.5})
    attacked = short.attacked()["rest"]
    assert attacked / 3 < 0.5  # 0 or 1 of the 3 (caller, chunk, date) of the rest
    gate = generated_gate(check(short))
    assert not gate.passed and gate.status == "FAIL"
    assert gate.findings[0] == (f"coverage of the hidden chunks, the rest: {attacked} of 3 (caller, chunk, date) "
                                f"attacked ({100 * attacked / 3:.3g}%), below min_coverage 50%; raise probe_budget "
                                "or lower the floor")
    assert f"; below min_coverage: the rest {100 * attacked / 3:.3g}% < 50%" in gate.detail


def test_min_coverage_passes_when_every_tier_meets_it() -> None:
    met = plan_probes(CHUNKS, CALLERS, CASES, DAY, budget=10_000, top_k=2, min_coverage=1.0)
    assert dict(met.min_coverage) == {"sibling": 1.0, "shared": 1.0, "rest": 1.0} and met.below_floor() == []
    gate = generated_gate(check(met))
    assert gate.passed and "below min_coverage" not in gate.detail
    # A tier with no target has nothing left to attack: its share is 1.
    alone = plan_probes(CHUNKS[:1], CALLERS, CASES, DAY, budget=10, top_k=2, min_coverage=1.0)
    assert alone.tiers["sibling"] == 0 and alone.shares()["sibling"] == 1.0


def test_min_coverage_is_validated_and_read_from_a_config_file(tmp_path) -> None:
    assert GateConfig().min_coverage is None
    assert dict(GateConfig(min_coverage={"sibling": 1}).min_coverage) == {"sibling": 1.0}
    for bad, message in [(1.5, r"\[0, 1\]"), ({"siblings": 0.5}, "valid tiers are"), ({"rest": True}, r"\[0, 1\]"),
                         ("half", "a number in")]:
        with pytest.raises(InvalidArgument, match=message):
            GateConfig(min_coverage=bad)
    path = tmp_path / "gate.json"
    path.write_text(json.dumps({"min_coverage": {"sibling": 0.9, "rest": 0}}), encoding="utf-8")
    config = load_gate_config(path)
    assert dict(config.min_coverage) == {"sibling": 0.9, "rest": 0.0}
    assert load_gate_config(_written(tmp_path, config.to_dict())) == config  # to_dict round-trips
    path.write_text('{\n  "min_coverage": {\n    "sibling": 2\n  }\n}', encoding="utf-8")
    with pytest.raises(InvalidRecord, match=r"line 3.*min_coverage\.sibling"):
        load_gate_config(path)


def _written(folder: Path, values: dict) -> Path:
    path = folder / "again.json"
    path.write_text(json.dumps(values), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """The hand-made corpus as the files ``labsrc gate`` reads."""
    folder = tmp_path_factory.mktemp("tiers")
    (folder / "chunks.jsonl").write_text("".join(json.dumps({
        "chunk_id": c.chunk_id, "document_id": c.document_id, "parent_id": c.parent_id, "version": c.version,
        "region": c.region, "acl_tag": c.acl_tag, "effective_from": c.effective_from.isoformat(),
        "effective_to": None if c.effective_to is None else c.effective_to.isoformat(), "text": c.text}) + "\n"
        for c in CHUNKS))
    (folder / "callers.json").write_text(json.dumps(
        [{"actor_id": c.actor_id, "region": c.region, "acl_tags": sorted(c.acl_tags)} for c in CALLERS.values()]))
    (folder / "cases.jsonl").write_text("".join(json.dumps(
        {"name": c.name, "query": c.query, "caller": c.caller, "kind": c.kind, "expected": list(c.expected),
         "on_date": c.on_date.isoformat()}) + "\n" for c in CASES))
    (folder / "gate.json").write_text(json.dumps({"top_k": 2, "on_date": DAY.isoformat(), "hybrid_rule": "off",
                                                  "concurrency": 0, "repetitions": 1, "warmup": 0}))
    (folder / "retriever.py").write_text("import labsrc\n\ndef build(chunks, vectors):\n"
                                         "    return labsrc.PolicyRetriever(chunks, vectors)\n")
    return {"chunks.jsonl": folder / "chunks.jsonl", "callers.json": folder / "callers.json",
            "cases.jsonl": folder / "cases.jsonl", "gate.json": folder / "gate.json", "retriever": folder / "retriever.py"}


def test_the_min_coverage_option_fails_a_run_that_is_otherwise_sound(files) -> None:
    retriever = f"{files['retriever']}:build"
    code, out, _ = run_gate(files, "--retriever", retriever, "--probe-budget", "8", "--min-coverage", "rest=1")
    assert code == 1 and status(out, "generated probes") == "FAIL"
    assert "coverage of the hidden chunks, the rest: " in out and "below min_coverage 100%" in out
    code, out, _ = run_gate(files, "--retriever", retriever, "--min-coverage", "1")  # 400 probes attack every tier whole
    assert code == 0 and status(out, "generated probes") == "PASS", out
    code, _, err = run_gate(files, "--retriever", retriever, "--min-coverage", "sibling=2")
    assert code == 2 and "--min-coverage: min_coverage['sibling'] must be a number in [0, 1]" in err
    with pytest.raises(SystemExit) as exited:  # argparse refuses the shape before the run, as for every option
        run_gate(files, "--retriever", retriever, "--min-coverage", "most")
    assert exited.value.code == 2



def test_the_probe_budget_option_takes_auto_as_the_config_does(files) -> None:
    retriever = f"{files['retriever']}:build"
    code, out, _ = run_gate(files, "--retriever", retriever, "--probe-budget", "auto")
    assert code == 0 and "; budget 400, seed 0)" in out, out  # 'auto' on a small corpus: the 400 it always had
    code, out, _ = run_gate(files, "--retriever", retriever, "--probe-budget", "3")
    assert code == 0 and "3 generated probes at top_k 2 and 10 (6 requests; budget 3, seed 0)" in out, out
    code, _, err = run_gate(files, "--retriever", retriever, "--probe-budget", "-1")
    assert code == 2 and "probe_budget must be 'auto' (sized from the corpus) or an int from 0 to 100,000, not -1" in err
    with pytest.raises(SystemExit) as exited:  # argparse refuses what is neither a number nor 'auto'
        run_gate(files, "--retriever", retriever, "--probe-budget", "many")
    assert exited.value.code == 2

# -- the default budget --------------------------------------------------------------------------------------------


def test_the_default_budget_is_400_on_a_small_corpus_and_grows_with_the_corpus_to_a_cap() -> None:
    assert GateConfig().probe_budget == AUTO_PROBE_BUDGET == "auto" and DEFAULT_PROBE_BUDGET == 400
    # max(400, ceil(chunks / 25)), at most 2,000.
    assert [default_probe_budget(n) for n in (7, 5_000, 10_000, 10_001, 20_000, 50_000, 100_000)] == \
        [400, 400, 400, 401, 800, 2_000, 2_000]
    plan = plan_probes(CHUNKS, CALLERS, CASES, DAY, budget="auto", top_k=2)
    assert plan.budget == 400 and "requests; budget 400, seed 0): " in plan.coverage()
    with pytest.raises(InvalidArgument, match="'auto'"):
        GateConfig(probe_budget="big")


# -- a document-level ACL bug at the default budget -----------------------------------------------------------------


def test_a_document_level_acl_bug_fails_at_the_default_budget_on_a_generated_corpus() -> None:
    # Slow (21 s in the full suite): two gate runs on 3,000 generated chunks. At that size the default budget is a
    # sample (it attacks 67 of 33,406 (caller, chunk, date) targets), so the tiers' aim is what finds the bug.
    chunks = scale_corpus(3_000)
    callers = scale_callers()
    cases = scale_cases(chunks, callers)
    assert not {c.document_id for c in chunks if c.chunk_id in {i for k in cases for i in k.expected + k.forbidden}} \
        & {c.document_id for c in chunks if c.effective_to is not None}  # no case touches a multi-version document
    # "ids": scores are not compared across builds (as for an engine with per-shard statistics); in "exact" mode
    # the rebuild gate would catch this retriever's BM25 statistics on the cases themselves.
    config = GateConfig(top_k=3, on_date=EVAL_DATE, noninterference="ids", concurrency=0, repetitions=1, warmup=0)
    alone = labsrc.gate_retriever(document_acl, chunks, callers, cases, None, replace(config, probe_budget=0),
                                  measure=False)
    assert alone.passed, [(g.name, g.detail) for g in alone.gates if not g.passed]  # the cases cannot see it
    run = labsrc.gate_retriever(document_acl, chunks, callers, cases, None, config, measure=False)
    generated = run.probes.generated
    assert generated.plan.budget == 400 and not run.passed
    assert {g.name: g.status for g in run.gates}["generated probes"] == "FAIL"
    siblings = [f for f in generated.of_kind("boundary") if f.request.tier == "sibling"]
    assert siblings and "of a document they may see" in siblings[0].describe()
