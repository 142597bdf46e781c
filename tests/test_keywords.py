import subprocess
import sys

import pytest

import labsrc
from labsrc.datasets import fixtures_dir
from labsrc.lanes import BM25Index
from labsrc.patterns import (
    MAX_KEYWORDS,
    enrich_content,
    enrich_with_keywords,
    extract_keywords,
)

yake = pytest.importorskip("yake", reason="keyword extraction needs the keywords extra: pip install 'hybrid-retrieval-lab[keywords]'")

POLICIES = {c.chunk_id: c.text for c in labsrc.load_chunks(fixtures_dir() / "policies" / "chunks.jsonl")}
# "Rule RPL-14. Damaged refurbished laptops qualify for replacement within 14 days of delivery when
# damage is reported within 48 hours."
REFURB = POLICIES["eu-refurb-v2-rule"]
REFURB_KEYWORDS = ["rule", "hours", "damaged refurbished", "laptops qualify", "refurbished laptops", "damaged", "days"]


def yake_scores(text: str) -> dict[str, float]:
    """Every candidate's YAKE score, straight from the library (lower is better)."""
    extractor = yake.KeywordExtractor(lan="en", n=2, dedup_lim=1.0, top=1000)
    return {keyword: float(score) for keyword, score in extractor.extract_keywords(text)}


def test_a_policy_chunk_gives_the_same_seven_keywords_best_first():
    assert extract_keywords(REFURB) == REFURB_KEYWORDS
    assert extract_keywords(REFURB) == extract_keywords(REFURB)
    scores = yake_scores(REFURB)
    ranked = [scores[k] for k in REFURB_KEYWORDS]
    assert ranked == sorted(ranked)
    # "rule" is first: YAKE rewards a capitalised word at the start of the text.
    assert scores["rule"] < scores["hours"] < scores["damaged refurbished"]


def test_equal_scores_break_by_keyword_text_not_by_position():
    scores = yake_scores(REFURB)
    # Two ties in the real chunk: the same features give the same score, bit for bit.
    assert scores["laptops qualify"] == scores["refurbished laptops"]
    assert scores["damaged"] == scores["days"]
    # YAKE itself keeps the tie in text order ("refurbished laptops" comes first) and cuts inside it.
    own = [k.lower() for k, _ in yake.KeywordExtractor(lan="en", n=2, top=4).extract_keywords(REFURB)]
    assert own == ["rule", "hours", "damaged refurbished", "refurbished laptops"]
    assert extract_keywords(REFURB, top=4) == ["rule", "hours", "damaged refurbished", "laptops qualify"]


def test_ties_break_by_text_and_case_variants_merge(monkeypatch):
    scored = [("zeta", 0.1), ("Alpha", 0.1), ("Beta", 0.05), ("beta ", 0.05), ("alpha", 0.2)]
    monkeypatch.setattr(yake.KeywordExtractor, "extract_keywords", lambda self, text: scored)
    # (0.05, "beta") twice -> once; (0.1, "alpha") < (0.1, "zeta"); the later "alpha" at 0.2 is a duplicate.
    assert extract_keywords("any text") == ["beta", "alpha", "zeta"]


def test_top_is_an_upper_bound():
    for top in (1, 3, MAX_KEYWORDS):
        assert extract_keywords(REFURB, top=top) == REFURB_KEYWORDS[:top]
    everything = extract_keywords(REFURB, top=100)
    assert len(everything) == len(yake_scores(REFURB)) == 14
    assert extract_keywords("", top=3) == [] and extract_keywords(" \n\n ") == []


def test_max_ngram_bounds_the_words_per_keyword():
    assert all(" " not in k for k in extract_keywords(REFURB, max_ngram=1, top=100))
    assert max(len(k.split()) for k in extract_keywords(REFURB, max_ngram=3, top=100)) == 3


