"""The release gate at a team's scale: wall time, peak memory and generated-probe coverage at the default budget.

Generates a policy corpus of N chunks, as a support organisation writes one:
documents in 2-3 versions (a superseded one, the current one, sometimes one not
yet in force) and in editions for 2-3 regions, each under one of 3 ACL tags;
a third of the documents have one version in one region. Text is real words
(the prose of ``fixtures/needles/docs``), Zipf-distributed, with each document's
code (``RPL-1042``) and a few topic words; one document in ten cites another's
code. Six callers; twelve cases on two dates, every one about a single-version
document (none touches a document with other versions or editions, so a
document-level ACL bug is invisible to them).

Then runs :func:`labsrc.gate_retriever` at the default ``probe_budget`` (sized
from the corpus) on two factories, one at a time (:data:`RUNS`):

* ``policy``: :class:`labsrc.PolicyRetriever` (permission-safe), vectors ``None``
  (its dense lane uses the lab's hashing encoder);
* ``doc-acl``: :class:`DocumentAclRetriever`, a filter-first BM25 whose ACL is
  checked per *document*: a chunk is granted when any chunk of its document is
  permitted to the caller (other versions and other regions' editions leak);
  first on the cases alone (``probe_budget`` 0), which pass it, then at the default.

For each it prints the wall time, the peak resident memory of the gate's process
(``getrusage``: ``RUSAGE_SELF``, and ``RUSAGE_CHILDREN`` for the workers already
waited for) and of the largest forked worker (its ``VmHWM``, sampled from /proc
while it lives), the generated probes' coverage line and every gate's verdict::

    python benchmarks/bench_gate_scale.py --chunks 20000 [--only NAME] [--probe-budget N] [--json FILE]

Latency is not measured (``measure=False``): the stage budgets are the lesson's,
for a five-chunk corpus, and the latency gate is not what this measures. The config
is ``top_k`` 3, ``noninterference`` "ids" (see :func:`gate_once`) and a search
timeout of 120 s; everything else is the default, ``probe_budget`` "auto" included.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import re
import os
import resource
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

import labsrc
from labsrc.datasets.lesson import fixtures_dir
from labsrc.gate import procfs
from labsrc.lanes import BM25Index
from labsrc.lanes.permitted import PermittedBM25
from labsrc.records.cases import Case

__all__ = ["DocumentAclRetriever", "EARLY_DATE", "EVAL_DATE", "RUNS", "document_acl", "gate_once", "scale_callers", "scale_cases", "scale_corpus", "word_list"]

EVAL_DATE = dt.date(2026, 6, 15)
#: Two cases ask on an earlier date, when other versions were in force.
EARLY_DATE = dt.date(2026, 1, 15)
REGIONS = ("EU", "US", "APAC")
TAGS = ("support", "billing", "legal")
PREFIXES = ("RPL", "CLM", "REF", "SHP", "WAR", "PAY", "PRV", "FTW", "GFT", "CRD")
#: Six callers: (actor_id, region, tags). The contractor holds no tag and asks no case.
CALLERS = (
    ("eu-agent", "EU", ("support",)),
    ("eu-lead", "EU", ("support", "legal")),
    ("us-agent", "US", ("support", "billing")),
    ("us-clerk", "US", ("billing",)),
    ("apac-admin", "APAC", ("support", "billing", "legal")),
    ("contractor", "EU", ()),
)


_HEAD = re.compile(r"Rule (\S+): (\w+ \w+ \w+)\.")


def word_list() -> list[str]:
    """The distinct words (3 to 12 letters) of the lab's prose fixtures, sorted: real vocabulary, offline."""
    text = " ".join(p.read_text(encoding="utf-8") for p in sorted((fixtures_dir() / "needles" / "docs").glob("*.md")))
    return sorted({w for w in re.findall(r"[a-z]+", text.lower()) if 3 <= len(w) <= 12})


