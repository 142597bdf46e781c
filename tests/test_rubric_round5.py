"""Coursework round 5 (issue 48, part 3): near-copies of the course's cases are the course's.

A case that asks what a course case asks with a small edit (the same ids; one or two analysed terms changed, or a
code switched to a sibling code; round 5 also asked for the same caller and kind, which round 6 drops) is
recognised, named and counted toward the share that caps the level (:mod:`labsrc.course.provenance`). Measured
here on the model answer reworded at one, two and three words per query, and on five honest submissions written
for this test.

Each submission is built the way a learner builds one: cases.jsonl, a vectors/ folder written by
:func:`labsrc.lanes.embed.embed_to_dir`, and report/ from ``labsrc gate --out``. The ``embed`` extra is not needed:
a stand-in encoder returns the course's stored MiniLM rows for the chunks, a reworded query's original row moved a
little (a one-word swap moves a MiniLM vector a little), and for an honest query the row of the chunk it is about
moved further (what a good encoder does with a well-written paraphrase). So the vectors and the report are never
the course's files, and only the cases can give a copy away.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from labsrc.cli.main import main
from labsrc.course import NEAR_CHANGED, NEAR_EDITS, code_shape, grade, near_copy, term_edits
from labsrc.lanes.analysis import tokens
from labsrc.lanes.embed import document_text, embed_to_dir
from labsrc.records.loading import load_chunks

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "fixtures" / "coursework" / "solution"
POLICIES = ROOT / "fixtures" / "policies"
MINILM = SOLUTION / "vectors" / "all-MiniLM-L6-v2"
OWN_WORK = "the work is the learner's own, not the course's files"

#: One word for another, as a learner disguising the model answer would swap them (the issue's "broken" → "cracked").
SWAPS = {
    "swap": "exchange", "broken": "cracked", "reconditioned": "renewed", "notebook": "laptop",
    "courier": "driver", "misplaced": "mislaid", "package": "shipment", "money": "cash", "get": "have",
    "sending": "posting", "sneakers": "trainers", "never": "barely", "wore": "used",
    "rival": "competing", "store": "shop", "sells": "offers", "cheaper": "less", "difference": "gap",
    "replacement": "exchange", "window": "period", "cracked": "broken", "refurbished": "renewed",
    "laptop": "notebook", "box": "carton", "arrived": "came", "crushed": "dented", "photos": "pictures",
    "need": "want", "customer": "client", "opened": "filed", "chargeback": "dispute", "damaged": "faulty",
    "laptops": "notebooks", "qualify": "count", "return": "refund", "days": "weeks", "unopened": "sealed",
    "items": "goods", "returned": "sent", "may": "can", "gift": "present", "card": "voucher", "expire": "lapse",
    "does": "will",
}  # fmt: skip
#: A positive code-only case switched to a sibling code expects the sibling's rule, as a learner keeping it passing would.
SIBLING_RULES = {"RPL-15": "eu-refurb-tablet-rule", "CLM-8": "eu-neighbour-delivery", "RTN-31": "us-restocking-fee"}
#: Words appended when a query has fewer swappable words and codes than the depth asks for.
FILLERS = ("please", "today", "urgently")
_TERM = re.compile(r"[^\W_]+(?:-[^\W_]+)*")


def sibling(code: str) -> str:
    """The same code with its last number one higher: RPL-14 → RPL-15, RPL-14-US → RPL-15-US, VIP-RPL-1 → VIP-RPL-2."""
    last = list(re.finditer(r"[0-9]+", code))[-1]
    return code[: last.start()] + str(int(last.group()) + 1) + code[last.end():]


def reword(query: str, depth: int) -> str:
    """``query`` with ``depth`` words changed: swaps first (in query order), then a sibling code, then fillers."""
    out, changed = query, 0
    for match in _TERM.finditer(query):
        word = match.group()
        if changed < depth and word.lower() in SWAPS:
            out = re.sub(rf"\b{re.escape(word)}\b", SWAPS[word.lower()], out, count=1)
            changed += 1
    for match in _TERM.finditer(query):
        if changed < depth and code_shape(match.group().lower()) is not None:
            out = out.replace(match.group(), sibling(match.group()), 1)
            changed += 1
    return " ".join([out, *FILLERS[: depth - changed]])


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _code_only(query: str) -> bool:
    return [code_shape(t) is not None for t in tokens(query)] == [True]


def reworded_model_answer(depth: int) -> list[dict]:
    """The model answer, every query ``depth`` words changed; an exact-code positive becomes its sibling's case."""
    out = []
    for case in _lines(SOLUTION / "cases.jsonl"):
        if case["kind"] == "positive" and _code_only(case["query"]):
            code = sibling(case["query"])  # still an exact-code case, so it switches code and rule, at any depth
            out.append({**case, "query": code, "expected": [SIBLING_RULES[code]]})
        else:
            out.append({**case, "query": reword(case["query"], depth)})
    return out


