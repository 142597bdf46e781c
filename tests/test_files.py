"""labsrc.records.files: durable writes, atomic folder commits, and .npy files checked before reading."""

from __future__ import annotations

import numpy as np
import pytest

import labsrc.records.files as files
from labsrc.errors import InvalidArgument, InvalidRecord


def _stage(target, text):
    staged = files.stage_dir(target)
    files.write_durable(staged / "a.txt", lambda h: h.write(text.encode()))
    return staged


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "rename-aside"])
def test_commit_dir_puts_a_folder_in_place_whole(tmp_path, monkeypatch, exchange):
    if not exchange:  # what other systems get: the old folder renamed aside, then the new one in
        monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    target = tmp_path / "out"
    files.commit_dir(_stage(target, "one"), target)
    (target / "old-only.txt").write_text("x", encoding="utf-8")
    files.commit_dir(_stage(target, "two"), target)
    assert sorted(p.name for p in target.iterdir()) == ["a.txt"] and (target / "a.txt").read_text() == "two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_atomic_write_bytes_replaces_a_file_and_leaves_nothing_beside_it(tmp_path):
    path = tmp_path / "params.json"
    files.atomic_write_bytes(path, b"old")
    files.atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"new" and [p.name for p in tmp_path.iterdir()] == ["params.json"]


def test_load_npy_reads_plain_arrays_and_refuses_damaged_ones(tmp_path):
    path = tmp_path / "a.npy"
    np.save(path, np.arange(6, dtype=np.int64).reshape(2, 3))
    assert files.load_npy(path).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert files.load_npy(path, mmap=True).tolist() == [[0, 1, 2], [3, 4, 5]]
    np.save(path, np.zeros(0))
    assert files.load_npy(path, mmap=True).size == 0  # an empty array cannot be mapped: read instead
    with pytest.raises(InvalidRecord, match=r"a\.npy, field 'header'"):
        path.write_bytes(b"")
        files.load_npy(path)
    with pytest.raises(InvalidRecord, match=r"missing\.npy: missing file"):
        files.load_npy(tmp_path / "missing.npy")


@pytest.mark.parametrize(("value", "message"), [(None, "not NoneType"), ("a\0b", "NUL"), ("a\ud800", "lone surrogate")])
def test_as_path_names_what_is_wrong(value, message):
    with pytest.raises(InvalidArgument, match=message):
        files.as_path(value)
