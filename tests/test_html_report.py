"""report.html: one self-contained page (no network, no JavaScript) that a browser renders."""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

import labsrc
from labsrc.datasets.lesson import fixtures_dir
from labsrc.gate.config import GateConfig, load_gate_config
from labsrc.gate.gates import release_gate
from labsrc.reports.html_report import dense_model_label
from labsrc.reports.report import report_markdown, write_report
from labsrc.records.policy import Caller
from labsrc.retriever.policy import PolicyRetriever

LESSON_CONFIG = load_gate_config(fixtures_dir() / "lesson" / "gate.json")
#: The lesson's config with one warm-up round: its 20 timed repetitions stay, since a p95 over a few samples is
#: their largest, and one slow sample on a loaded machine would fail the latency gate these tests expect to pass.
FAST = GateConfig(**{**LESSON_CONFIG.to_dict(), "on_date": LESSON_CONFIG.on_date, "warmup": 1})


class BoundaryBypass(PolicyRetriever):
    """A deliberately unsafe retriever: it searches as an EU caller holding every tag."""

    def search(self, query, caller, on_date, top_k=2, *, query_kind="adhoc"):  # type: ignore[override]
        everything = Caller(caller.actor_id, "EU", {"support:eu", "merchant:vip-ops"})
        return super().search(query, everything, on_date, top_k, query_kind=query_kind)


class Tags(HTMLParser):
    """Every start tag with its attributes, and whether end tags balance."""

    VOID = {"meta", "img", "br", "hr", "link", "input"}

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.stack: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1] if self.stack else None}>"
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def parse(page: str) -> Tags:
    tags = Tags()
    tags.feed(page)
    tags.close()
    assert tags.stack == []
    return tags


@pytest.fixture(scope="module")
def failing_dir(data: labsrc.Lesson, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("html")
    write_report(release_gate(BoundaryBypass(data.chunks, data.vectors), data.cases, data.callers, FAST), out)
    return out


@pytest.fixture(scope="module")
def untested_dir(data: labsrc.Lesson, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("untested")
    positives = [c for c in data.cases if c.kind == "positive"]
    write_report(release_gate(PolicyRetriever(data.chunks, data.vectors), positives, data.callers, FAST), out)
    return out


def test_the_page_is_self_contained(failing_dir: Path) -> None:
    page = (failing_dir / "report.html").read_text(encoding="utf-8")
    tags = parse(page)
    assert not [t for t, _ in tags.tags if t in ("script", "link", "iframe", "object")]  # no JS, no external CSS
    sources = [attrs.get("src") or attrs.get("href") for _, attrs in tags.tags if "src" in attrs or "href" in attrs]
    assert len(sources) == 2 and all(s.startswith("data:image/png;base64,") for s in sources)
    for source, name in zip(sources, ("recall.png", "latency.png")):
        assert base64.b64decode(source.split(",", 1)[1]) == (failing_dir / name).read_bytes()
    without_images = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", page)
    assert not re.search(r"(?:https?:)?//[a-z]", without_images)  # no network address anywhere


def test_verdict_first_then_gates_recall_latency_and_failed_traces(failing_dir: Path) -> None:
    page = (failing_dir / "report.html").read_text(encoding="utf-8")
    text = " ".join(parse(page).text)
    # The bypass leaks in the restricted and wrong_region cases, so the verdict is FAIL.
    verdict = page.index('class="verdict FAIL"')
    order = [page.index(marker) for marker in ("<h2>Gates", "<h2>Permitted Recall@2", "<h2>Latency against budgets",
                                                "<h2>Failed cases", "<h2>Versions")]
    assert verdict < order[0] and order == sorted(order)
    assert "FAIL  restricted exclusion".split()[0] in text and "restricted exclusion" in text
    assert "Per positive case" in text and "shared-language" in text
    failed_section = page[order[3]:order[4]]
    assert "restricted-merchant-code" in failed_section and "&quot;leaked&quot;" in failed_section


def test_an_untested_gate_is_shown_as_not_tested(untested_dir: Path) -> None:
    page = (untested_dir / "report.html").read_text(encoding="utf-8")
    assert page.count('<td class="status NOT-TESTED">NOT TESTED</td>') == 5
    assert "5 gates NOT TESTED and do not fail the run" in page
    # The banner gives each NOT TESTED gate its own reason, not one "(no cases)" for all.
    assert "<li>restricted exclusion: no restricted cases to replay; add a restricted case" in page
    assert "<li>abstention: no absent cases to replay; add an absent case" in page
    markdown = (untested_dir / "report.md").read_text(encoding="utf-8")
    # 3 recall gates + hybrid + latency were tested; 4 exclusion gates + abstention had no cases.
    assert "**PASS**: 6 of 6 tested gates pass, 5 gates NOT TESTED for retriever `PolicyRetriever` on 2026-05-27" in markdown
    assert "| restricted exclusion | NOT TESTED | no restricted cases to replay" in markdown


def test_markdown_names_the_dense_model_not_a_dict(data: labsrc.Lesson) -> None:
    assert dense_model_label(data.vectors.model) == "fixture-embeddings-v1 (3-d, hand-written 3-d intent vectors)"
    assert dense_model_label({"model": "all-MiniLM-L6-v2", "dim": 384, "dtype": "float32"}) == (
        "all-MiniLM-L6-v2 (384-d, float32)")
    run = release_gate(PolicyRetriever(data.chunks, data.vectors), data.cases, data.callers, FAST, measure=False)
    markdown = report_markdown(run)
    assert "- dense model: `fixture-embeddings-v1 (3-d, hand-written 3-d intent vectors)`" in markdown
    assert "{" not in markdown.split("## Versions")[1].split("##")[0]
    assert "1 cases" not in markdown and "1 case, 0 leaked" in markdown


def _chromium() -> str | None:
    return next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(name)), None)


@pytest.mark.skipif(_chromium() is None, reason="no chromium on PATH (Debian: apt-get install chromium)")
def test_report_html_renders_in_headless_chromium(failing_dir: Path, tmp_path: Path) -> None:
    import matplotlib.image as mpimg

    shot = tmp_path / "shot.png"
    proc = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1200,1600",
         f"--screenshot={shot}", (failing_dir / "report.html").resolve().as_uri()],
        capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(tmp_path)},
    )
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    pixels = mpimg.imread(shot)[..., :3]
    assert pixels.shape[:2] == (1600, 1200)
    assert pixels.std() > 0.05  # not a blank page
    # The FAIL verdict banner (#cf222e) is drawn near the top of the page.
    red = np.all(np.abs(pixels[:400] - np.array([0xCF, 0x22, 0x2E]) / 255) < 0.02, axis=-1)
    assert red.sum() > 1000
