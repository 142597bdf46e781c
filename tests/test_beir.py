from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import pytest
from beir_fixture import DOCS, QUERIES, write_tiny_beir

from labsrc.boundary import permitted_chunks
from labsrc.datasets import (
    ENV_VAR,
    UNIVERSE_CALLER,
    as_chunks,
    beir_search_dirs,
    find_dataset_dir,
    load_beir,
    load_corpus,
    load_qrels,
    load_queries,
    missing_data_reason,
    resolve_dataset_dir,
    user_beir_dir,
)
from labsrc.errors import InvalidArgument, InvalidRecord, LabError
from labsrc.evaluation import BeirLanes, convex_run, rrf_run
from labsrc.evaluation.benchmark import (
    ALPHA_GRID,
    DEFAULT_ALPHA,
    load_lanes,
    run_benchmark,
    tune_alpha,
    write_trec_run,
)
from labsrc.lanes.analysis import english_analyzer
from labsrc.lanes.bm25 import brute_force_bm25


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_tiny_beir(tmp_path)


@pytest.fixture
def lanes(tiny: Path) -> BeirLanes:
    return load_lanes(tiny)


# --- loading --------------------------------------------------------------------------


def test_load_beir_reads_every_file(tiny: Path):
    dataset = load_beir(tiny)
    assert dataset.name == "tiny"
    assert list(dataset.corpus) == [doc_id for doc_id, _, _ in DOCS]  # file order
    assert dataset.corpus["d1"].indexed_text == "Vitamin D Vitamin D deficiency raises fracture risk in older adults."
    assert dataset.corpus["q4"].indexed_text == "Smoking slows bone healing."  # empty title, no leading space
    assert dict(dataset.queries) == QUERIES
    assert dataset.splits == ("test", "train")
    assert dict(dataset.split_qrels("test")["q3"]) == {"d3": 1}
    assert list(dataset.split_queries("train")) == ["q1", "q2"]
    assert dataset.missing_docs == ()


def test_load_beir_keeps_judgements_of_absent_documents(tiny: Path):
    with (tiny / "qrels" / "test.tsv").open("a", encoding="utf-8") as handle:
        handle.write("q3\tgone\t1\n")
    dataset = load_beir(tiny)
    assert dataset.missing_docs == (("test", "q3", "gone"),)
    assert dict(dataset.split_qrels("test")["q3"]) == {"d3": 1, "gone": 1}


def test_unknown_split_lists_the_available_ones(tiny: Path):
    with pytest.raises(InvalidArgument, match=r"\['test', 'train'\]"):
        load_beir(tiny, splits=["dev"])
    with pytest.raises(InvalidArgument, match="no qrels split 'dev'"):
        load_beir(tiny).split_qrels("dev")


def _jsonl(path: Path, *records: object) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("records", "line", "field", "message"),
    [
        ([{"title": "t", "text": "x"}], 1, "_id", "missing required field"),
        ([{"_id": "a", "title": "t", "text": "x"}, {"_id": "a", "title": "t", "text": "y"}], 2, "_id", "first seen on line 1"),
        ([{"_id": "a", "title": "t", "text": 3}], 1, "text", "must be a string"),
        ([{"_id": "a", "title": "t"}], 1, "text", "missing required field"),
        ([{"_id": " ", "title": "t", "text": "x"}], 1, "_id", "blank"),
        ([{"_id": "a", "text": "x", "metadata": []}], 1, "metadata", "JSON object"),
    ],
)
def test_corpus_errors_name_file_line_and_field(tmp_path, records, line, field, message):
    path = _jsonl(tmp_path / "corpus.jsonl", *records)
    with pytest.raises(InvalidRecord, match=message) as info:
        load_corpus(path)
    assert (info.value.path, info.value.line, info.value.field) == (str(path), line, field)


def test_corpus_allows_an_empty_title_and_text(tmp_path):
    path = _jsonl(tmp_path / "corpus.jsonl", {"_id": "a", "title": "", "text": ""}, {"_id": "b", "text": "x"})
    corpus = load_corpus(path)
    assert corpus["a"].indexed_text == ""
    assert corpus["b"].title == ""


def test_malformed_json_names_the_line(tmp_path):
    path = tmp_path / "queries.jsonl"
    path.write_text('{"_id": "1", "text": "ok"}\n{"_id": \n', encoding="utf-8")
    with pytest.raises(InvalidRecord, match="malformed JSON") as info:
        load_queries(path)
    assert info.value.line == 2


