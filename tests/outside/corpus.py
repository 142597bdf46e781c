"""A small HR-policy corpus the lab does not ship, written as a team would write its own files.

It feeds the gate's "retrievers written outside the project" tests
(tests/test_gate_plugins.py): two regions, two ACL tags, a superseded and a
not-yet-effective version, and cases of every kind.
"""

import json
from pathlib import Path

CHUNKS = [
    # id, region, tag, from, to, text
    ("north-leave-v2", "north", "hr:staff", "2026-01-01", None,
     "Parental leave policy LV-22: employees receive 20 weeks of paid parental leave after the birth or adoption of a child."),
    ("north-leave-v1", "north", "hr:staff", "2024-01-01", "2025-12-31",
     "Parental leave policy LV-21: employees receive 12 weeks of paid parental leave after the birth of a child."),
    ("north-leave-v3", "north", "hr:staff", "2026-09-01", None,
     "Parental leave policy LV-23: employees receive 26 weeks of paid parental leave after the birth or adoption of a child, and may split it."),
    ("north-expenses", "north", "hr:staff", "2025-01-01", None,
     "Expense claims EX-7: submit receipts for travel, meals and lodging within 30 days; claims above 500 euros need approval."),
    ("north-remote", "north", "hr:staff", "2025-06-01", None,
     "Remote work RW-3: staff may work from home up to three days a week with their team lead's agreement."),
    ("north-salary-bands", "north", "hr:managers", "2025-01-01", None,
     "Salary bands SB-9 for managers: band limits, merit increase budgets and promotion adjustments are confidential."),
    ("north-layoffs", "north", "hr:managers", "2026-01-01", None,
     "Restructuring plan RS-4: managers prepare severance packages and notice periods for the planned reductions."),
    ("south-leave", "south", "hr:staff", "2025-01-01", None,
     "Parental leave policy LV-S1: employees in the south office receive 16 weeks of paid parental leave."),
    ("south-expenses", "south", "hr:staff", "2025-01-01", None,
     "Expense claims EX-S2: receipts for travel and meals within 60 days; lodging is booked by the office."),
    ("south-security", "south", "hr:staff", "2025-01-01", None,
     "Badge and building security BS-1: report a lost badge to reception the same day."),
]

CALLERS = [
    {"actor_id": "ana", "region": "north", "acl_tags": ["hr:staff"]},
    {"actor_id": "ben", "region": "north", "acl_tags": ["hr:staff", "hr:managers"]},
    {"actor_id": "cy", "region": "south", "acl_tags": ["hr:staff"]},
]

CASES = [
    {"name": "leave-weeks", "query": "how many weeks of paid parental leave after adoption", "caller": "ana",
     "kind": "positive", "expected": ["north-leave-v2"]},
    {"name": "expense-deadline", "query": "deadline to submit travel receipts for expense claims", "caller": "ana",
     "kind": "positive", "expected": ["north-expenses"]},
    {"name": "remote-days", "query": "work from home days per week", "caller": "ana",
     "kind": "positive", "expected": ["north-remote"]},
    {"name": "south-leave", "query": "paid parental leave weeks", "caller": "cy",
     "kind": "positive", "expected": ["south-leave"]},
    {"name": "manager-bands", "query": "salary bands merit increase budgets", "caller": "ana",
     "kind": "restricted", "forbidden": ["north-salary-bands"]},
    {"name": "old-leave", "query": "parental leave policy LV-21 12 weeks", "caller": "ana",
     "kind": "superseded", "forbidden": ["north-leave-v1"]},
    {"name": "north-expenses-from-south", "query": "expense claims above 500 euros need approval", "caller": "cy",
     "kind": "wrong_region", "forbidden": ["north-expenses"]},
    {"name": "no-pension", "query": "pension fund contribution rate", "caller": "ana", "kind": "absent"},
]

CONFIG = {"top_k": 2, "on_date": "2026-06-15", "min_recall": {"hybrid": 1.0}, "repetitions": 2, "warmup": 0}


def write_corpus(folder: Path) -> dict[str, Path]:
    """Write chunks.jsonl, callers.json, cases.jsonl and gate.json into ``folder``; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {name: folder / name for name in ("chunks.jsonl", "callers.json", "cases.jsonl", "gate.json")}
    with paths["chunks.jsonl"].open("w", encoding="utf-8") as out:
        for chunk_id, region, tag, start, end, text in CHUNKS:
            doc = chunk_id.rsplit("-v", 1)[0]
            out.write(json.dumps({
                "chunk_id": chunk_id, "document_id": doc, "parent_id": doc, "version": f"{doc}/{start}",
                "region": region, "acl_tag": tag, "effective_from": start, "effective_to": end, "text": text,
            }) + "\n")
    paths["callers.json"].write_text(json.dumps(CALLERS, indent=1), encoding="utf-8")
    paths["cases.jsonl"].write_text("".join(json.dumps(c) + "\n" for c in CASES), encoding="utf-8")
    paths["gate.json"].write_text(json.dumps(CONFIG), encoding="utf-8")
    return paths
