"""A held-out hospital-pharmacy corpus (medication handling policies), written as a pharmacy team would write it.

The lab ships nothing like it: it is the corpus for judging the retrievers of
tests/outside/leak_retrievers.py, written outside the project. Three hospital
sites are the regions (``north``, ``south``, ``east``); four ACL tags split the
policies: ``pharm:staff`` (dispensary and aseptic rules), ``pharm:controlled``
(controlled-drug handling), ``nurse:ward`` (ward medicine rules) and
``admin:billing`` (charges, credits, invoices). 29 chunks of two or three
sentences each; every chunk names its own policy code in its text (``CD-12``,
``MED-7``, ``IV-8``, ...), and no code is used twice.

Six callers::

    ana   north  pharm:staff, pharm:controlled, nurse:ward   lead pharmacist
    bo    south  pharm:staff, pharm:controlled               pharmacist
    chen  east   pharm:staff, nurse:ward                     pharmacist without controlled-drug rights
    dara  north  nurse:ward                                  ward nurse
    eli   south  admin:billing                               billing clerk
    finn  east   (no tags at all)                            agency contractor

Dates, against the evaluation date 2026-06-15 (gate.json ``on_date``; top_k 3):

* superseded: ``n-cd-destruction-v1`` (CD-14) ended 2026-03-31, succeeded by
  ``n-cd-destruction-v2`` (CD-15); ``s-recall-v1`` (RCL-1) ended 2026-01-31,
  succeeded by ``s-recall-v2`` (RCL-2); ``e-hours-v1`` (DSP-1) ended 2026-04-30,
  succeeded by ``e-hours-v2`` (DSP-2).
* not yet effective: ``n-formulary-v2`` (FRM-5) takes effect 2026-06-16, exactly
  one day after the evaluation date (``n-formulary-v1``, FRM-4, is in force to
  2026-06-15 inclusive); ``s-unlicensed-v2`` (ULM-2) takes effect 2026-09-01
  (``s-unlicensed-v1``, ULM-1, is in force to 2026-08-31). The positive case
  ``ana-formulary-route`` asks in the words of FRM-5 and expects FRM-4, so a date
  check that is off by one day returns the wrong version.

The cases have the blind spots a real team's case file has, on purpose (the gate,
not the cases, must catch what hides in them):

* **no case is asked by the contractor** ``finn``, the one caller with no tags, so
  a retriever that treats "no tags" as "no restrictions" is never asked as him;
* **no case's query holds the code of a chunk hidden from its caller**: the
  restricted, wrong-region and date cases attack by meaning, in the policy's own
  words, never by code. Two positive cases do quote a code, each one of a chunk
  their own caller may see (``MED-7`` asked by ana, ``ABX-2`` asked by chen);
* **no query is asked by two different callers**: every case has its own query
  text, so a result cache keyed by the query alone never serves one caller's
  answer to another.

Visibility on 2026-06-15 (current chunks; "all" = every current chunk of the site):

* ana sees all of north but ``n-billing-charges`` (BIL-2);
* dara sees only north ward chunks (MED-7, MED-9, POD-1): every north
  ``pharm:*`` and billing chunk is restricted for her (CD-12, CD-15, IV-3, FRM-4, BIL-2);
* bo sees south ``pharm:*`` chunks, not south ward or billing (MED-11, BIL-6, BIL-8, BIL-9);
* eli sees only south billing (BIL-6, BIL-8, BIL-9): CD-21, CD-23, ONC-4, RCL-2,
  ULM-1 and MED-11 are restricted for her;
* chen sees east staff and ward chunks, not the controlled ones (CD-31, CD-33)
  nor billing (BIL-10);
* finn sees nothing: every east chunk (CD-31, CD-33, IV-8, ABX-2, DSP-2, MED-15,
  BIL-10) is restricted for him.

``write_pharmacy_corpus(folder)`` writes chunks.jsonl, callers.json, cases.jsonl
and gate.json in the formats of docs/records.md.
"""

import re
from pathlib import Path

STAFF, CTRL, WARD, BILL = "pharm:staff", "pharm:controlled", "nurse:ward", "admin:billing"

#: The evaluation date (gate.json ``on_date``).
EVAL_DATE = "2026-06-15"

