"""Collection hooks for the notebooks.

Notebooks 08 and 09 run on BEIR SciFact (and 11 measures filter placement on it), which a fresh clone does not have
(see the README, "Real benchmark"). Without it their cells are skipped with the
reason, instead of failing on the first cell; with it they run under nbval
like every other notebook.
"""

from __future__ import annotations

import pytest

from labsrc.datasets import find_dataset_dir, missing_data_reason

#: Notebook file name → the BEIR collection it needs.
BEIR_NOTEBOOKS = {
    "08-tuning-fusion.ipynb": "scifact",
    "09-real-benchmark.ipynb": "scifact",
    "11-filter-placement.ipynb": "scifact",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    missing: dict[str, bool] = {}
    for item in items:
        dataset = BEIR_NOTEBOOKS.get(item.path.name)
        if dataset is None:
            continue
        if dataset not in missing:
            missing[dataset] = find_dataset_dir(dataset) is None
        if missing[dataset]:
            item.add_marker(pytest.mark.skip(reason=missing_data_reason(dataset)))
