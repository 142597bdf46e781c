"""The three outside-in checks of noninterference: returned ids, rebuild comparison, bait."""

from __future__ import annotations

import os

import datetime as dt

import numpy as np
import pytest

import labsrc
from labsrc.gate import reaping
from labsrc.boundary import block_reasons
from labsrc.gate.bait import BAIT_REASONS, BaitVectors, bait_chunks, bait_marker, bait_markers, bait_query, bait_text
from labsrc.gate.noninterference import boundary_violations, compare_observations
from labsrc.evaluation.subject import Observation
from labsrc.lanes.dense import FixtureVectors

DAY = dt.date(2026, 5, 27)


def obs(hybrid, bm25=None, dense=None, **kw) -> Observation:
    lanes = {"hybrid": hybrid}
    if bm25 is not None:
        lanes.update(bm25=bm25, dense=dense or ())
    return Observation(lanes, **kw)


# --- every returned id --------------------------------------------------------------------


def test_a_hidden_id_is_named_with_its_lane_rank_and_every_reason(data: labsrc.Lesson) -> None:
    stored = {c.chunk_id: c for c in data.chunks}
    seen = obs([("eu-refurb-v2-rule", 0.9), ("merchant-vip-refurb", 0.5), ("ghost", 0.1)])
    found = boundary_violations("c1", seen, data.no_access, data.eval_date, stored)
    # The APAC visitor holds no tag: every EU chunk is both wrong-region and restricted for them.
    assert [(v.chunk_id, v.rank, v.reasons) for v in found] == [
        ("eu-refurb-v2-rule", 1, ("wrong region", "restricted")),
        ("merchant-vip-refurb", 2, ("wrong region", "restricted")),
        ("ghost", 3, ("not a stored chunk",)),
    ]
    assert found[0].describe() == "case 'c1': 'eu-refurb-v2-rule' at rank 1 of the fused list: wrong region, restricted"


def test_permitted_ids_are_not_violations(data: labsrc.Lesson, permitted) -> None:
    stored = {c.chunk_id: c for c in data.chunks}
    seen = obs([(c.chunk_id, 1.0) for c in permitted], bm25=[(permitted[0].chunk_id, 2.0)])
    assert boundary_violations("c", seen, data.luna, data.eval_date, stored) == ()


# --- rebuild comparison: the arithmetic ---------------------------------------------------


def test_identical_answers_are_the_same() -> None:
    a = obs([("a", 0.5), ("b", 0.25)])
    assert not compare_observations(a, a, kind="rebuild").differs


def test_a_short_list_is_reported_as_missing_ids() -> None:
    reference = obs([("a", 0.5), ("b", 0.25)])
    short = obs([("a", 0.5)])
    comparison = compare_observations(reference, short, kind="rebuild")
    assert comparison.differs
    assert comparison.describe() == "hybrid: missing ['b'] (a short list)"


def test_score_difference_is_the_largest_absolute_one_over_common_ids() -> None:
    reference = obs([("a", 0.5), ("b", 0.25)])
    moved = obs([("a", 0.5 + 2**-40), ("b", 0.25 - 0.125)])
    comparison = compare_observations(reference, moved, kind="rebuild")
    assert comparison.max_score_diff == 0.125  # |0.125 - 0.25|, larger than 2**-40
    assert comparison.differs
    # In "ids" mode the same answer passes: same ids, same order.
    assert not compare_observations(reference, moved, kind="rebuild", mode="ids").differs


def test_one_ulp_is_a_difference_in_exact_mode() -> None:
    reference = obs([("a", 0.1)])
    nudged = obs([("a", float(np.nextafter(0.1, 1.0)))])
    assert compare_observations(reference, nudged, kind="rebuild").differs


def test_order_and_extra_ids() -> None:
    reference = obs([("a", 0.5), ("b", 0.5)])
    swapped = obs([("b", 0.5), ("a", 0.5), ("x", 0.1)])
    comparison = compare_observations(reference, swapped, kind="rebuild", mode="ids")
    assert comparison.describe() == "hybrid: extra ['x'], order differs"


def test_lanes_are_compared_when_both_report_them() -> None:
    reference = obs([("a", 1.0)], bm25=[("a", 2.0)], dense=[("a", 0.9)])
    other = obs([("a", 1.0)], bm25=[("a", 2.5)], dense=[("a", 0.9)])
    assert compare_observations(reference, other, kind="rebuild").describe() == "bm25: scores differ by up to 0.5"


