"""A tiny BEIR collection written into a temporary folder, for tests that must not need the real data.

Five documents about three topics (bones, hearts, sleep), four queries (two
train, two test) and 3-d unit vectors whose dimensions are those topics. One
document id, ``q4``, equals a query id, as in ArguAna, so ``--ignore-identical-ids``
has something to drop.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from labsrc.records.checksums import CHECKSUMS_FILE, checksums_json

DOCS = [
    ("d1", "Vitamin D", "Vitamin D deficiency raises fracture risk in older adults."),
    ("d2", "Aspirin", "Daily aspirin lowers the risk of a heart attack."),
    ("d3", "Exercise", "Regular exercise improves sleep quality."),
    ("d4", "Fracture healing", "Bone fracture healing is slower in smokers."),
    ("q4", "", "Smoking slows bone healing."),
]
QUERIES = {
    "q1": "vitamin D and fracture risk",
    "q2": "aspirin prevents heart attack",
    "q3": "exercise and sleep",
    "q4": "smoking slows bone healing",
}
QRELS = {
    "train": [("q1", "d1", 1), ("q2", "d2", 1)],
    "test": [("q3", "d3", 1), ("q4", "d4", 1)],
}
# Topic weights (bone, heart, sleep), normalised when written.
DOC_VECTORS = {
    "d1": [0.9, 0.1, 0.1],
    "d2": [0.1, 0.95, 0.05],
    "d3": [0.05, 0.1, 0.95],
    "d4": [0.95, 0.05, 0.1],
    "q4": [0.9, 0.0, 0.2],
}
QUERY_VECTORS = {
    "q1": [0.85, 0.2, 0.1],
    "q2": [0.1, 0.9, 0.1],
    "q3": [0.1, 0.2, 0.9],
    "q4": [0.8, 0.1, 0.3],
}
MODEL = {"model": "tiny-topic-vectors", "dim": 3, "dtype": "float32", "normalized": True,
         "rows": {"corpus": 5, "queries": 4}}  # fmt: skip


def unit_rows(rows: list[list[float]]) -> np.ndarray:
    matrix = np.asarray(rows, dtype=np.float64)
    return (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype(np.float32)


def write_tiny_beir(root: Path, *, splits: tuple[str, ...] = ("train", "test"), vectors: bool = True) -> Path:
    """Write the collection to ``root / "tiny"`` and return that folder."""
    path = root / "tiny"
    (path / "qrels").mkdir(parents=True)
    with (path / "corpus.jsonl").open("w", encoding="utf-8") as handle:
        for doc_id, title, text in DOCS:
            handle.write(json.dumps({"_id": doc_id, "title": title, "text": text, "metadata": {}}) + "\n")
    with (path / "queries.jsonl").open("w", encoding="utf-8") as handle:
        for qid, text in QUERIES.items():
            handle.write(json.dumps({"_id": qid, "text": text, "metadata": {}}) + "\n")
    for split in splits:
        rows = "".join(f"{qid}\t{doc}\t{grade}\n" for qid, doc, grade in QRELS[split])
        (path / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows, encoding="utf-8")
    if vectors:
        folder = write_vectors(path / "vectors" / "tiny-topic-vectors")
        # With checksums.json, as `labsrc embed` writes it: it loads checked, with no UncheckedFolderWarning.
        (folder / CHECKSUMS_FILE).write_bytes(checksums_json(folder, [p.name for p in folder.iterdir()]))
    return path


def write_vectors(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "MODEL.json").write_text(json.dumps(MODEL), encoding="utf-8")
    (path / "corpus_ids.txt").write_text("".join(f"{d}\n" for d in DOC_VECTORS), encoding="utf-8")
    (path / "query_ids.txt").write_text("".join(f"{q}\n" for q in QUERY_VECTORS), encoding="utf-8")
    np.save(path / "corpus.npy", unit_rows(list(DOC_VECTORS.values())))
    np.save(path / "queries.npy", unit_rows(list(QUERY_VECTORS.values())))
    return path
