import json

import labsrc
from labsrc.trace import StageTimer

PARAPHRASE = "swap a broken reconditioned notebook"


def test_paraphrase_trace(data):
    trace = labsrc.trace_hybrid_request(PARAPHRASE, "paraphrase", data.luna, data.chunks, data.vectors, data.eval_date)
    as_dict = trace.to_dict()
    assert as_dict["versions"] == {
        "retriever": "policy-retriever-v2",
        "index": "policy-index/2026-05-27",
        "sparse": "bm25-tokenizer-v1",
        "dense": "fixture-embeddings-v1",
        "fusion": "rrf-k60",
    }
    assert as_dict["query_kind"] == "paraphrase"
    assert as_dict["sparse_ids"] == []
    assert as_dict["dense_ids"] == as_dict["fused_ids"] == ["eu-refurb-v2-rule", "eu-footwear-v1-rule"]
    assert set(as_dict["timings_ms"]) == {"authorize", "bm25", "dense", "fusion"}
    assert all(isinstance(v, float) and v >= 0 for v in as_dict["timings_ms"].values())


def test_trace_never_holds_text_or_hidden_ids(data):
    for query in (PARAPHRASE, "RPL-14", "VIP-RPL-1", "damaged refurbished laptop replacement after delivery"):
        trace = labsrc.trace_hybrid_request(query, "adhoc", data.luna, data.chunks, data.vectors, data.eval_date)
        blob = json.dumps(trace.to_dict())
        assert "merchant-vip-refurb" not in blob
        assert "eu-refurb-v1-rule" not in blob
        for chunk in data.chunks:
            assert chunk.text not in blob


def test_to_dict_without_timings_is_replay_stable(data):
    first = labsrc.trace_hybrid_request("RPL-14", "exact", data.luna, data.chunks, data.vectors, data.eval_date)
    second = labsrc.trace_hybrid_request("RPL-14", "exact", data.luna, data.chunks, data.vectors, data.eval_date)
    assert "timings_ms" not in first.to_dict(include_timings=False)
    assert first.to_dict(include_timings=False) == second.to_dict(include_timings=False)


def test_stage_timer_measures_real_time():
    import time

    timer = StageTimer()
    with timer.stage("sleep"):
        time.sleep(0.02)
    assert timer.timings_ms["sleep"] >= 15.0
