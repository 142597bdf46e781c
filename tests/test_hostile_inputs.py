"""Issue 32, the rest: hostile files and values that crashed, hung or fooled the lab.

Six defects, one section each: JSON nested 200,000 deep (a ``RecursionError``
traceback), a FIFO where a file belongs (a hang), a lone surrogate in the SQLite
store (a raw ``UnicodeEncodeError``), a regex planted in a saved index's
``params.json`` (accepted), bit flips and swapped ids in a ``vectors/`` folder
(loaded silently), and staging folders that a killed save leaves behind.

Anything that could hang runs in a forked child with a deadline (:func:`_forked`):
a fork costs milliseconds where a new interpreter importing labsrc costs seconds,
and a child that hangs is killed, so the suite fails instead of waiting forever.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import signal
import sqlite3
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from factories import make_chunk, reseal

import labsrc
from labsrc.cli.main import main
from labsrc.datasets.lesson import fixtures_dir
from labsrc.errors import InvalidArgument, InvalidRecord
from labsrc.lanes.analysis import Analyzer, english_analyzer
from labsrc.lanes.dense import HashingEncoder
from labsrc.lanes.embed import embed_to_dir, load_embeddings
from labsrc.lanes.persistence import load_bm25_index
from labsrc.lanes.vectordir import load_vector_dir, write_vector_dir
from labsrc.patterns.store import SQLiteStore
from labsrc.records.files import stage_dir
from labsrc.records.loading import iter_jsonl, load_callers, load_chunks, load_json

LESSON = fixtures_dir() / "lesson"
LESSON_FILES = ["--chunks", str(LESSON / "chunks.jsonl"), "--callers", str(LESSON / "callers.json")]
SEARCH = ["search", "RPL-14", "--as", "luna-48291"]
DEEP = 200_000
#: How long a forked call may take before it counts as hung: generous, since CI machines stall.
DEADLINE_S = 30.0


def _forked(call: Callable[[], int], workdir: Path) -> tuple[int, str]:
    """Run ``call()`` in a forked child with a deadline: ``(its return value as exit status, its stderr)``.

    An exception in the child is written to its stderr and exits 70. A child still
    running after :data:`DEADLINE_S` is killed and the test fails: that is the hang.
    """
    err_path = workdir / f"stderr-{time.monotonic_ns()}.txt"
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 70
        try:
            err_fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(err_fd, 2)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", write_through=True)
            sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", write_through=True)
            status = call()
        except BaseException:  # noqa: BLE001 - whatever escapes is the finding; report it
            traceback.print_exc()
        finally:
            os._exit(status)
    deadline = time.monotonic() + DEADLINE_S
    while True:
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"hung: still running after {DEADLINE_S:.0f} s, killed")
        time.sleep(0.01)
    return os.waitstatus_to_exitcode(wait_status), err_path.read_text(encoding="utf-8")


def _cli(argv: list[str], workdir: Path) -> tuple[int, list[str]]:
    """The CLI's exit status and stderr lines, run in a forked child with a deadline."""
    status, err = _forked(lambda: main(argv), workdir)
    return status, err.splitlines()


def _raises_in_child(call: Callable[[], object], workdir: Path) -> str:
    """``"ExceptionName: message"`` of what ``call()`` raised in a forked child ("returned" if nothing)."""

    def child() -> int:
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - the test asserts on the type's name
            print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        print("returned", file=sys.stderr)
        return 0

    return _forked(child, workdir)[1].strip()


def _one_line(lines: list[str]) -> str:
    assert len(lines) == 1, lines
    assert "Traceback" not in lines[0]
    return lines[0]


# --- 1. JSON nested too deeply: a clear InvalidRecord naming the file and line, never a RecursionError ---------


def _deep_list(depth: int = DEEP) -> str:
    return "[" * depth + "]" * depth


def _deep_object(depth: int = DEEP) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def _chunk_line(chunk_id: str, **extra: object) -> str:
    record = {"chunk_id": chunk_id, "document_id": "d", "parent_id": "p", "version": "v1", "region": "EU",
              "acl_tag": "support:eu", "effective_from": "2026-01-01", "text": "Rule RPL-14.", **extra}  # fmt: skip
    return json.dumps(record)


