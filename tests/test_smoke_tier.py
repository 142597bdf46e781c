"""The smoke tier (``pytest -m smoke``) names modules that exist, and selects their tests and nothing else."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tiers import SMOKE_MODULES

TESTS = Path(__file__).resolve().parent


def test_every_smoke_module_exists() -> None:
    assert sorted(name for name in SMOKE_MODULES if not (TESTS / name).is_file()) == []


def test_the_marker_selects_exactly_the_smoke_modules() -> None:
    # Collect only (no test runs): which files does -m smoke keep, over the whole suite and the notebooks?
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "smoke", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=TESTS.parent, capture_output=True, text=True, timeout=300, check=False,
    )
    assert listed.returncode == 0, listed.stdout[-2000:] + listed.stderr[-2000:]
    files = {line.split("::")[0] for line in listed.stdout.splitlines() if "::" in line}
    assert files == {f"tests/{name}" for name in SMOKE_MODULES}
