from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from beir_fixture import write_tiny_beir

from labsrc.cli.beir import format_significance, format_table
from labsrc.cli.main import main
from labsrc.datasets import ENV_VAR
from labsrc.evaluation.significance import lane_significance


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_tiny_beir(tmp_path)


def test_beir_prints_a_table_and_writes_json_and_runs(tiny: Path, tmp_path: Path, capsys):
    out, runs = tmp_path / "out" / "m.json", tmp_path / "runs"
    code = main(["beir", "--data", str(tiny), "--depth", "5", "--json", str(out), "--run-dir", str(runs)])
    assert code == 0
    printed = capsys.readouterr()
    assert "lane         ndcg@10  recall@100      mrr@10" in printed.out
    assert "convex alpha = " in printed.out and "tuned on train" in printed.out
    report = json.loads(out.read_text())
    assert list(report) == ["bm25", "dense", "rrf", "convex", "config", "versions", "alpha_sweep", "significance"]
    assert set(report["rrf"]) == {"ndcg@10", "recall@100", "mrr@10"}
    assert report["config"]["depth"] == 5 and report["config"]["rrf_k"] == 60
    assert report["versions"]["dense"] == "tiny-topic-vectors"
    assert [alpha for alpha, _ in report["alpha_sweep"]["values"]][:3] == [0.0, 0.05, 0.1]
    # The table rows are the JSON values at four decimals.
    assert f"bm25    {report['bm25']['ndcg@10']:>12.4f}" in printed.out
    assert sorted(p.name for p in runs.iterdir()) == ["bm25.trec", "convex.trec", "dense.trec", "rrf.trec"]
    for line in (runs / "rrf.trec").read_text().splitlines():
        qid, q0, doc, rank, score, tag = line.split()
        assert q0 == "Q0" and tag == "labsrc-rrf" and int(rank) >= 1 and float(score) > 0
    assert "bm25 (train)" not in printed.err  # no progress bars when stderr is not a terminal


