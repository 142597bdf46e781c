"""Issue 57, item 5: a load reads one version of a saved folder, each file once (labsrc.records.pinned).

A load used to check every file's digest by path and then open each path again to
parse it. Racing 300 saves of two indexes into one folder, 61 of 999 loads
equalled neither index, having passed every check, and 28 more were refused as
"a bit flip" (2026-11-28, this machine; with fsync off, 168 and 152). Now a load
opens the folder once, reads each file relative to it, and digests and parses
the same bytes: a racing save yields the old index, the new one, or a refusal
naming the race.
"""

from __future__ import annotations

import os
import shutil
import threading
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import labsrc
from labsrc.lanes.persistence import load_bm25_index, save_bm25_index
from labsrc.lanes.vectordir import load_vector_dir, write_vector_dir
from labsrc.records import pinned
from labsrc.records.pinned import RACE_ATTEMPTS, PinnedFolder, UncheckedFolderWarning

RACE = "the folder was replaced by a concurrent save while it was read"

# Two indexes whose every array has the same shape and dtype, so a mix of their files passes every structural
# check of a load (the shapes in params.json, ptr, positions in range): only the digests, or reading one
# version, can tell. Every file differs between them but ptr.npy and tf.npy.
A = labsrc.BM25Index.build([("a1", "alpha beta gamma"), ("a2", "alpha delta"), ("a3", "beta beta epsilon")],
                           k1=0.9, b=0.7)  # fmt: skip
B = labsrc.BM25Index.build([("b1", "zeta eta"), ("b2", "zeta iota theta"), ("b3", "eta eta kappa")], k1=1.5, b=0.4)
ARRAYS = ("doc_len", "ptr", "tf", "_packed")


def _same(loaded: labsrc.BM25Index, index: labsrc.BM25Index) -> bool:
    return (loaded.ids == index.ids and loaded.vocabulary == index.vocabulary
            and (loaded.k1, loaded.b) == (index.k1, index.b)
            and all(np.array_equal(getattr(loaded, n), getattr(index, n)) for n in ARRAYS))  # fmt: skip


def test_the_two_indexes_differ_only_in_content():
    for name in ARRAYS:
        assert getattr(A, name).shape == getattr(B, name).shape and getattr(A, name).dtype == getattr(B, name).dtype
    assert len(A.vocabulary) == len(B.vocabulary) and A.ids != B.ids
    assert not _same(A, B) and _same(A, A)


