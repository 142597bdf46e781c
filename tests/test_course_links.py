"""The grader never writes into the course: a link into the course's files is found, refused and replaced.

A submission whose ``vectors/`` is a symbolic link to ``fixtures/policies/vectors``
had ``labsrc embed --out <submission>/vectors/...`` (the rubric's printed fix)
overwrite the course's own vectors. Now every writer refuses a path through such
a link, the rubric names it, and the commands it prints remove the link first.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from labsrc.cli import embed as cli_embed
from labsrc.cli.main import main
from labsrc.course.rubric import grade
from labsrc.course.submission import find_submission
from labsrc.datasets.course_links import course_link, course_roots
from labsrc.datasets.lesson import fixtures_dir
from labsrc.lanes.dense import HashingEncoder

FIXTURES = fixtures_dir()
COURSE_VECTORS = FIXTURES / "policies" / "vectors"
SOLUTION = FIXTURES / "coursework" / "solution"


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under ``root`` (links not followed) and its SHA-256: what "no course file changed" compares."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


# --- finding the link ---------------------------------------------------------------------------


def test_a_link_into_the_fixtures_is_found_relative_and_absolute(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "vectors").symlink_to(COURSE_VECTORS)
    monkeypatch.chdir(tmp_path)
    found = course_link("sub/vectors/all-MiniLM-L6-v2")
    assert found is not None and found.link == Path("sub/vectors")
    assert found.target == COURSE_VECTORS.resolve() and found.root == FIXTURES.resolve()
    absolute = course_link(tmp_path / "sub" / "vectors" / "not-made-yet" / "deeper")
    assert absolute is not None and absolute.link == tmp_path / "sub" / "vectors"
    assert found.describe() == f"sub/vectors is a symbolic link to {COURSE_VECTORS.resolve()}, the course's own files"


def test_a_dangling_link_into_the_course_is_found_too(tmp_path):
    (tmp_path / "vectors").symlink_to(COURSE_VECTORS / "no-such-model")
    found = course_link(tmp_path / "vectors" / "x")
    assert found is not None and found.link == tmp_path / "vectors"


def test_a_path_straight_into_the_fixtures_or_through_a_link_to_the_whole_checkout_is_not_one(tmp_path):
    # An instructor re-embedding the course writes there directly (fixtures/policies/README.md).
    assert course_link(COURSE_VECTORS / "all-MiniLM-L6-v2") is None
    # ~/lab -> /data/lab: the link's target holds the course, it is not inside it.
    (tmp_path / "checkout").symlink_to(FIXTURES.resolve().parent)
    assert course_link(tmp_path / "checkout" / "fixtures" / "policies" / "vectors" / "x") is None
    assert course_link(tmp_path / "elsewhere" / "vectors") is None


def test_a_path_inside_the_installed_package_is_always_one():
    package = course_roots()[-1]
    found = course_link(package / "new-folder")
    assert found is not None and found.link is None and found.root == package
    assert found.describe() == f"{package / 'new-folder'} is inside the installed labsrc package ({package})"


# --- the writers refuse ------------------------------------------------------------------------


@pytest.fixture
def linked(tmp_path, monkeypatch) -> Path:
    """A submission folder in the current directory whose vectors/ and report/ are links into the course."""
    monkeypatch.chdir(tmp_path)
    sub = tmp_path / "sub"
    sub.mkdir()
    lines = (SOLUTION / "cases.jsonl").read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    first["query"] += " please"  # a query the course has no vector for, so the rubric prints `labsrc embed`
    (sub / "cases.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n", encoding="utf-8")
    (sub / "vectors").symlink_to(COURSE_VECTORS)
    (sub / "report").symlink_to(SOLUTION / "report")
    return sub


def _refusal(argv, capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_embed_refuses_to_write_through_the_link_even_without_the_extra(linked, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # the link is named before the missing extra
    err = _refusal(["embed", "--chunks", str(FIXTURES / "policies" / "chunks.jsonl"),
                    "--queries", "sub/cases.jsonl", "--out", "sub/vectors/all-MiniLM-L6-v2"], capsys)
    assert err == (
        f"labsrc: error: --out sub/vectors/all-MiniLM-L6-v2: sub/vectors is a symbolic link to "
        f"{COURSE_VECTORS.resolve()}, the course's own files; writing through it would change the course: "
        "remove the link (rm sub/vectors) and run again, so your files get a folder of their own"
    )


@pytest.mark.parametrize("option", ["--out", "--junit-xml"])
def test_gate_refuses_to_write_its_report_through_the_link(linked, option, capsys):
    target = "sub/report" if option == "--out" else "sub/report/gates.xml"
    err = _refusal(["gate", "--chunks", str(FIXTURES / "policies" / "chunks.jsonl"),
                    "--callers", str(FIXTURES / "policies" / "callers.json"), "--cases", "sub/cases.jsonl",
                    option, target], capsys)
    assert err.startswith(f"labsrc: error: {option} {target}: sub/report is a symbolic link to ")
    assert err.endswith("remove the link (rm sub/report) and run again, so your files get a folder of their own")


# --- the rubric names the link and its commands replace it ------------------------------------


def test_the_submissions_commands_remove_a_link_inside_it_and_only_there(linked, tmp_path):
    sub = find_submission("sub")
    assert sub.embed_command().startswith("rm sub/vectors && labsrc embed ")
    assert sub.gate_command().startswith("rm sub/report && labsrc gate ")
    assert [str(link.link) for link in sub.course_links()] == ["sub/report", "sub/vectors"]
    # The submission folder itself linked into the course: removing it is not a fix; the writers refuse instead.
    (tmp_path / "whole").symlink_to(SOLUTION)
    whole = find_submission("whole")
    assert whole.embed_command().startswith("labsrc embed ")
    assert [(str(link.link), whole.replaceable(link)) for link in whole.course_links()] == [("whole", False)]


def test_following_every_printed_fix_leaves_the_course_unchanged(linked, monkeypatch, capsys):
    """The rubric's fixes, run as printed (the model replaced by a hashing encoder), never touch fixtures/."""
    monkeypatch.setattr(cli_embed, "minilm_encoder", lambda device="cpu", batch_size=32: HashingEncoder(16))
    record = {"model": "hashing-16", "packaged_by": "tests", "sentence_transformers": "-", "transformers": "-",
              "torch": "-", "max_seq_length": 64}  # fmt: skip
    monkeypatch.setattr(cli_embed, "minilm_model_record", lambda: dict(record))
    before = tree_digest(FIXTURES)

    first = grade("sub", measure=False)
    text = "\n".join(first.inputs) + "\n" + "\n".join(e.detail for level in first.levels for e in level.evidence)
    assert "course files: vectors/ is a symbolic link to fixtures/policies/vectors, the course's own files, " \
           "not yours; the commands below remove the link first, never what it points to" in first.inputs
    assert "course files: report/ is a symbolic link to fixtures/coursework/solution/report" in text
    commands = list(dict.fromkeys(re.findall(r"`((?:rm [^`]+ && )?labsrc (?:embed|gate) [^`]+)`", text)))
    assert [c.split(" --")[0] for c in commands] == ["rm sub/vectors && labsrc embed", "rm sub/report && labsrc gate"]
    assert all("my-submission" not in c for c in commands), commands  # each names the folder being graded
    for command in commands:
        for step in command.split(" && "):
            argv = shlex.split(step)
            if argv[0] == "rm":
                Path(argv[1]).unlink()  # what `rm LINK` does to a symbolic link: the link goes, its target stays
            else:
                assert main(argv[1:]) in (0, 1), capsys.readouterr().err
    capsys.readouterr()

    assert tree_digest(FIXTURES) == before
    assert not Path("sub/vectors").is_symlink() and (Path("sub/vectors/all-MiniLM-L6-v2") / "MODEL.json").is_file()
    again = grade("sub", measure=False)
    assert not any("symbolic link" in line for line in again.inputs)
    assert not any("vectors/ is the course's own" in line for line in again.inputs)
