from __future__ import annotations

import pytest

import labsrc


@pytest.fixture(scope="session")
def data() -> labsrc.Lesson:
    return labsrc.lesson()


@pytest.fixture(scope="session")
def permitted(data: labsrc.Lesson) -> list[labsrc.PolicyChunk]:
    return labsrc.permitted_chunks(data.luna, data.chunks, data.eval_date)


@pytest.fixture(scope="module")
def monkeypatch_module():
    """A monkeypatch that hypothesis tests can use (function-scoped fixtures are reset per example)."""
    with pytest.MonkeyPatch.context() as patch:
        yield patch