CHUNKS = [
    # id, region, tag, from, to, text
    # --- north
    ("n-cd-cabinet", "north", CTRL, "2025-01-01", None,
     "Controlled drug storage CD-12: controlled drugs are kept in a double-locked cabinet bolted to the wall, and "
     "the keys stay with the nurse or pharmacist in charge. The register balance is counted against the stock at "
     "every shift change."),
    ("n-cd-destruction-v1", "north", CTRL, "2025-01-01", "2026-03-31",
     "Controlled drug destruction CD-14: expired stock is destroyed on the ward by two registered nurses with a "
     "denaturing kit, and both sign the ward register."),
    ("n-cd-destruction-v2", "north", CTRL, "2026-04-01", None,
     "Controlled drug destruction CD-15: expired stock goes back to pharmacy, where a pharmacist destroys it with a "
     "denaturing kit before an authorised witness from the governance team. Both sign the destruction register."),
    ("n-iv-aseptic", "north", STAFF, "2025-01-01", None,
     "Aseptic preparation IV-3: intravenous doses that need compounding are made in the pharmacy isolator, never on "
     "the ward. Each bag is labelled with its batch number and a 24 hour expiry."),
    ("n-formulary-v1", "north", STAFF, "2025-01-01", "2026-06-15",
     "Formulary additions FRM-4: a new medicine joins the north formulary only after a paper application to the "
     "drugs and therapeutics committee, which meets once a quarter."),
    ("n-formulary-v2", "north", STAFF, "2026-06-16", None,
     "Formulary additions FRM-5: a new medicine joins the north formulary through an electronic application that "
     "the drugs and therapeutics committee reviews every month."),
    ("n-ward-fridge", "north", WARD, "2025-01-01", None,
     "Medicine fridge MED-7: ward fridges hold 2 to 8 degrees Celsius and nurses log the minimum and maximum twice a "
     "day. After a temperature excursion, quarantine the stock and phone pharmacy before using any of it."),
    ("n-insulin", "north", WARD, "2025-01-01", None,
     "Insulin administration MED-9: every insulin dose is checked independently by a second nurse against the "
     "prescription. Doses are drawn up with an insulin syringe only, and units are never abbreviated."),
    ("n-own-medicines", "north", WARD, "2025-01-01", None,
     "Patients' own medicines POD-1: medicines brought in from home are checked by the admitting nurse and kept in "
     "the bedside locker. They go home with the patient at discharge unless the patient agrees to their disposal."),
    ("n-billing-charges", "north", BILL, "2025-01-01", None,
     "Dispensing charges BIL-2: outpatient prescriptions are charged per item at the hospital rate. Exemption "
     "certificates are checked at the hatch and recorded on the charge log."),
    # --- south
    ("s-cd-register", "south", CTRL, "2025-01-01", None,
     "Controlled drug register CD-21: entries are made in ink at the time of each transaction, with a running "
     "balance. A discrepancy not resolved by the end of the shift is reported to the accountable officer within "
     "24 hours."),
    ("s-fentanyl-patch", "south", CTRL, "2025-01-01", None,
     "Opioid patch disposal CD-23: used fentanyl patches are folded sticky sides together and put in the controlled "
     "drug waste bin in front of a witness. A used patch still holds enough drug to harm a child."),
    ("s-cytotoxic", "south", STAFF, "2025-01-01", None,
     "Cytotoxic handling ONC-4: chemotherapy is dispensed in sealed bags, and every area that stores it keeps a "
     "spill kit. A spill is contained with absorbent pads and the area is cleaned twice with detergent."),
    ("s-recall-v1", "south", STAFF, "2025-01-01", "2026-01-31",
     "Medicine recalls RCL-1: the pharmacy manager reads the recall alerts every Friday and takes the affected "
     "batches off the dispensary shelves."),
    ("s-recall-v2", "south", STAFF, "2026-02-01", None,
     "Medicine recalls RCL-2: recall alerts are actioned on the working day they arrive. Pharmacy quarantines the "
     "affected batches on every ward and in the dispensary and records each location checked."),
    ("s-unlicensed-v1", "south", STAFF, "2025-01-01", "2026-08-31",
     "Unlicensed medicines ULM-1: a consultant signs a request form stating why no licensed product will do, and "
     "pharmacy orders the special from an approved supplier."),
    ("s-unlicensed-v2", "south", STAFF, "2026-09-01", None,
     "Unlicensed medicines ULM-2: requests are made in the electronic prescribing system, and the patient must be "
     "told the medicine is unlicensed before the first dose is given."),
    ("s-missed-doses", "south", WARD, "2025-01-01", None,
     "Missed doses MED-11: a dose omitted or delayed by more than two hours is recorded with a reason code on the "
     "drug chart. Omitted critical medicines, such as those for Parkinson's disease, are escalated to the prescriber "
     "at once."),
    ("s-billing-returns", "south", BILL, "2025-01-01", None,
     "Stock returns BIL-6: unopened stock returned to the wholesaler within 30 days is credited in full. Opened "
     "packs and fridge lines are never credited and go to waste."),
    ("s-billing-invoices", "south", BILL, "2025-01-01", None,
     "Invoice matching BIL-8: each wholesaler invoice is matched to its goods received note before payment. Price "
     "differences above five percent are queried with the supplier."),
    ("s-billing-private", "south", BILL, "2025-01-01", None,
     "Private prescriptions BIL-9: private prescriptions are priced at cost plus a dispensing fee set each April. "
     "Payment is taken at the hatch before the medicine is handed over."),
    # --- east
    ("e-cd-transport", "east", CTRL, "2025-01-01", None,
     "Controlled drug transport CD-31: controlled drugs move between hospital sites in sealed tamper-evident bags. "
     "The porter signs for the bag and the receiving pharmacist checks the seal number."),
    ("e-cd-night-safe", "east", CTRL, "2025-01-01", None,
     "Night safe CD-33: out of hours, controlled drugs for the emergency department are kept in the night safe. "
     "Only the site manager and the on-call pharmacist know its combination, which is changed monthly."),
    ("e-potassium", "east", STAFF, "2025-01-01", None,
     "Concentrated potassium IV-8: ampoules of concentrated potassium chloride are stocked only in pharmacy and "
     "critical care. Every other ward uses premixed infusion bags instead."),
    ("e-antibiotics", "east", STAFF, "2025-01-01", None,
     "Antibiotic review ABX-2: every intravenous antibiotic prescription is reviewed at 48 hours. The prescriber "
     "records whether to stop, switch to an oral antibiotic, or continue."),
    ("e-hours-v1", "east", STAFF, "2024-01-01", "2026-04-30",
     "Dispensary hours DSP-1: the east dispensary opens from eight until five on weekdays. Outside those hours the "
     "on-call pharmacist is paged through switchboard."),
    ("e-hours-v2", "east", STAFF, "2026-05-01", None,
     "Dispensary hours DSP-2: the east dispensary opens from half past seven until eight in the evening on weekdays, "
     "and on weekend mornings. The on-call pharmacist covers the night."),
    ("e-crash-trolley", "east", WARD, "2025-01-01", None,
     "Emergency trolley MED-15: the resuscitation trolley on each ward is checked every day against its list. The "
     "adrenaline and amiodarone drawers are resealed with a numbered tag after each check."),
    ("e-billing-recharge", "east", BILL, "2025-01-01", None,
     "Interdepartment recharges BIL-10: drugs issued for another hospital's patients are recharged monthly at cost "
     "plus a two percent handling fee."),
]