def scale_corpus(n: int, seed: int = 0) -> tuple[labsrc.PolicyChunk, ...]:
    """About ``n`` chunks (exactly ``n``: the last document is cut), deterministic for ``seed``."""
    rng = random.Random(seed)
    words = word_list()
    zipf = [1.0 / (rank + 1) for rank in range(len(words))]
    shuffled = words[:]
    rng.shuffle(shuffled)  # which words are common is not alphabetical
    chunks: list[labsrc.PolicyChunk] = []
    multi_codes: list[str] = []
    doc = 0
    while len(chunks) < n:
        code = f"{PREFIXES[doc % len(PREFIXES)]}-{1000 + doc}"
        single = rng.random() < 0.35
        regions = (rng.choice(REGIONS),) if single else tuple(rng.sample(REGIONS, rng.choice((2, 3))))
        versions = 1 if single else rng.choice((2, 3))
        tag = rng.choice(TAGS)
        topic = rng.sample(words, 3)
        cite = f" See {rng.choice(multi_codes)}." if multi_codes and rng.random() < 0.1 else ""
        # Version windows: v1 from 2025, v2 current since late 2025 or early 2026, v3 not yet in force.
        starts = [dt.date(2025, 1, 1) + dt.timedelta(days=rng.randint(0, 120))]
        if versions >= 2:
            starts.append(dt.date(2025, 10, 1) + dt.timedelta(days=rng.randint(0, 200)))
        if versions >= 3:
            starts.append(EVAL_DATE + dt.timedelta(days=rng.randint(1, 120)))
        for region in regions:
            for v, start in enumerate(starts, start=1):
                end = starts[v] - dt.timedelta(days=1) if v < len(starts) else None
                parent = f"d{doc:06d}-{region.lower()}-v{v}"
                for part in range(1 if single else rng.choice((1, 2))):
                    body = " ".join(rng.choices(shuffled, weights=zipf, k=rng.randint(25, 60)))
                    head = f"Rule {code}: {' '.join(topic)}." if part == 0 else f"{code} continued."
                    text = f"{head} {region} edition, revision {v}. {body}.{cite if part == 0 else ''}"
                    chunks.append(labsrc.PolicyChunk(
                        chunk_id=f"{parent}-{part}", document_id=f"d{doc:06d}", parent_id=parent,
                        version=f"d{doc:06d}/{start.isoformat()}", region=region, acl_tag=tag,
                        effective_from=start, effective_to=end, text=text,
                    ))  # fmt: skip
        if not single:
            multi_codes.append(code)
        doc += 1
    return tuple(chunks[:n])


def scale_callers() -> dict[str, labsrc.Caller]:
    return {actor: labsrc.Caller(actor, region, frozenset(tags)) for actor, region, tags in CALLERS}


def scale_cases(chunks: Sequence[labsrc.PolicyChunk], callers: Mapping[str, labsrc.Caller],
                seed: int = 0) -> list[Case]:
    """Twelve cases, each about a single-version, single-edition document: 6 positive, 4 restricted, 2 wrong region.

    Each asks for its document's code, as support agents look a rule up: a positive case as a caller who may
    see the chunk (no other chunk holds the code, so BM25 ranks it first), a negative case as one who may not.
    Such a code is in no other chunk, so even at full depth no case's answer can hold another document.
    """
    rng = random.Random(seed)
    per_doc: dict[str, list[labsrc.PolicyChunk]] = {}
    for chunk in chunks:
        per_doc.setdefault(chunk.document_id, []).append(chunk)
    cited = {m for c in chunks for m in re.findall(r"See ([A-Z]+-\d+)\.", c.text)}
    singles = [group[0] for group in per_doc.values() if len(group) == 1 and group[0].effective_to is None
               and _HEAD.match(group[0].text).group(1) not in cited]

    def query(chunk: labsrc.PolicyChunk) -> str:
        return _HEAD.match(chunk.text).group(1)

    def pick(test) -> labsrc.PolicyChunk:
        found = [c for c in singles if test(c)]
        return found[rng.randrange(len(found))]

    cases = []
    positive = ("eu-agent", "eu-lead", "us-agent", "us-clerk", "apac-admin", "eu-lead")
    for n, actor in enumerate(positive):
        caller = callers[actor]
        chunk = pick(lambda c: c.region == caller.region and c.acl_tag in caller.acl_tags)
        cases.append(Case(f"positive-{n}", query(chunk), actor, "positive", expected=(chunk.chunk_id,),
                          on_date=EARLY_DATE if n == len(positive) - 1 else EVAL_DATE))
    for n, actor in enumerate(("eu-agent", "us-clerk", "eu-lead", "us-agent")):
        caller = callers[actor]
        chunk = pick(lambda c: c.region == caller.region and c.acl_tag not in caller.acl_tags)
        cases.append(Case(f"restricted-{n}", query(chunk), actor, "restricted", forbidden=(chunk.chunk_id,),
                          on_date=EARLY_DATE if n == 3 else EVAL_DATE))
    for n, actor in enumerate(("apac-admin", "eu-lead")):
        caller = callers[actor]
        chunk = pick(lambda c: c.region != caller.region and c.acl_tag in caller.acl_tags)
        cases.append(Case(f"wrong-region-{n}", query(chunk), actor, "wrong_region", forbidden=(chunk.chunk_id,),
                          on_date=EVAL_DATE))
    return cases