def test_given_alpha_and_a_lane_subset(tiny: Path, tmp_path: Path, capsys):
    out = tmp_path / "m.json"
    assert main(["beir", "--data", str(tiny), "--lanes", "bm25,convex", "--alpha", "0.2", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [k for k in report if k not in ("config", "versions", "significance")] == ["bm25", "convex"]
    assert report["config"]["alpha"] == 0.2 and report["config"]["alpha_source"] == "given"
    assert "convex alpha = 0.20  (given)" in capsys.readouterr().out


def test_no_train_split_uses_alpha_one_half(tmp_path: Path, capsys):
    tiny = write_tiny_beir(tmp_path, splits=("test",))
    assert main(["beir", "--data", str(tiny), "--lanes", "convex"]) == 0
    assert "convex alpha = 0.50  (default (no train split to tune on))" in capsys.readouterr().out


def test_ignore_identical_ids_changes_the_runs(tiny: Path, tmp_path: Path):
    plain, ignoring = tmp_path / "plain", tmp_path / "ignoring"
    assert main(["beir", "--data", str(tiny), "--lanes", "bm25", "--run-dir", str(plain)]) == 0
    assert main(["beir", "--data", str(tiny), "--lanes", "bm25", "--ignore-identical-ids", "--run-dir", str(ignoring)]) == 0

    def docs_for_q4(path: Path) -> list[str]:
        return [line.split()[2] for line in (path / "bm25.trec").read_text().splitlines() if line.startswith("q4 ")]

    assert "q4" in docs_for_q4(plain)
    assert "q4" not in docs_for_q4(ignoring)


def test_data_from_the_environment(tiny: Path, monkeypatch, capsys):
    monkeypatch.setenv(ENV_VAR, str(tiny.parent))
    assert main(["beir", "--dataset", "tiny", "--lanes", "bm25"]) == 0
    assert "BEIR tiny / test: 2 queries" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--lanes", "bm25,splade"], "unknown lane(s) ['splade']"),
        (["--alpha", "1.5"], "alpha must be a number in [0, 1]"),
        (["--depth", "0"], "depth must be > 0"),
        (["--rrf-k", "0"], "rrf_k must be a positive number"),
        (["--split", "dev"], "no qrels split 'dev'"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(tiny: Path, capsys, extra, message):
    assert main(["beir", "--data", str(tiny), *extra]) == 2
    assert message in capsys.readouterr().err


def test_missing_data_exits_2_and_says_how_to_get_it(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert main(["beir"]) == 2
    assert f"set {ENV_VAR}" in capsys.readouterr().err
    assert main(["beir", "--data", str(tmp_path)]) == 2
    assert "no BEIR collection" in capsys.readouterr().err


def test_dense_lanes_need_vectors(tmp_path: Path, capsys):
    tiny = write_tiny_beir(tmp_path, vectors=False)
    assert main(["beir", "--data", str(tiny)]) == 2
    assert "--lanes bm25" in capsys.readouterr().err
    assert main(["beir", "--data", str(tiny), "--lanes", "bm25"]) == 0


def test_format_table_has_a_row_per_lane():
    table = format_table({"bm25": {"ndcg@10": 0.5, "recall@100": 0.75, "mrr@10": 1 / 3}})
    assert table.splitlines()[1] == "bm25          0.5000      0.7500      0.3333"


def test_a_few_queries_get_no_p_value_and_a_bad_permutation_count_exits_2(tiny: Path, tmp_path: Path, capsys):
    out = tmp_path / "m.json"
    assert main(["beir", "--data", str(tiny), "--json", str(out)]) == 0
    assert "no significance test: with 2 judged queries none is meaningful" in capsys.readouterr().out
    significance = json.loads(out.read_text())["significance"]
    assert significance["queries"] == 2 and significance["comparisons"] == []
    assert main(["beir", "--data", str(tiny), "--permutations", "0"]) == 2
    assert "--permutations must be a positive integer, not 0" in capsys.readouterr().err
    # An upper bound (issue 57): a trillion draws ran without end; 10**6 resolves p to 1e-6.
    assert main(["beir", "--data", str(tiny), "--permutations", "1000000000000"]) == 2
    assert capsys.readouterr().err.strip() == (
        "labsrc: error: --permutations must be at most 1,000,000 (p-values resolve to 1e-06 there), "
        "not 1,000,000,000,000"
    )


def test_format_significance_has_a_row_per_pair():
    per_query = {
        "bm25": {f"q{i:02d}": 0.5 for i in range(20)},
        "rrf": {f"q{i:02d}": 0.5 + (0.1 if i < 10 else 0.0) for i in range(20)},
    }
    text = format_significance(lane_significance(per_query, "ndcg@10", permutations=1000, seed=3))
    lines = text.splitlines()
    assert lines[0].endswith("on ndcg@10: 20 queries, 1000 permutations, seed 3")
    # 10 differences of +0.1 and 10 of 0: |sum| 1.0 is reached by 2 of the 2^10 sign patterns of the ten,
    # p = 2/1024 = 0.00195; this seed's 1000 draws hit 3 of them (0.0030), and p rounds to four places.
    assert lines[2].split() == ["bm25", "rrf", "+0.0500", "0.0030"]
    per_query["rrf"] = {q: 0.6 for q in per_query["rrf"]}  # 20 gains of 0.1: p = 2/2^20, no draw reaches it
    assert format_significance(lane_significance(per_query, "ndcg@10", permutations=1000)).splitlines()[2].split() == [
        "bm25", "rrf", "+0.1000", "<0.001"
    ]


# --- issue 22: outputs checked before the run; Ctrl-C is one line and exit 130 -----------------


@pytest.mark.parametrize("option", ["--json", "--run-dir"])
def test_an_unwritable_output_is_exit_2_before_the_run(tiny: Path, tmp_path: Path, capsys, monkeypatch, option):
    # Issue 22: `labsrc beir --json` or `--run-dir` into a read-only folder crashed with OSError after the run.
    import labsrc.cli.beir as cli_beir

    import os

    import labsrc.cli.outputs as outputs

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    if os.geteuid() == 0:  # root writes anywhere: make the write probe meet what a user would
        def refuse(*args, **kwargs):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(outputs.tempfile, "NamedTemporaryFile", refuse)
    ran = []
    monkeypatch.setattr(cli_beir, "load_lanes", lambda *a, **k: ran.append(1))
    target = str(locked / ("m.json" if option == "--json" else "runs"))
    try:
        assert main(["beir", "--data", str(tiny), "--no-progress", option, target]) == 2
    finally:
        locked.chmod(0o700)
    err = capsys.readouterr().err
    assert ran == [] and "Traceback" not in err
    assert err.startswith(f"labsrc: error: {option} {target}: cannot write in") and len(err.splitlines()) == 1
    monkeypatch.undo()
    monkeypatch.setattr(cli_beir, "load_lanes", lambda *a, **k: ran.append(1))
    (tmp_path / "a-file").write_text("x", encoding="utf-8")
    assert main(["beir", "--data", str(tiny), option, str(tmp_path / "a-file" / "below")]) == 2
    assert ran == [] and "is a file" in capsys.readouterr().err


def test_ctrl_c_prints_one_line_and_exits_130(tiny: Path, capsys, monkeypatch):
    import labsrc.cli.beir as cli_beir

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_beir, "run_benchmark", interrupted)
    assert main(["beir", "--data", str(tiny), "--lanes", "bm25", "--no-progress"]) == 130
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == "labsrc: interrupted" and "Traceback" not in err


def test_ctrl_c_while_loading_removes_the_output_folders_the_run_created(tiny: Path, tmp_path: Path, capsys, monkeypatch):
    import labsrc.cli.beir as cli_beir

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_beir, "load_lanes", interrupted)
    runs, out = tmp_path / "new" / "runs", tmp_path / "json" / "m.json"
    argv = ["beir", "--data", str(tiny), "--lanes", "bm25", "--no-progress", "--run-dir", str(runs), "--json", str(out)]
    assert main(argv) == 130
    assert capsys.readouterr().err.splitlines()[-1] == "labsrc: interrupted"
    # Both made for this run, both still empty: gone, with the parents made for them.
    assert not (tmp_path / "new").exists() and not (tmp_path / "json").exists()


def test_a_failed_run_keeps_a_run_dir_that_was_there_before(tiny: Path, tmp_path: Path, capsys, monkeypatch):
    import labsrc.cli.beir as cli_beir

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_beir, "load_lanes", interrupted)
    existing = tmp_path / "runs"
    existing.mkdir()
    assert main(["beir", "--data", str(tiny), "--lanes", "bm25", "--no-progress", "--run-dir", str(existing)]) == 130
    assert existing.is_dir() and list(existing.iterdir()) == []
    below = existing / "today"  # a new folder under it goes, the folder the user had stays
    assert main(["beir", "--data", str(tiny), "--lanes", "bm25", "--no-progress", "--run-dir", str(below)]) == 130
    assert existing.is_dir() and not below.exists()
    capsys.readouterr()


def test_a_run_interrupted_after_writing_keeps_the_complete_files(tiny: Path, tmp_path: Path, capsys, monkeypatch):
    import labsrc.cli.beir as cli_beir

    real, written = cli_beir.write_trec_run, []

    def second_interrupted(run, path, tag):
        if written:
            raise KeyboardInterrupt
        written.append(real(run, path, tag))
        return written[-1]

    monkeypatch.setattr(cli_beir, "write_trec_run", second_interrupted)
    runs = tmp_path / "runs"
    assert main(["beir", "--data", str(tiny), "--lanes", "bm25,dense", "--no-progress", "--run-dir", str(runs)]) == 130
    assert sorted(p.name for p in runs.iterdir()) == ["bm25.trec"]  # complete, and nothing half-written beside it
    capsys.readouterr()


def test_a_real_sigint_in_a_beir_run_is_one_line_and_exit_130(tiny: Path):
    # Issue 22: Ctrl-C in `labsrc beir` printed a 27-45 line KeyboardInterrupt traceback. The child
    # sends itself SIGINT from inside the run, where a user's Ctrl-C would land.
    import subprocess
    import sys

    code = (
        "import os, signal, sys\n"
        # As in a terminal: a job started in the background (CI runners, nohup ... &) inherits SIGINT ignored.
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from labsrc.cli import beir\n"
        "real = beir.run_benchmark\n"
        "def run(*a, **k):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    return real(*a, **k)\n"
        "beir.run_benchmark = run\n"
        "from labsrc.cli.main import main\n"
        f"sys.exit(main(['beir', '--data', {str(tiny)!r}, '--lanes', 'bm25', '--no-progress']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.splitlines()[-1] == "labsrc: interrupted"
    assert len(proc.stderr.splitlines()) == 2  # the "loading ..." line, then this one


def test_recall_at_prints_each_lane_at_each_k_and_plot_draws_the_curves(tiny: Path, tmp_path: Path, capsys):
    from labsrc.datasets.beir import load_beir
    from labsrc.evaluation.metrics import evaluate_run

    out, png, runs = tmp_path / "m.json", tmp_path / "plots" / "recall.png", tmp_path / "runs"
    code = main(["beir", "--data", str(tiny), "--depth", "5", "--lanes", "bm25,rrf", "--recall-at", "5,1,2",
                 "--json", str(out), "--plot", str(png), "--run-dir", str(runs), "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    curve = report["recall_curve"]
    assert curve["k"] == [1, 2, 5] and set(curve) == {"k", "bm25", "rrf"}
    # Each point is Recall@k of the run the command wrote, as the lab's own metric reads it.
    qrels = load_beir(tiny).split_qrels("test")
    for lane in ("bm25", "rrf"):
        run: dict[str, dict[str, float]] = {}
        for line in (runs / f"{lane}.trec").read_text().splitlines():
            qid, _, doc, _, score, _ = line.split()
            run.setdefault(qid, {})[doc] = float(score)
        assert curve[lane] == pytest.approx([evaluate_run(run, qrels, [f"recall@{k}"])[f"recall@{k}"] for k in (1, 2, 5)])
        assert f"{lane:<8}" + "".join(f"{v:>8.4f}" for v in curve[lane]) in printed
    assert curve["bm25"][-1] == pytest.approx(report["bm25"]["recall@100"])  # depth 5: Recall@100 is Recall@5
    assert "Recall@k (2 queries)" in printed and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_recall_at_uses_the_default_k_up_to_the_depth(tiny: Path, tmp_path: Path, capsys):
    out = tmp_path / "m.json"
    assert main(["beir", "--data", str(tiny), "--depth", "5", "--lanes", "bm25", "--plot", str(tmp_path / "c.png"),
                 "--json", str(out)]) == 0
    assert json.loads(out.read_text())["recall_curve"]["k"] == [1, 2, 3, 5]


@pytest.mark.parametrize(("extra", "message"), [
    (["--recall-at", "1,200"], "--recall-at: k 200 is deeper than --depth 100"),
    (["--recall-at", "x"], "expected whole numbers joined by commas"),
])
def test_a_bad_recall_at_exits_2_in_one_line(tiny: Path, capsys, extra, message):
    with pytest.raises(SystemExit) if extra[1] == "x" else contextlib.nullcontext() as stopped:
        code = main(["beir", "--data", str(tiny), "--lanes", "bm25", *extra])
    err = capsys.readouterr().err
    assert (stopped.value.code if extra[1] == "x" else code) == 2
    assert message in err and err.count("\n") == 1
