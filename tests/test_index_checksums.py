"""Issue 47, part 4: a saved BM25 index carries the SHA-256 of every file, checked before an array is trusted.

One flipped byte in ``postings.npy``, ``tf.npy`` or ``doc_len.npy`` used to load
silently (an audit saw 3 of 5 queries score differently, 0.56938 -> 0.60063).
"""

import hashlib
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import labsrc
from labsrc.lanes import index_files
from labsrc.lanes.persistence import load_bm25_index, save_bm25_index
from labsrc.records.pinned import UncheckedFolderWarning

DOCS = [
    ("a-refurb", "Rule RPL-14: damaged refurbished laptops are replaced within 14 days of delivery."),
    ("b-footwear", "Unworn footwear may be returned within 30 days of delivery."),
    ("c-carrier", "Lost parcels: open a carrier loss claim after 10 business days."),
    ("d-vouchers", "Vouchers are non-refundable; café vouchers too."),
]
QUERIES = ["damaged laptop replacement", "RPL-14", "delivery days", "café vouchers", "nothing matches"]
#: Every file a save writes (format 3): the digests cover all of them but checksums.json itself.
FILES = ["doc_len.npy", "ids.json", "params.json", "postings.npy", "ptr.npy", "tf.npy", "vocabulary.json"]
INDEX = labsrc.BM25Index.build(DOCS, k1=0.9, b=0.7)


def _answers(index: labsrc.BM25Index) -> list[object]:
    return [(index.search(q, 4), index.score_all(q).tolist()) for q in QUERIES]


def _saved(tmp_path: Path) -> Path:
    return save_bm25_index(INDEX, tmp_path / "idx")


