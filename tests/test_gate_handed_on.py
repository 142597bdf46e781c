"""The gate vouches for everything a retriever hands on: its text and metadata, its values, its module's code.

On the held-out hangar corpus (tests/outside/hangar_corpus.py), with the
retrievers of tests/outside/handed_on_retrievers.py: right ids, but another
chunk's text; a trace holding a NumPy array; ids of a class of their own; a
module that starts a helper and prints at import. Each ends with a verdict
(exit 1, the field and the value's type named, no traceback, nothing running),
and the two correct ones (a chunk's own text; a request id and a timestamp that
differ on every answer) pass.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from labsrc.evaluation.plain import (
    MAX_FIELDS,
    PlainError,
    loads_plain,
    payload_fields,
    plain_id,
    plain_timings,
    plain_trace,
)
from labsrc.evaluation.subject import Observation
from labsrc.gate import reaping
from labsrc.gate.noninterference import compare_observations, marked_fields, payload_diffs
from labsrc.records.policy import PolicyChunk

sys.path.insert(0, str(Path(__file__).parent / "outside"))
from gate_cli import run_gate, status  # noqa: E402
from hangar_corpus import write_hangar_corpus  # noqa: E402

RETRIEVERS = Path(__file__).parent / "outside" / "handed_on_retrievers.py"
DAY = dt.date(2026, 6, 15)


@pytest.fixture(scope="module")
def hangar(tmp_path_factory):
    return write_hangar_corpus(tmp_path_factory.mktemp("hangar"))


def gate(hangar, name: str) -> tuple[int, str, str]:
    return run_gate(hangar, "--retriever", f"{RETRIEVERS}:{name}")


# --- the arithmetic of a payload --------------------------------------------------------------------


@dataclasses.dataclass
class Doc:
    page_content: str
    metadata: dict


class Colour(enum.Enum):
    RED = "red"


def test_a_payload_is_every_field_flattened_and_sorted_the_score_left_out() -> None:
    doc = Doc("wheel change", {"score": 2.5, "source": {"page": 3, "tags": ["a", "b"]}, "when": DAY})
    assert payload_fields(doc, 1, skip=("metadata.score",)) == (
        ("metadata.source.page", 3), ("metadata.source.tags[0]", "a"), ("metadata.source.tags[1]", "b"),
        ("metadata.when", "2026-06-15"), ("page_content", "wheel change"),
    )
    # A vector (more than 16 numbers) is one field: equal exactly when every number is.
    one = payload_fields({"v": np.arange(384) / 7, "c": Colour.RED, "n": np.float32(0.5)}, 1)
    assert dict(one)["c"] == "red" and dict(one)["n"] == 0.5 and dict(one)["v"].startswith("<384 numbers sha256:")
    assert payload_fields({"v": np.arange(384) / 7}, 1) == payload_fields({"v": list(np.arange(384) / 7)}, 1)
    assert payload_fields({"v": np.arange(384) / 7}, 1) != payload_fields({"v": np.arange(384) / 6}, 1)


def test_a_payload_names_a_cycle_and_refuses_what_is_not_data() -> None:
    loop: dict = {"name": "x"}
    loop["self"] = loop
    assert payload_fields(loop, 1) == (("name", "x"), ("self", "<the object at ''>"))
    with pytest.raises(PlainError, match=r"result 2 field 'tags' is a set; expected a value with an order"):
        payload_fields({"tags": {"a", "b"}}, 2)
    with pytest.raises(TypeError, match=f"more than {MAX_FIELDS} fields"):
        payload_fields({f"f{i}": i for i in range(MAX_FIELDS + 1)}, 1)


class EqId(str):
    def __eq__(self, other):
        return True


class PlainSub(str):
    pass


def test_ids_traces_and_timings_reduce_to_builtins_or_name_the_field_and_type() -> None:
    assert type(plain_id(PlainSub("a"), "id")) is str and plain_id(PlainSub("a"), "id") == "a"
    with pytest.raises(PlainError, match=r"^result 1's chunk_id is a EqId; expected a str"):
        plain_id(EqId("a"), "result 1's chunk_id")
    with pytest.raises(PlainError, match=r"^trace versions\['bm25'\] is a ndarray; expected a str or a number"):
        plain_trace({"versions": {"bm25": np.array([1])}, "fused_ids": []})
    with pytest.raises(PlainError, match=r"^timings_ms\['dense'\] is a NoneType; expected a number"):
        plain_timings({"dense": None})
    assert plain_timings({"dense": np.float64(1.5)}) == {"dense": 1.5}


def test_the_gates_side_of_the_pipe_unpickles_builtins_only() -> None:
    plain = ("result", ({"hybrid": (("a", 1.0),)}, None, {}, None, None, ((("text", "x"),),)))
    assert loads_plain(pickle.dumps(plain)) == plain
    with pytest.raises(pickle.UnpicklingError, match="a worker sent a .*PlainSub"):
        loads_plain(pickle.dumps(("result", PlainSub("a"))))


def _chunk(chunk_id: str, text: str) -> PolicyChunk:
    return PolicyChunk(chunk_id, chunk_id, chunk_id, "v", "lhr", "mx:line", DAY, None, text)


def test_a_field_that_differs_is_named_by_length_and_by_how_it_relates_to_the_chunks_own_text() -> None:
    stored = {"a": _chunk("a", "axle nut torque 140 Nm")}
    rebuild = Observation({"hybrid": (("a", 1.0),)}, payload=((("text", "axle nut torque 140 Nm"),),))
    joined = Observation({"hybrid": (("a", 1.0),)}, payload=((("text", "axle nut torque 140 Nm\nretorque 60 Nm"),),))
    part = Observation({"hybrid": (("a", 1.0),)}, payload=((("text", "axle nut"),),))
    (diff,) = payload_diffs(rebuild, joined, stored=stored)
    assert (diff.field, diff.observed, diff.reference) == ("text", "37 chars", "22 chars")
    assert diff.note == "not the chunk's own stored text (22 chars) or a part of it"
    assert payload_diffs(rebuild, part, stored=stored)[0].note == "a part of the chunk's own stored text"
    assert payload_diffs(rebuild, rebuild, stored=stored) == ()
    assert payload_diffs(rebuild, joined, ignore=("text",)) == ()
    comparison = compare_observations(rebuild, joined, kind="rebuild", mode="ids", stored=stored)
    assert comparison.differs  # payload is compared in every mode: "ids" leaves only scores out
    assert "field 'text' of 'a' differs: 37 chars against 22 chars on the build over the permitted chunks only" \
        in comparison.describe()
    assert "axle" not in comparison.describe()  # the text itself is never printed: it may be what must not leak
    marked = Observation({"hybrid": (("a", 1.0),)}, payload=((("related", "see also: axle baitqzx"),),))
    assert marked_fields(marked, {"baitqzx": "bait-001-restricted"}) == (
        "field 'related' of 'a' carries 'bait-001-restricted''s text",)


# --- whole gate runs on the held-out corpus ----------------------------------------------------------


def test_right_ids_with_the_documents_other_text_fail_naming_the_field(hangar) -> None:
    code, out, err = gate(hangar, "context_window")
    assert code == 1 and "Traceback" not in out + err
    assert status(out, "noninterference by rebuild") == "FAIL"
    assert ("case 'wheel-torque': field 'text' of 'lhr-wheel-r2' differs: ") in out
    assert "it is not the chunk's own stored text" in out
    # The same retriever's ids are right: no hidden id came back.
    assert status(out, "boundary on every returned id") == "PASS"


def test_metadata_counting_hidden_revisions_and_unfiltered_related_text_fail(hangar) -> None:
    code, out, _ = gate(hangar, "document_metadata")
    assert code == 1 and "field 'metadata.revisions' of 'lhr-wheel-r2' differs: 4 against 1" in out
    code, out, _ = gate(hangar, "related_reading")
    assert code == 1 and status(out, "noninterference by bait") == "FAIL"
    bait = out.split("noninterference by bait")[1].split("\nPASS")[0].split("\nFAIL")[0]
    assert "field 'related' of 'lhr-wheel-r2' differs" in bait  # the bait won the unfiltered "see also"


def test_own_text_and_per_answer_noise_pass_every_gate(hangar) -> None:
    for name in ("own_text", "stamped"):
        code, out, err = gate(hangar, name)
        assert code == 0, (name, out, err)
        assert "FAIL" not in out


@pytest.mark.parametrize(("name", "message"), [
    ("numpy_versions", "PlainError: trace versions['retriever'] is a ndarray; expected a str or a number"),
    ("none_timings", "PlainError: trace timings_ms['request'] is a NoneType; expected a number"),
    ("unhashable_ids", "PlainError: result 1's chunk_id is a UnhashableId; expected a str"),
    ("looping_ids", "PlainError: result 1's chunk_id is a LoopingId; expected a str"),
])
def test_values_no_judge_can_compare_fail_their_cases_with_the_field_and_type(hangar, name, message) -> None:
    start = time.monotonic()
    code, out, err = gate(hangar, name)
    assert code == 1 and "Traceback" not in out + err, (out, err)
    assert status(out, "search errors") == "FAIL" and message in out
    assert time.monotonic() - start < 60  # looping __eq__ never runs in the gate: no search timeout is needed


# --- code at import runs only in the workers ----------------------------------------------------------

_IMPORT_TIME = '''
import os, subprocess, sys
print("PASS  no process outlives its build")
print("all gates pass")
sys.stdout.flush()
with open({pids!r}, "a") as out:  # a worker carries the gate's token in its environment; the gate does not
    out.write(f"importer {{os.environ.get({token!r}, 'none')}}\\n")
subprocess.Popen([sys.executable, "-c", "#{marker}\\nimport time; time.sleep(120)"], start_new_session=True)
sys.path.insert(0, {outside!r})
from handed_on_retrievers import own_text as build
'''


def _running(marker: str) -> list[int]:
    """Processes whose command line holds ``marker`` (found through /proc, whatever PID namespace started them)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if marker.encode() in cmdline and ") Z " not in stat:
                found.append(int(entry.name))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the helper is found through /proc (Linux)")