def test_a_failed_search_cannot_be_compared_and_counts_as_a_difference() -> None:
    comparison = compare_observations(obs([]), Observation({"hybrid": ()}, error="boom"), kind="rebuild")
    assert comparison.differs and comparison.describe() == "not compared: the full build raised boom"


def test_bait_returned_is_named() -> None:
    comparison = compare_observations(obs([("a", 1.0)]), obs([("bait-001-restricted", 3.0), ("a", 1.0)]),
                                      kind="bait", bait_ids=frozenset({"bait-001-restricted"}))
    assert comparison.bait_returned == ("bait-001-restricted",)
    assert comparison.describe().startswith("bait returned: ['bait-001-restricted']")


# --- bait ---------------------------------------------------------------------------------


def test_one_bait_per_reason_each_blocked_for_exactly_that_reason(data: labsrc.Lesson) -> None:
    bait = bait_chunks(["RPL-14 damaged laptop"], data.luna, DAY, {c.chunk_id for c in data.chunks})
    assert [c.chunk_id for c in bait] == [
        "bait-001-restricted", "bait-001-superseded", "bait-001-not-yet-effective", "bait-001-wrong-region",
    ]
    for chunk, reason in zip(bait, BAIT_REASONS):
        assert block_reasons(data.luna, chunk, DAY) == (reason,)  # Luna holds a tag: one reason each
        marker = bait_marker(chunk.chunk_id, "RPL-14 damaged laptop")
        assert chunk.text == bait_text("RPL-14 damaged laptop") == "RPL-14 damaged laptop"  # the query, nothing else
        assert bait_query(chunk) == "RPL-14 damaged laptop" and bait_markers([chunk]) == {marker: chunk.chunk_id}
        assert marker.isalpha() and marker.islower() and marker.startswith("bait")
    assert len(bait_markers(bait)) == 4  # one marker per chunk, in its metadata: a payload carrying it names its chunk


def test_a_caller_without_tags_still_gets_bait_blocked_by_its_reason(data: labsrc.Lesson) -> None:
    for chunk, reason in zip(bait_chunks(["x"], data.no_access, DAY, set()), BAIT_REASONS):
        assert reason in block_reasons(data.no_access, chunk, DAY)


def test_bait_ids_never_collide_with_stored_ids(data: labsrc.Lesson) -> None:
    bait = bait_chunks(["q"], data.luna, DAY, {"bait-001-restricted"})
    assert bait[0].chunk_id == "bait-001-restricted-2"


def test_bait_vectors_are_the_query_vector_and_the_rest_come_from_the_source() -> None:
    source = FixtureVectors({"a": [1.0, 0.0], "b": [0.0, 1.0]}, {"find b": [0.0, 2.0]})
    bait = bait_chunks(["find b"], labsrc.Caller("u", "EU", {"t"}), DAY, {"a", "b"})
    vectors = BaitVectors.for_queries(source, bait)
    chunks = [labsrc.PolicyChunk("b", "d", "p", "v", "EU", "t", DAY, None, "x"), bait[0]]
    assert vectors.document_matrix(chunks).tolist() == [[0.0, 1.0], [0.0, 2.0]]
    assert vectors.version == source.version and vectors.dimension == 2


def test_the_lab_retriever_passes_rebuild_and_bait_on_the_lesson(data: labsrc.Lesson) -> None:
    run = labsrc.gate_retriever(labsrc.PolicyRetriever, data.chunks, data.callers, data.cases, data.vectors,
                                labsrc.GateConfig(top_k=2), on_date=data.eval_date, measure=False)
    by_name = {g.name: g for g in run.gates}
    for name in ("boundary on every returned id", "noninterference by rebuild", "noninterference by bait"):
        assert by_name[name].status == "PASS", by_name[name]
    assert run.noninterference == "exact"
    assert all(o.rebuild is not None and o.bait is not None for o in run.outcomes)


