"""No process a build starts survives it (issue 56, part 3): the escapes a subreaper and a token cannot hold.

Each factory below starts a helper the way that beat the gate before builds ran
in a PID namespace of their own (:mod:`labsrc.gate.containment`):
``clone(CLONE_PARENT)`` then ``setsid`` (the helper was the gate's child, outside
the worker's tree), ``prctl(PR_SET_CHILD_SUBREAPER, 0)`` then a double fork with
an empty environment (handed to init, and no token to find it by), and a helper
started while the retriever's module is imported. Each helper records what it
sees (its pid, its parent's, its session, whether it carries the token), so a
test shows the escape really happened before it shows the helper did not survive
``close()`` and is named in ``leftovers`` by that pid.
"""

from __future__ import annotations

import ctypes
import inspect
import os
import platform
import runpy
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from labsrc.cli.main import main
from labsrc.evaluation.subject import SubjectError
from labsrc.gate import containment
from labsrc.gate.procfs import CMDLINE_CHARS, TOKEN_VARIABLE
from labsrc.gate.workers import IsolatedBuild, live_workers

STARTER = Path(__file__).resolve().parents[1] / "labsrc" / "testing" / "starter"

#: The helper: records ``pid ppid sid token`` as it sees them (its namespace's numbers), then sleeps.
HELPER = ("import os, sys, time; token = int(%r in os.environ); w = open(sys.argv[1] + '.tmp', 'w'); "
          "w.write(f'{os.getpid()} {os.getppid()} {os.getsid(0)} {token}'); w.close(); "
          "os.rename(sys.argv[1] + '.tmp', sys.argv[1]); time.sleep(600)") % TOKEN_VARIABLE

CLONE_PARENT = 0x00008000
SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(platform.machine())


@pytest.fixture(scope="module")
def namespace() -> str:
    kind = containment.containment_kind()
    if kind != "pid-namespace":
        pytest.skip(f"builds here get {kind!r}, not a PID namespace: these escapes are what that cannot hold")
    return kind


@pytest.fixture
def marker():
    mark = f"labsrc-escape-{uuid.uuid4().hex[:12]}"
    yield mark
    for pid in running(mark):  # a failing test must not leave its helpers behind
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def running(marker: str) -> list[int]:
    """Pids (ours: the test's namespace) of live processes whose command line holds ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            state = Path(f"/proc/{name}/stat").read_bytes().rpartition(b")")[2].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state not in (b"Z", b"X"):
            found.append(int(name))
    return found


def status_field(pid: int | str, name: str) -> str:
    """A field of ``/proc/<pid>/status`` (``PPid``, ``NSpid``, ...)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    raise KeyError(name)


def parent_inside(pid: int) -> int:
    """The pid, inside its build's namespace, of the parent of ``pid`` (a pid of ours): 1 is the namespace's init."""
    return int(status_field(status_field(pid, "PPid"), "NSpid").split()[-1])


def helper_argv(record: Path, marker: str) -> list[str]:
    return [sys.executable, "-c", HELPER, str(record), marker]


def seen_by_helper(record: Path, timeout: float = 10.0) -> tuple[int, int, int, bool]:
    """What the helper recorded: ``(pid, ppid, sid, carries the token)``, once it has."""
    deadline = time.monotonic() + timeout
    while not record.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the helper never wrote {record}")
        time.sleep(0.01)
    pid, ppid, sid, token = (int(field) for field in record.read_text().split())
    return pid, ppid, sid, bool(token)


def as_leftover(pid: int, argv: list[str]) -> str:
    """How ``leftovers`` names a process (labsrc.gate.procfs.describe): its command line cut to 80 characters."""
    text = " ".join(argv)
    return f"pid {pid} `{text if len(text) <= CMDLINE_CHARS else text[: CMDLINE_CHARS - 3] + '...'}`"


class Quiet:
    def search(self, query, caller, on_date, top_k):
        return []


# --- the escapes, as a factory would write them -----------------------------------------------------------------


def start_by_clone_parent(argv: list[str]) -> int:
    """``clone(CLONE_PARENT)``, ``setsid``, exec: the helper is a child of this process's parent, in a session of its own.

    ``PyDLL`` keeps the GIL across the call, so the child, which runs no Python
    beyond ``setsid`` and ``execv``, finds it held by its one thread.
    """
    pid = ctypes.PyDLL(None, use_errno=True).syscall(SYS_CLONE, CLONE_PARENT | int(signal.SIGCHLD), 0, 0, 0, 0)
    if pid == 0:
        try:
            os.setsid()
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    if pid < 0:
        raise OSError(ctypes.get_errno(), "clone(CLONE_PARENT)")
    return pid