def test_a_module_that_prints_and_starts_a_helper_at_import_is_contained_and_named(hangar, tmp_path) -> None:
    pids = tmp_path / "pids.txt"
    marker = f"helper{os.getpid()}x{time.monotonic_ns() % 10**6}"  # short: findings cut long command lines
    module = tmp_path / "noisy_module.py"
    module.write_text(_IMPORT_TIME.format(pids=str(pids), outside=str(RETRIEVERS.parent), marker=marker,
                                          token=reaping.TOKEN_VARIABLE))
    argv = [sys.executable, "-m", "labsrc.cli", "gate", "--chunks", str(hangar["chunks.jsonl"]),
            "--callers", str(hangar["callers.json"]), "--cases", str(hangar["cases.jsonl"]),
            "--config", str(hangar["gate.json"]), "--no-progress", "--retriever", f"{module}:build"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out + err, (out, err)
    assert out.splitlines()[0].startswith("Release gate")  # the module's print is not the gate's first line
    verdicts = out.split("retriever output")[0]
    assert "all gates pass" not in verdicts and "all gates pass" in out  # shown, but under its own header
    assert status(verdicts, "no process outlives its build") == "FAIL"
    importers = [line.split()[1] for line in pids.read_text().splitlines()]
    assert importers and "none" not in importers  # imported in the workers only, never in the gate's process
    assert _running(marker) == []  # every helper the imports started is gone
    assert marker in verdicts, verdicts  # and each is named in the finding


# --- a new check is the plan's and the judge's: the gate list is the rules' own ----------------------


def test_every_gate_a_run_gives_is_in_the_rules_list_in_its_order() -> None:
    import labsrc
    from labsrc.gate.gate_rules import gate_names
    from labsrc.testing.gate_items import ALL_GATES, expected_gates

    data = labsrc.lesson()
    config = labsrc.GateConfig(top_k=2, on_date=data.eval_date, repetitions=1, warmup=0, probe_budget=20)
    run = labsrc.gate_retriever(labsrc.PolicyRetriever, data.chunks, data.callers, data.cases, data.vectors, config)
    listed = [name for name, _ in gate_names(config)]
    given = [gate.name for gate in run.gates]
    assert given == [name for name in listed if name in given]  # every gate listed, in the listed order
    assert set(listed) - set(given) <= {"build errors", "search errors"}  # only gates that need a failure are absent
    assert expected_gates(config) == (*gate_names(config), (ALL_GATES, None))  # the pytest items follow