def test_a_leaky_retriever_is_caught_by_bait_even_on_cases_that_forbid_nothing(data: labsrc.Lesson) -> None:
    class IgnoresTags(labsrc.PolicyRetriever):
        def search(self, query, caller, on_date, top_k=2, *, query_kind="adhoc"):
            everything = labsrc.Caller(caller.actor_id, caller.region, {c.acl_tag for c in self.chunks})
            return super().search(query, everything, on_date, top_k, query_kind=query_kind)

    run = labsrc.gate_retriever(IgnoresTags, data.chunks, data.callers, data.cases, data.vectors,
                                labsrc.GateConfig(top_k=2), on_date=data.eval_date, measure=False)
    bait = next(g for g in run.gates if g.name == "noninterference by bait")
    assert bait.status == "FAIL"
    positive = next(o for o in run.outcomes if o.case.kind == "positive")
    assert positive.bait is not None and any(i.endswith("-restricted") for i in positive.bait.bait_returned)


def test_factory_errors_on_a_rebuild_fail_the_build_errors_gate_with_the_reason(data: labsrc.Lesson) -> None:
    def picky(chunks, vectors):
        if len(chunks) < len(data.chunks):
            raise RuntimeError("needs the whole corpus")
        return labsrc.PolicyRetriever(chunks, vectors)

    run = labsrc.gate_retriever(picky, data.chunks, data.callers, data.cases, data.vectors,
                                labsrc.GateConfig(top_k=2), on_date=data.eval_date, measure=False)
    gates = {g.name: g for g in run.gates}
    # A build that raised is its own finding (issue 59), not a difference the rebuild gate reports.
    failed = gates["build errors"]
    assert failed.status == "FAIL" and failed.findings
    assert all(f.startswith("build 'rebuild ") and "RuntimeError: needs the whole corpus" in f for f in failed.findings)
    rebuild = gates["noninterference by rebuild"]  # nothing was compared: no PASS without evidence
    assert rebuild.status == "NOT TESTED" and not rebuild.passed and not rebuild.findings
    assert rebuild.detail == f"not compared: {len(data.cases)} cases: its build failed (see 'build errors')"


def test_every_build_is_closed_in_its_own_worker_process(data: labsrc.Lesson, tmp_path) -> None:
    # Each build lives in a fresh worker process, so what a build leaves behind must be observed
    # from outside it: every close() appends its process id and chunk count to a file.
    log = tmp_path / "closed.txt"

    class Closing(labsrc.PolicyRetriever):
        def close(self):
            with log.open("a") as f:
                # A build may run in a PID namespace of its own (every one then sees itself as pid 2): the
                # worker's token, which names the worker's pid as the gate sees it, tells two builds apart.
                f.write(f"{os.environ.get(reaping.TOKEN_VARIABLE, 'the-gate')} {len(self.chunks)}\n")

    run = labsrc.gate_retriever(Closing, data.chunks, data.callers, data.cases, data.vectors,
                                labsrc.GateConfig(top_k=2), on_date=data.eval_date, measure=False)
    groups = {(o.case.caller, o.case.on_date or data.eval_date) for o in run.outcomes}
    closed = log.read_text().splitlines()
    # The full build, its repeat, the canary build, then a rebuild and a bait build per group.
    assert len(closed) == run.probes.builds == 3 + 2 * len(groups)
    pids = {line.split()[0] for line in closed}
    assert len(pids) == len(closed) and "the-gate" not in pids  # one process per build, never the gate's


@pytest.mark.parametrize("mode", ["nope", 1, None])
def test_unknown_noninterference_mode_is_refused(mode) -> None:
    with pytest.raises(labsrc.InvalidArgument, match="noninterference must be one of"):
        labsrc.GateConfig(noninterference=mode)


def test_a_bare_encoder_is_wrapped_so_bait_gets_vectors(data: labsrc.Lesson, tmp_path) -> None:
    log = tmp_path / "sources.txt"

    def factory(chunks, vectors):
        with log.open("a") as f:
            f.write(type(vectors).__name__ + "\n")
        return labsrc.PolicyRetriever(chunks, vectors)

    run = labsrc.gate_retriever(factory, data.chunks, data.callers, data.cases, labsrc.HashingEncoder(),
                                labsrc.GateConfig(top_k=2), on_date=data.eval_date, measure=False)
    assert {g.name: g.status for g in run.gates}["noninterference by bait"] == "PASS"
    # The canary build gets a BaitVectors too (its code's vector), so the two kinds are all there is.
    assert set(log.read_text().split()) == {"EncoderVectors", "BaitVectors"}
