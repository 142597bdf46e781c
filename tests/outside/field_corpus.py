"""A held-out IT-operations and security runbook corpus, written as an operations team would write it.

The lab ships nothing like it: it is the "field" corpus for judging retrievers
written outside the project (tests/outside/field_retrievers.py). Three regions
(eu, us, apac), two ACL tags (``ops:engineer`` for runbooks, ``sec:responder``
for incident-response playbooks) and four callers, one of them holding both tags.

Dates, against the evaluation date 2026-06-15:

* ``eu-db-failover-v2`` was superseded on 2026-01-01 by ``eu-db-failover-v3``;
  ``apac-oncall-v1`` was superseded on 2026-03-01 by ``apac-oncall-v2``.
* ``eu-cert-rotation-v2`` takes effect on 2026-06-16, exactly one day after the
  evaluation date; until then ``eu-cert-rotation-v1`` (in force to 2026-06-15
  inclusive) is the rule. The positive case ``eu-cert-renewal`` asks in the
  words of v2, so a retriever whose date check is off by one day returns v2.

The case ``apac-latency`` is the only one whose query holds the word "tokyo".
"""

import json
import re
from pathlib import Path

OPS, SEC = "ops:engineer", "sec:responder"

CHUNKS = [
    # id, region, tag, from, to, text
    # --- eu, runbooks
    ("eu-db-failover-v3", "eu", OPS, "2026-01-01", None,
     "Database failover runbook DB-FO-3: promote the standby replica with pg_ctl promote, repoint the "
     "connection pooler to the new primary and confirm that replication lag reads zero."),
    ("eu-db-failover-v2", "eu", OPS, "2025-01-01", "2025-12-31",
     "Database failover runbook DB-FO-2: page the database administrator on duty, who promotes the standby "
     "manually after a thirty minute wait for the old primary to recover."),
    ("eu-cert-rotation-v1", "eu", OPS, "2025-03-01", "2026-06-15",
     "Certificate rotation CR-7: TLS certificates for the public load balancers are requested from the internal "
     "certificate authority 30 days before expiry; install them and reload nginx on every edge node."),
    ("eu-cert-rotation-v2", "eu", OPS, "2026-06-16", None,
     "Certificate rotation CR-8: TLS certificates for the public load balancers are issued by ACME and renewed "
     "automatically every 60 days; engineers only watch the certificate expiry dashboard."),
    ("eu-backup-restore", "eu", OPS, "2025-01-01", None,
     "Backup restore procedure BR-5: nightly snapshots are kept for 35 days in object storage; restore onto a "
     "scratch host and verify checksums before any cutover."),
    ("eu-oncall-handover", "eu", OPS, "2025-01-01", None,
     "On-call handover OC-2: the outgoing engineer records open incidents, silenced alerts and pending changes "
     "in the handover log before 09:00."),
    ("eu-change-freeze", "eu", OPS, "2025-01-01", None,
     "Change freeze CF-1: no production deploys between 20 December and 3 January unless the change advisory "
     "board approves an exception."),
    ("eu-disk-pressure", "eu", OPS, "2025-01-01", None,
     "Disk pressure alert DP-4: when a volume passes 85 percent full, delete rotated logs under /var/log and "
     "grow the volume if usage keeps climbing."),
    # --- eu, incident response
    ("eu-breach-notify", "eu", SEC, "2025-05-01", None,
     "Breach notification SEC-9: responders inform the data protection officer within 24 hours; the supervisory "
     "authority is notified within 72 hours of discovery."),
    ("eu-forensics", "eu", SEC, "2025-01-01", None,
     "Forensic capture SEC-4: isolate the compromised host from the network, take a memory image and a disk "
     "snapshot before anyone reboots it."),
    ("eu-phishing-triage", "eu", SEC, "2025-01-01", None,
     "Phishing triage SEC-6: purge the reported message from every mailbox, block the sender domain and reset "
     "the password of anyone who clicked the link."),
    # --- us, runbooks
    ("us-db-failover", "us", OPS, "2025-01-01", None,
     "Database failover runbook DB-FO-US1: the managed cluster fails over by itself; engineers check the writer "
     "endpoint DNS record and restart stuck queue workers."),
    ("us-vpn-access", "us", OPS, "2025-01-01", None,
     "VPN access VPN-3: contractor VPN accounts expire after 90 days and are renewed through the access portal "
     "with a sponsor's approval."),
    ("us-backup-restore", "us", OPS, "2025-01-01", None,
     "Backup restore procedure BR-US2: snapshots are retained for 14 days; open a ticket with the storage team "
     "to restore a volume."),
    ("us-pager-escalation", "us", OPS, "2025-01-01", None,
     "Pager escalation PE-1: an unacknowledged page escalates to the secondary after 15 minutes and then to the "
     "engineering manager."),
    ("us-dns-change", "us", OPS, "2025-01-01", None,
     "DNS change procedure DNS-2: lower the record TTL to 300 seconds a day ahead, make the change in Terraform "
     "and confirm resolution from two resolvers."),
    # --- us, incident response
    ("us-breach-notify", "us", SEC, "2025-01-01", None,
     "Breach notification SEC-US2: counsel notifies affected customers and the state attorneys general without "
     "unreasonable delay."),
    ("us-ransomware", "us", SEC, "2025-01-01", None,
     "Ransomware playbook SEC-US5: disconnect file shares, preserve the ransom note and never contact the "
     "attackers without counsel."),
    # --- apac, runbooks
    ("apac-cert-rotation", "apac", OPS, "2025-01-01", None,
     "Certificate rotation CR-AP1: load balancer certificates in Singapore renew through the cloud provider's "
     "managed certificate service."),
    ("apac-change-freeze", "apac", OPS, "2025-01-01", None,
     "Change freeze CF-AP: production deploys pause for the Lunar New Year holiday week across the region."),
    ("apac-latency", "apac", OPS, "2025-01-01", None,
     "Latency runbook LT-2: when p99 latency in Tokyo stays above 800 milliseconds, shift traffic to Singapore "
     "and page the network team."),
    ("apac-oncall-v1", "apac", OPS, "2024-01-01", "2026-02-28",
     "On-call rota OC-AP1: one engineer covers the whole week and hands over by phone every Monday morning."),
    ("apac-oncall-v2", "apac", OPS, "2026-03-01", None,
     "On-call rota OC-AP2: Sydney and Singapore split the day follow-the-sun style and hand over in the shared "
     "incident channel."),
    ("apac-k8s-upgrade", "apac", OPS, "2025-06-01", None,
     "Kubernetes upgrade KU-3: drain one node pool at a time, keep pod disruption budgets and upgrade the "
     "control plane first."),
    # --- apac, incident response
    ("apac-secret-leak", "apac", SEC, "2025-01-01", None,
     "Secret leak response SEC-AP3: revoke the exposed API key, rotate dependent credentials and scan every "
     "repository for other copies."),
    ("apac-ddos", "apac", SEC, "2025-01-01", None,
     "DDoS response SEC-AP1: enable the scrubbing service, rate limit the edge and tell the status page team."),
]