class DocumentAclRetriever:
    """A filter-first BM25 with a document-level ACL bug: a chunk is granted when any chunk of its document is
    permitted to the caller on that date (so other versions and other regions' editions come back).

    Otherwise sound: BM25 over the granted chunks only, statistics included, as :func:`labsrc.bm25_rank` over
    them would score it; one index over every chunk, scored with the granted set's statistics
    (:class:`~labsrc.lanes.permitted.PermittedBM25`, the lab's own sparse lane), so a new date costs a mask,
    not an index. The boundary is the lab's (:class:`labsrc.BoundaryIndex`); the bug is one line.
    """

    def __init__(self, chunks: Sequence[labsrc.PolicyChunk], vectors: object = None) -> None:
        self.chunks = tuple(sorted(chunks, key=lambda c: c.chunk_id))  # the index's positions are in id order
        self.boundary = labsrc.BoundaryIndex(self.chunks)
        numbers: dict[str, int] = {}
        self.document = np.fromiter((numbers.setdefault(c.document_id, len(numbers)) for c in self.chunks), np.int64)
        self.documents = len(numbers)
        self.bm25 = PermittedBM25(BM25Index.build((c.chunk_id, c.text) for c in self.chunks))

    def granted(self, caller: labsrc.Caller, on_date: dt.date) -> np.ndarray:
        seen = np.zeros(self.documents, dtype=bool)
        seen[self.document[self.boundary.mask(caller, on_date)]] = True  # the bug: documents, not chunks
        return seen[self.document]

    def search(self, query: str, caller: labsrc.Caller, on_date: dt.date, top_k: int) -> list[tuple[str, float]]:
        granted = self.granted(caller, on_date)
        if not query.strip() or not granted.any():
            return []
        return self.bm25.search(query, granted, top_k)


def document_acl(chunks: Sequence[labsrc.PolicyChunk], vectors: object) -> DocumentAclRetriever:
    return DocumentAclRetriever(chunks, vectors)


#: The runs, in order: (name, factory, probe_budget). The cases alone (``probe_budget`` 0) come first for the bug,
#: to show that they cannot see it.
RUNS = (("policy", labsrc.PolicyRetriever, "auto"), ("doc-acl, cases only", document_acl, 0),
        ("doc-acl", document_acl, "auto"))


def peak_mib(who: int) -> float:
    """Peak resident set size in MiB (Linux reports ru_maxrss in KiB, macOS in bytes)."""
    peak = resource.getrusage(who).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


class WorkerMemory:
    """The largest peak RSS (``VmHWM``) of any process descended from this one, sampled from /proc every 0.2 s.

    ``RUSAGE_CHILDREN`` counts only children already waited for; the gate's workers are sampled while
    they live. Linux only (elsewhere :attr:`peak_mib` stays 0).
    """

    def __init__(self) -> None:
        self.peak_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> WorkerMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        if not Path("/proc/self").is_dir():
            return
        me = os.getpid()
        while not self._stop.wait(0.2):
            # The gate's workers, their namespaces' processes, what they started (the whole table: the kernel's
            # children lists are reliable only for stopped processes).
            for pid in procfs.descendants(me, procfs.process_table()):
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                for line in status.splitlines():
                    if line.startswith("VmHWM:"):
                        self.peak_mib = max(self.peak_mib, int(line.split()[1]) / 1024)

