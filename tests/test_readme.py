"""The README's code example runs and prints what the README says it prints."""

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def _example() -> tuple[str, str]:
    text = README.read_text(encoding="utf-8")
    block = text.split("<!-- README-EXAMPLE:START -->")[1].split("<!-- README-EXAMPLE:END -->")[0]
    code = re.search(r"```python\n(.*?)```", block, re.S).group(1)
    expected = re.search(r"```text\n(.*?)```", block, re.S).group(1)
    return code, expected


def test_readme_example_runs_and_prints_what_it_claims():
    code, expected = _example()
    assert len(code.strip().splitlines()) <= 10
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {})
    assert out.getvalue() == expected


def test_quickstart_has_exactly_two_bash_blocks_on_the_first_screen():
    text = README.read_text(encoding="utf-8")
    quickstart = text.split("## Quickstart")[1].split("\n## ")[0]
    quickstart = quickstart.split("<!-- README-EXAMPLE:START -->")[0]
    blocks = re.findall(r"```bash\n(.*?)```", quickstart, re.S)
    assert len(blocks) == 2
    assert "labsrc report" in blocks[0] and blocks[1].strip() == "pytest"
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    ci_lines = {line.strip() for line in ci.splitlines()}
    for line in [*blocks[0].strip().splitlines(), *blocks[1].strip().splitlines()]:
        assert line.strip() in ci_lines  # .ci/run installs and tests exactly as the README says


def test_the_record_pages_lines_of_chunks_and_vectors_load(tmp_path):
    from labsrc.lanes.dense import load_vectors
    from labsrc.records.loading import load_chunks

    records = README.parent / "docs" / "records.md"
    blocks = re.findall(r"```json\n(.*?)```", records.read_text(encoding="utf-8"), re.S)
    [vectors] = [b for b in blocks if '"documents"' in b]
    [chunk] = [b for b in blocks if '"effective_from"' in b]
    (tmp_path / "vectors.json").write_text(vectors, encoding="utf-8")
    (tmp_path / "chunks.jsonl").write_text(chunk, encoding="utf-8")
    assert load_chunks(tmp_path / "chunks.jsonl")[0].chunk_id == "eu-refurb-v2-rule"
    assert load_vectors(tmp_path / "vectors.json").documents["eu-refurb-v2-rule"].tolist() == [1.0, 0.0, 0.0]


def _dependency_closure(extra: str) -> set[str]:
    """The distributions ``pip install .`` (``extra=""``) or ``pip install ".[extra]"`` installs, the lab included,
    as this environment's metadata resolves them. In CI that is a fresh dev install, so the count is what a fresh
    install on this index gives; an older environment (other versions, other dependencies) may count otherwise."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    def wanted(requirement: Requirement, extras: set[str]) -> bool:
        marker = requirement.marker
        return marker is None or any(marker.evaluate({"extra": e}) for e in {"", *extras})

    lab = metadata.distribution("hybrid-retrieval-lab")
    stack = [r for r in map(Requirement, lab.requires or []) if wanted(r, {extra} if extra else set())]
    seen = {"hybrid-retrieval-lab"}
    done: set[tuple[str, frozenset[str]]] = set()
    while stack:
        requirement = stack.pop()
        name, extras = canonicalize_name(requirement.name), frozenset(requirement.extras)
        if (name, extras) in done:
            continue
        done.add((name, extras))
        seen.add(name)
        stack.extend(r for r in map(Requirement, metadata.distribution(requirement.name).requires or [])
                     if wanted(r, set(extras)))
    return seen


def test_the_install_tables_package_counts_are_what_pip_installs():
    # Issue 49: the README said 16 packages where the wheel installed 14.
    text = README.read_text(encoding="utf-8")
    quoted = dict(re.findall(r'^\| [^|]+\| `pip install (\.|-e "\.\[dev\]")`[^|]*\| ([\d,]+) packages', text, re.M))
    assert set(quoted) == {".", '-e ".[dev]"'}, quoted
    assert int(quoted["."]) == len(_dependency_closure("")), sorted(_dependency_closure(""))
    assert int(quoted['-e ".[dev]"'].replace(",", "")) == len(_dependency_closure("dev"))