CALLERS = [
    {"actor_id": "mira", "region": "eu", "acl_tags": [OPS]},
    {"actor_id": "tomas", "region": "eu", "acl_tags": [OPS, SEC]},
    {"actor_id": "riley", "region": "us", "acl_tags": [OPS]},
    {"actor_id": "jun", "region": "apac", "acl_tags": [OPS]},
]

CASES = [
    # --- positive
    {"name": "eu-failover-steps", "query": "promote the standby replica and repoint the connection pooler",
     "caller": "mira", "kind": "positive", "expected": ["eu-db-failover-v3"]},
    {"name": "eu-cert-renewal", "query": "are TLS certificates for the public load balancers renewed automatically by ACME",
     "caller": "mira", "kind": "positive", "expected": ["eu-cert-rotation-v1"],
     "notes": "v2 (CR-8) answers in these very words but takes effect 2026-06-16, one day late"},
    {"name": "eu-backup-retention", "query": "how many days are nightly snapshots kept in object storage",
     "caller": "mira", "kind": "positive", "expected": ["eu-backup-restore"]},
    {"name": "eu-breach-deadline", "query": "inform the data protection officer within 24 hours of a breach",
     "caller": "tomas", "kind": "positive", "expected": ["eu-breach-notify"]},
    {"name": "us-vpn-expiry", "query": "when do contractor VPN accounts expire",
     "caller": "riley", "kind": "positive", "expected": ["us-vpn-access"]},
    {"name": "apac-latency", "query": "p99 latency in Tokyo above 800 milliseconds",
     "caller": "jun", "kind": "positive", "expected": ["apac-latency"],
     "notes": "the only query with the word 'tokyo' (field_retrievers.hangs blocks on it)"},
    {"name": "eu-failover-in-2025", "query": "who promotes the standby manually after a failover",
     "caller": "mira", "kind": "positive", "expected": ["eu-db-failover-v2"], "on_date": "2025-06-01"},
    # --- restricted
    {"name": "forensics-for-ops", "query": "isolate the compromised host and take a memory image",
     "caller": "mira", "kind": "restricted", "forbidden": ["eu-forensics"]},
    {"name": "us-breach-for-ops", "query": "notify state attorneys general about a breach",
     "caller": "riley", "kind": "restricted", "forbidden": ["us-breach-notify"]},
    # --- superseded
    {"name": "old-manual-failover", "query": "page the database administrator on duty thirty minute wait",
     "caller": "mira", "kind": "superseded", "forbidden": ["eu-db-failover-v2"]},
    {"name": "apac-weekly-rota", "query": "one engineer covers the whole week and hands over by phone",
     "caller": "jun", "kind": "superseded", "forbidden": ["apac-oncall-v1"]},
    # --- not yet effective
    {"name": "acme-one-day-early", "query": "ACME renewed automatically every 60 days expiry dashboard",
     "caller": "mira", "kind": "not_yet_effective", "forbidden": ["eu-cert-rotation-v2"]},
    # --- wrong region
    {"name": "eu-freeze-from-apac", "query": "no production deploys between 20 December and 3 January",
     "caller": "jun", "kind": "wrong_region", "forbidden": ["eu-change-freeze"]},
    {"name": "apac-freeze-from-us", "query": "Lunar New Year holiday deploy pause",
     "caller": "riley", "kind": "wrong_region", "forbidden": ["apac-change-freeze"]},
    # --- absent
    {"name": "no-parking", "query": "employee parking permits garage", "caller": "tomas", "kind": "absent",
     "forbidden": ["eu-oncall-handover"]},
]

