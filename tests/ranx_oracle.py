"""ranx as a test oracle, run as plain Python in a child process (``NUMBA_DISABLE_JIT=1``).

ranx compiles its metrics and its Fisher test with numba on first use: 85 s for the
metrics these tests compare and about 50 s for the Fisher test on a fresh install,
where the on-disk cache is empty (every CI run). The oracle's arithmetic is the same
without the compiler, and on the tests' small collections plain Python takes a
second or two. The JIT switch is process-wide, so the oracle runs in a child
process and the lab's own process (and every other library in it) keeps numba.

``ranx_jobs(jobs)`` runs a list of jobs in one child and returns their results:

* ``{"evaluate": {"qrels": ..., "run": ... or "run_file": TREC path, "metrics": [...], "return_mean": bool}}``
  → ``ranx.evaluate(..., make_comparable=True)`` as ``{metric: float}`` (mean) or
  ``{metric: [per-query floats]}`` (queries in ranx's order, sorted ids);
* ``{"fisher": {"control": [...], "treatment": [...], "n_permutations": n, "seed": s}}``
  → the p-value of ``ranx.statistical_tests.fisher_randomization_test``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_CHILD = r"""
import json, sys, warnings
import numpy as np
warnings.simplefilter("ignore")
import ranx
from ranx.statistical_tests.fisher_randomization_test import fisher_randomization_test

def evaluate(job):
    run = ranx.Run.from_file(job["run_file"], kind="trec") if "run_file" in job else ranx.Run(job["run"])
    out = ranx.evaluate(ranx.Qrels(job["qrels"]), run, job["metrics"],
                        return_mean=job.get("return_mean", True), make_comparable=job.get("make_comparable", True))
    if isinstance(out, dict):
        return {k: (float(v) if np.ndim(v) == 0 else [float(x) for x in v]) for k, v in out.items()}
    return float(out)

def fisher(job):
    p, _ = fisher_randomization_test(np.asarray(job["control"], dtype=float), np.asarray(job["treatment"], dtype=float),
                                     n_permutations=job["n_permutations"], random_seed=job["seed"])
    return float(p)

jobs = json.load(sys.stdin)
print(json.dumps([evaluate(j["evaluate"]) if "evaluate" in j else fisher(j["fisher"]) for j in jobs]))
"""


def ranx_jobs(jobs: list[dict]) -> list:
    """Each job's result, computed by ranx without numba in one child process (skips without ranx)."""
    pytest.importorskip("ranx", reason="ranx (dev extra)")
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    proc = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(jobs), capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"the ranx oracle failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)
