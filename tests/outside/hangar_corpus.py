"""A held-out aircraft-maintenance corpus (a maintenance organisation's task cards), as its engineering team writes it.

The lab ships nothing like it: it is the corpus for the retrievers of
tests/outside/handed_on_retrievers.py, which hand on more than ids (text,
metadata, traces). Two bases are the regions (``lhr``, ``sin``); three ACL
tags split the cards: ``mx:line`` (line maintenance), ``mx:heavy`` (hangar
checks) and ``eng:records`` (reliability data). Several task cards have more
than one revision, and each base keeps its own edition of the wheel-change
card, so a retriever that joins "every chunk of the same document" into a
context window hands on text the caller may not see.

Callers::

    kai   lhr  mx:line               line engineer
    lena  lhr  mx:line, mx:heavy     hangar engineer
    omar  sin  mx:line               line engineer at the other base
    pia   sin  eng:records           reliability analyst
"""

from __future__ import annotations

import json
from pathlib import Path

#: (chunk_id, document_id, region, tag, from, to, text)
CHUNKS = [
    ("lhr-wheel-r1", "wheel-change", "lhr", "mx:line", "2024-01-01", "2025-12-31",
     "Task card TC-32-41 revision 1: main wheel change, torque the axle nut to 150 Nm, back off, retorque to 60 Nm."),
    ("lhr-wheel-r2", "wheel-change", "lhr", "mx:line", "2026-01-01", None,
     "Task card TC-32-42 revision 2: main wheel change, torque the axle nut to 140 Nm while rotating the wheel, "
     "then lock with a new cotter pin."),
    ("lhr-wheel-r3", "wheel-change", "lhr", "mx:line", "2026-09-01", None,
     "Task card TC-32-43 revision 3: main wheel change with the new jacking adapter JA-7; axle nut 145 Nm."),
    ("sin-wheel", "wheel-change", "sin", "mx:line", "2025-01-01", None,
     "Task card TC-32-S9: main wheel change at the Singapore base, humidity over 80 percent needs bearing grease "
     "type G-12."),
    ("lhr-brake-wear", "brake-wear", "lhr", "mx:line", "2025-01-01", None,
     "Task card TC-32-51: brake wear pin check, replace the brake unit when the pin is flush with the housing."),
    ("lhr-tyre-pressure", "tyre-pressure", "lhr", "mx:line", "2025-01-01", None,
     "Task card TC-12-14: tyre pressure check with nitrogen, cold tyres only, within 4 hours of the last flight."),
    ("lhr-oil-uplift", "oil-uplift", "lhr", "mx:line", "2025-06-01", None,
     "Task card TC-12-31: engine oil uplift, wait five minutes after shutdown, record quarts added in the tech log."),
    ("lhr-c-check", "c-check", "lhr", "mx:heavy", "2025-01-01", None,
     "Heavy check HC-05-20: C-check wing spar inspection with eddy current; findings over 2 mm go to engineering."),
    ("lhr-landing-gear-overhaul", "gear-overhaul", "lhr", "mx:heavy", "2026-01-01", None,
     "Heavy check HC-32-10: landing gear overhaul every ten years, shipped to the overhaul shop with its log card."),
    ("sin-fuel-leak", "fuel-leak", "sin", "mx:line", "2025-01-01", None,
     "Task card TC-28-11: fuel leak classification by wet area, a running leak grounds the aircraft."),
    ("sin-reliability", "reliability", "sin", "eng:records", "2025-01-01", None,
     "Reliability report RR-4: brake unit removals per thousand landings, quarterly, by tail number."),
    ("sin-oil-uplift", "oil-uplift", "sin", "mx:line", "2025-01-01", None,
     "Task card TC-12-S31: engine oil uplift at the Singapore base, record the quantity in the electronic log."),
]

CALLERS = [
    {"actor_id": "kai", "region": "lhr", "acl_tags": ["mx:line"]},
    {"actor_id": "lena", "region": "lhr", "acl_tags": ["mx:line", "mx:heavy"]},
    {"actor_id": "omar", "region": "sin", "acl_tags": ["mx:line"]},
    {"actor_id": "pia", "region": "sin", "acl_tags": ["eng:records"]},
]

CASES = [
    {"name": "wheel-torque", "query": "axle nut torque for a main wheel change", "caller": "kai",
     "kind": "positive", "expected": ["lhr-wheel-r2"]},
    {"name": "brake-pin", "query": "brake wear pin flush with the housing", "caller": "kai",
     "kind": "positive", "expected": ["lhr-brake-wear"]},
    {"name": "tyre-nitrogen", "query": "tyre pressure check nitrogen cold tyres", "caller": "lena",
     "kind": "positive", "expected": ["lhr-tyre-pressure"]},
    {"name": "spar-eddy", "query": "wing spar eddy current inspection", "caller": "lena",
     "kind": "positive", "expected": ["lhr-c-check"]},
    {"name": "sin-leak", "query": "fuel leak classification wet area", "caller": "omar",
     "kind": "positive", "expected": ["sin-fuel-leak"]},
    {"name": "sin-wheel-grease", "query": "bearing grease for a wheel change in humidity", "caller": "omar",
     "kind": "positive", "expected": ["sin-wheel"]},
    {"name": "removals", "query": "brake unit removals per thousand landings", "caller": "pia",
     "kind": "positive", "expected": ["sin-reliability"]},
    {"name": "gear-overhaul-hidden", "query": "landing gear overhaul shop log card", "caller": "kai",
     "kind": "restricted", "forbidden": ["lhr-landing-gear-overhaul"]},
    {"name": "old-torque", "query": "retorque the axle nut to 60 Nm after backing off", "caller": "kai",
     "kind": "superseded", "forbidden": ["lhr-wheel-r1"]},
    {"name": "new-adapter", "query": "jacking adapter for the wheel change", "caller": "lena",
     "kind": "not_yet_effective", "forbidden": ["lhr-wheel-r3"]},
    {"name": "other-base-oil", "query": "record the oil quantity in the electronic log", "caller": "kai",
     "kind": "wrong_region", "forbidden": ["sin-oil-uplift"]},
    {"name": "no-de-icing", "query": "de-icing fluid holdover times", "caller": "omar", "kind": "absent"},
]

CONFIG = {"top_k": 2, "on_date": "2026-06-15", "min_recall": {"hybrid": 1.0}, "repetitions": 1, "warmup": 0,
          "probe_budget": 60, "search_timeout_s": 5, "build_timeout_s": 30}


def write_hangar_corpus(folder: Path) -> dict[str, Path]:
    """Write chunks.jsonl, callers.json, cases.jsonl and gate.json into ``folder``; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {name: folder / name for name in ("chunks.jsonl", "callers.json", "cases.jsonl", "gate.json")}
    with paths["chunks.jsonl"].open("w", encoding="utf-8") as out:
        for chunk_id, doc, region, tag, start, end, text in CHUNKS:
            out.write(json.dumps({
                "chunk_id": chunk_id, "document_id": doc, "parent_id": doc, "version": f"{chunk_id}/{start}",
                "region": region, "acl_tag": tag, "effective_from": start, "effective_to": end, "text": text,
            }) + "\n")
    paths["callers.json"].write_text(json.dumps(CALLERS, indent=1), encoding="utf-8")
    paths["cases.jsonl"].write_text("".join(json.dumps(c) + "\n" for c in CASES), encoding="utf-8")
    paths["gate.json"].write_text(json.dumps(CONFIG), encoding="utf-8")
    return paths
