"""Every link in the README and ``docs/`` points at something: a file of the repository, or a heading of a page.

The documentation is read on GitHub, not rendered as a site, so this is its build's
link check: a moved page or a renamed heading fails here instead of in front of a reader.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: ``[text](target)`` and ``![alt](target)``; a target has no spaces (a title after one is not used here).
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def heading_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.

    >>> heading_anchor("Real benchmark: BEIR SciFact")
    'real-benchmark-beir-scifact'
    """
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    return {heading_anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def links(page: Path) -> list[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    return [m.group(1) for m in _LINK.finditer(text)]


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # https:, mailto: ...: not checked offline
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.name}")
        elif root not in resolved.parents and resolved != root:
            broken.append(f"{target}: outside the repository")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_the_checker_catches_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## Real benchmark: BEIR SciFact\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#real-benchmark-beir-scifact) [gone](missing.md) [bad](other.md#nowhere)\n"
        "```text\n[in a fence](ignored.md)\n```\n[web](https://example.org/x)\n",
        encoding="utf-8",
    )
    assert links(page) == ["other.md#real-benchmark-beir-scifact", "missing.md", "other.md#nowhere", "https://example.org/x"]
    assert broken_links(page, root=tmp_path) == [
        "missing.md: no such file", "other.md#nowhere: no heading #nowhere in other.md"]
    (tmp_path / "sub").mkdir()
    escape = tmp_path / "sub" / "page.md"
    escape.write_text("[up](../other.md)", encoding="utf-8")
    assert broken_links(escape, root=tmp_path / "sub") == ["../other.md: outside the repository"]


def test_every_page_is_linked_from_the_readme() -> None:
    linked = {target.partition("#")[0] for target in links(ROOT / "README.md")}
    pages = {p.relative_to(ROOT).as_posix() for p in PAGES[1:]}
    assert pages - linked == set()


def test_the_readme_keeps_its_essentials_on_the_first_screens() -> None:
    # Issue 30: the README was 686 lines; the reference lives in docs/.
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    for heading in ("## Install", "## Quickstart", "## Gate your own retriever", "## Notebooks", "## Documentation"):
        assert heading in text