def _race(save, load, classify, saves: int, loads: int, loaders: int = 4) -> tuple[Counter, list[str]]:
    """``saves`` calls of ``save(i)`` in one thread while ``loaders`` threads make ``loads`` calls of ``load(i)``.

    Returns the count of each ``classify(result)`` (``"race"`` for a refusal naming the race) and every other
    refusal's message.
    """
    outcomes: Counter = Counter()
    others: list[str] = []
    lock, start = threading.Lock(), threading.Barrier(loaders + 1)

    def saver() -> None:
        start.wait()
        for i in range(saves):
            save(i)

    def loader(k: int) -> None:
        start.wait()
        for i in range(k, loads, loaders):
            try:
                outcome = classify(load(i))
            except labsrc.InvalidRecord as exc:
                outcome = "race" if RACE in str(exc) else "refused"
                if outcome == "refused":
                    with lock:
                        others.append(str(exc))
            with lock:
                outcomes[outcome] += 1

    threads = [threading.Thread(target=saver), *(threading.Thread(target=loader, args=(k,)) for k in range(loaders))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes, others


@pytest.fixture
def quick_saves(monkeypatch):
    """fsync made a no-op: durability is not what races (renames and opens are), and it makes a save 5x slower."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


def test_1000_loads_racing_300_saves_each_equal_a_saved_index_or_are_refused_naming_the_race(tmp_path, quick_saves):
    folder = save_bm25_index(A, tmp_path / "idx")

    def classify(loaded: labsrc.BM25Index) -> str:
        return "A" if _same(loaded, A) else "B" if _same(loaded, B) else "mix"

    outcomes, others = _race(lambda i: (B if i % 2 == 0 else A).save(folder),
                             lambda i: labsrc.BM25Index.load(folder, mmap=i % 2 == 1),
                             classify, saves=300, loads=1000)  # fmt: skip
    print(f"1,000 loads racing 300 saves: {dict(outcomes)}")
    assert others == [] and outcomes["mix"] == 0  # none mixed the two saves, none blamed "a bit flip"
    assert sum(outcomes.values()) == 1000 and set(outcomes) <= {"A", "B", "race"}
    assert outcomes["A"] and outcomes["B"]  # the loads did race the saves (B stands only while they run)


def _unit(rows: int, dim: int, seed: int) -> np.ndarray:
    matrix = np.random.default_rng(seed).normal(size=(rows, dim)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


#: Two vector folders of one shape: ids, vectors and MODEL.json all differ.
VECTORS = {
    "m1": (["a", "b", "c"], _unit(3, 8, 1), ["q1", "q2"], _unit(2, 8, 2)),
    "m2": (["x", "y", "z"], _unit(3, 8, 3), ["r1", "r2"], _unit(2, 8, 4)),
}


def test_vector_loads_racing_writes_each_equal_a_written_folder_or_are_refused(tmp_path, quick_saves):
    folder = tmp_path / "vectors" / "m"

    def write(i: int) -> None:
        name = "m2" if i % 2 == 0 else "m1"
        doc_ids, docs, query_ids, queries = VECTORS[name]
        write_vector_dir(folder, doc_ids, docs, query_ids, queries, {"model": name, "dim": 8})

    def classify(loaded) -> str:
        doc_ids, docs, query_ids, queries = VECTORS[loaded.version]
        whole = (loaded.doc_ids == tuple(doc_ids) and loaded.query_ids == tuple(query_ids)
                 and np.array_equal(loaded.documents, docs.astype(np.float64))
                 and np.array_equal(loaded.query_matrix(query_ids), queries.astype(np.float64)))  # fmt: skip
        return loaded.version if whole else "mix"

    write(1)
    outcomes, others = _race(write, lambda i: load_vector_dir(folder), classify, saves=150, loads=500)
    print(f"500 vector loads racing 150 writes: {dict(outcomes)}")
    assert others == [] and outcomes["mix"] == 0
    assert sum(outcomes.values()) == 500 and set(outcomes) <= {"m1", "m2", "race"}
    assert outcomes["m1"] and outcomes["m2"]


# --- one folder, each file read once: a folder swapped in mid-load is never parsed --------------------------------


def _swap_after(monkeypatch, name: str, swap) -> list[str]:
    """Call ``swap()`` right after ``name``'s digest is checked, before it is parsed; returns the files checked."""
    checked: list[str] = []
    real = PinnedFolder._check

    def check(self, file: str, digest: str) -> None:
        real(self, file, digest)
        checked.append(file)
        if file == name:
            swap()

    monkeypatch.setattr(PinnedFolder, "_check", check)
    return checked


@pytest.mark.parametrize("mmap", [False, True])
def test_a_folder_swapped_in_after_a_digest_check_is_not_read_the_load_is_the_old_index(tmp_path, monkeypatch, mmap):
    folder = save_bm25_index(A, tmp_path / "idx")
    newer = save_bm25_index(B, tmp_path / "newer")

    def swap() -> None:  # a save's two renames, once, the old folder kept aside (its rmtree not yet begun)
        if newer.exists():
            folder.rename(tmp_path / "aside")
            newer.rename(folder)

    _swap_after(monkeypatch, "params.json", swap)
    loaded = labsrc.BM25Index.load(folder, mmap=mmap)
    assert _same(loaded, A)  # params.json, checked, was A's: so is every file after it (a mix before issue 57)
    assert _same(labsrc.BM25Index.load(folder), B)  # the next load reads the folder now in place


def test_where_a_folder_cannot_be_held_open_a_swap_mid_load_is_caught_by_the_digests(tmp_path, monkeypatch):
    monkeypatch.setattr(pinned, "_PINNING", False)  # as on Windows: each file opened by path
    folder = save_bm25_index(A, tmp_path / "idx")
    newer = save_bm25_index(B, tmp_path / "newer")

    def swap() -> None:
        if newer.exists():
            folder.rename(tmp_path / "aside")
            newer.rename(folder)

    checked = _swap_after(monkeypatch, "params.json", swap)
    # B's doc_len.npy differs from the digest in A's checksums.json, read first: refused, then read again whole.
    assert _same(labsrc.BM25Index.load(folder), B) and checked.count("params.json") == 2


def test_a_pinned_folder_reads_the_old_bytes_after_another_folder_is_renamed_into_its_place(tmp_path):
    folder = save_bm25_index(A, tmp_path / "idx")
    old_ids = (folder / "ids.json").read_bytes()
    with PinnedFolder(folder) as pinned_folder:
        assert not pinned_folder.replaced()
        folder.rename(tmp_path / "aside")
        save_bm25_index(B, folder)
        assert pinned_folder.replaced() and pinned_folder.read_bytes("ids.json") == old_ids
        assert (folder / "ids.json").read_bytes() != old_ids
        shutil.rmtree(tmp_path / "aside")  # as a save removes the folder it replaced
        assert pinned_folder.replaced()
        with pytest.raises(labsrc.InvalidRecord, match=r"ids\.json, field 'sha256': missing, but checksums\.json"):
            pinned_folder.read_bytes("ids.json")


def test_a_load_whose_folder_a_save_removed_starts_again_on_the_folder_now_in_place(tmp_path, monkeypatch):
    folder = save_bm25_index(A, tmp_path / "idx")
    save_bm25_index(B, tmp_path / "newer")
    swaps = []

    def save_once() -> None:  # the save's exchange, then its rmtree of the old folder
        if not swaps:
            swaps.append(1)
            (tmp_path / "newer").rename(tmp_path / "aside")
            folder.rename(tmp_path / "old")
            (tmp_path / "aside").rename(folder)
            shutil.rmtree(tmp_path / "old")

    checked = _swap_after(monkeypatch, "ptr.npy", save_once)
    loaded = labsrc.BM25Index.load(folder, mmap=True)
    assert _same(loaded, B) and checked.count("params.json") == 2  # read twice: the second attempt read B whole


def test_a_load_raced_on_every_attempt_is_refused_naming_the_race_never_a_bit_flip(tmp_path, monkeypatch):
    folder = save_bm25_index(A, tmp_path / "idx")
    saves = []

    def save() -> None:  # a save of the other index lands between the digest check and the parse, every time
        saves.append(1)
        (B if len(saves) % 2 else A).save(folder)

    _swap_after(monkeypatch, "params.json", save)
    with pytest.raises(labsrc.InvalidRecord) as info:
        labsrc.BM25Index.load(folder)
    assert str(info.value) == (f"{folder}: the folder was replaced by a concurrent save while it was read "
                               f"({RACE_ATTEMPTS} times in a row); load it again")  # fmt: skip
    assert len(saves) == RACE_ATTEMPTS and "bit flip" not in str(info.value)


# --- a folder without checksums.json: loads, and says so -----------------------------------------------------


def test_an_index_without_checksums_loads_with_a_warning_saying_it_is_unchecked_and_how_to_save_it(tmp_path):
    folder = save_bm25_index(A, tmp_path / "idx")
    (folder / "checksums.json").unlink()
    with pytest.warns(UncheckedFolderWarning) as caught:
        loaded = load_bm25_index(folder)
    assert _same(loaded, A) and len(caught) == 1
    assert str(caught[0].message) == (
        f"no checksums.json in {folder}, so its files were loaded unchecked (a bit flip or an edit would go "
        "unnoticed); save it again to record them: BM25Index.load(folder).save(folder), or "
        "save_bm25_index(index, folder)"
    )
    assert caught[0].filename == __file__  # it names the line that loaded the folder, not the lab's internals
    loaded.save(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _same(labsrc.BM25Index.load(folder), A)


def test_a_vector_folder_without_checksums_loads_with_a_warning_saying_how_to_write_it_again(tmp_path):
    doc_ids, docs, query_ids, queries = VECTORS["m1"]
    folder = write_vector_dir(tmp_path / "m1", doc_ids, docs, query_ids, queries, {"model": "m1"})
    (folder / "checksums.json").unlink()
    with pytest.warns(UncheckedFolderWarning) as caught:
        assert load_vector_dir(folder).doc_ids == tuple(doc_ids)
    assert [str(w.message) for w in caught] == [
        f"no checksums.json in {folder}, so its files were loaded unchecked (a bit flip or an edit would go "
        "unnoticed); write it again to record them: `labsrc embed`, or write_vector_dir(...)"
    ]


def test_a_checked_folder_loads_without_a_warning(tmp_path):
    folder = save_bm25_index(A, tmp_path / "idx")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _same(labsrc.BM25Index.load(folder, mmap=True), A)


def test_a_pinned_npy_is_checked_like_load_npy_and_a_digest_that_differs_is_named_first(tmp_path):
    folder = save_bm25_index(A, tmp_path / "idx")
    padded = (folder / "tf.npy").read_bytes() + b"\0" * 64
    (folder / "tf.npy").write_bytes(padded)
    with PinnedFolder(folder) as held, pytest.raises(labsrc.InvalidRecord, match=r"tf\.npy, field 'sha256'"):
        held.load_npy("tf.npy")  # the digest first, as a load has always reported a changed file
    (folder / "checksums.json").unlink()
    for mmap in (False, True):
        with PinnedFolder(folder) as held, pytest.raises(labsrc.InvalidRecord, match=r"tf\.npy, field 'shape'.*padded"):
            held.load_npy("tf.npy", mmap=mmap)


def test_the_cli_says_an_unchecked_folder_in_one_warning_line(tmp_path, capsys):
    """`labsrc` prints the lab's own warnings as `labsrc: warning: ...`, not Python's file:line form."""
    from labsrc.cli.main import main

    policies = Path(__file__).resolve().parents[1] / "fixtures" / "policies"
    folder = tmp_path / "v"
    shutil.copytree(policies / "vectors" / "all-MiniLM-L6-v2", folder)
    (folder / "checksums.json").unlink()
    assert main(["search", "RPL-14", "--as", "luna-48291", "--chunks", str(policies / "chunks.jsonl"),
                 "--callers", str(policies / "callers.json"), "--vectors", str(folder)]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"labsrc: warning: no checksums.json in {folder}, so its files were loaded unchecked (a bit flip or an "
        "edit would go unnoticed); write it again to record them: `labsrc embed`, or write_vector_dir(...)"
    ]


def test_the_cli_shows_the_warning_even_where_userwarnings_are_ignored(tmp_path, capsys):
    """A library imported on the way may ignore UserWarning; the CLI still shows the lab's own (by its start)."""
    from labsrc.cli.main import LAB_WARNING_STARTS, main
    from labsrc.records import UNCHECKED_PREFIX

    assert LAB_WARNING_STARTS == UNCHECKED_PREFIX
    policies = Path(__file__).resolve().parents[1] / "fixtures" / "policies"
    folder = tmp_path / "v"
    shutil.copytree(policies / "vectors" / "all-MiniLM-L6-v2", folder)
    (folder / "checksums.json").unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main(["search", "RPL-14", "--as", "luna-48291", "--chunks", str(policies / "chunks.jsonl"),
                     "--callers", str(policies / "callers.json"), "--vectors", str(folder)]) == 0
    assert capsys.readouterr().err.startswith(f"labsrc: warning: no checksums.json in {folder}, ")