def test_queries_need_non_blank_text_and_unique_ids(tmp_path):
    with pytest.raises(InvalidRecord, match="blank") as info:
        load_queries(_jsonl(tmp_path / "q.jsonl", {"_id": "1", "text": "  "}))
    assert (info.value.line, info.value.field) == (1, "text")
    with pytest.raises(InvalidRecord, match="duplicate query id '1'") as info:
        load_queries(_jsonl(tmp_path / "q.jsonl", {"_id": "1", "text": "a"}, {"_id": "1", "text": "b"}))
    assert info.value.line == 2


def _tsv(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_qrels_header_is_optional(tmp_path):
    with_header = load_qrels(_tsv(tmp_path / "a.tsv", "query-id\tcorpus-id\tscore\n1\td1\t1\n1\td2\t0\n"))
    without = load_qrels(_tsv(tmp_path / "b.tsv", "1\td1\t1\n1\td2\t0\n"))
    assert with_header == without == {"1": {"d1": 1, "d2": 0}}


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        ("query-id\tcorpus-id\tscore\n1\td1\n", 2, None, "expected 3 tab-separated fields"),
        ("1 d1 1\n", 1, None, "got 1"),
        ("1\td1\thigh\n", 1, "score", "grade must be an integer"),
        ("1\td1\t1\n1\td1\t1\n", 2, "corpus-id", "judged twice"),
        ("\td1\t1\n", 1, "query-id", "must not be empty"),
        ("9\td1\t1\n", 1, "query-id", "not in queries.jsonl"),
    ],
)
def test_qrels_errors_name_file_line_and_field(tmp_path, text, line, field, message):
    path = _tsv(tmp_path / "test.tsv", text)
    with pytest.raises(InvalidRecord, match=message) as info:
        load_qrels(path, query_ids={"1"})
    assert (info.value.path, info.value.line, info.value.field) == (str(path), line, field)


def test_missing_corpus_is_a_clear_error(tmp_path):
    with pytest.raises(InvalidRecord, match="corpus.jsonl is missing"):
        load_beir(tmp_path)


# --- where the data is ------------------------------------------------------------------


def test_resolve_accepts_the_collection_or_its_parent(tiny: Path):
    assert resolve_dataset_dir(tiny) == tiny
    assert resolve_dataset_dir(tiny.parent, "tiny") == tiny


def test_resolve_falls_back_to_the_environment(tiny: Path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tiny.parent))
    assert resolve_dataset_dir(None, "tiny") == tiny


def test_resolve_without_data_says_where_it_looked_and_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cache = tmp_path / "xdg" / "labsrc" / "beir"
    with pytest.raises(LabError) as error:
        resolve_dataset_dir(None)
    assert str(error.value) == (
        f"no BEIR collection 'scifact' in the per-user cache {cache} (${ENV_VAR} is unset): fetch it with "
        f"'labsrc data fetch scifact', or pass --data DIR (or set {ENV_VAR}) to the folder holding 'scifact/'"
    )
    with pytest.raises(LabError, match="no BEIR collection"):
        resolve_dataset_dir(tmp_path)


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="the XDG cache folder is the Linux/Unix rule")
def test_the_user_cache_follows_xdg_cache_home_else_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert user_beir_dir() == tmp_path / "home" / ".cache" / "labsrc" / "beir"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert user_beir_dir() == tmp_path / "xdg" / "labsrc" / "beir"
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "mine"))
    assert beir_search_dirs() == (tmp_path / "mine",)  # the variable wins outright
    monkeypatch.delenv(ENV_VAR)
    assert beir_search_dirs() == (tmp_path / "xdg" / "labsrc" / "beir",)


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="the XDG cache folder is the Linux/Unix rule")
def test_the_user_cache_is_where_platformdirs_puts_it(tmp_path, monkeypatch):
    platformdirs = pytest.importorskip("platformdirs", reason="platformdirs (installed with pooch, the data extra)")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert user_beir_dir() == Path(platformdirs.user_cache_dir("labsrc")) / "beir"


def test_a_collection_in_the_user_cache_is_found_without_data_or_variable(tmp_path, monkeypatch, capsys):
    from labsrc.cli.main import main

    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    tiny = write_tiny_beir(user_beir_dir())
    assert resolve_dataset_dir(None, "tiny") == tiny
    assert find_dataset_dir("tiny") == tiny
    assert main(["beir", "--dataset", "tiny", "--lanes", "bm25"]) == 0
    assert "BEIR tiny / test: 2 queries" in capsys.readouterr().out
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "elsewhere"))  # set: only it is searched
    assert find_dataset_dir("tiny") is None
    assert f"not found in ${ENV_VAR} ({tmp_path / 'elsewhere'})" in missing_data_reason("tiny")