def gate_once(name: str, factory, budget: int | str, chunks, callers, cases) -> dict:
    """One gate run at ``budget``: its figures, printed and returned."""
    # "ids": scores are not compared across builds (as for an engine whose statistics are per shard): in "exact"
    # mode the rebuild gate also catches the bug's BM25 statistics on the cases, and the point here is the probes.
    # search_timeout_s 120: a PolicyRetriever build indexes its corpus at its first search (20 s at 100,000
    # chunks), too close to the default 30 s on a shared 2-core machine.
    config = labsrc.GateConfig(top_k=3, on_date=EVAL_DATE, noninterference="ids", probe_budget=budget,
                               search_timeout_s=120)
    t0 = time.perf_counter()
    with WorkerMemory() as workers:
        run = labsrc.gate_retriever(factory, chunks, callers, cases, None, config, measure=False)
    wall = time.perf_counter() - t0
    generated = run.probes.generated if run.probes is not None else None
    findings = () if generated is None else generated.findings
    by_tier: dict[str, int] = {}
    for f in findings:
        key = f"{f.request.family}{'' if f.request.tier is None else ' ' + f.request.tier}"
        by_tier[key] = by_tier.get(key, 0) + 1
    first = next((n for n, probe in enumerate(() if generated is None else generated.plan.asked)
                  if any(f.request == probe for f in findings[:1])), None)
    row = {"probe_budget": budget, "wall_s": round(wall, 1), "passed": run.passed,
           "load_avg_5min": round(os.getloadavg()[1], 2),  # the machine is shared: what else ran meanwhile
           "peak_gate_mib": round(peak_mib(resource.RUSAGE_SELF)),
           "peak_children_mib": round(peak_mib(resource.RUSAGE_CHILDREN)), "peak_worker_mib": round(workers.peak_mib),
           "gates": {g.name: g.status for g in run.gates},
           "failed": {g.name: [g.detail, *g.findings[:3]] for g in run.gates if g.status == "FAIL"},
           "coverage": None if generated is None else generated.plan.coverage(),
           "findings": len(findings), "findings_by_family_and_tier": by_tier,
           "first_finding": findings[0].describe()[:300] if findings else None, "first_finding_request": first}
    print(f"\n{name}: {'PASS' if run.passed else 'FAIL'} in {wall:.1f} s; peak RSS: gate {row['peak_gate_mib']} MiB, "
          f"largest worker {row['peak_worker_mib']} MiB (sampled), RUSAGE_CHILDREN {row['peak_children_mib']} MiB "
          f"(the gate's and RUSAGE_CHILDREN: so far in this process); load average {row['load_avg_5min']} (5 min)")
    print(f"  coverage: {row['coverage']}")
    for gate in run.gates:
        print(f"  {gate.status:<10} {gate.name}")
        if gate.status == "FAIL" and gate.name != "generated probes":
            print(f"             {gate.detail[:300]}")
            for line in gate.findings[:2]:
                print(f"             {line[:300]}")
    if findings:
        print(f"  generated findings: {len(findings)} {by_tier}; the first at request {first} of the run's "
              f"{len(generated.plan.asked)}: {row['first_finding']}")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--only", choices=[name for name, _, _ in RUNS], help="one run only (default: each in turn)")
    parser.add_argument("--probe-budget", type=int, metavar="N",
                        help="the budget of the runs that use the default (\"auto\"), to see what the probes cost")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args()

    t0 = time.perf_counter()
    chunks = scale_corpus(args.chunks)
    callers = scale_callers()
    cases = scale_cases(chunks, callers)
    made = time.perf_counter() - t0
    docs = {c.document_id for c in chunks}
    print(f"corpus: {len(chunks):,} chunks, {len(docs):,} documents, {len(callers)} callers, {len(cases)} cases "
          f"(generated in {made:.1f} s)")
    figures = {"chunks": len(chunks), "documents": len(docs), "runs": {}}
    for name, factory, budget in RUNS:
        if args.only in (None, name):
            if budget == "auto" and args.probe_budget is not None:
                budget = args.probe_budget
            figures["runs"][name] = gate_once(name, factory, budget, chunks, callers, cases)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
