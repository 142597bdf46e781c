"""The load's analysis in worker processes: the same bytes as one process, and one process whenever workers cannot help."""

from __future__ import annotations

import operator
import subprocess

import pytest

import labsrc
from labsrc.engines import analysis_pool
from labsrc.engines.analysis_pool import analyse_for_copy, staging_rows

TEXTS = [(f"c{i:04d}", f"refund laptop policy {i} damaged refund tab\there {'x' * (i % 7)}") for i in range(300)]


class _NotImportableInAWorker:
    """Pickles by reference to this test module, which a worker's ``python -m`` cannot import."""

    def __call__(self, text: str) -> list[str]:
        return text.split()


@pytest.fixture
def spawned(monkeypatch):
    """Every worker started, counted; and no slice too small to start one."""
    started = []
    real = subprocess.Popen

    def spy(*args, **kwargs):
        started.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(analysis_pool.subprocess, "Popen", spy)
    monkeypatch.setattr(analysis_pool, "PARALLEL_FROM", 1)
    return started


def test_workers_write_the_bytes_one_process_writes(spawned):
    lengths, slices = analyse_for_copy(TEXTS, labsrc.lesson_analyzer, workers=3)
    assert len(spawned) == 3 and [rows for rows, _ in slices] == [100, 100, 100]
    assert (lengths, b"".join(text for _, text in slices)) == staging_rows(TEXTS, labsrc.lesson_analyzer)


@pytest.mark.parametrize("analyzer", [lambda text: text.split(), _NotImportableInAWorker()], ids=["lambda", "unimportable"])
def test_an_analyzer_workers_cannot_run_is_run_here(spawned, analyzer):
    lengths, slices = analyse_for_copy(TEXTS, analyzer, workers=2)
    assert slices == [(300, staging_rows(TEXTS, analyzer)[1])]
    assert lengths == [len(text.split()) for _, text in TEXTS]
    # A lambda does not pickle, so no worker starts; the class pickles, its workers fail, and the work is redone here.
    assert len(spawned) == (0 if isinstance(analyzer, type(lambda: 0)) else 2)


def test_an_analyzer_that_raises_raises_its_own_error_here(spawned):
    with pytest.raises(TypeError, match="must be str or None, not int"):
        analyse_for_copy(TEXTS, operator.methodcaller("split", 5), workers=2)
    assert len(spawned) == 2


def test_a_small_corpus_is_analysed_without_workers(monkeypatch):
    monkeypatch.setattr(analysis_pool.subprocess, "Popen", None)  # any worker would fail loudly
    lengths, slices = analyse_for_copy(TEXTS[:10], labsrc.lesson_analyzer, workers=2)
    assert len(lengths) == 10 and len(slices) == 1
