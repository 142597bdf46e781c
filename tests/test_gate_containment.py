"""Nothing outlives the gate (issue 46, part 5): escaped processes, a stopped gate, the retriever's output, outputs.

Each test is a factory that misbehaves the way a real one can: a helper started
in a session of its own or by a double fork, a factory that stops the gate, a
retriever that prints, a report path that is a FIFO. Without the containment in
``labsrc.gate.reaping`` the helpers are still running when the build is closed,
and the gate that was stopped never ends (here: the subprocess hits its timeout).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from labsrc.cli.main import main
from labsrc.datasets.lesson import fixtures_dir, lesson
from labsrc.evaluation.subject import Request, SubjectError
from labsrc.gate import reaping
from labsrc.gate.workers import OUTPUT_LIMIT_BYTES, IsolatedBuild, live_workers

LINUX = pytest.mark.skipif(not reaping.SUPPORTED, reason="finding escaped processes needs Linux's /proc and prctl")
LESSON = fixtures_dir() / "lesson"
SLEEPER = "import time; time.sleep(600)"
ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}


def running(marker: str) -> list[int]:
    """Pids of live (not zombie) processes whose command line holds ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{name}/stat", "rb") as f:
                state = f.read().rpartition(b")")[2].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state not in (b"Z", b"X"):
            found.append(int(name))
    return found


