"""`labsrc audit` of one subject in a fresh interpreter, read back through its ``--rows`` file.

A library that is not fork-safe (LanceDB, Milvus Lite, Chroma) must not have run in
the process that forks the gate's workers; the test process may have run it, so the
audit runs in a new one, exactly as a user runs the command.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from labsrc.audit import AuditRow, load_rows
from labsrc.datasets.lesson import fixtures_dir


def audit_in_fresh_interpreter(subject: str, dataset: str = "lesson", timeout_s: float = 240.0) -> AuditRow:
    """The audit row of ``subject`` on the fixture folder ``dataset``, from ``python -m labsrc.cli audit``."""
    with tempfile.TemporaryDirectory() as folder:
        rows = Path(folder) / "rows.jsonl"
        done = subprocess.run(
            [sys.executable, "-m", "labsrc.cli", "audit", "--subjects", subject, "--data",
             f"{dataset}={fixtures_dir() / dataset}", "--rows", str(rows), "--no-progress"],
            capture_output=True, text=True, timeout=timeout_s,
        )
        if done.returncode != 0:
            raise AssertionError(f"labsrc audit exited {done.returncode}: {done.stderr[-2000:]}")
        [row] = load_rows(rows)
    return row
