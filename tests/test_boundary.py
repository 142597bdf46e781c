import datetime as dt

import pytest
from factories import make_chunk

import labsrc
from labsrc.boundary import BlockReason, BoundaryIndex


def test_is_current_window_is_inclusive_on_both_ends():
    chunk = make_chunk("a", effective_from=dt.date(2026, 1, 1), effective_to=dt.date(2026, 3, 31))
    assert not labsrc.is_current(chunk, dt.date(2025, 12, 31))
    assert labsrc.is_current(chunk, dt.date(2026, 1, 1))
    assert labsrc.is_current(chunk, dt.date(2026, 3, 31))
    assert not labsrc.is_current(chunk, dt.date(2026, 4, 1))


def test_open_ended_chunk_stays_current():
    assert labsrc.is_current(make_chunk("a"), dt.date(2099, 1, 1))


def test_lesson_permitted_ids_in_corpus_order(data, permitted):
    assert [c.chunk_id for c in permitted] == ["eu-refurb-v2-rule", "eu-footwear-v1-rule", "eu-carrier-loss-v1"]


def test_lesson_blocked_ids_and_reasons(data):
    blocked = {
        c.chunk_id: labsrc.block_reasons(data.luna, c, data.eval_date)
        for c in data.chunks
        if labsrc.block_reasons(data.luna, c, data.eval_date)
    }
    assert sorted(blocked) == ["eu-refurb-v1-rule", "merchant-vip-refurb"]
    assert blocked["eu-refurb-v1-rule"] == (BlockReason.SUPERSEDED,)
    assert blocked["merchant-vip-refurb"] == (BlockReason.RESTRICTED,)


def test_no_access_caller_sees_nothing(data):
    assert labsrc.permitted_chunks(data.no_access, data.chunks, data.eval_date) == []
    reasons = labsrc.block_reasons(data.no_access, data.chunks[0], data.eval_date)
    assert reasons == (BlockReason.WRONG_REGION, BlockReason.RESTRICTED)


def test_not_yet_effective_is_a_reason(data):
    future = make_chunk("f", effective_from=dt.date(2027, 1, 1))
    assert labsrc.block_reasons(data.luna, future, data.eval_date) == (BlockReason.NOT_YET_EFFECTIVE,)


def test_permitted_chunks_does_not_mutate_input(data):
    chunks = list(data.chunks)
    labsrc.permitted_chunks(data.luna, chunks, data.eval_date)
    assert chunks == list(data.chunks)


@pytest.mark.parametrize("bad", ["2026-05-27", dt.datetime(2026, 5, 27), None])
def test_on_date_must_be_a_date(data, bad):
    with pytest.raises(labsrc.InvalidArgument, match="on_date"):
        labsrc.permitted_chunks(data.luna, data.chunks, bad)


def test_vectorised_boundary_agrees_with_the_readable_one(data):
    index = BoundaryIndex(data.chunks)
    for caller in data.callers:
        for day in (dt.date(2025, 6, 1), dt.date(2026, 3, 31), dt.date(2026, 4, 1), data.eval_date):
            assert list(index.permitted(caller, day)) == labsrc.permitted_chunks(caller, data.chunks, day)


def test_vectorised_boundary_unknown_region_or_tags_give_nothing(data):
    index = BoundaryIndex(data.chunks)
    assert index.permitted(labsrc.Caller("x", "MARS", {"support:eu"}), data.eval_date) == ()
    assert index.permitted(labsrc.Caller("x", "EU", {"nope"}), data.eval_date) == ()