@pytest.mark.parametrize("deep", [_deep_list, _deep_object], ids=["list", "object"])
def test_a_chunks_line_nested_200000_deep_is_an_invalid_record_naming_file_and_line(tmp_path, deep):
    path = tmp_path / "chunks.jsonl"
    path.write_text(_chunk_line("c1") + "\n" + deep() + "\n", encoding="utf-8")
    with pytest.raises(InvalidRecord, match=r"chunks\.jsonl, line 2: .*nested too deeply") as info:
        load_chunks(path)
    assert (info.value.path, info.value.line) == (str(path), 2)


@pytest.mark.parametrize("deep", [_deep_list, _deep_object], ids=["list", "object"])
def test_a_callers_file_nested_200000_deep_is_an_invalid_record_naming_file_and_line(tmp_path, deep):
    path = tmp_path / "callers.json"
    path.write_text('[\n{"actor_id": "a", "region": "EU", "acl_tags": []},\n' + deep() + "\n]\n", encoding="utf-8")
    with pytest.raises(InvalidRecord, match=r"callers\.json, line 3: .*nested too deeply") as info:
        load_callers(path)
    assert info.value.line == 3


def test_nesting_just_past_the_limit_is_refused_the_same_way_and_just_under_it_loads(tmp_path):
    # Not only what overflows Python's stack: 200 levels parse, but would crash a later json.dumps or repr.
    from labsrc.records.loading import MAX_JSON_DEPTH

    ok, too_deep = tmp_path / "ok.jsonl", tmp_path / "deep.jsonl"
    ok.write_text(_chunk_line("c1", metadata=json.loads(_deep_object(MAX_JSON_DEPTH - 1))) + "\n", encoding="utf-8")
    too_deep.write_text(_chunk_line("c1", metadata=json.loads(_deep_object(MAX_JSON_DEPTH))) + "\n", encoding="utf-8")
    assert load_chunks(ok)[0].chunk_id == "c1"
    with pytest.raises(InvalidRecord, match=rf"deep\.jsonl, line 1: .*nested too deeply \(more than {MAX_JSON_DEPTH}"):
        load_chunks(too_deep)
    with pytest.raises(InvalidRecord, match="nested too deeply"):
        list(iter_jsonl(too_deep))
    with pytest.raises(InvalidRecord, match="nested too deeply"):
        load_json(too_deep)


@pytest.mark.parametrize(("suffix", "text"), [(".json", '{"top_k": ' + _deep_list() + "}"),
                                              (".toml", "top_k = " + _deep_list())])  # fmt: skip
def test_a_gate_config_nested_200000_deep_is_an_invalid_record(tmp_path, suffix, text):
    from labsrc.gate.config import load_gate_config

    path = tmp_path / f"gate{suffix}"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InvalidRecord, match=rf"gate\{suffix}, line 1: .*nested too deeply"):
        load_gate_config(path)


def test_store_metadata_nested_200000_deep_is_an_invalid_record(tmp_path):
    path = tmp_path / "lab.sqlite"
    with SQLiteStore(path) as store:
        store.add_document("d")
        store.add_chunk("c1", "d", "text")
    with sqlite3.connect(path) as db:  # a hostile or damaged file, written behind the store's back
        db.execute("UPDATE chunks SET metadata = ?", (_deep_list(),))
    expected = r"field \"chunks\['c1'\]\.metadata\": nested too deeply"
    with SQLiteStore(path) as store, pytest.raises(InvalidRecord, match=expected):
        store.get_all_chunks()


@pytest.mark.parametrize("flag", ["--chunks", "--callers"])
def test_the_cli_exits_2_with_one_line_for_a_200000_deep_file(tmp_path, capsys, flag):
    deep = tmp_path / ("deep.jsonl" if flag == "--chunks" else "deep.json")
    deep.write_text(_deep_list() + "\n", encoding="utf-8")
    argv = [*SEARCH, *LESSON_FILES]
    argv[argv.index(flag) + 1] = str(deep)
    assert main(argv) == 2
    line = _one_line(capsys.readouterr().err.splitlines())
    assert f"{deep}, line 1" in line and "nested too deeply" in line


