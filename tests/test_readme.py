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