def test_near_duplicates_of_a_better_keyword_are_dropped():
    digital = POLICIES["eu-digital-goods"]  # "... once the download has started."
    extractor = yake.KeywordExtractor()
    assert extractor.seqm("downloaded", "download") == pytest.approx(0.786, abs=1e-3)
    kept = extract_keywords(digital, top=100)  # default limit 0.9: both stay
    assert {"downloaded", "download"} <= set(kept)
    assert kept.index("downloaded") < kept.index("download")
    stricter = extract_keywords(digital, top=100, dedup_limit=0.75)
    assert "downloaded" in stricter and "download" not in stricter
    assert stricter == [k for k in kept if k != "download"]


def test_a_markdown_heading_ends_a_sentence():
    chunk = (
        "## Damaged on arrival\n\nRule RPL-14: damaged refurbished laptops qualify for a replacement within 14 days "
        "of delivery, provided the damage is reported within 48 hours of delivery."
    )
    # YAKE alone joins the heading to the sentence under it.
    assert "arrival rule" in yake_scores(chunk)
    keywords = extract_keywords(chunk, top=100)
    assert "arrival rule" not in keywords and "arrival" in keywords


def test_enrichment_is_enrich_content_with_the_extracted_keywords():
    assert enrich_with_keywords(REFURB) == enrich_content(REFURB, REFURB_KEYWORDS)
    assert enrich_with_keywords(REFURB).startswith(
        "rule, hours, damaged refurbished, laptops qualify, refurbished laptops, damaged, days\n\nRule RPL-14."
    )
    entities = {"code": ["RPL-14"]}
    assert enrich_with_keywords(REFURB, entities, top=2) == f"rule, hours | RPL-14\n\n{REFURB}"
    assert enrich_with_keywords("") == ""


def test_enriched_keywords_lift_the_chunk_they_describe_in_bm25():
    neighbour, carrier = "eu-neighbour-delivery", "us-carrier-loss"
    # Both say "delivered" once; only for the neighbour rule is it a keyword.
    assert "delivered" in extract_keywords(POLICIES[neighbour])
    assert "delivered" not in extract_keywords(POLICIES[carrier])
    plain = BM25Index.build(POLICIES.items())
    enriched = BM25Index.build((cid, enrich_with_keywords(text)) for cid, text in POLICIES.items())
    assert [cid for cid, _ in plain.search("delivered", 2)] == [carrier, neighbour]
    assert [cid for cid, _ in enriched.search("delivered", 2)] == [neighbour, carrier]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"top": 0}, "top must be a positive integer, not 0"),
        ({"top": True}, "top must be a positive integer, not True"),
        ({"top": 2.5}, "top must be a positive integer, not 2.5"),
        ({"max_ngram": 0}, "max_ngram must be a positive integer, not 0"),
        ({"dedup_limit": 0}, r"dedup_limit must be a number in \(0, 1\], not 0"),
        ({"dedup_limit": 1.5}, r"dedup_limit must be a number in \(0, 1\], not 1.5"),
        ({"language": "english"}, r"language must be one of .*'en'.*, not 'english'"),
        ({"language": None}, "language must be a two-letter code such as 'en', not None"),
    ],
)
def test_bad_arguments_are_refused_with_the_value_named(kwargs, named):
    with pytest.raises(labsrc.InvalidArgument, match=named):
        extract_keywords(REFURB, **kwargs)


def test_bad_text_and_enrichment_top_are_refused():
    with pytest.raises(labsrc.InvalidArgument, match="text must be a string, not bytes"):
        extract_keywords(b"refund")
    with pytest.raises(labsrc.InvalidArgument, match="top must be at most 7 .*not 8"):
        enrich_with_keywords(REFURB, top=8)
    with pytest.raises(labsrc.InvalidArgument, match="content must be a string, not NoneType"):
        enrich_with_keywords(None)


def test_without_yake_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "yake", None)
    with pytest.raises(labsrc.MissingDependency, match=r"pip install 'hybrid-retrieval-lab\[keywords\]'"):
        extract_keywords(REFURB)
    with pytest.raises(ImportError):  # MissingDependency is an ImportError, for generic callers
        enrich_with_keywords(REFURB)


def test_importing_labsrc_does_not_import_yake():
    code = "import sys; sys.modules['yake'] = None; import labsrc, labsrc.patterns.keywords; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