# --- universe semantics -----------------------------------------------------------------


def test_every_beir_document_is_in_the_universe(tiny: Path):
    dataset = load_beir(tiny)
    chunks = as_chunks(dataset)
    assert [c.chunk_id for c in chunks] == list(dataset.corpus)
    assert permitted_chunks(UNIVERSE_CALLER, chunks, dt.date(2026, 5, 27)) == list(chunks)
    assert chunks[0].text == dataset.corpus["d1"].indexed_text
    assert dataset.chunks == chunks  # cached copy, same values


# --- the lanes ----------------------------------------------------------------------------


def test_bm25_run_matches_the_brute_force_reference(lanes: BeirLanes):
    documents = [(c.chunk_id, c.text) for c in lanes.dataset.chunks]
    query = QUERIES["q4"]
    expected = {d: s for d, s in brute_force_bm25(query, documents, analyzer=english_analyzer()).items() if s > 0}
    run = lanes.bm25_run({"q4": query}, depth=10)
    assert run["q4"] == pytest.approx(expected, rel=1e-12)
    assert list(run["q4"]) == sorted(expected, key=lambda d: (-expected[d], d))


def test_ignore_identical_ids_drops_the_query_itself(lanes: BeirLanes):
    kept = lanes.bm25_run({"q4": QUERIES["q4"]}, depth=1)
    dropped = lanes.bm25_run({"q4": QUERIES["q4"]}, depth=1, ignore_identical_ids=True)
    assert list(kept["q4"]) == ["q4"]  # the ArguAna-style twin is the query's own best match
    assert list(dropped["q4"]) == ["d4"]  # one extra hit is fetched, so the depth is still met
    dense = lanes.dense_run(["q4"], depth=2, ignore_identical_ids=True)
    assert "q4" not in dense["q4"] and len(dense["q4"]) == 2


def test_dense_run_is_cosine_ranked(lanes: BeirLanes):
    run = lanes.dense_run(["q3"], depth=5)
    assert next(iter(run["q3"])) == "d3"
    scores = list(run["q3"].values())
    assert scores == sorted(scores, reverse=True)
    assert max(scores) <= 1.0 + 1e-12
    assert lanes.dense_search("q3", 5) == list(run["q3"].items())


def test_dense_lane_needs_vectors(tmp_path):
    lanes = load_lanes(write_tiny_beir(tmp_path, vectors=False))
    assert lanes.vectors is None
    with pytest.raises(InvalidArgument, match="no vectors"):
        lanes.dense_run(["q1"], 5)


def test_hybrid_search_is_rrf_of_both_lanes(lanes: BeirLanes):
    fused = lanes.hybrid_search("q3", QUERIES["q3"], depth=3)
    assert fused[0] == ("d3", pytest.approx(1 / (60 + 1) + 1 / (60 + 1)))
    assert len(fused) <= 3


# --- fusion over runs --------------------------------------------------------------------


def test_rrf_run_adds_reciprocal_ranks():
    bm25 = {"q": {"a": 9.0, "b": 5.0}}
    dense = {"q": {"b": 0.9, "c": 0.8}}
    fused = rrf_run({"bm25": bm25, "dense": dense}, depth=3, rrf_k=60)
    assert fused["q"] == pytest.approx({"b": 1 / 62 + 1 / 61, "a": 1 / 61, "c": 1 / 62})
    assert list(fused["q"]) == ["b", "a", "c"]
    assert list(rrf_run({"bm25": bm25, "dense": dense}, depth=1)["q"]) == ["b"]


def test_convex_run_mixes_min_max_normalised_scores():
    bm25 = {"q": {"a": 9.0, "b": 5.0, "c": 1.0}}
    dense = {"q": {"b": 0.9, "c": 0.5}}
    fused = convex_run(bm25, dense, alpha=0.25, depth=3)
    # bm25 normalised: a 1, b (5-1)/(9-1) = 0.5, c 0; dense: b 1, c 0.
    assert fused["q"] == pytest.approx({"a": 0.75 * 1.0, "b": 0.25 * 1.0 + 0.75 * 0.5, "c": 0.0})
    assert list(fused["q"]) == ["a", "b", "c"]