# Five honest submissions: other questions on the lesson's corpus, as learners would write them. ``about`` is the
# chunk the stand-in encoder puts the query near: the one it asks about, none for a bare code (MiniLM reads no code).
def _case(name: str, query: str, caller: str, kind: str, ids: list[str]) -> tuple[dict, str | None]:
    key = "expected" if kind == "positive" else "forbidden"
    about = None if _code_only(query) or not ids else ids[0]
    return {"name": name, "query": query, "caller": caller, "kind": kind, **({key: ids} if ids else {})}, about


HONEST = {
    "eu-agent": [
        _case("wdr-code", "WDR-14", "luna-48291", "positive", ["eu-withdrawal-right"]),
        _case("haz-code", "HAZ-2", "luna-48291", "positive", ["eu-battery-safety"]),
        _case("shp-code", "SHP-3", "luna-48291", "positive", ["eu-return-label-v2"]),
        _case("vip-fee-code", "VIP-FEE-1", "marco-eu-vip-07", "positive", ["merchant-vip-fees"]),
        _case("back-out", "shopper changed their mind about a web purchase", "luna-48291", "positive",
              ["eu-withdrawal-right"]),
        _case("money-when", "how long until the buyer sees the cash again", "luna-48291", "positive",
              ["eu-refund-timing"]),
        _case("rfd-mixed", "RFD-5 refund paid to the original card", "luna-48291", "positive", ["eu-refund-timing"]),
        _case("loy-mixed", "LOY-2 points removed after a refund", "luna-48291", "positive", ["eu-loyalty-points"]),
        _case("dig-mixed", "DIG-1 activated licence key", "luna-48291", "positive", ["eu-digital-goods"]),
        _case("vip-fees", "VIP-FEE-1", "luna-48291", "restricted", ["merchant-vip-fees"]),
        _case("old-label", "prepaid return label is free for every order", "luna-48291", "superseded",
              ["eu-return-label-v1"]),
        _case("us-shoes", "RTN-12 shoes", "luna-48291", "wrong_region", ["us-footwear"]),
        _case("instalments", "can I pay in instalments", "luna-48291", "absent", []),
    ],
    "us-agent": [
        _case("restock", "RTN-31", "dana-us-17", "positive", ["us-restocking-fee"]),
        _case("final", "RTN-33", "dana-us-17", "positive", ["us-final-sale"]),
        _case("prm", "PRM-4", "dana-us-17", "positive", ["us-price-match-v2"]),
        _case("neighbour", "CLM-8", "luna-48291", "positive", ["eu-neighbour-delivery"]),
        _case("fridge", "fridge brought indoors and the previous one taken off", "dana-us-17", "positive",
              ["us-appliance-delivery"]),
        _case("porch", "app shows it came yet my porch is empty", "dana-us-17", "positive", ["us-carrier-loss"]),
        _case("shoes-mixed", "RTN-12 shoes worn outdoors", "dana-us-17", "positive", ["us-footwear"]),
        _case("openbox-mixed", "RTN-32 open-box return after two weeks", "dana-us-17", "positive", ["us-open-box"]),
        _case("recall", "LGL-11 recall refund", "dana-us-17", "restricted", ["legal-us-recall"]),
        _case("any-shop", "price match against every shop, not only listed competitors", "dana-us-17", "superseded",
              ["us-price-match-v1"]),
        _case("apac-gift", "GFT-5 gift card", "dana-us-17", "wrong_region", ["apac-gift-card-v2"]),
        _case("warranty-sale", "do you sell extended warranties", "dana-us-17", "absent", []),
    ],
    "apac-agent": [
        _case("cod", "COD-4", "kenji-apac-03", "positive", ["apac-cod-refund"]),
        _case("lost", "CLM-12", "kenji-apac-03", "positive", ["apac-carrier-loss"]),
        _case("duties", "TAX-9", "kenji-apac-03", "positive", ["apac-import-duties"]),
        _case("fraud-code", "LGL-8", "priya-eu-legal-12", "positive", ["legal-fraud-hold"]),
        _case("cash-door", "I handed the driver notes at my door, how do I get it back", "kenji-apac-03", "positive",
              ["apac-cod-refund"]),
        _case("sale-mind", "bought something in the spring festival discount and regret it", "kenji-apac-03",
              "positive", ["apac-festival-returns"]),
        _case("war-mixed", "WAR-2 brand service centre", "kenji-apac-03", "positive", ["apac-warranty-v2"]),
        _case("refurb-mixed", "RPL-22 laptop arrived damaged", "kenji-apac-03", "positive", ["apac-refurb-rule"]),
        _case("vip-gift", "VIP-GFT-2", "kenji-apac-03", "restricted", ["merchant-vip-apac-gift"]),
        _case("workshop", "warranty repairs done in your own workshop", "kenji-apac-03", "superseded",
              ["apac-warranty-v1"]),
        _case("eu-code", "RPL-14", "kenji-apac-03", "wrong_region", ["eu-refurb-v2-rule", "eu-refurb-v1-rule"]),
        _case("pets", "can I return a pet", "kenji-apac-03", "absent", []),
    ],
    "legal-and-vip": [
        _case("fraud", "LGL-8", "priya-eu-legal-12", "positive", ["legal-fraud-hold"]),
        _case("chargeback", "LGL-3", "priya-eu-legal-12", "positive", ["legal-chargeback-v2"]),
        _case("vip-lost", "VIP-CLM-2", "marco-eu-vip-07", "positive", ["merchant-vip-carrier"]),
        _case("vip-fees", "VIP-FEE-1", "marco-eu-vip-07", "positive", ["merchant-vip-fees"]),
        _case("postage", "does a premium seller's shopper pay postage when sending stuff back", "marco-eu-vip-07",
              "positive", ["merchant-vip-fees"]),
        _case("stuck", "purchase frozen because the risk system marked it suspicious", "priya-eu-legal-12",
              "positive", ["legal-fraud-hold"]),
        _case("vip-refurb", "VIP-RPL-1 refund for a damaged refurbished laptop", "marco-eu-vip-07", "positive",
              ["merchant-vip-refurb"]),
        _case("pause", "LGL-3 pause the open refund", "priya-eu-legal-12", "positive", ["legal-chargeback-v2"]),
        _case("fraud-agent", "LGL-8 fraud hold", "luna-48291", "restricted", ["legal-fraud-hold"]),
        _case("old-chargeback", "refund the order at once when a chargeback opens", "priya-eu-legal-12",
              "superseded", ["legal-chargeback-v1"]),
        _case("us-lost", "CLM-7-US", "marco-eu-vip-07", "wrong_region", ["us-carrier-loss"]),
        _case("staff", "staff discount on returns", "priya-eu-legal-12", "absent", []),
    ],
    "first-try": [  # a learner part of the way: six positives, two adversarial cases
        _case("phone", "RPL-16", "luna-48291", "positive", ["eu-refurb-phone-rule"]),
        _case("grades", "RFB-1", "luna-48291", "positive", ["eu-refurb-grading"]),
        _case("bags", "ACC-2", "luna-48291", "positive", ["eu-laptop-accessories"]),
        _case("pixels", "dots that never light up on my renewed screen", "luna-48291", "positive",
              ["eu-refurb-monitor-rule"]),
        _case("tax-back", "do I get the levy back when I send something back", "dana-us-17", "positive",
              ["us-sales-tax"]),
        _case("guarantee", "WAR-24 two year guarantee on a new device", "luna-48291", "positive",
              ["eu-legal-guarantee"]),
        _case("vip-carrier", "VIP-CLM-2", "luna-48291", "restricted", ["merchant-vip-carrier"]),
        _case("us-shoes", "RTN-12", "luna-48291", "wrong_region", ["us-footwear"]),
    ],
}

