"""Ctrl-C and SIGTERM during ``labsrc gate`` leave the output paths as they were (issue 59).

``--out`` and ``--junit-xml``'s folder are made before the run, to prove them writable. A run stopped
before it wrote removes each folder it made (parents too) and touches none that was there. The process
boundary is what is tested: a real ``labsrc gate`` in a subprocess, signalled once its run has started
(its retriever's build has begun: the factory writes a marker, then waits), never after a fixed sleep.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labsrc.testing.starter import write_starter

#: Factories that say they have started, then build (or search) for longer than any test waits.
SLOW = '''
import os, pathlib, time

def build(chunks, vectors):
    pathlib.Path(os.environ["GATE_STARTED"]).touch()
    time.sleep(300)


class SlowSearch:
    def search(self, query, caller, on_date, top_k):
        pathlib.Path(os.environ["GATE_STARTED"]).touch()
        time.sleep(300)


def slow_search(chunks, vectors):
    return SlowSearch()
'''

#: ``labsrc gate`` as a terminal runs it: SIGINT raises KeyboardInterrupt even when the test runner's
#: process was started with SIGINT ignored (a background job, a CI runner), which its children inherit.
RUN = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
       "from labsrc.cli.main import main; sys.exit(main(sys.argv[1:]))")


@pytest.fixture(scope="module")
def starter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("interrupted")
    write_starter(folder)
    (folder / "slow_retriever.py").write_text(SLOW, encoding="utf-8")
    return folder


def interrupted_gate(folder: Path, signum: int, out: Path, junit: Path, started: Path,
                     factory: str = "build") -> subprocess.CompletedProcess:
    data = folder / "data"
    argv = [sys.executable, "-c", RUN, "gate", "--chunks", str(data / "chunks.jsonl"), "--callers",
            str(data / "callers.json"), "--cases", str(data / "cases.jsonl"), "--config", str(data / "gate.json"),
            "--retriever", f"{folder / 'slow_retriever.py'}:{factory}", "--out", str(out), "--junit-xml", str(junit),
            "--no-progress"]
    env = {**os.environ, "GATE_STARTED": str(started)}
    proc = subprocess.Popen(argv, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120  # a bound for a stuck run, not a guess at how long starting takes
        while not started.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the gate's first build never started"
            time.sleep(0.02)
        assert out.is_dir() and junit.parent.is_dir()  # made up front, before the run: the state to undo
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


@pytest.mark.parametrize(("signum", "status", "said"), [(signal.SIGINT, 130, "labsrc: interrupted"),
                                                         (signal.SIGTERM, 143, "labsrc: terminated")])
def test_an_interrupted_gate_removes_the_output_folders_it_made(starter, tmp_path, signum, status, said) -> None:
    out, junit = tmp_path / "new" / "reports" / "gate", tmp_path / "ci" / "junit" / "gate.xml"
    done = interrupted_gate(starter, signum, out, junit, tmp_path / "started")
    assert done.returncode == status, done.stderr
    assert done.stderr.splitlines()[-1] == said and "Traceback" not in done.stderr
    assert not (tmp_path / "new").exists() and not (tmp_path / "ci").exists()  # the parents it made too
    assert sorted(p.name for p in tmp_path.iterdir()) == ["started"]


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_gate_leaves_folders_that_were_there_untouched(starter, tmp_path, signum, status) -> None:
    out, reports = tmp_path / "reports", tmp_path / "ci"
    out.mkdir()
    reports.mkdir()
    (out / "notes.txt").write_text("mine\n", encoding="utf-8")
    done = interrupted_gate(starter, signum, out, reports / "gate.xml", tmp_path / "started")
    assert done.returncode == status, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"] and list(reports.iterdir()) == []
    assert (out / "notes.txt").read_text(encoding="utf-8") == "mine\n"


def test_a_gate_interrupted_while_a_search_runs_ends_and_removes_its_folders(starter, tmp_path) -> None:
    # The worker is inside the retriever's search: it is killed, not waited for (a search may never end).
    out, junit = tmp_path / "new" / "gate", tmp_path / "new" / "gate.xml"
    done = interrupted_gate(starter, signal.SIGINT, out, junit, tmp_path / "started", factory="slow_search")
    assert done.returncode == 130, done.stderr
    assert done.stderr.splitlines()[-1] == "labsrc: interrupted" and not (tmp_path / "new").exists()
