import pytest

import labsrc
from labsrc.patterns.enrich import enrich_content


def test_spec_example():
    enriched = enrich_content(
        "Test content here",
        ["key1", "key2", "key3"],
        {"library": ["React", "Vue"], "framework": ["Next.js"]},
    )
    assert enriched == "key1, key2, key3 | React, Vue, Next.js\n\nTest content here"


def test_nothing_to_add_returns_content_unchanged():
    assert enrich_content("Test content here", [], {}) == "Test content here"
    assert enrich_content("Test content here") == "Test content here"
    assert enrich_content("x", ["  "], {"t": [""]}) == "x"


def test_limits_seven_keywords_two_per_type_five_in_all():
    keywords = [f"k{i}" for i in range(10)]
    entities = {"a": ["A1", "A2", "A3"], "b": ["B1", "B2", "B3"], "c": ["C1", "C2"], "d": ["D1"]}
    header = enrich_content("body", keywords, entities).split("\n\n")[0]
    assert header == "k0, k1, k2, k3, k4, k5, k6 | A1, A2, B1, B2, C1"


def test_only_one_part():
    assert enrich_content("body", ["refund"], None) == "refund\n\nbody"
    assert enrich_content("body", None, {"code": ["RPL-14"]}) == "RPL-14\n\nbody"


def test_inputs_not_mutated_and_bad_types_refused():
    keywords = ["a", "b"]
    entities = {"t": ["X"]}
    enrich_content("c", keywords, entities)
    assert keywords == ["a", "b"] and entities == {"t": ["X"]}
    with pytest.raises(labsrc.InvalidArgument, match="keywords"):
        enrich_content("c", "refund, laptop")
    with pytest.raises(labsrc.InvalidArgument, match="entities"):
        enrich_content("c", [], ["React"])
