"""Plot BM25 query throughput against corpus size from ``bench_bm25_scale.py --json`` output.

    python benchmarks/plot_scale.py benchmarks/results/bm25_scale.json benchmarks/results/bm25_scale.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {
    "labsrc index": ("#4c72b0", "o", "-"),
    "labsrc index, ids": ("#4c72b0", "D", ":"),
    "labsrc permitted": ("#4c72b0", "s", "--"),
    "bm25s numba": ("#dd8452", "^", "-"),
    "bm25s numpy": ("#dd8452", "v", "--"),
    "PISA block-max WAND": ("#55a868", "P", "-"),
    "PISA MaxScore": ("#55a868", "X", "--"),
}


def main(source: str, target: str) -> int:
    result = json.loads(Path(source).read_text(encoding="utf-8"))
    rows = result["rows"]
    sizes = [row["documents"] for row in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for name in rows[0]["qps"]:
        color, marker, line = STYLE.get(name, ("#55a868", "d", ":"))
        ax.plot(sizes, [row["qps"][name] for row in rows], line, color=color, marker=marker, label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("documents in the corpus (synthetic Zipf text, 10-60 tokens each)")
    ax.set_ylabel(f"queries per second, top-{result['top_k']}, one thread")
    ax.set_title("BM25 throughput against corpus size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