def test_gate_exits_2_with_one_line_for_200000_deep_cases(tmp_path, capsys):
    cases = tmp_path / "cases.jsonl"
    cases.write_text(_deep_object() + "\n", encoding="utf-8")
    argv = ["gate", *LESSON_FILES, "--cases", str(cases), "--no-progress", "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    assert "nested too deeply" in _one_line(capsys.readouterr().err.splitlines())


# --- 2. a FIFO, a device or a folder where a file belongs: refused by name, before anything blocks --------------


def _vector_folder(root: Path) -> Path:
    """A vectors/<model>/ folder, written by the lab, for the lesson's chunks (one-hot rows)."""
    ids = [json.loads(line)["chunk_id"] for line in (LESSON / "chunks.jsonl").read_text(encoding="utf-8").splitlines()]
    return write_vector_dir(root / "vectors" / "toy", ids, np.eye(len(ids), dtype=np.float32), ["q"],
                            np.eye(1, len(ids), dtype=np.float32), {"model": "toy", "dim": len(ids)})  # fmt: skip


def test_a_fifo_as_chunks_exits_2_with_one_line_instead_of_hanging(tmp_path):
    fifo = tmp_path / "chunks.jsonl"
    os.mkfifo(fifo)
    status, err = _cli([*SEARCH, "--chunks", str(fifo), "--callers", str(LESSON / "callers.json")], tmp_path)
    line = _one_line(err)
    assert status == 2 and str(fifo) in line and "FIFO" in line and "not a regular file" in line


@pytest.mark.parametrize("name", ["corpus.npy", "queries.npy", "corpus_ids.txt", "MODEL.json", "checksums.json"])
def test_a_fifo_inside_a_vectors_folder_exits_2_with_one_line_instead_of_hanging(tmp_path, name):
    folder = _vector_folder(tmp_path)
    (folder / name).unlink()
    os.mkfifo(folder / name)
    status, err = _cli([*SEARCH, *LESSON_FILES, "--vectors", str(folder)], tmp_path)
    line = _one_line(err)
    assert status == 2 and str(folder / name) in line and "FIFO" in line


@pytest.mark.parametrize("name", ["ids.json", "params.json", "postings.npy"])
def test_a_fifo_inside_a_saved_index_is_refused_instead_of_hanging(tmp_path, name):
    folder = labsrc.BM25Index.build([("a", "damaged laptops"), ("b", "lost parcels")]).save(tmp_path / "idx")
    (folder / name).unlink()
    os.mkfifo(folder / name)
    for mmap in (False, True):
        outcome = _raises_in_child(lambda mmap=mmap: labsrc.BM25Index.load(folder, mmap=mmap), tmp_path)
        assert outcome.startswith("InvalidRecord: ") and str(folder / name) in outcome and "FIFO" in outcome


def test_a_fifo_among_the_needles_docs_or_as_an_embed_queries_file_is_refused_instead_of_hanging(tmp_path):
    from labsrc.patterns import load_needles

    needles = tmp_path / "needles"
    shutil.copytree(fixtures_dir() / "needles", needles)
    os.mkfifo(needles / "docs" / "a-pipe.md")
    outcome = _raises_in_child(lambda: load_needles(needles), tmp_path)
    assert outcome.startswith("InvalidRecord: ") and "a-pipe.md" in outcome and "FIFO" in outcome
    embed_to_dir([make_chunk("a-rule", "Rule RPL-14.")], {"q": "RPL-14"}, tmp_path / "vec", HashingEncoder(16),
                 {"model": "hashing-test"})  # fmt: skip
    (tmp_path / "vec" / "queries.jsonl").unlink()
    os.mkfifo(tmp_path / "vec" / "queries.jsonl")
    outcome = _raises_in_child(lambda: load_embeddings(tmp_path / "vec"), tmp_path)
    assert outcome.startswith("InvalidRecord: ") and "queries.jsonl" in outcome and "FIFO" in outcome


def test_a_device_or_a_folder_given_as_a_file_is_refused_by_name(tmp_path):
    with pytest.raises(InvalidRecord, match=r"/dev/null: .*character device.*not a regular file"):
        load_chunks("/dev/null")  # read as empty before: "holds no chunks", which blamed the content
    (tmp_path / "folder.jsonl").mkdir()
    with pytest.raises(InvalidRecord, match=r"folder\.jsonl: .*folder.*not a regular file"):
        load_chunks(tmp_path / "folder.jsonl")
    folder = _vector_folder(tmp_path)
    (folder / "corpus_ids.txt").unlink()
    (folder / "corpus_ids.txt").mkdir()
    with pytest.raises(InvalidRecord, match=r"corpus_ids\.txt: .*folder"):
        load_vector_dir(folder)


def test_a_symlink_to_a_regular_file_still_loads(tmp_path):
    link = tmp_path / "chunks.jsonl"
    link.symlink_to(LESSON / "chunks.jsonl")
    assert load_chunks(link) == load_chunks(LESSON / "chunks.jsonl")


# --- 3. a lone surrogate in the SQLite store: InvalidArgument naming the field and the chunk ----------------


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"text": "a\ud800b"}, "text"),
        ({"enriched_text": "x\udfff"}, "enriched_text"),
        ({"metadata": {"tier": "\ud800"}}, "metadata"),
        ({"metadata": {"\udcff": 1}}, "metadata"),
    ],
)
def test_a_lone_surrogate_in_a_chunk_is_an_invalid_argument_naming_field_and_chunk(tmp_path, values, field):
    with SQLiteStore(tmp_path / "lab.sqlite") as store:
        store.add_document("d")
        call = {"chunk_id": "c1", "doc_id": "d", "text": "fine", **values}
        with pytest.raises(InvalidArgument, match=rf"chunk 'c1': field '{field}' .*lone surrogate"):
            store.add_chunk(**call)
        assert store.count_chunks() == 0  # nothing half-written
        store.add_chunk("c1", "d", "fine")  # the store still works
        assert store.get_chunk("c1")["text"] == "fine"