def start_by_double_fork_without_subreaper(argv: list[str]) -> None:
    """``prctl(PR_SET_CHILD_SUBREAPER, 0)``, fork, ``setsid``, fork, exec with an empty environment, exit."""
    ctypes.CDLL(None, use_errno=True).prctl(36, 0, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    middle = os.fork()
    if middle == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                os.execve(argv[0], argv, {})  # no token: the worker's environment is not its
        finally:
            os._exit(0)
    os.waitpid(middle, 0)


IMPORTED = '''
    import subprocess
    # Runs when the retriever's module is imported: during the build, in the factory's process.
    HELPER = subprocess.Popen({argv!r}, start_new_session=True, env={{}})

    class Quiet:
        def search(self, query, caller, on_date, top_k):
            return []

    def build(chunks, vectors):
        return Quiet()
'''


def import_module_that_starts_a_helper(path: Path):
    """The factory imports the retriever's module, whose top level starts the helper (``--retriever FILE:build``)."""
    return runpy.run_path(str(path))["build"]


# --- 1. each escape, in one build ---------------------------------------------------------------------------------


@pytest.mark.skipif(SYS_CLONE is None, reason=f"no clone syscall number known for {platform.machine()}")
def test_a_helper_made_the_parents_child_by_clone_parent_does_not_survive_and_is_named(namespace, marker, tmp_path):
    record = tmp_path / "helper"
    argv = helper_argv(record, marker)

    def factory(chunks, vectors):
        start_by_clone_parent(argv)
        seen_by_helper(record)
        return Quiet()

    build = IsolatedBuild(factory, (), None)
    assert build.containment == "pid-namespace" == containment.containment_kind()
    pid, ppid, sid, _ = seen_by_helper(record)
    (alive,) = running(marker)
    assert ppid == 1 == parent_inside(alive) and sid == pid  # a child of the factory's parent, in a session of its own
    build.close()
    assert not os.path.exists(f"/proc/{alive}") and running(marker) == []
    assert build.leftovers == (as_leftover(pid, argv),)
    assert live_workers() == 0


def test_a_double_forked_helper_without_subreaper_or_token_does_not_survive_and_is_named(namespace, marker, tmp_path):
    record = tmp_path / "helper"
    argv = helper_argv(record, marker)

    def factory(chunks, vectors):
        start_by_double_fork_without_subreaper(argv)
        seen_by_helper(record)
        return Quiet()

    build = IsolatedBuild(factory, (), None)
    pid, _, _, token = seen_by_helper(record)
    (alive,) = running(marker)
    assert parent_inside(alive) == 1 and not token  # handed to init, and nothing in its environment says whose it is
    build.close()
    assert not os.path.exists(f"/proc/{alive}") and running(marker) == []
    assert build.leftovers == (as_leftover(pid, argv),)


def test_a_helper_started_when_the_retrievers_module_is_imported_does_not_survive_and_is_named(
    namespace, marker, tmp_path
) -> None:
    record = tmp_path / "helper"
    argv = helper_argv(record, marker)
    module = tmp_path / "starts_at_import.py"
    module.write_text(textwrap.dedent(IMPORTED.format(argv=argv)), encoding="utf-8")

    def factory(chunks, vectors):
        build = import_module_that_starts_a_helper(module)
        seen_by_helper(record)
        return build(chunks, vectors)

    build = IsolatedBuild(factory, (), None)
    pid, _, sid, token = seen_by_helper(record)
    assert sid == pid and not token
    (alive,) = running(marker)
    build.close()
    assert not os.path.exists(f"/proc/{alive}") and running(marker) == []
    assert build.leftovers == (as_leftover(pid, argv),)


def test_a_factory_that_escapes_then_exits_still_has_its_helper_named_and_its_exit_status_reported(
    namespace, marker, tmp_path
) -> None:
    # Before, the worker's own exit handed the helper to init, and with no token nothing found it.
    record = tmp_path / "helper"
    argv = helper_argv(record, marker)

    def factory(chunks, vectors):
        start_by_double_fork_without_subreaper(argv)
        seen_by_helper(record)
        os._exit(3)

    with pytest.raises(SubjectError, match=r"worker process ended while building .*\(exit status 3\)") as failed:
        IsolatedBuild(factory, (), None)
    pid, _, _, _ = seen_by_helper(record)
    assert running(marker) == []
    assert failed.value.leftovers == (as_leftover(pid, argv),)


# --- 2. where there is no namespace, the subreaper still works ----------------------------------------------------


def test_without_a_namespace_the_subreaper_still_kills_and_names_a_helper_in_a_session_of_its_own(
    marker, tmp_path, monkeypatch
) -> None:
    if containment.containment_kind() == "process-group":
        pytest.skip("no /proc here: nothing is named")
    monkeypatch.setattr(containment, "containment_kind", lambda: "subreaper")
    record = tmp_path / "helper"
    argv = helper_argv(record, marker)

    def factory(chunks, vectors):
        (tmp_path / "factory").write_text(str(os.getpid()))
        subprocess.Popen(argv, start_new_session=True)
        seen_by_helper(record)
        return Quiet()

    build = IsolatedBuild(factory, (), None)
    assert build.containment == "subreaper"
    pid, ppid, _, token = seen_by_helper(record)
    assert [pid] == running(marker) and ppid == int((tmp_path / "factory").read_text()) and token  # our numbering
    build.close()
    assert running(marker) == []
    assert build.leftovers == (as_leftover(pid, argv),)


def test_a_worker_the_kernel_refuses_its_namespace_builds_as_the_subreaper_and_says_so(monkeypatch) -> None:
    if containment.containment_kind() != "pid-namespace":
        pytest.skip("no namespace here to be refused")
    refused = containment._Measured(os.getpid(), "pid-namespace", flags=0x1)  # unshare(2) refuses: EINVAL
    monkeypatch.setattr(containment, "_MEASURED", refused)
    build = IsolatedBuild(lambda chunks, vectors: Quiet(), (), None)
    assert build.containment == "subreaper"
    build.close()
    assert build.leftovers == () and live_workers() == 0


# --- 3. the gate: "no process outlives its build" fails, and nothing is left running -------------------------------


@pytest.mark.skipif(SYS_CLONE is None, reason=f"no clone syscall number known for {platform.machine()}")
def test_the_gate_fails_a_retriever_whose_factory_escapes_by_clone_parent(namespace, marker, tmp_path, capsys):
    escape = textwrap.dedent(inspect.getsource(start_by_clone_parent))
    module = tmp_path / "escaping_retriever.py"
    module.write_text(textwrap.dedent(f'''
        import ctypes, os, runpy, signal, sys, time

        CLONE_PARENT, SYS_CLONE = {CLONE_PARENT}, {SYS_CLONE}
        STARTER = runpy.run_path({str(STARTER / "my_retriever.py")!r})
        ARGV = [sys.executable, "-c", "import time; time.sleep(600)", {marker!r}]

    ''') + escape + textwrap.dedent(f'''

        def build(chunks, vectors):
            pid = start_by_clone_parent(ARGV)
            while {marker!r}.encode() not in open(f"/proc/{{pid}}/cmdline", "rb").read():  # until it runs
                time.sleep(0.01)
            return STARTER["build"](chunks, vectors)
    '''), encoding="utf-8")
    data = STARTER / "data"
    code = main(["gate", "--chunks", str(data / "chunks.jsonl"), "--callers", str(data / "callers.json"),
                 "--cases", str(data / "cases.jsonl"), "--config", str(data / "gate.json"),
                 "--retriever", f"{module}:build", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 1, out
    failed = [line[len("FAIL  "):].split("  ")[0] for line in out.splitlines() if line.startswith("FAIL  ")]
    assert failed == ["no process outlives its build"], out  # the starter retriever passes every other gate
    named = [line for line in out.splitlines() if "the factory left a process running: build 'every stored chunk': pid"
             in line]
    command = " ".join([sys.executable, "-c", "import time; time.sleep(600)", marker])  # ARGV, as the gate shows it
    shown = command if len(command) <= CMDLINE_CHARS else command[: CMDLINE_CHARS - 3] + "..."
    assert len(named) == 1 and named[0].endswith(f"`{shown}`"), named  # whatever the interpreter's path's length
    assert running(marker) == []
    assert live_workers() == 0