CALLERS = [
    {"actor_id": "ana", "region": "north", "acl_tags": [STAFF, CTRL, WARD]},
    {"actor_id": "bo", "region": "south", "acl_tags": [STAFF, CTRL]},
    {"actor_id": "chen", "region": "east", "acl_tags": [STAFF, WARD]},
    {"actor_id": "dara", "region": "north", "acl_tags": [WARD]},
    {"actor_id": "eli", "region": "south", "acl_tags": [BILL]},
    {"actor_id": "finn", "region": "east", "acl_tags": []},  # agency contractor: no tags; asks no case (on purpose)
]

CASES = [
    # --- positive
    {"name": "ana-destruction-now",
     "query": "who witnesses a pharmacist destroying expired stock with a denaturing kit",
     "caller": "ana", "kind": "positive", "expected": ["n-cd-destruction-v2"]},
    {"name": "ana-fridge-code", "query": "what does MED-7 say after a fridge temperature excursion",
     "caller": "ana", "kind": "positive", "expected": ["n-ward-fridge"],
     "notes": "quotes the code of a chunk ana may see"},
    {"name": "ana-formulary-route",
     "query": "does a new medicine join the north formulary through an electronic application",
     "caller": "ana", "kind": "positive", "expected": ["n-formulary-v1"],
     "notes": "FRM-5 answers in these words but takes effect 2026-06-16, one day late"},
    {"name": "dara-insulin-check", "query": "second nurse independently checks each insulin dose",
     "caller": "dara", "kind": "positive", "expected": ["n-insulin"]},
    {"name": "bo-register-discrepancy",
     "query": "unresolved discrepancy in the running balance reported to the accountable officer",
     "caller": "bo", "kind": "positive", "expected": ["s-cd-register"]},
    {"name": "bo-recall-in-2025", "query": "on which day does the pharmacy manager read recall alerts",
     "caller": "bo", "kind": "positive", "expected": ["s-recall-v1"], "on_date": "2025-06-01"},
    {"name": "eli-returns-credit", "query": "is unopened stock returned to the wholesaler credited",
     "caller": "eli", "kind": "positive", "expected": ["s-billing-returns"]},
    {"name": "chen-potassium", "query": "where are concentrated potassium chloride ampoules stocked",
     "caller": "chen", "kind": "positive", "expected": ["e-potassium"]},
    {"name": "chen-antibiotic-code", "query": "ABX-2 review of intravenous antibiotics at 48 hours",
     "caller": "chen", "kind": "positive", "expected": ["e-antibiotics"],
     "notes": "quotes the code of a chunk chen may see"},
    # --- restricted (by meaning, never by code)
    {"name": "dara-cabinet-keys", "query": "who keeps the keys of the double-locked cabinet",
     "caller": "dara", "kind": "restricted", "forbidden": ["n-cd-cabinet"]},
    {"name": "eli-patch-disposal", "query": "how are used fentanyl patches thrown away",
     "caller": "eli", "kind": "restricted", "forbidden": ["s-fentanyl-patch"]},
    {"name": "chen-night-safe", "query": "who knows the combination of the night safe in the emergency department",
     "caller": "chen", "kind": "restricted", "forbidden": ["e-cd-night-safe"]},
    # --- superseded
    {"name": "ana-ward-destruction", "query": "two registered nurses destroy expired stock on the ward",
     "caller": "ana", "kind": "superseded", "forbidden": ["n-cd-destruction-v1"]},
    {"name": "bo-friday-recalls", "query": "recalled batches taken off the shelves every Friday",
     "caller": "bo", "kind": "superseded", "forbidden": ["s-recall-v1"]},
    # --- not yet effective
    {"name": "ana-monthly-formulary", "query": "committee reviews formulary applications every month",
     "caller": "ana", "kind": "not_yet_effective", "forbidden": ["n-formulary-v2"]},
    {"name": "bo-unlicensed-consent", "query": "patient told the medicine is unlicensed before the first dose",
     "caller": "bo", "kind": "not_yet_effective", "forbidden": ["s-unlicensed-v2"]},
    # --- wrong region
    {"name": "chen-north-fridge", "query": "log the fridge minimum and maximum twice a day",
     "caller": "chen", "kind": "wrong_region", "forbidden": ["n-ward-fridge"]},
    {"name": "dara-south-missed-dose", "query": "omitted dose recorded with a reason code on the drug chart",
     "caller": "dara", "kind": "wrong_region", "forbidden": ["s-missed-doses"]},
    # --- absent
    {"name": "eli-canteen", "query": "canteen menu vegetarian options", "caller": "eli", "kind": "absent",
     "forbidden": ["s-billing-invoices"]},
]

CONFIG = {
    "top_k": 3, "on_date": EVAL_DATE, "repetitions": 3, "warmup": 1, "min_recall": {"hybrid": 1.0},
    # Latency is not what this corpus judges: budgets no plug-in run on a busy machine comes near.
    "p50_budget_ms": {"request": 2000}, "p95_budget_ms": {"request": 2000},
}

#: Policy codes as they appear in the chunk texts (and in leak_retrievers' code lookup).
CODE = re.compile(r"\b[A-Z]{2,4}-\d+\b")


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


def codes():
    """chunk_id -> the one policy code its text names."""
    out = {}
    for chunk_id, *_, text in CHUNKS:
        (code,) = CODE.findall(text)
        out[chunk_id] = code
    return out


def write_pharmacy_corpus(folder: Path) -> dict[str, Path]:
    """Write chunks.jsonl, callers.json, cases.jsonl and gate.json into ``folder``; return their paths."""
    from field_corpus import write_corpus  # the same four files as the field corpus, written the same way

    return write_corpus(folder, chunk_records(), CALLERS, CASES, CONFIG)