def _flip_one_byte(path: Path) -> int:
    """Flip the low bit of one byte in the data part of ``path`` (past a ``.npy`` header); return its offset."""
    data = bytearray(path.read_bytes())
    if path.suffix == ".npy":
        with path.open("rb") as handle:
            version = np.lib.format.read_magic(handle)
            header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            assert header(handle)[2].itemsize == 8  # every array of the format holds 8-byte values
            start = handle.tell()
        at = start + 8 * ((len(data) - start) // 16)  # the middle value's low byte (8-byte values, little-endian)
    else:  # the alphanumeric byte nearest the middle whose low bit can flip and stay alphanumeric (b <-> c, 8 <-> 9)
        keep = b"0123456789bcdefghijklmnopqrstuvwxyBCDEFGHIJKLMNOPQRSTUVWXY"
        at = min((i for i, byte in enumerate(data) if byte in keep), key=lambda i: abs(i - len(data) // 2))
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
    return at


@pytest.mark.parametrize("mmap", [True, False])
def test_a_save_records_the_sha256_of_every_file_and_loads_back_equal(tmp_path, mmap):
    folder = _saved(tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == sorted([*FILES, "checksums.json"])
    recorded = json.loads((folder / "checksums.json").read_text(encoding="utf-8"))
    assert recorded == {"sha256": {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in FILES}}
    loaded = load_bm25_index(folder, mmap=mmap)
    assert loaded.ids == INDEX.ids and loaded.vocabulary == INDEX.vocabulary
    assert _answers(loaded) == _answers(INDEX)


@pytest.mark.parametrize("mmap", [True, False])
@pytest.mark.parametrize("name", [*FILES, "checksums.json"])
def test_one_flipped_byte_in_any_file_is_refused_naming_the_file(tmp_path, name, mmap):
    folder = _saved(tmp_path)
    at = _flip_one_byte(folder / name)
    assert at >= 128 or name.endswith(".json")  # past the .npy header (128 bytes here): in the values themselves
    with pytest.raises(labsrc.InvalidRecord) as info:
        labsrc.BM25Index.load(folder, mmap=mmap)
    message = str(info.value)
    assert info.value.field == "sha256" and name in message
    if name != "checksums.json":  # a digest flipped in checksums.json blames the file it covers, and says so
        assert info.value.path == str(folder / name) and message.startswith(f"{folder / name}, field 'sha256': ")
        assert "changed after the lab wrote it" in message and "save it again (BM25Index.build(...).save" in message


@pytest.mark.parametrize("name", FILES)
def test_a_missing_file_is_refused_naming_it(tmp_path, name):
    folder = _saved(tmp_path)
    (folder / name).unlink()
    with pytest.raises(labsrc.InvalidRecord, match=rf"{name}, field 'sha256': missing, but checksums\.json lists it"):
        labsrc.BM25Index.load(folder)


def _rewrite(folder: Path, change) -> None:
    path = folder / "checksums.json"
    path.write_text(change(json.loads(path.read_text(encoding="utf-8"))), encoding="utf-8")


def _without(name: str):
    return lambda c: json.dumps({"sha256": {k: v for k, v in c["sha256"].items() if k != name}})


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda c: json.dumps([c]), "expected {\"sha256\""),
        (lambda c: json.dumps({"md5": c["sha256"]}), "expected {\"sha256\""),
        (lambda c: json.dumps({"sha256": sorted(c["sha256"])}), "expected {\"sha256\""),
        (lambda c: json.dumps({"sha256": {**c["sha256"], "tf.npy": "a digest?"}}), "'tf.npy': 'a digest?' is not"),
        (lambda c: json.dumps({"sha256": {**c["sha256"], "tf.npy": c["sha256"]["tf.npy"].upper()}}), "'tf.npy': "),
        (lambda c: json.dumps({"sha256": {**c["sha256"], "../tf.npy": "0" * 64}}), "'../tf.npy' is not the name"),
        (_without("postings.npy"), "records no digest for postings.npy"),
        (_without("params.json"), "records no digest for params.json"),
    ],
    ids=["a-list", "no-sha256", "sha256-a-list", "not-hex", "upper-case", "outside-the-folder", "postings-left-out",
         "params-left-out"],
)
def test_a_malformed_checksums_json_is_refused_naming_it_and_its_field(tmp_path, change, says):
    folder = _saved(tmp_path)
    _rewrite(folder, change)
    with pytest.raises(labsrc.InvalidRecord, match=r"checksums\.json, field 'sha256': ") as info:
        labsrc.BM25Index.load(folder)
    assert says in str(info.value)


def test_a_checksums_json_that_is_not_json_is_refused_naming_its_line(tmp_path):
    folder = _saved(tmp_path)
    _rewrite(folder, lambda c: json.dumps(c, indent=2)[:-3])
    with pytest.raises(labsrc.InvalidRecord, match=r"checksums\.json, line \d+: malformed JSON"):
        labsrc.BM25Index.load(folder)


def test_an_index_saved_before_checksums_loads_unchecked_and_a_save_gives_it_checksums(tmp_path):
    checked = labsrc.BM25Index.load(_saved(tmp_path))
    old = save_bm25_index(INDEX, tmp_path / "old")
    (old / "checksums.json").unlink()  # as an index saved before the lab recorded digests
    with pytest.warns(UncheckedFolderWarning, match=r"^no checksums\.json in .*, so its files were loaded unchecked"):
        loaded = labsrc.BM25Index.load(old)  # issue 57: it loads as before, and says it is unchecked
    assert _answers(loaded) == _answers(checked) == _answers(INDEX)
    loaded.save(old)  # the documented way to have it checked: load it and save it again
    assert sorted(json.loads((old / "checksums.json").read_text(encoding="utf-8"))["sha256"]) == FILES
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # checked now: no warning
        labsrc.BM25Index.load(old)
    _flip_one_byte(old / "tf.npy")
    with pytest.raises(labsrc.InvalidRecord, match=r"tf\.npy, field 'sha256'"):
        labsrc.BM25Index.load(old)


def test_checksums_json_is_written_inside_the_atomic_save(tmp_path, monkeypatch):
    folder = _saved(tmp_path)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    real = index_files.write_durable

    def full_disk_at_the_checksums(path, write):
        if Path(path).name == "checksums.json":
            raise OSError(28, "No space left on device", str(path))
        return real(path, write)

    monkeypatch.setattr(index_files, "write_durable", full_disk_at_the_checksums)
    with pytest.raises(labsrc.InvalidArgument, match="No space left on device"):
        labsrc.BM25Index.build(DOCS[:2]).save(folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]  # no staging folder left beside it
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # the old index, whole and still checked
    assert _answers(labsrc.BM25Index.load(folder)) == _answers(INDEX)