def test_a_lone_surrogate_in_an_id_or_a_document_is_an_invalid_argument(tmp_path):
    with SQLiteStore(tmp_path / "lab.sqlite") as store:
        with pytest.raises(InvalidArgument, match=r"document 'd': field 'title' .*lone surrogate"):
            store.add_document("d", title="T\ud800")
        with pytest.raises(InvalidArgument, match=r"field 'doc_id' .*lone surrogate"):
            store.add_document("d\ud800")
        store.add_document("d")
        with pytest.raises(InvalidArgument, match=r"chunk 'c\\ud800': field 'chunk_id' .*lone surrogate"):
            store.add_chunk("c\ud800", "d", "text")
        with pytest.raises(InvalidArgument, match=r"field 'chunk_id' .*lone surrogate"):
            store.get_chunk("c\ud800")
        with pytest.raises(InvalidArgument, match="lone surrogate"):
            store.get_all_chunks(where={"tier": "\ud800"})


# --- 4. a saved index only restores an analyzer the lab wrote: no planted regex ------------------------------


DOCS = [("a-rule", "Rule RPL-14. Damaged refurbished laptops."), ("b-rule", "Lost parcels after 10 days.")]


def _plant(folder: Path, **analyzer: object) -> None:
    params_path = folder / "params.json"
    params = json.loads(params_path.read_text(encoding="utf-8"))
    params["analyzer"].update(analyzer)
    params_path.write_text(json.dumps(params), encoding="utf-8")
    reseal(folder)  # whoever plants a pattern can rewrite checksums.json too


@pytest.mark.parametrize("pattern", ["(a+)+$", r"(\w+\s?)*$", "x" * 10_000, "("])
def test_a_regex_planted_in_params_json_is_refused_naming_file_field_and_value(tmp_path, pattern):
    folder = labsrc.BM25Index.build(DOCS).save(tmp_path / "idx")
    _plant(folder, pattern=pattern)
    with pytest.raises(InvalidRecord, match=r"params\.json, field 'analyzer\.pattern': ") as info:
        labsrc.BM25Index.load(folder)
    assert repr(pattern)[:40] in str(info.value) and "analyzer=" in str(info.value)


def test_the_labs_own_analyzers_still_load_from_params_json(tmp_path):
    pytest.importorskip("snowballstemmer")
    for n, analyzer in enumerate([Analyzer(), english_analyzer(), Analyzer(stopwords=frozenset({"rule"}), name="v3")]):
        folder = labsrc.BM25Index.build(DOCS, analyzer=analyzer).save(tmp_path / f"idx{n}")
        assert labsrc.BM25Index.load(folder).analyzer == analyzer


def test_a_custom_pattern_loads_only_when_the_caller_passes_that_analyzer(tmp_path):
    whitespace = Analyzer(pattern=r"\S+", stopwords=frozenset(), name="whitespace")
    index = labsrc.BM25Index.build(DOCS, analyzer=whitespace)
    folder = index.save(tmp_path / "idx")
    with pytest.raises(InvalidRecord, match=r"field 'analyzer\.pattern': '\\\\S\+' is not a token pattern"):
        labsrc.BM25Index.load(folder)
    loaded = load_bm25_index(folder, analyzer=whitespace)
    assert loaded.analyzer == whitespace and loaded.search("RPL-14.", 1) == index.search("RPL-14.", 1)
    _plant(folder, pattern="(a+)+$")
    with pytest.raises(InvalidRecord, match=r"field 'analyzer': .*differs from the analyzer given"):
        labsrc.BM25Index.load(folder, analyzer=whitespace)
    with pytest.raises(InvalidArgument, match="analyzer must be a labsrc.lanes.analysis.Analyzer"):
        labsrc.BM25Index.load(folder, analyzer=str.split)


