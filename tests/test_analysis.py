import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import labsrc
from labsrc.lanes.analysis import LESSON_STOPWORDS, Analyzer


def lesson_reference_tokens(text: str) -> list[str]:
    """The lesson's analyzer written literally from the spec."""
    found = re.findall(r"[a-z0-9]+(?:-[a-z0-9]+)*", text.lower())
    return [t for t in found if t not in LESSON_STOPWORDS]


def test_codes_stay_whole_and_stopwords_go():
    assert labsrc.tokens("Rule RPL-14. A lost parcel after carrier pickup") == [
        "rule", "rpl-14", "lost", "parcel", "carrier", "pickup",
    ]  # fmt: skip


def test_lesson_stopword_set():
    assert LESSON_STOPWORDS == {"a", "an", "the", "after", "for", "of", "is", "within", "when"}
    assert labsrc.tokens("a") == []


def test_empty_and_blank_text():
    assert labsrc.tokens("") == []
    assert labsrc.tokens("   \n\t") == []


def test_non_ascii_letters_survive():
    assert labsrc.tokens("Rückgabe für Café-Geräte") == ["rückgabe", "für", "café-geräte"]
    assert labsrc.tokens("返品 ポリシー") == ["返品", "ポリシー"]


def test_nfkc_and_casefold():
    # Full-width letters and digits fold to ASCII; German ß casefolds to ss.
    assert labsrc.tokens("ＲＰＬ－１４ STRASSE Straße") == ["rpl-14", "strasse", "strasse"]


@settings(max_examples=300)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=80))
def test_on_ascii_text_equals_the_lesson_regex(text):
    assert labsrc.tokens(text) == lesson_reference_tokens(text)


def test_custom_analyzer_pattern_and_stopwords():
    analyzer = Analyzer(pattern=r"\w+", stopwords=frozenset({"the"}), name="words-v1")
    assert analyzer("The RPL-14 rule") == ["rpl", "14", "rule"]


def test_snowball_stemming():
    english = Analyzer(stemmer="english")
    assert english("refurbished laptops qualify") == ["refurbish", "laptop", "qualifi"]


def test_bad_analyzer_arguments():
    with pytest.raises(labsrc.InvalidArgument, match="token pattern"):
        Analyzer(pattern="(")
    with pytest.raises(labsrc.InvalidArgument, match="Snowball language"):
        Analyzer(stemmer="klingon")
    with pytest.raises(labsrc.InvalidArgument, match="normalize"):
        Analyzer(normalize="NFX")


def test_stemming_is_snowballs_pure_python_algorithm_even_beside_pystemmer(monkeypatch) -> None:
    # snowballstemmer.stemmer() returns PyStemmer's C stemmer when PyStemmer is importable (bm25s and
    # llama-index pull it in), and its release stems these words differently ('added' -> 'ad', 'biologists'
    # -> 'biologist', 'emergency' -> 'emerg'): the lab's BM25 would then score differently by what else is
    # installed. The lab always loads the pure-Python algorithm, so the stems below hold either way.
    pytest.importorskip("snowballstemmer")
    from labsrc.lanes.analysis import _load_stemmer

    stem = _load_stemmer("english")
    assert [stem(w) for w in ("added", "biologists", "emergency", "evening")] == ["add", "biolog", "emergenc", "evening"]
    assert type(stem.__self__).__module__ == "snowballstemmer.english_stemmer"
    assert _load_stemmer("dutch_porter")("lichamelijk")  # a two-word language name finds its class
    with pytest.raises(labsrc.InvalidArgument, match="unknown Snowball language 'klingon'"):
        _load_stemmer("klingon")


# Words whose stems differ in length and suffix, so two stemmers interleaving on one shared word buffer
# produce wrong stems or fail inside Snowball (measured before the lock: 7 of 800 SciFact abstracts wrong,
# and IndexErrors raised from the stemmer, 8 threads).
_WORDS = (
    "relational conditional rational valenci hesitanci digitizer conformabli radicalli differentli vileli "
    "analogousli vietnamization predication operator feudalism decisiveness hopefulness callousness "
    "formaliti sensitiviti sensibiliti triplicate formative formalize electriciti electrical hopeful goodness "
    "revival allowance inference airliner gyroscopic adjustable defensible irritant replacement adjustment "
    "dependent adoption homologou communism activate angulariti homologous effective bowdlerize"
).split()


def test_one_analyzer_gives_every_thread_the_stems_one_thread_gets() -> None:
    pytest.importorskip("snowballstemmer")
    import sys
    import threading

    texts = [" ".join(_WORDS[(i * 7 + j) % len(_WORDS)] for j in range(i % 23 + 5)) for i in range(400)]
    expected = [Analyzer(stemmer="english")(t) for t in texts]
    shared = Analyzer(stemmer="english")  # an empty cache: every thread starts by stemming
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    failures: list[object] = []
    start = threading.Barrier(16)

    def run(k: int) -> None:
        start.wait(timeout=30)
        for i in range(k, len(texts), 3):
            try:
                if shared(texts[i]) != expected[i]:
                    failures.append(i)
            except Exception as exc:  # noqa: BLE001 - a corrupted stemmer raises; count it
                failures.append(exc)

    try:
        threads = [threading.Thread(target=run, args=(k,)) for k in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        sys.setswitchinterval(previous)
    assert not any(t.is_alive() for t in threads)
    assert failures == []


def test_stems_are_remembered_up_to_the_cache_size_and_pickle_empty(monkeypatch) -> None:
    pytest.importorskip("snowballstemmer")
    import pickle

    from labsrc.lanes import analysis

    english = Analyzer(stemmer="english")
    assert english("laptops laptops qualify") == ["laptop", "laptop", "qualifi"]
    assert dict(english._stems) == {"laptops": "laptop", "qualify": "qualifi"}  # each token stemmed once
    copy = pickle.loads(pickle.dumps(english))
    assert copy == english and len(copy._stems) == 0 and copy("qualify laptops") == ["qualifi", "laptop"]
    monkeypatch.setattr(analysis, "STEM_CACHE_SIZE", 2)
    assert english("refurbished laptops") == ["refurbish", "laptop"]  # full: stemmed, not stored
    assert len(english._stems) == 2 and "refurbished" not in english._stems


def test_words_are_the_tokens_before_stopwords_and_stems_and_the_terms_are_them_filtered():
    analyzer = Analyzer(stemmer=None)
    assert analyzer.words("The RPL‑14 rule, for Refunds") == ["the", "rpl-14", "rule", "for", "refunds"]
    assert analyzer("The RPL‑14 rule, for Refunds") == ["rpl-14", "rule", "refunds"]
