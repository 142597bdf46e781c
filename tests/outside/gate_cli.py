"""`labsrc gate` run in-process on a corpus written by ``corpus.py`` or ``field_corpus.py``, as CI runs it."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping
from pathlib import Path

from labsrc.cli.main import main


def run_gate(corpus: Mapping[str, Path], *extra: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``labsrc gate`` over ``corpus`` with ``extra`` options."""
    argv = ["gate", "--chunks", str(corpus["chunks.jsonl"]), "--callers", str(corpus["callers.json"]),
            "--cases", str(corpus["cases.jsonl"]), "--config", str(corpus["gate.json"]), "--no-progress", *extra]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def status(stdout: str, gate_name: str) -> str:
    """PASS, FAIL or NOT TESTED: the printed table's verdict on the gate named ``gate_name``."""
    (line,) = [line for line in stdout.splitlines() if f"  {gate_name}  " in f"{line}  "]
    return "NOT TESTED" if line.startswith("NOT TESTED") else line.split()[0]