# --- 5. checksums in a vectors/ folder: a bit flip or two swapped ids are refused by name ----------------------


def _unit(rows: int, dim: int, seed: int) -> np.ndarray:
    matrix = np.random.default_rng(seed).normal(size=(rows, dim)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def _written(tmp_path: Path) -> Path:
    return write_vector_dir(tmp_path / "m", ["a", "b", "c"], _unit(3, 8, 1), ["q1", "q2"], _unit(2, 8, 2),
                            {"model": "m1", "dim": 8}, extra={"notes.jsonl": b'{"x": 1}\n'})  # fmt: skip


def test_write_vector_dir_records_the_sha256_of_every_file(tmp_path):
    folder = _written(tmp_path)
    recorded = json.loads((folder / "checksums.json").read_text(encoding="utf-8"))
    names = sorted(p.name for p in folder.iterdir() if p.name != "checksums.json")
    assert names == ["MODEL.json", "corpus.npy", "corpus_ids.txt", "notes.jsonl", "queries.npy", "query_ids.txt"]
    assert recorded["sha256"] == {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in names}
    assert load_vector_dir(folder).doc_ids == ("a", "b", "c")


def _flip_last_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # the lowest mantissa bit of the last value: still finite, still unit length
    path.write_bytes(bytes(data))


def _swap_first_two_lines(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[0], lines[1] = lines[1], lines[0]
    path.write_text("".join(lines), encoding="utf-8")


@pytest.mark.parametrize(
    ("name", "damage"),
    [
        ("corpus.npy", _flip_last_bit),
        ("queries.npy", _flip_last_bit),
        ("corpus_ids.txt", _swap_first_two_lines),
        ("query_ids.txt", _swap_first_two_lines),
        ("MODEL.json", lambda p: p.write_text(p.read_text(encoding="utf-8").replace("m1", "m2"), encoding="utf-8")),
        ("notes.jsonl", lambda p: p.write_bytes(b'{"x": 2}\n')),
        ("corpus.npy", lambda p: p.unlink()),
    ],
)
def test_a_bit_flip_or_swapped_ids_in_a_vectors_folder_are_refused_naming_the_file(tmp_path, name, damage):
    folder = _written(tmp_path)
    damage(folder / name)
    with pytest.raises(InvalidRecord, match=rf"{name}, field 'sha256'"):
        load_vector_dir(folder)


def test_a_damaged_checksums_file_is_refused(tmp_path):
    folder = _written(tmp_path)
    good = json.loads((folder / "checksums.json").read_text(encoding="utf-8"))
    missing = {name: digest for name, digest in good["sha256"].items() if name != "corpus_ids.txt"}
    for sha256, named in (
        (missing, "corpus_ids.txt"),  # a file the folder needs, no longer covered
        ({**good["sha256"], "../outside.txt": "0" * 64}, "'../outside.txt'"),  # a path out of the folder
        ({**good["sha256"], "corpus_ids.txt": "not a digest"}, "'corpus_ids.txt'"),
    ):
        (folder / "checksums.json").write_text(json.dumps({**good, "sha256": sha256}), encoding="utf-8")
        with pytest.raises(InvalidRecord, match=rf"checksums\.json, field 'sha256': .*{re.escape(named)}"):
            load_vector_dir(folder)


def test_swapped_ids_are_refused_by_the_cli_in_one_line_before_anything_is_ranked(tmp_path, capsys):
    folder = _vector_folder(tmp_path)
    _swap_first_two_lines(folder / "corpus_ids.txt")
    assert main([*SEARCH, *LESSON_FILES, "--vectors", str(folder)]) == 2
    line = _one_line(capsys.readouterr().err.splitlines())
    assert "corpus_ids.txt" in line and "SHA-256" in line


def test_a_folder_written_before_checksums_still_loads(tmp_path):
    folder = _written(tmp_path)
    (folder / "checksums.json").unlink()
    assert load_vector_dir(folder).version == "m1"


def test_a_folder_made_by_labsrc_embed_gets_checksums(tmp_path):
    chunks = [make_chunk("a-rule", "Rule RPL-14."), make_chunk("b-rule", "Unworn footwear.")]
    embed_to_dir(chunks, {"q": "RPL-14"}, tmp_path / "vec", HashingEncoder(16), {"model": "hashing-test"})
    recorded = json.loads((tmp_path / "vec" / "checksums.json").read_text(encoding="utf-8"))["sha256"]
    assert "queries.jsonl" in recorded and "corpus.npy" in recorded
    _flip_last_bit(tmp_path / "vec" / "corpus.npy")
    with pytest.raises(InvalidRecord, match=r"corpus\.npy, field 'sha256'"):
        load_embeddings(tmp_path / "vec")


@pytest.mark.parametrize("folder", ["policies/vectors/all-MiniLM-L6-v2", "coursework/solution/vectors/all-MiniLM-L6-v2"])
def test_the_fixture_vector_folders_carry_checksums_that_verify(folder):
    path = fixtures_dir() / folder
    recorded = json.loads((path / "checksums.json").read_text(encoding="utf-8"))["sha256"]
    assert sorted(recorded) == sorted(p.name for p in path.iterdir() if p.name != "checksums.json")
    assert load_vector_dir(path).version == "sentence-transformers/all-MiniLM-L6-v2"


# --- 6. staging folders of a killed save: removed by the next save or load, a live save's kept ----------------


def _dead_stage(target: Path) -> Path:
    """A staging folder beside ``target`` whose owner was killed mid-save (a forked child that exits)."""
    before = set(target.parent.iterdir())
    pid = os.fork()
    if pid == 0:
        try:
            staged = stage_dir(target)
            (staged / "corpus.npy").write_bytes(b"\0" * 1024)  # half a save
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    (staged,) = set(target.parent.iterdir()) - before
    return staged


def _save_index(folder: Path) -> Path:
    return labsrc.BM25Index.build(DOCS).save(folder)


def _save_vectors(folder: Path) -> Path:
    return write_vector_dir(folder, ["a"], _unit(1, 4, 1), ["q"], _unit(1, 4, 2), {"model": "m"})


@pytest.mark.parametrize(("save", "load"), [(_save_index, labsrc.BM25Index.load), (_save_vectors, load_vector_dir)])
def test_a_dead_saves_staging_folder_is_removed_on_load_and_a_live_ones_kept(tmp_path, save, load):
    target = save(tmp_path / "target")
    live = stage_dir(target)  # this process is alive: a concurrent save in progress
    dead = _dead_stage(target)  # (made second: starting a save removes the dead ones)
    assert dead.is_dir() and live.is_dir()
    load(target)
    assert not dead.exists()
    assert live.is_dir()
    shutil.rmtree(live)


@pytest.mark.parametrize("save", [_save_index, _save_vectors])
def test_a_dead_saves_staging_folder_is_removed_on_the_next_save_and_a_live_ones_kept(tmp_path, save):
    target = save(tmp_path / "target")
    live = stage_dir(target)
    dead = _dead_stage(target)
    save(target)  # the commit used to remove every staging folder beside the target, a live save's too
    assert not dead.exists()
    assert live.is_dir()
    shutil.rmtree(live)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]


def test_a_dead_saves_staging_folder_is_removed_at_the_start_of_a_save_that_then_fails(tmp_path, monkeypatch):
    from labsrc.lanes import index_files

    target = _save_index(tmp_path / "idx")
    dead = _dead_stage(target)

    def full_disk(path, write):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(index_files, "write_durable", full_disk)
    with pytest.raises(InvalidArgument, match="No space left on device"):
        labsrc.BM25Index.build(DOCS).save(target)
    assert not dead.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]  # the failed save's own staging is gone too
    monkeypatch.undo()
    assert labsrc.BM25Index.load(target).n_docs == 2  # the old index is intact


def test_a_staging_folder_of_another_target_or_another_kind_is_never_touched(tmp_path):
    target = _save_index(tmp_path / "idx")
    other = _dead_stage(tmp_path / "idx2")  # another target's, even though its owner is dead
    mine = tmp_path / ".idx.staging-notes"  # a name the lab never writes
    mine.mkdir()
    labsrc.BM25Index.load(target)
    _save_index(target)
    assert other.is_dir() and mine.is_dir()


def test_the_docs_say_where_staging_folders_live_and_when_they_go():
    readme = (Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert ".<name>.staging-" in readme
    section = readme[readme.index(".<name>.staging-") - 600 : readme.index(".<name>.staging-") + 800]
    assert "next save" in section and "load" in section and "process" in section
