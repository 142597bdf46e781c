"""Charts for release reports and notebooks. Each function returns a matplotlib Figure.

Figures are made with ``pyplot`` so that a notebook cell ending in
``plt.show()`` renders them as images; scripts should pass them to
:func:`save_figure`, which writes a PNG and closes the figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from labsrc.errors import InvalidArgument

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["LANE_COLORS", "plot_latency", "plot_recall", "plot_recall_curves", "save_figure"]

#: One colour per lane, the same in every chart.
LANE_COLORS: Mapping[str, str] = {"bm25": "#4C72B0", "dense": "#DD8452", "hybrid": "#55A868", "rrf": "#55A868",
                                   "convex": "#8172B3"}
_STAT_COLORS = {"p50": "#8172B3", "p95": "#C44E52"}


def plot_recall(
    per_case: pd.DataFrame,
    k: int,
    *,
    thresholds: Mapping[str, float] | None = None,
    title: str | None = None,
) -> Figure:
    """Grouped bars: Recall@k of each lane (bars) per positive case and on average (groups).

    ``per_case`` has one row per positive case (index = case name) and one
    column per lane, as :func:`labsrc.reports.report.recall_frame` returns. The last
    group is the mean over cases, which is what the recall gates compare;
    ``thresholds`` draws each lane's gate as a black tick over its mean bar
    (one legend entry, "gate threshold"). Every mean is labelled, and so is
    every 0, so a lane that found nothing reads as 0, not as a missing bar.
    """
    if not isinstance(per_case, pd.DataFrame):
        raise InvalidArgument(f"per_case must be a pandas DataFrame, not {type(per_case).__name__}")
    lanes = list(per_case.columns)
    groups = [*map(str, per_case.index), "mean"]
    values = np.vstack([per_case.to_numpy(dtype=float), per_case.mean(axis=0).to_numpy(dtype=float)]) if len(
        per_case
    ) else np.zeros((1, len(lanes)))
    import matplotlib.pyplot as plt  # here, not at import: a report without charts loads no matplotlib

    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(groups) + 1.5), 3.6))
    width = 0.8 / max(len(lanes), 1)
    x = np.arange(len(groups))
    threshold_labelled = False
    for i, lane in enumerate(lanes):
        offsets = x - 0.4 + width * (i + 0.5)
        bars = ax.bar(offsets, values[:, i], width, label=lane, color=LANE_COLORS.get(lane), edgecolor="white")
        for j, bar in enumerate(bars):
            # Label every mean, and every 0: a lane that found nothing must not look like a missing bar.
            if j == len(bars) - 1 or values[j, i] == 0:
                ax.annotate(
                    f"{values[j, i]:.2f}" if j == len(bars) - 1 else "0",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points",
                    color=LANE_COLORS.get(lane) if values[j, i] == 0 else "black",
                    fontweight="bold" if values[j, i] == 0 else "normal",
                )
        if thresholds and lane in thresholds:
            left = offsets[-1] - width / 2
            ax.hlines(thresholds[lane], left, left + width, colors="black", linestyles="-", linewidth=2,
                      label=None if threshold_labelled else "gate threshold")
            threshold_labelled = True
    if not len(per_case):
        ax.text(0, 0.5, "no positive cases", ha="center")
    ax.axvline(len(groups) - 1.5, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xticks(x, groups)
    ax.set_ylim(0, 1.2)
    ax.set_ylabel(f"Recall@{k}")
    ax.set_xlabel("positive case (bars: one per lane; last group: mean over the cases, what the gates compare)")
    ax.set_title(title or f"Permitted Recall@{k} per lane")
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda n: labels[n] not in lanes)  # lanes first, then the threshold
    ax.legend([handles[n] for n in order], [labels[n] for n in order], loc="upper left", ncols=len(labels),
              fontsize=8, frameon=False, title="lane", title_fontsize=8, alignment="left")
    fig.tight_layout()
    return fig


_MARKERS = ("o", "s", "^", "D", "v", "P")
_STYLES = ("-", "--", "-.", ":")


def plot_recall_curves(curves: pd.DataFrame, *, title: str | None = None, mark_k: int | None = None) -> Figure:
    """One line per lane: mean Recall@k (y) at each k (x), the plot a design review compares.

    ``curves`` has one row per k (the index, ascending) and one column per lane, as
    :func:`labsrc.reports.frames.curve_frame` returns for a gate run and ``labsrc beir --recall-at``
    for a benchmark; notebook 09 draws SciFact's with it. The x axis is logarithmic when the
    deepest k is at least ten times the shallowest, and every k is a tick. ``mark_k`` draws a
    dotted line at that k (the gate's ``top_k``: the point its recall gates judge). Every point
    of the deepest k is labelled with its value (lanes that end on the same value share one label).
    """
    if not isinstance(curves, pd.DataFrame):
        raise InvalidArgument(f"curves must be a pandas DataFrame, not {type(curves).__name__}")
    if curves.empty or not len(curves.columns):
        raise InvalidArgument("curves holds no k or no lane: nothing to draw")
    ks = [int(k) for k in curves.index]
    if any(k < 1 for k in ks) or ks != sorted(set(ks)):
        raise InvalidArgument(f"curves' index must be distinct k >= 1 in ascending order, got {ks}")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 3.8))
    ends: dict[str, list[str]] = {}
    for i, lane in enumerate(curves.columns):
        values = curves[lane].to_numpy(dtype=float)
        # Lines that coincide stay visible: each later lane is drawn thinner, with smaller markers, on top.
        ax.plot(ks, values, marker=_MARKERS[i % len(_MARKERS)], markersize=max(9 - 2.5 * i, 3),
                linewidth=max(2.6 - 0.8 * i, 1), linestyle=_STYLES[i % len(_STYLES)], label=str(lane),
                color=LANE_COLORS.get(str(lane)))
        ends.setdefault(f"{values[-1]:.2f}", []).append(str(lane))
    # One label per distinct end value (naming the lanes that share it), top down, never closer than 0.05.
    placed = float("inf")
    for value, lanes in sorted(ends.items(), key=lambda item: -float(item[0])):
        placed = min(float(value), placed - 0.05)
        ax.annotate(f"{value} {', '.join(lanes)}" if len(lanes) > 1 else f"{value} {lanes[0]}",
                    (ks[-1], placed), xytext=(6, 0), textcoords="offset points", va="center", fontsize=8,
                    color=LANE_COLORS.get(lanes[0]) if len(lanes) == 1 else "black")
    log = ks[-1] >= 10 * ks[0]
    if log:
        ax.set_xscale("log")
    ax.set_xlabel("k (log scale)" if log else "k")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.minorticks_off()
    if mark_k is not None:
        ax.axvline(mark_k, color="grey", linewidth=0.8, linestyle=":", label=f"top_k = {mark_k}")
    ax.set_ylim(0, 1.05)
    ax.set_xlim(right=ks[-1] * 2.2 if log else ks[-1] + 0.2 * (ks[-1] - ks[0] + 1))  # room for the end labels
    ax.set_ylabel("Recall@k")
    ax.set_title(title or "Recall@k per lane")
    ax.legend(loc="lower right", fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def plot_latency(frame: pd.DataFrame, *, title: str | None = None) -> Figure:
    """Bars of p50 and p95 per stage (log scale) with each stage's budget as a line.

    ``frame`` has columns ``stage``, ``p50_ms``, ``p95_ms`` and optionally
    ``p50_budget_ms`` / ``p95_budget_ms`` (as :func:`labsrc.reports.report.latency_frame`
    returns). A log axis keeps sub-millisecond timings visible next to budgets
    of tens of milliseconds.
    """
    if not isinstance(frame, pd.DataFrame):
        raise InvalidArgument(f"frame must be a pandas DataFrame, not {type(frame).__name__}")
    missing = sorted({"stage", "p50_ms", "p95_ms"} - set(frame.columns))
    if missing:
        raise InvalidArgument(f"latency frame lacks column(s) {missing}")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    stages = [str(s) for s in frame["stage"]]
    x = np.arange(len(stages))
    width = 0.36
    positive = []
    for i, stat in enumerate(("p50", "p95")):
        measured = frame[f"{stat}_ms"].to_numpy(dtype=float)
        positive += [v for v in measured if math.isfinite(v) and v > 0]
        ax.bar(x - width / 2 + i * width, np.nan_to_num(measured, nan=0.0), width, label=f"{stat} measured",
               color=_STAT_COLORS[stat])
    styles = {"p50": ":", "p95": "--"}
    for stat in ("p50", "p95"):
        column = f"{stat}_budget_ms"
        if column not in frame.columns:
            continue
        budgets = frame[column].to_numpy(dtype=float)
        same = "p50_budget_ms" in frame.columns and "p95_budget_ms" in frame.columns and np.allclose(
            np.nan_to_num(frame["p50_budget_ms"].to_numpy(dtype=float)),
            np.nan_to_num(frame["p95_budget_ms"].to_numpy(dtype=float)),
        )
        if stat == "p50" and same:
            continue  # one line says it all when both budgets agree
        label = "budget" if same else f"{stat} budget"
        for i, budget in enumerate(budgets):
            if math.isfinite(budget):
                positive.append(budget)
                ax.hlines(budget, x[i] - 0.45, x[i] + 0.45, colors="black", linestyles=styles[stat],
                          linewidth=1.5, label=label if i == 0 else None)
                ax.annotate(f"{budget:g} ms", (x[i], budget), ha="center", va="bottom", fontsize=8,
                            xytext=(0, 2), textcoords="offset points")
    if positive:
        ax.set_yscale("log")
        ax.set_ylim(min(positive) / 3, max(positive) * 30)  # headroom for the legend
    else:
        ax.text(0.5, 0.5, "latency not measured", ha="center", transform=ax.transAxes)
    ax.set_xticks(x, stages)
    ax.set_xlabel("retrieval stage")
    ax.set_ylabel("milliseconds (log scale)" if positive else "milliseconds")
    ax.set_title(title or "Stage latency: measured p50 / p95 vs budget")
    ax.legend(loc="upper left", fontsize=8, frameon=False, ncols=3)
    fig.tight_layout()
    return fig


def save_figure(fig: Figure, path: str | Path, *, dpi: int = 110) -> Path:
    """Write ``fig`` as PNG to ``path`` and close it (so scripts don't accumulate figures)."""
    import matplotlib.pyplot as plt

    path = Path(path)
    try:
        fig.savefig(path, dpi=dpi, format="png")
    finally:
        plt.close(fig)
    return path
