import sys
import types

import numpy as np
import pytest

import labsrc
from labsrc.lanes.encoders import EmbedderLoadError, SentenceTransformerEncoder


def fake_library(monkeypatch, loader):
    module = types.ModuleType("sentence_transformers")
    module.SentenceTransformer = loader
    monkeypatch.setitem(sys.modules, "sentence_transformers", module)


class FakeModel:
    calls = []

    def __init__(self, name, device=None, local_files_only=None):
        FakeModel.calls.append((name, device, local_files_only))

    def encode(self, texts, batch_size, normalize_embeddings, convert_to_numpy):
        return np.array([[len(t), 1.0] for t in texts], dtype=np.float32)

    def get_sentence_embedding_dimension(self):
        return 2


def test_loads_lazily_and_only_from_local_files(monkeypatch):
    FakeModel.calls = []
    fake_library(monkeypatch, FakeModel)
    encoder = SentenceTransformerEncoder("my-model")
    assert not encoder.loaded and FakeModel.calls == []
    matrix = encoder.encode(["ab", "abcd"])
    assert FakeModel.calls == [("my-model", None, True)]
    assert matrix.dtype == np.float64 and matrix.tolist() == [[2.0, 1.0], [4.0, 1.0]]
    encoder.encode(["x"])
    assert len(FakeModel.calls) == 1  # loaded once
    assert encoder.encode([]).shape == (0, 2)


def test_missing_package_is_a_missing_dependency_naming_the_model(monkeypatch):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import fails
    encoder = SentenceTransformerEncoder("sentence-transformers/all-MiniLM-L6-v2")
    with pytest.raises(labsrc.MissingDependency) as err:
        encoder.encode(["hello"])
    assert "all-MiniLM-L6-v2" in str(err.value) and "[embed]" in str(err.value)
    assert isinstance(err.value, labsrc.LabError)


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (OSError("model.safetensors not found in /models/missing"), "OSError: model.safetensors not found"),
        (ValueError("corrupt header"), "ValueError: corrupt header"),
        (MemoryError("cannot allocate 4 GiB"), "out of memory"),
    ],
)
def test_any_load_failure_names_model_and_reason(monkeypatch, failure, reason):
    def broken(*args, **kwargs):
        raise failure

    fake_library(monkeypatch, broken)
    encoder = SentenceTransformerEncoder("/models/missing")
    with pytest.raises(EmbedderLoadError) as err:
        encoder.load()
    assert err.value.model == "/models/missing"
    assert reason in str(err.value) and "'/models/missing'" in str(err.value)
    assert isinstance(err.value, labsrc.LabError)
    assert not encoder.loaded  # no silent fallback model was put in its place


def test_retriever_surfaces_the_load_error(monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("no such model")

    fake_library(monkeypatch, broken)
    with pytest.raises(EmbedderLoadError, match="no such model"):
        labsrc.HybridRetriever.from_chunks([{"chunk_id": "a", "text": "x"}], embedder=SentenceTransformerEncoder("ghost"))


def test_works_as_the_dropin_embedder(monkeypatch):
    fake_library(monkeypatch, FakeModel)
    retriever = labsrc.HybridRetriever.from_chunks(
        [{"chunk_id": "a", "text": "refund"}, {"chunk_id": "b", "text": "damaged laptop replacement"}],
        embedder=SentenceTransformerEncoder("fake"),
    )
    assert retriever.embedding_dimension == 2
    assert [h["chunk_id"] for h in retriever.search("refund", k=1)] == ["a"]


def test_bad_arguments():
    with pytest.raises(labsrc.InvalidArgument):
        SentenceTransformerEncoder("")
    with pytest.raises(labsrc.InvalidArgument, match="list"):
        SentenceTransformerEncoder("m").encode("one string")