CONFIG = {
    "top_k": 2, "on_date": "2026-06-15", "repetitions": 3, "warmup": 1, "min_recall": {"hybrid": 1.0},
    "p50_budget_ms": {"request": 2000}, "p95_budget_ms": {"request": 2000},
}


def chunk_records():
    """The chunks as JSON-ready dicts (ISO dates, null for an open end), in file order."""
    records = []
    for chunk_id, region, tag, start, end, text in CHUNKS:
        doc = re.sub(r"-v\d+$", "", chunk_id)
        records.append({
            "chunk_id": chunk_id, "document_id": doc, "parent_id": doc, "version": f"{doc}/{start}",
            "region": region, "acl_tag": tag, "effective_from": start, "effective_to": end, "text": text,
        })
    return records


def write_field_corpus(folder: Path) -> dict[str, Path]:
    """Write chunks.jsonl, callers.json, cases.jsonl and gate.json into ``folder``; return their paths."""
    return write_corpus(folder, chunk_records(), CALLERS, CASES, CONFIG)


def write_corpus(folder: Path, records, callers, cases, config) -> dict[str, Path]:
    """A held-out corpus's four files in ``folder`` (the pharmacy corpus writes its own through this too)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {name: folder / name for name in ("chunks.jsonl", "callers.json", "cases.jsonl", "gate.json")}
    paths["chunks.jsonl"].write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    paths["callers.json"].write_text(json.dumps(callers, indent=1), encoding="utf-8")
    paths["cases.jsonl"].write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    paths["gate.json"].write_text(json.dumps(config), encoding="utf-8")
    return paths
