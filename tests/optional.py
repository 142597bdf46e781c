"""Skip a test module when an optional library is missing, without importing the library.

``pytest.importorskip`` imports what it checks. Every pytest-xdist worker collects every
module, so a module-level ``importorskip("lancedb")`` cost each of the four workers the
whole import (LanceDB 2.5 s, LlamaIndex 1.7 s, Chroma 0.8 s) although one worker runs the
module. :func:`require` asks the import system whether the module is there
(:func:`importlib.util.find_spec`, which imports at most its parent packages) and leaves
the import itself to the tests that use it.
"""

from __future__ import annotations

import importlib.util

import pytest


def require(*modules: str, reason: str | None = None) -> None:
    """Skip the calling module, naming the first of ``modules`` that is not installed."""
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # a parent package is missing
            found = False
        if not found:
            pytest.skip(reason or f"could not import {module!r}: not installed", allow_module_level=True)
