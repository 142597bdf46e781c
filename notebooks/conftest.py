"""Collection hooks for the notebooks.

Notebooks 08 and 09 run on BEIR SciFact (and 11 and 12 measure on it), which a fresh clone does not have
(see the README, "Real benchmark"). Without it their cells are skipped with the
reason, instead of failing on the first cell; with it they run under nbval
like every other notebook. Notebook 12 also needs the ``postgres`` extra and
is skipped, with the install command as the reason, without it.
"""

from __future__ import annotations

import os

import pytest

from labsrc.datasets import find_dataset_dir, missing_data_reason
from labsrc.engines import postgres_available
from labsrc.records import UNCHECKED_PREFIX

try:
    from student_checks import add_student_items
except ModuleNotFoundError as exc:  # nbformat (the dev extra): without it nbval collects no notebook either
    if exc.name != "nbformat":
        raise
    add_student_items = None

#: Notebook file name → the BEIR collection it needs.
BEIR_NOTEBOOKS = {
    "08-tuning-fusion.ipynb": "scifact",
    "09-real-benchmark.ipynb": "scifact",
    "11-filter-placement.ipynb": "scifact",
    "12-into-a-real-database.ipynb": "scifact",
}

#: Notebooks that run the PostgreSQL engine (the ``postgres`` extra).
POSTGRES_NOTEBOOKS = frozenset({"12-into-a-real-database.ipynb"})


def pytest_configure(config: pytest.Config) -> None:
    # The shared SciFact vectors (../shared/data/beir, what CI and this machine have) were written without a
    # checksums.json, so loading them warns that they are unchecked (labsrc.records.pinned), on stderr, which
    # nbval compares: a folder `labsrc embed --beir` wrote has one and loads silently. The kernels nbval starts
    # inherit this filter; it matches that warning's literal start only (UNCHECKED_PREFIX), no other.
    previous = os.environ.get("PYTHONWARNINGS")
    quiet = f"ignore:{UNCHECKED_PREFIX}"
    if quiet not in (previous or "").split(","):
        os.environ["PYTHONWARNINGS"] = f"{previous},{quiet}" if previous else quiet


def pytest_ignore_collect(collection_path, config: pytest.Config) -> bool | None:
    # The smoke tier (pytest -m smoke, see tests/tiers.py) runs no notebook: skip parsing them.
    if (config.getoption("markexpr", "") or "").strip() == "smoke":
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if add_student_items is not None:
        add_student_items(items)  # each student twin's checks, in its lesson's kernel (notebooks/student_checks.py)
    missing: dict[str, bool] = {}
    engine_missing = postgres_available()
    for item in items:
        if item.path.name in POSTGRES_NOTEBOOKS and engine_missing is not None:
            item.add_marker(pytest.mark.skip(reason=engine_missing))
            continue
        dataset = BEIR_NOTEBOOKS.get(item.path.name)
        if dataset is None:
            continue
        if dataset not in missing:
            missing[dataset] = find_dataset_dir(dataset) is None
        if missing[dataset]:
            item.add_marker(pytest.mark.skip(reason=missing_data_reason(dataset)))
