"""labsrc.cli.usage: the documentation's usage lines are the parsers' own, and `labsrc --version` works."""

from __future__ import annotations

from pathlib import Path

import pytest

from labsrc.cli.main import build_parser, main
from labsrc.cli.usage import main as usage_main
from labsrc.cli.usage import documentation_files, render_blocks, usage_table
from labsrc.version import __version__

ROOT = Path(__file__).resolve().parent.parent
#: The page whose usage block shows report, gate, audit, search and the rest.
README = ROOT / "docs" / "gates.md"


def _all_docs() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in documentation_files(ROOT))


def test_the_readme_usage_lines_match_the_parsers():
    # Issue 22: the README's usage lines omitted --engine, --dsn, --no-progress, --dataset, --model.
    # To fix a failure here: python -m labsrc.cli.usage, and commit the result.
    files = documentation_files(ROOT)
    assert [p.relative_to(ROOT).as_posix() for p in files] == ["docs/benchmarks.md", "docs/coursework.md", "docs/gate-in-pytest.md", "docs/gates.md"]
    assert usage_main([*map(str, files), "--check"]) == 0
    text = _all_docs()
    for option in ("--engine {memory,postgres}", "--dsn URL", "--no-progress", "--dataset NAME", "--model MODEL"):
        assert option in text
    assert text.count("<!-- labsrc-usage:") == 5


def test_every_command_has_a_usage_line_and_a_block_shows_it():
    table = usage_table()
    assert list(table) == ["init", "chunk", "report", "gate", "audit", "search", "beir", "data fetch", "embed", "rubric", "engines clean", "--version"]
    text = _all_docs()
    for usage in table.values():
        assert usage in text


def test_an_added_option_is_caught_as_drift(tmp_path):
    parser = build_parser()
    gate = next(a for a in parser._actions if hasattr(a, "choices") and a.choices and "gate" in a.choices).choices["gate"]
    gate.add_argument("--new-option", metavar="VALUE")
    stale = README.read_text(encoding="utf-8")
    fresh = render_blocks(stale, usage_table(parser))
    assert fresh != stale and "[--new-option VALUE]" in fresh
    copy = tmp_path / "README.md"
    copy.write_text(stale.replace("[--dsn URL]", "", 1), encoding="utf-8")
    assert usage_main([str(copy), "--check"]) == 1
    assert usage_main([str(copy)]) == 0 and usage_main([str(copy), "--check"]) == 0
    assert copy.read_text(encoding="utf-8") == stale


def test_an_unknown_command_in_a_block_is_an_error():
    with pytest.raises(SystemExit, match="unknown command"):
        render_blocks("<!-- labsrc-usage: reprot -->\n```text\n```\n<!-- /labsrc-usage -->\n")


def test_version(capsys):
    # Issue 22: `labsrc --version` was an error.
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"labsrc {__version__}\n"
