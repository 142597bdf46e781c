"""tests/costs.py: the suite's cost report counts what it says it counts."""

from __future__ import annotations

import os
import subprocess
import sys

import costs


def test_the_report_counts_subprocesses_and_forks_per_module(tmp_path):
    ledger = costs.Ledger()
    with ledger.charging("tests/test_example.py"):
        subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=60)
        subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=60)
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    with ledger.charging("tests/test_other.py"):
        subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=60)
    ledger.add_time("tests/test_example.py", 2.5)
    ledger.add_time("tests/test_other.py", 1.0)
    rows = {row["module"]: row for row in ledger.rows()}
    assert (rows["tests/test_example.py"]["subprocesses"], rows["tests/test_example.py"]["forks"]) == (2, 1)
    assert (rows["tests/test_other.py"]["subprocesses"], rows["tests/test_other.py"]["forks"]) == (1, 0)
    assert [row["module"] for row in ledger.rows()] == ["tests/test_example.py", "tests/test_other.py"]  # by time
    table = ledger.markdown()
    assert table.splitlines()[0].startswith("| module | seconds |")
    assert "| tests/test_example.py | 2.5 | 0.0 | 2 | 1 |" in table


def test_cpu_seconds_count_the_children_the_worker_waited_for():
    ledger = costs.Ledger()
    before = costs._cpu_seconds()
    subprocess.run([sys.executable, "-c", "sum(range(30_000_000))"], check=True, timeout=60)  # about a second
    spent = costs._cpu_seconds() - before
    assert spent > 0.2, spent
    ledger.add_cpu("tests/test_example.py", spent)
    ledger.merge([{"module": "tests/test_example.py", "seconds": 1.0, "cpu": 0.5, "subprocesses": 1, "forks": 0,
                   "servers": 0, "kernels": 0}])
    assert ledger.rows()[0]["cpu"] == round(spent + 0.5, 1)


def test_outside_a_charge_nothing_is_counted():
    ledger = costs.Ledger()
    subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=60)
    assert ledger.rows() == []


def test_a_workers_rows_add_up_in_the_controller():
    ledger = costs.Ledger()
    ledger.add_time("tests/test_a.py", 1.0)
    ledger.merge([{"module": "tests/test_a.py", "seconds": 2.0, "subprocesses": 3, "forks": 0, "servers": 1,
                   "kernels": 0}])
    assert ledger.rows() == [{"module": "tests/test_a.py", "seconds": 3.0, "cpu": 0.0, "subprocesses": 3, "forks": 0,
                              "servers": 1, "kernels": 0}]