#: Measured with this module's submissions (grade(..., measure=False), so Strong is the highest level).
REWORDED_LEVELS = {1: ("Strong", "Foundational"), 2: ("Strong", "Foundational"), 3: ("Strong", "Strong")}  # old, new
HONEST_LEVELS = {"eu-agent": "Strong", "us-agent": "Strong", "apac-agent": "Strong", "legal-and-vip": "Strong",
                 "first-try": "Applied"}


class StandIn:
    """An encoder that answers from known rows: the course's MiniLM rows for the chunks, the given rows for queries."""

    def __init__(self, rows: dict[str, np.ndarray]) -> None:
        self.rows = rows

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.rows[text] for text in texts])


def _course_rows() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The course's MiniLM rows: chunk id → row, and model-answer query text → row."""
    corpus = dict(zip(_ids(MINILM / "corpus_ids.txt"), np.load(MINILM / "corpus.npy")))
    texts = {r["_id"]: r["text"] for r in _lines(MINILM / "queries.jsonl")}
    queries = {texts[name]: row for name, row in zip(_ids(MINILM / "query_ids.txt"), np.load(MINILM / "queries.npy"))}
    return corpus, queries


def _ids(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split()


def _moved(row: np.ndarray, text: str, by: float) -> np.ndarray:
    """``row`` plus a random direction of length ``by`` (seeded by ``text``): cosine about 1/sqrt(1 + by²) with ``row``."""
    rng = np.random.default_rng(int(hashlib.sha256(text.encode()).hexdigest()[:8], 16))
    step = rng.normal(size=row.shape)
    return row + by * step / np.linalg.norm(step)


def _build(root: Path, name: str, cases: list[dict], query_rows: dict[str, np.ndarray]) -> Path:
    """A learner's submission folder: cases.jsonl, vectors/ (embedded by the stand-in), report/ from `labsrc gate`."""
    sub = root / name
    sub.mkdir()
    (sub / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    for artifact in ("step5_traces.jsonl", "step6_candidates.jsonl"):  # exercises 5 and 6: the course's cases
        shutil.copy(SOLUTION / artifact, sub / artifact)
    chunks = load_chunks(POLICIES / "chunks.jsonl")
    corpus, _ = _course_rows()
    rows = {document_text(c): corpus[c.chunk_id] for c in chunks} | query_rows
    model = json.loads((MINILM / "MODEL.json").read_text(encoding="utf-8"))
    record = {key: model[key] for key in ("model", "packaged_by", "sentence_transformers", "transformers", "torch",
                                          "max_seq_length")}
    vectors = sub / "vectors" / "all-MiniLM-L6-v2"
    embed_to_dir(chunks, {c["name"]: c["query"] for c in cases}, vectors, StandIn(rows), record)
    code = main(["gate", "--chunks", str(POLICIES / "chunks.jsonl"), "--callers", str(POLICIES / "callers.json"),
                 "--cases", str(sub / "cases.jsonl"), "--vectors", str(vectors), "--config", str(POLICIES / "gate.json"),
                 "--out", str(sub / "report"), "--no-progress",
                 # grade(..., measure=False) below stops at Strong and reads no latency: one timed repetition
                 # (not the config's 20) keeps the report's latency section and costs a twentieth. The rubric
                 # reads no generated probe and no concurrency probe of report.json either: without them a
                 # report costs half (3.3 s to 2.7 s against 6.4 s alone).
                 "--repetitions", "1", "--probe-budget", "0", "--concurrency", "0"])
    assert code in (0, 1)  # 1: a gate failed, which the rubric then reports
    return sub


def query_rows(name: str) -> tuple[list[dict], dict[str, np.ndarray]]:
    """Submission ``name``'s cases and the stand-in's query rows: a reworded query gets its original's MiniLM row
    moved by 0.15 (cosine 0.99), an honest one the row of the chunk it asks about moved by 0.5 (cosine 0.89), a bare
    code the mean chunk row moved by 0.5 (a code means nothing to MiniLM)."""
    corpus, originals = _course_rows()
    mean = np.mean(list(corpus.values()), axis=0)
    if name.startswith("reworded-"):
        cases = reworded_model_answer(int(name.rsplit("-", 1)[1]))
        rows = {c["query"]: _moved(mean, c["query"], 0.5) if c.get("expected") != o.get("expected")
                else _moved(originals[o["query"]], c["query"], 0.15)
                for c, o in zip(cases, _lines(SOLUTION / "cases.jsonl"))}
        return cases, rows
    cases = [case for case, _ in HONEST[name]]
    return cases, {c["query"]: _moved(corpus[about] if about else mean, c["query"], 0.5) for c, about in HONEST[name]}


SUBMISSIONS = ("reworded-1", "reworded-2", "reworded-3", *HONEST)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """name → grade, for the reworded model answers and the honest submissions."""
    root = tmp_path_factory.mktemp("round5")
    return {name: grade(_build(root, name, *query_rows(name)), measure=False) for name in SUBMISSIONS}


def _evidence(result, level: str) -> dict[str, tuple[bool, str]]:
    verdict = next(v for v in result.levels if v.level == level)
    return {e.criterion: (e.met, e.detail) for e in verdict.evidence}


def _course_line(result) -> str | None:
    return next((line for line in result.inputs if line.startswith("course files: cases.jsonl")), None)


# --- the rule ----------------------------------------------------------------------------------------------


def test_the_rule_counts_edits_over_analysed_terms_and_lets_a_sibling_code_keep_its_place():
    assert (NEAR_EDITS, NEAR_CHANGED) == (2, 0.5)
    assert code_shape("rpl-14") == code_shape("rpl-15") == "rpl-#"
    assert code_shape("rpl-14-us") == "rpl-#-us" != code_shape("rpl-14")
    assert code_shape("laptop") is None and code_shape("45") is None
    assert term_edits(["a", "b", "c"], ["a", "x", "c"]) == 1
    assert term_edits(["a", "b"], ["b", "a", "c"]) == 2
    assert term_edits([], ["a", "b"]) == 2 and term_edits(["a"], []) == 1
    # One swapped word, one sibling code, a code and a word: near-copies, with their edit counts.
    assert near_copy(tokens("swap a cracked reconditioned notebook"), tokens("swap a broken reconditioned notebook")) == 1
    assert near_copy(tokens("RPL-15"), tokens("RPL-14")) == 1
    assert near_copy(tokens("LGL-4 dispute"), tokens("LGL-3 chargeback")) == 2
    assert near_copy(tokens("LGL-3 dispute"), tokens("LGL-3 chargeback")) == 1
    assert near_copy(tokens("Swap the broken reconditioned notebook!"), tokens("swap a broken reconditioned notebook")) == 0
    # Not near: another code, half a two-word query and a new word, three edits, an unrelated question.
    assert near_copy(tokens("CLM-7"), tokens("RPL-14")) is None
    assert near_copy(tokens("chargeback rules"), tokens("LGL-3 chargeback")) is None
    assert near_copy(tokens("swap a cracked renewed laptop"), tokens("swap a broken reconditioned notebook")) is None
    assert near_copy(tokens("refund"), tokens("RPL-14")) is None


def test_the_generator_changes_exactly_depth_terms():
    original = _lines(SOLUTION / "cases.jsonl")
    assert reword("RPL-14", 1) == "RPL-15" and reword("RPL-14-US", 2) == "RPL-15-US please"
    assert reword("swap a broken reconditioned notebook", 1) == "exchange a broken reconditioned notebook"
    for depth in (1, 2, 3):
        for case, new in zip(original, reworded_model_answer(depth)):
            switched = new.get("expected") != case.get("expected")  # an exact-code positive: its sibling's case
            assert switched == (case["kind"] == "positive" and _code_only(case["query"]))
            edits = term_edits(tokens(new["query"]), tokens(case["query"]))
            assert edits == (1 if switched else depth), (case["query"], new["query"])


def test_a_near_copy_needs_the_same_ids_and_since_round_6_any_caller(tmp_path):
    case = _lines(SOLUTION / "cases.jsonl")[3]  # eu-paraphrase-rpl14
    one_word = {**case, "query": "swap a cracked reconditioned notebook"}
    variants = {"same": one_word, "caller": {**one_word, "caller": "marco-eu-vip-07"},
                "ids": {**one_word, "expected": ["eu-refurb-tablet-rule"]}}
    found = {}
    for name, record in variants.items():
        sub = tmp_path / name
        sub.mkdir()
        (sub / "cases.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
        found[name] = _course_line(grade(sub, measure=False))
    assert found["same"] == ("course files: cases.jsonl: all 1 cases are the course's own (the model answer, "
                             "fixtures/coursework/solution/cases.jsonl), all of them with a word or two or a code "
                             "changed: 'eu-paraphrase-rpl14' is course case 'eu-paraphrase-rpl14' (1 edit: 'cracked' "
                             "for 'broken')")
    # Round 6 (tests/test_rubric_round6_copies.py): another caller asks the course's question all the same.
    assert found["caller"] == found["same"]
    assert found["ids"] is None


# --- measured: the model answer reworded ---------------------------------------------------------------------


@pytest.mark.parametrize("depth", [1, 2])
def test_the_model_answer_reworded_by_one_or_two_words_per_query_is_the_course_s_and_below_applied(graded, depth):
    result = graded[f"reworded-{depth}"]
    line = _course_line(result)
    assert line is not None and line.startswith(
        "course files: cases.jsonl: 13 of 16 cases are the course's own (the model answer, "
        "fixtures/coursework/solution/cases.jsonl), all of them with a word or two or a code changed: '")
    # The other three are exact-code cases switched to a sibling code *and its rule*: other ids, so not counted.
    assert not any(line.startswith(("course files: vectors/", "course files: report/")) for line in result.inputs)
    met, detail = _evidence(result, "Applied")[OWN_WORK]
    assert not met and "this submission is the course's model answer, not your work, so it cannot reach Applied" in detail
    assert result.level == REWORDED_LEVELS[depth][1] == "Foundational"
    assert not result.reaches("Applied")
    # Everything else about it is sound: the own-work criterion is the only one that keeps it below Applied.
    failing = [(v.level, e.criterion) for v in result.levels[:3] for e in v.evidence if e.applicable and not e.met]
    assert failing == [("Applied", OWN_WORK)]


def test_three_words_per_query_is_where_the_rule_stops(graded):
    result = graded["reworded-3"]
    assert _course_line(result) is None
    assert _evidence(result, "Applied")[OWN_WORK] == (True, "no case, vector file or report of the course's own was recognised")
    assert result.level == REWORDED_LEVELS[3][1]


# --- measured: honest submissions keep their levels -------------------------------------------------------------


#: Round 6: the APAC agent asks the course's "RPL-14" wrong_region question as kenji-apac-03, the course as visitor-9000.
HONEST_RECOGNISED = {"apac-agent": ("cases.jsonl: 1 of 12 cases are the course's own (the course's reference cases, "
                                    "fixtures/policies/cases.jsonl): 'eu-code' is course case 'wrong-region-no-access' "
                                    "(the same question)")}


@pytest.mark.parametrize("name", list(HONEST))
def test_honest_submissions_are_not_recognised_and_keep_their_levels(graded, name):
    result = graded[name]
    recognised = HONEST_RECOGNISED.get(name)
    assert _course_line(result) == (f"course files: {recognised}" if recognised else None), _course_line(result)
    assert _evidence(result, "Applied")[OWN_WORK] == (
        (True, f"{recognised}: a small part, the rest is your own") if recognised
        else (True, "no case, vector file or report of the course's own was recognised"))
    assert result.level == HONEST_LEVELS[name], result.to_text()


def test_the_docs_state_the_rule_and_the_table():
    docs = (ROOT / "docs" / "coursework.md").read_text(encoding="utf-8")
    for text in ("near-copy", "at most 2 edits", "half", "sibling code", "model answer, 1 word per query",
                 "five honest submissions"):
        assert text in docs, text