def kill_all(marker: str) -> None:
    for pid in running(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.fixture
def marker():
    mark = f"labsrc-escapee-{uuid.uuid4().hex[:12]}"
    yield mark
    kill_all(mark)  # a failing test must not leave its sleepers behind


def start_in_new_session(mark: str, pids: Path) -> None:
    helper = subprocess.Popen([sys.executable, "-c", SLEEPER, mark + "-session"], start_new_session=True)
    with open(pids, "a") as f:
        f.write(f"{helper.pid} -session\n")


def start_by_double_fork(mark: str, pids: Path) -> None:
    """fork, setsid, fork, exit: the daemon is handed to init (or to a subreaper); returns once it runs Python."""
    middle = os.fork()
    if middle == 0:
        try:
            os.setsid()
            daemon = os.fork()
            if daemon == 0:
                os.execv(sys.executable, [sys.executable, "-c", SLEEPER, mark + "-daemon"])
            with open(pids, "a") as f:
                f.write(f"{daemon} -daemon\n")
        finally:
            os._exit(0)
    os.waitpid(middle, 0)
    daemon = int(pids.read_text().split("\n")[-2].split()[0])
    cmdline = Path(f"/proc/{daemon}/cmdline")
    while mark.encode() not in cmdline.read_bytes():  # exec'd: it carries the token in its environment
        time.sleep(0.01)


def as_leftover(pid: int, argv: list[str]) -> str:
    text = " ".join(argv)
    return f"pid {pid} `{text if len(text) <= 80 else text[:77] + '...'}`"


class Quiet:
    def search(self, query, caller, on_date, top_k):
        return []


def request(query: str = "return policy") -> Request:
    data = lesson()
    return Request(query, data.luna, data.eval_date, 3)


def recorded(pids: Path, mark: str) -> list[str]:
    """The leftovers the helpers the factory recorded must be named as, in pid order."""
    helpers = sorted((int(pid), suffix) for pid, suffix in (line.split() for line in pids.read_text().splitlines()))
    return [as_leftover(pid, [sys.executable, "-c", SLEEPER, mark + suffix]) for pid, suffix in helpers]


# --- 1. escaped processes are found, killed and named ----------------------------------------------------------


@LINUX
def test_helpers_started_in_a_new_session_or_by_double_fork_are_killed_and_named(marker, tmp_path) -> None:
    pids = tmp_path / "pids"

    def escapes(chunks, vectors):
        start_in_new_session(marker, pids)
        start_by_double_fork(marker, pids)
        subprocess.Popen([sys.executable, "-c", SLEEPER, marker + "-group"])  # in the group: killed, not named
        return Quiet()

    build = IsolatedBuild(escapes, (), None)
    deadline = time.monotonic() + 10
    while len(running(marker)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(running(marker)) == 3  # all three run while the build is alive
    build.close()
    assert running(marker) == []  # killpg alone leaves the first two running
    expected = recorded(pids, marker)
    assert len(expected) == 2 and list(build.leftovers) == expected
    assert live_workers() == 0


@LINUX
def test_a_helper_started_by_a_search_that_times_out_is_killed_and_named(marker, tmp_path) -> None:
    pids = tmp_path / "pids"

    class Hangs:
        def search(self, query, caller, on_date, top_k):
            start_by_double_fork(marker, pids)
            time.sleep(600)

    build = IsolatedBuild(lambda chunks, vectors: Hangs(), (), None, search_timeout_s=1.0)
    try:
        observation = build.search(request())
        assert observation.error and "timed out after 1 s" in observation.error
        assert running(marker) == []
        assert list(build.leftovers) == recorded(pids, marker) and len(build.leftovers) == 1
        build.search(request())  # the restart's helper is named too: leftovers add up over restarts
        assert len(build.leftovers) == 2 and running(marker) == []
    finally:
        build.close()


@LINUX
def test_a_worker_that_dies_after_a_double_fork_leaves_nothing_running(marker, tmp_path) -> None:
    # The worker is gone before the gate looks, so its orphans went to init: the token in their environment finds them.
    pids = tmp_path / "pids"

    def forks_and_dies(chunks, vectors):
        start_by_double_fork(marker, pids)
        os._exit(3)

    with pytest.raises(SubjectError, match=r"worker process ended while building .*\(exit status 3\)") as failed:
        IsolatedBuild(forks_and_dies, (), None)
    assert running(marker) == []
    assert live_workers() == 0
    assert list(failed.value.leftovers) == recorded(pids, marker)  # the failed build's error carries them


@LINUX
def test_a_factory_that_runs_a_gate_of_its_own_builds_and_leaves_nothing(marker, tmp_path) -> None:
    # A worker is a gate too: its builds, its watchdog and their descriptors must not trip over the outer ones.
    def inner(chunks, vectors):
        subprocess.Popen([sys.executable, "-c", SLEEPER, marker + "-inner"], start_new_session=True)
        print("inner factory")
        return Quiet()

    def outer(chunks, vectors):
        build = IsolatedBuild(inner, (), None, build_timeout_s=20)
        build.close()
        print(f"inner: {len(build.leftovers)} leftover(s), output {build.output!r}")
        return Quiet()

    build = IsolatedBuild(outer, (), None, build_timeout_s=30)
    build.close()
    assert build.output == "inner: 1 leftover(s), output 'inner factory\\n'\n"
    assert build.leftovers == ()  # the inner gate killed its helper, and its watchdog went with its last build
    assert running(marker) == []


# --- 2. a worker cannot leave the gate hung --------------------------------------------------------------------


def gate_argv(retriever: str) -> list[str]:
    return [sys.executable, "-m", "labsrc.cli", "gate", "--chunks", str(LESSON / "chunks.jsonl"),
            "--callers", str(LESSON / "callers.json"), "--cases", str(LESSON / "cases.jsonl"),
            "--vectors", str(LESSON / "vectors.json"), "--config", str(LESSON / "gate.json"),
            "--no-progress", "--retriever", retriever]  # the config's 20 repetitions: a plug-in's traces are timed too


HOSTILE = '''
    import os, signal, subprocess, sys
    from labsrc import PolicyRetriever

    def stops_parent(chunks, vectors):
        os.kill(os.getppid(), signal.SIGSTOP)
        return PolicyRetriever(chunks, vectors)

    def stops_parent_group(chunks, vectors):
        try:
            os.killpg(os.getpgid(os.getppid()), signal.SIGSTOP)
        except ProcessLookupError:  # in a build's PID namespace the parent's group is 1: killpg(1) is kill(-1)
            pass
        return PolicyRetriever(chunks, vectors)

    class Noisy(PolicyRetriever):
        def search(self, query, caller, on_date, top_k):
            print("NOISE from search", query)
            return super().search(query, caller, on_date, top_k)

    def noisy(chunks, vectors):
        print("NOISE from the factory")
        print("NOISE on stderr", file=sys.stderr)
        subprocess.run(["echo", "NOISE from a child process"], check=True)
        return Noisy(chunks, vectors)
'''


@pytest.fixture
def hostile(tmp_path) -> Path:
    path = tmp_path / "hostile.py"
    path.write_text(textwrap.dedent(HOSTILE), encoding="utf-8")
    return path


@LINUX
@pytest.mark.parametrize("name", ["stops_parent", "stops_parent_group"])
def test_a_factory_that_stops_the_gate_still_gets_a_verdict(hostile, name) -> None:
    # Every build stops the gate (a dozen builds); its own session keeps the stop away from pytest.
    start = time.monotonic()
    try:
        done = subprocess.run(gate_argv(f"{hostile}:{name}"), capture_output=True, text=True, timeout=90,
                              start_new_session=True, env=ENV, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name}: the gate was stopped by its worker and never resumed")
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "all tested gates pass"
    assert elapsed < 60, elapsed


@LINUX
def test_the_watchdog_kills_what_the_workers_started_when_the_gate_is_killed(marker, tmp_path) -> None:
    # SIGKILL of the gate: its worker dies with it (PR_SET_PDEATHSIG), and the watchdog kills the worker's group
    # and the processes carrying the worker's token, so nothing is left running.
    script = tmp_path / "gate.py"
    script.write_text(textwrap.dedent(f'''
        import subprocess, sys, time
        from labsrc.gate.workers import IsolatedBuild

        class Quiet:
            def search(self, *args):
                return []

        def factory(chunks, vectors):
            subprocess.Popen([sys.executable, "-c", {SLEEPER!r}, {marker!r} + "-group"])
            subprocess.Popen([sys.executable, "-c", {SLEEPER!r}, {marker!r} + "-session"], start_new_session=True)
            return Quiet()

        build = IsolatedBuild(factory, (), None)
        print("built", flush=True)
        time.sleep(600)
    '''), encoding="utf-8")
    gate = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=ENV,
                            start_new_session=True)
    try:
        assert gate.stdout.readline() == "built\n"
        deadline = time.monotonic() + 10
        while len(running(marker)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(running(marker)) == 2
        gate.kill()
        gate.wait()
        deadline = time.monotonic() + 10
        while running(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert running(marker) == []
    finally:
        if gate.poll() is None:
            gate.kill()
            gate.wait()
        gate.stdout.close()


@LINUX
def test_no_watchdog_outlives_a_run_that_keeps_one() -> None:
    with reaping.keep_watchdog():
        watchdog = reaping.watchdog_pid()
        assert watchdog is not None
        for _ in range(3):  # builds one after the other share the watchdog
            IsolatedBuild(lambda chunks, vectors: Quiet(), (), None).close()
            assert reaping.watchdog_pid() == watchdog
    assert reaping.watchdog_pid() is None
    assert not os.path.exists(f"/proc/{watchdog}")  # killed and reaped, not a zombie


@LINUX
def test_a_builds_watchdog_is_gone_shortly_after_the_build() -> None:
    IsolatedBuild(lambda chunks, vectors: Quiet(), (), None).close()
    watchdog = reaping.watchdog_pid()
    assert watchdog is not None  # it lingers, for the next build of the run
    deadline = time.monotonic() + reaping.WATCHDOG_LINGER_S + 5
    while reaping.watchdog_pid() is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert reaping.watchdog_pid() is None and not os.path.exists(f"/proc/{watchdog}")


# --- 3. the retriever's stdout and stderr are captured per build -----------------------------------------------


class Prints:
    def search(self, query, caller, on_date, top_k):
        print(f"search: {query}")
        if query == "hang":
            time.sleep(600)
        return []


def prints(chunks, vectors):
    print("factory: print")
    sys.stderr.write("factory: sys.stderr\n")
    os.write(1, b"factory: fd 1\n")
    os.write(2, b"factory: fd 2\n")
    subprocess.run(["echo", "factory: a child process"], check=True)
    print("factory: no newline", end="")
    return Prints()


def test_output_is_captured_per_build_and_never_reaches_the_gates_streams(capfd) -> None:
    build = IsolatedBuild(prints, (), None)
    build.search(request("first"))
    build.close()
    out, err = capfd.readouterr()
    assert "factory:" not in out + err and "search:" not in out + err
    assert build.output == (
        "factory: print\nfactory: sys.stderr\nfactory: fd 1\nfactory: fd 2\nfactory: a child process\n"
        "factory: no newlinesearch: first\n"
    )


def test_each_restarts_output_is_labelled(capfd) -> None:
    build = IsolatedBuild(lambda chunks, vectors: Prints(), (), None, search_timeout_s=1.0)
    try:
        assert "timed out" in (build.search(request("hang")).error or "")
        build.search(request("after"))
    finally:
        build.close()
    assert build.restarts == 1
    assert build.output == "search: hang\n--- restart 1 ---\nsearch: after\n"
    assert "search:" not in "".join(capfd.readouterr())


def test_a_flood_of_output_keeps_its_tail_and_says_it_was_cut() -> None:
    def floods(chunks, vectors):
        for i in range(20000):
            print(f"line {i:05d}")
        return Quiet()

    build = IsolatedBuild(floods, (), None)
    build.close()
    first, _, rest = build.output.partition("\n")
    assert first.startswith("[labsrc: output cut: 220000 bytes written, the last ") and first.endswith(" kept]")
    assert rest.startswith("line ") and rest.endswith("line 19999\n")
    assert len(rest.encode()) <= OUTPUT_LIMIT_BYTES


def test_a_factory_that_fails_hands_its_output_over_with_its_error() -> None:
    def explains_then_raises(chunks, vectors):
        print("cannot reach the index at localhost:9200")
        raise ConnectionError("refused")

    with pytest.raises(SubjectError, match="raised while building") as failed:
        IsolatedBuild(explains_then_raises, (), None)
    assert failed.value.output == "cannot reach the index at localhost:9200\n"


def test_a_notebook_without_standard_streams_still_builds(monkeypatch) -> None:
    # A Jupyter kernel can run with sys.__stdout__ and sys.__stderr__ set to None.
    monkeypatch.setattr(sys, "__stdout__", None)
    monkeypatch.setattr(sys, "__stderr__", None)
    build = IsolatedBuild(prints, (), None)
    assert build.search(request("notebook")).error is None
    build.close()
    assert build.output.endswith("search: notebook\n")


def test_nothing_of_the_output_is_left_on_disk(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    build = IsolatedBuild(prints, (), None)
    (folder,) = tmp_path.iterdir()  # the worker's folder; the capture file has no name on disk
    assert folder.name.startswith("labsrc-gate-") and folder.is_dir()
    build.close()
    assert list(tmp_path.iterdir()) == [] and "factory: print" in build.output


def test_the_verdict_lines_hold_none_of_the_retrievers_output(hostile, capfd) -> None:
    code = main(gate_argv(f"{hostile}:noisy")[3:])
    out, err = capfd.readouterr()
    assert code == 0 and out.splitlines()[-1] == "all tested gates pass"
    verdicts, header, printed = out.partition("retriever output (what each build printed; not part of the verdict):")
    assert "NOISE" not in verdicts and "NOISE" not in err  # never among the verdict lines, nor on the gate's stderr
    shown = printed.split("\n\n")[0].strip("\n").splitlines()  # the section, up to the latency table
    assert header and shown and all(line.startswith(("  | ", "  --- build ")) for line in shown)


# --- 4. an output path that is a FIFO, a device or a folder is refused before the run ----------------------------


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out, captured.err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_junit_xml_path_that_is_a_fifo_is_refused_before_the_run(tmp_path, capsys) -> None:
    fifo = tmp_path / "gates.xml"
    os.mkfifo(fifo)
    code, out, err = run_cli(gate_argv("x")[3:-2] + ["--junit-xml", str(fifo)], capsys)
    assert code == 2 and out == ""
    assert err == (f"labsrc: error: --junit-xml {fifo}: this is a FIFO (named pipe), not a regular file; "
                   "writing there could block or go nowhere; give a file path\n")


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="needs /dev/null")
def test_a_junit_xml_path_that_is_a_device_is_refused(capsys) -> None:
    code, out, err = run_cli(gate_argv("x")[3:-2] + ["--junit-xml", "/dev/null"], capsys)
    assert code == 2 and out == ""
    assert "--junit-xml /dev/null: this is a character device, not a regular file" in err
    assert len(err.splitlines()) == 1


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_an_out_folder_that_is_a_fifo_or_holds_one_where_a_report_goes_is_refused(tmp_path, capsys) -> None:
    fifo = tmp_path / "reports"
    os.mkfifo(fifo)
    code, out, err = run_cli(gate_argv("x")[3:-2] + ["--out", str(fifo)], capsys)
    assert code == 2 and out == ""
    assert f"--out {fifo}: this is a FIFO (named pipe), not a folder; give a folder path" in err
    folder = tmp_path / "gate"
    folder.mkdir()
    os.mkfifo(folder / "report.json")
    code, out, err = run_cli(gate_argv("x")[3:-2] + ["--out", str(folder)], capsys)
    assert code == 2 and out == ""
    assert err == (f"labsrc: error: --out {folder}: {folder / 'report.json'} is a FIFO (named pipe), where a report "
                   "file would be written; remove it or give another folder\n")


def test_an_out_folder_with_ordinary_files_in_it_is_accepted(tmp_path) -> None:
    from labsrc.cli.outputs import check_out_dir

    (tmp_path / "report.json").write_text("{}")
    (tmp_path / "older").mkdir()
    assert check_out_dir(tmp_path) == tmp_path