def test_tune_alpha_picks_the_best_grid_point_and_the_smaller_on_ties():
    # One query; the relevant doc "r" is bm25's second and dense's first.
    bm25 = {"q": {"x": 2.0, "r": 1.0, "y": 0.0}}
    dense = {"q": {"r": 0.9, "x": 0.1}}
    qrels = {"q": {"r": 1}}
    sweep = tune_alpha(bm25, dense, qrels, depth=3)
    assert [alpha for alpha, _ in sweep.values] == list(ALPHA_GRID)
    # r: 0.5·(1-a) + a ... wins over x: (1-a)·1 + 0 once a > 1/3; 0.35 is the first grid point beyond it.
    assert sweep.alpha == 0.35
    assert dict(sweep.values)[0.35] == pytest.approx(1.0)
    assert dict(sweep.values)[0.3] < 1.0


def test_run_benchmark_tunes_alpha_on_train_never_on_test(lanes: BeirLanes):
    result = run_benchmark(lanes, split="test", depth=5)
    assert result.config["alpha_source"].startswith("tuned on train")
    assert result.sweep is not None and result.sweep.split == "train"
    assert result.config["alpha"] == result.sweep.alpha
    assert set(result.metrics) == {"bm25", "dense", "rrf", "convex"}
    assert set(result.metrics["bm25"]) == {"ndcg@10", "recall@100", "mrr@10"}
    # Evaluating on train itself would tune on the reported split: the fixed default is used instead.
    on_train = run_benchmark(lanes, split="train", depth=5, lanes=["convex"])
    assert on_train.config["alpha"] == DEFAULT_ALPHA and on_train.sweep is None


def test_run_benchmark_without_train_uses_the_default_alpha(tmp_path):
    lanes = load_lanes(write_tiny_beir(tmp_path, splits=("test",)))
    result = run_benchmark(lanes, lanes=["convex"], depth=5)
    assert result.config["alpha"] == DEFAULT_ALPHA == 0.5
    assert "no train split" in result.config["alpha_source"]
    assert list(result.runs) == ["convex"]


def test_run_benchmark_rejects_unknown_lanes(lanes: BeirLanes):
    with pytest.raises(InvalidArgument, match="valid lanes: bm25, dense, rrf, convex"):
        run_benchmark(lanes, lanes=["splade"])


def test_to_json_has_lanes_config_and_versions(lanes: BeirLanes):
    out = run_benchmark(lanes, depth=5, alpha=0.3).to_json()
    assert set(out) == {"bm25", "dense", "rrf", "convex", "config", "versions", "significance"}
    assert 0.0 <= out["convex"]["ndcg@10"] <= 1.0
    assert out["significance"]["queries"] == 2 and out["significance"]["note"].startswith("no significance test")
    assert out["config"]["alpha"] == 0.3 and out["config"]["alpha_source"] == "given"
    assert out["versions"]["dense"] == "tiny-topic-vectors"
    assert out["versions"]["dense_model"]["dim"] == 3
    assert out["versions"]["sparse"] == "bm25-english-snowball-v1"
    json.dumps(out)  # JSON-ready


def test_write_trec_run_lines(tmp_path):
    path = write_trec_run({"q2": {"b": 1.0, "a": 1.0, "c": 3.5}, "q1": {"z": 0.25}}, tmp_path / "r.trec", "tag")
    assert path.read_text().splitlines() == [
        "q1 Q0 z 1 0.25 tag",
        "q2 Q0 c 1 3.5 tag",
        "q2 Q0 a 2 1.0 tag",  # ties break on doc id ascending
        # ...and the tied score is lowered one float32 ulp (2**-24 below 1.0), so trec_eval keeps this order.
        f"q2 Q0 b 3 {1.0 - 2**-24!r} tag",
    ]
    with pytest.raises(InvalidArgument, match="one word"):
        write_trec_run({}, tmp_path / "r.trec", "two words")


def test_the_notebooks_and_the_skip_reason_name_the_same_two_commands(tmp_path, monkeypatch):
    commands = ("labsrc data fetch scifact", "labsrc embed --beir scifact")
    notebooks = Path(__file__).resolve().parents[1] / "notebooks"
    for name in ("08-tuning-fusion", "09-real-benchmark", "11-filter-placement"):
        intro = "".join(json.loads((notebooks / f"{name}.ipynb").read_text(encoding="utf-8"))["cells"][0]["source"])
        assert all(command in intro for command in commands), name
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert all(command in missing_data_reason("scifact") for command in commands)
