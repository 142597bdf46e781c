"""Plots: the figures show the numbers they are given (checked on the artists, not by eye)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from labsrc.errors import InvalidArgument  # noqa: E402
from labsrc.reports.plots import LANE_COLORS, plot_latency, plot_recall, save_figure  # noqa: E402

PER_CASE = pd.DataFrame(
    {"bm25": [1.0, 0.0, 1.0], "dense": [0.0, 1.0, 1.0], "hybrid": [1.0, 1.0, 1.0]},
    index=pd.Index(["exact-code", "paraphrase", "shared-language"], name="case"),
)
LATENCY = pd.DataFrame(
    {
        "stage": ["authorize", "bm25", "dense", "fusion"],
        "p50_ms": [0.02, 0.01, 0.015, 0.008],
        "p95_ms": [0.03, 0.02, 0.02, 0.01],
        "p50_budget_ms": [10.0, 12.0, 40.0, 8.0],
        "p95_budget_ms": [10.0, 12.0, 40.0, 8.0],
    }
)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def bar_heights(fig: Figure, label: str) -> list[float]:
    ax = fig.axes[0]
    (container,) = [c for c in ax.containers if c.get_label() == label]
    return [round(bar.get_height(), 6) for bar in container]


def test_recall_plot_groups_cases_and_the_mean() -> None:
    fig = plot_recall(PER_CASE, 2)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["exact-code", "paraphrase", "shared-language", "mean"]
    assert bar_heights(fig, "bm25") == [1.0, 0.0, 1.0, round(2 / 3, 6)]
    assert bar_heights(fig, "dense") == [0.0, 1.0, 1.0, round(2 / 3, 6)]
    assert bar_heights(fig, "hybrid") == [1.0, 1.0, 1.0, 1.0]
    assert ax.get_ylabel() == "Recall@2"
    labels = sorted(t.get_text() for t in ax.texts)
    # Three means, plus a visible "0" over bm25's paraphrase bar and dense's exact-code bar.
    assert labels == ["0", "0", "0.67", "0.67", "1.00"]
    assert ax.get_xlabel().startswith("positive case")


def test_a_lane_scoring_zero_shows_a_visible_zero_and_the_threshold_has_a_legend_entry() -> None:
    zero = pd.DataFrame({"bm25": [0.0], "dense": [1.0], "hybrid": [1.0]}, index=pd.Index(["only"], name="case"))
    fig = plot_recall(zero, 2, thresholds={"hybrid": 1.0, "bm25": 0.5})
    ax = fig.axes[0]
    texts = [(t.get_text(), t.xy) for t in ax.texts]
    bm25_bars = [c for c in ax.containers if c.get_label() == "bm25"][0]
    centre = bm25_bars[0].get_x() + bm25_bars[0].get_width() / 2
    assert ("0", (centre, 0.0)) in texts  # the case's bar: height 0, labelled "0"
    assert any(text == "0.00" for text, _ in texts)  # bm25's mean, also 0
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["bm25", "dense", "hybrid", "gate threshold"]  # one entry for both threshold ticks
    assert ax.get_legend().get_title().get_text() == "lane"


def test_recall_plot_uses_the_lane_colours() -> None:
    fig = plot_recall(PER_CASE, 2)
    for lane in PER_CASE.columns:  # LANE_COLORS also colours the BEIR lanes (rrf, convex) other charts draw
        (container,) = [c for c in fig.axes[0].containers if c.get_label() == lane]
        assert matplotlib.colors.to_hex(container[0].get_facecolor()) == LANE_COLORS[lane].lower()


def test_recall_plot_draws_thresholds() -> None:
    fig = plot_recall(PER_CASE, 2, thresholds={"hybrid": 1.0})
    segments = [seg for coll in fig.axes[0].collections for seg in coll.get_segments()]
    assert len(segments) == 1 and np.allclose(segments[0][:, 1], [1.0, 1.0])


def test_recall_plot_with_no_positive_cases_says_so() -> None:
    fig = plot_recall(PER_CASE.iloc[0:0], 2)
    assert "no positive cases" in [t.get_text() for t in fig.axes[0].texts]


def test_latency_plot_bars_and_budget_lines() -> None:
    fig = plot_latency(LATENCY)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["authorize", "bm25", "dense", "fusion"]
    assert bar_heights(fig, "p50 measured") == [0.02, 0.01, 0.015, 0.008]
    assert bar_heights(fig, "p95 measured") == [0.03, 0.02, 0.02, 0.01]
    budgets = sorted(seg[0, 1] for coll in ax.collections for seg in coll.get_segments())
    assert budgets == [8.0, 10.0, 12.0, 40.0]  # one line per stage when both budgets agree
    assert ax.get_yscale() == "log"


def test_latency_plot_draws_both_budgets_when_they_differ() -> None:
    frame = LATENCY.assign(p50_budget_ms=[5.0, 6.0, 20.0, 4.0])
    ax = plot_latency(frame).axes[0]
    budgets = sorted(seg[0, 1] for coll in ax.collections for seg in coll.get_segments())
    assert budgets == [4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 20.0, 40.0]


def test_latency_plot_of_nothing_says_not_measured() -> None:
    fig = plot_latency(pd.DataFrame(columns=["stage", "p50_ms", "p95_ms"]))
    assert "latency not measured" in [t.get_text() for t in fig.axes[0].texts]


def test_plots_refuse_the_wrong_input() -> None:
    with pytest.raises(InvalidArgument, match="DataFrame"):
        plot_recall({"bm25": 1.0}, 2)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="lacks column"):
        plot_latency(LATENCY.drop(columns=["p95_ms"]))


def test_save_figure_writes_png_and_closes(tmp_path: Path) -> None:
    fig = plot_recall(PER_CASE, 2)
    path = save_figure(fig, tmp_path / "recall.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    assert not plt.fignum_exists(fig.number)
