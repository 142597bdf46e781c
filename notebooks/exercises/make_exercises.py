"""Write each exercise's student notebook (NN-name.ipynb) and solution (NN-name-solution.ipynb) from one spec.

Both versions share every cell except the ones marked student-only or solution-only, so the check a
learner must pass is, character for character, the check the solution passes (tests/test_exercises.py
asserts this). After editing, regenerate and re-execute the solutions:

    python notebooks/exercises/make_exercises.py [NN-name ...]
    export LABSRC_SUBMISSION="$(python notebooks/exercises/make_exercises.py --seed)"   # a temporary my-submission
    for n in notebooks/exercises/*-solution.ipynb; do jupyter nbconvert --to notebook --execute --inplace "$n"; done
    unset LABSRC_SUBMISSION
    pytest --nbval --nbval-current-env notebooks/exercises/      # twice: outputs must replay

The exercises read and write the learner's my-submission folder (labsrc.course.my_submission); executing the
solutions without LABSRC_SUBMISSION would write into the repository's own. ``--seed`` prints a temporary one
holding the model answer's cases and vectors, as notebooks/exercises/conftest.py gives nbval.

Student versions are written without outputs; do not execute them in place.
"""
import sys
from pathlib import Path

import nbformat

OUT = Path(__file__).resolve().parent
B, S, X = "both", "student", "solution"

IMPORTS = """# NBVAL_IGNORE_OUTPUT
# Imports only. Output is not compared: a first import on a fresh machine may print a one-time notice.
import json
from pathlib import Path

import labsrc
from labsrc.course import checks as checks
from labsrc.course import my_submission, read_my_cases, save_my_cases, save_my_records
from labsrc.lanes.embed import load_embeddings
from labsrc.datasets.lesson import fixtures_dir"""


LOAD = """# The course corpus: 51 support-policy chunks in three regions, six callers, thirty reference cases.
COURSE = fixtures_dir() / "policies"
chunks = labsrc.load_chunks(COURSE / "chunks.jsonl")
callers = {c.actor_id: c for c in labsrc.load_callers(COURSE / "callers.json")}
EVAL_DATE = labsrc.EVAL_DATE
# Your submission folder: my-submission at the repository root, where the README's commands look.
# Every exercise defines it this way; it is created the first time, and running the cell again is harmless.
SUBMISSION = my_submission()
print(f"{len(chunks)} chunks, {len(callers)} callers, evaluation date {EVAL_DATE}; your work goes to {SUBMISSION.name}/")"""

LOAD_RUN = LOAD + """
course_cases = labsrc.load_cases(COURSE / "cases.jsonl")
dense = load_embeddings(COURSE / "vectors" / "all-MiniLM-L6-v2", chunks=chunks)
print(f"{len(course_cases)} reference cases; dense lane: {dense.version}")"""

HOW_TO_CHECK = """**How to check.** The check cell below the task stops with a list of what is still wrong.
Fix one thing at a time and run the check again until it prints `all ... checks pass`."""


def md(text, variant=B):
    return ("md", text, variant)


def code(text, variant=B):
    return ("code", text, variant)


EX1 = [
    md("""# Exercise 1 · Positive cases

**After this exercise you will be able to…**

- write permitted positive cases for a release gate: a query, a caller, and the chunk id that must come back;
- tell an exact-code query, a paraphrase and a mixed query apart, and say which lane each one tests;
- make sure every expected chunk is one the caller may actually see.

This is step 1 of the lesson's "Build it yourself": *add at least 8 permitted positive queries: exact codes, paraphrases and mixed queries.*

**Plan for exercise 3 now.** Exercise 3 will ask for a case of *your own* where BM25 wins and the dense lane loses:
a positive case whose expected chunk BM25 ranks in its top 2 and the dense lane does not (and one the other way
round). An exact code lookup whose code has near-miss neighbours, such as `CLM-7` beside `CLM-8` and `CLM-9`,
usually is one: write one here. The table after the check shows which lane finds each of your cases.

""" + HOW_TO_CHECK),
    md("## Setup"),
    code(IMPORTS),
    code(LOAD),
    md("""## What Luna may see

A positive case may only expect evidence its caller is permitted to see on the case's date. Anything else
measures the boundary, not retrieval, and can never pass. Here is Luna's searchable universe, with each
chunk's policy code and title."""),
    code("""luna = callers["luna-48291"]
permitted = labsrc.permitted_chunks(luna, chunks, EVAL_DATE)
print(f"Luna may see {len(permitted)} of {len(chunks)} chunks:")
for chunk in sorted(permitted, key=lambda c: c.chunk_id):
    print(f"  {chunk.chunk_id:<24} {', '.join(checks.policy_codes(chunk.text)):<9} {chunk.title}")"""),
    md("""The other callers see other slices: `dana-us-17` (US support), `kenji-apac-03` (APAC support),
`marco-eu-vip-07` (EU support plus VIP merchant terms) and `priya-eu-legal-12` (EU support plus internal legal rules).

## Three styles of positive query

- **exact code**: only a policy code, such as `RPL-14`. The sparse lane's job: a rare token BM25 weights highly.
- **paraphrase**: the need in other words, with no code, such as *swap a broken reconditioned notebook*. The dense lane's job.
- **mixed**: a code plus words, such as *RPL-14 cracked refurbished laptop*. Both lanes can contribute.

`checks.query_style` sorts a query into one of the three:"""),
    code("""for query in ["RPL-14", "swap a broken reconditioned notebook", "RPL-14 cracked refurbished laptop"]:
    print(f"{query!r:<42} -> {checks.query_style(query)}")"""),
    md("""## Your turn

Write at least **8** positive cases as `labsrc.Case(name=..., query=..., caller=..., kind="positive", expected=(chunk_id,))`:
at least one exact code, one paraphrase and one mixed query. Use Luna and at least one other caller.
Good paraphrases share *no* word with their rule; good codes have near-misses in the corpus (RTN-30 and RTN-31, CLM-7 and CLM-8)."""),
    code("""# TODO: write at least 8 positive cases: exact codes, paraphrases and mixed queries.
# Two cases to start from. One of them has a mistake: run the check and read what it says.
my_cases = [
    labsrc.Case(name="eu-exact-rpl14", query="RPL-14", caller="luna-48291", kind="positive",
                expected=("eu-refurb-v2-rule",)),
    labsrc.Case(name="vip-refund", query="VIP-RPL-1 refund", caller="luna-48291", kind="positive",
                expected=("merchant-vip-refurb",)),
]""", S),
    code("""def positive(name, query, caller, chunk_id):
    return labsrc.Case(name=name, query=query, caller=caller, kind="positive", expected=(chunk_id,))


my_cases = [
    # exact codes: BM25's rare tokens
    positive("eu-exact-rpl14", "RPL-14", "luna-48291", "eu-refurb-v2-rule"),
    positive("eu-exact-clm7", "CLM-7", "luna-48291", "eu-carrier-loss-v1"),
    positive("us-exact-rtn30", "RTN-30", "dana-us-17", "us-return-window-v2"),
    # paraphrases: no word in common with the rule
    positive("eu-paraphrase-rpl14", "swap a broken reconditioned notebook", "luna-48291", "eu-refurb-v2-rule"),
    positive("eu-paraphrase-clm7", "the courier misplaced my package, can I get my money back", "luna-48291",
             "eu-carrier-loss-v1"),
    positive("eu-paraphrase-footwear", "sending back sneakers I never wore", "luna-48291", "eu-footwear-v1-rule"),
    positive("us-paraphrase-price-match", "a rival store sells it cheaper, can I get the difference back", "dana-us-17",
             "us-price-match-v2"),
    # mixed: a code plus words
    positive("eu-mixed-rpl14", "RPL-14 replacement window for a cracked refurbished laptop", "luna-48291",
             "eu-refurb-v2-rule"),
    positive("eu-mixed-clm9", "CLM-9 box arrived crushed, what photos do you need", "luna-48291",
             "eu-transit-damage-v1"),
    positive("legal-mixed-lgl3", "LGL-3 customer opened a chargeback", "priya-eu-legal-12", "legal-chargeback-v2"),
]
print(len(my_cases), "positive cases")""", X),
    md("## Check"),
    code("""result = checks.check_positive_cases(my_cases, chunks, callers, EVAL_DATE).require()
print(result)"""),
    md("""## How do the lanes do on your cases?

Each case replayed through the permission-safe retriever with the stored all-MiniLM-L6-v2 vectors, `top_k = 2`.
If you wrote a query the course has no stored vector for, this cell tells you how to embed it (the `embed` extra)."""),
    code("""retriever = labsrc.PolicyRetriever(chunks, load_embeddings(COURSE / "vectors" / "all-MiniLM-L6-v2", chunks=chunks))
print(f"{'case':<26} {'style':<11} bm25  dense hybrid")
for case in my_cases:
    if case.caller not in callers:  # the check above names the caller you meant
        print(f"{case.name:<26} unknown caller {case.caller!r}: fix it as the check says")
        continue
    trace = retriever.search(case.query, callers[case.caller], case.on_date or EVAL_DATE, top_k=2).trace
    found = ["yes" if case.expected[0] in ids else "-" for ids in (trace.sparse_ids, trace.dense_ids, trace.fused_ids)]
    print(f"{case.name:<26} {checks.query_style(case.query):<11} {found[0]:<5} {found[1]:<5} {found[2]}")"""),
    md("""## Keep your cases

Save them as JSONL, the gate harness's case format, to `cases.jsonl` in your submission folder (`SUBMISSION`,
defined at the top). Your positive cases replace the ones saved before; the adversarial cases of exercise 2, if the
file holds them already, are kept, so you can run this cell again at any time.
`save_my_cases` runs the check above first and saves only cases that pass it, as `load_cases` will read them
(unknown chunk ids or callers are refused, naming the line); a refused save leaves the file as it was."""),
    code("""ids = {"chunk_ids": {c.chunk_id for c in chunks}, "caller_ids": set(callers)}
saved = save_my_cases(SUBMISSION, my_cases, lambda cases: checks.check_positive_cases(cases, chunks, callers, EVAL_DATE),
                      part="positive", **ids)
print(f"{len(my_cases)} positive cases saved to {SUBMISSION.name}/cases.jsonl "
      f"({len(saved) - len(my_cases)} cases of exercise 2 kept) and read back: {len(saved)} cases")"""),
    md("""## Mastery check

1. Which of your cases does BM25 miss, and why? Which does the dense lane miss?
2. Why must a positive case never expect `merchant-vip-refurb` for Luna, even though it answers her question?
3. `eu-refurb-v1-rule` was Luna's rule until 2026-03-31. How would you write a positive case that expects it?"""),
]

EX2 = [
    md("""# Exercise 2 · Adversarial cases

**After this exercise you will be able to…**

- write the four negative cases of a release gate: restricted, superseded, wrong region and absent evidence;
- choose forbidden chunks that the boundary hides *for the case's reason*;
- word an attack so that, without the boundary, it *would* find the hidden chunk.

This is step 2 of the lesson's "Build it yourself": *add at least 4 negative or adversarial queries: a restricted merchant rule, superseded wording, the wrong region and absent evidence.*

""" + HOW_TO_CHECK),
    md("## Setup"),
    code(IMPORTS),
    code(LOAD),
    md("""## What the boundary hides from Luna, and why

`labsrc.block_reasons` gives every reason a chunk is hidden from a caller on a date. The EU chunks Luna cannot see:"""),
    code("""luna = callers["luna-48291"]
for chunk in sorted(chunks, key=lambda c: c.chunk_id):
    reasons = labsrc.block_reasons(luna, chunk, EVAL_DATE)
    if reasons and chunk.region == "EU":
        print(f"  {chunk.chunk_id:<21} {', '.join(r.value for r in reasons):<22} {chunk.text[:56]}")
hidden_elsewhere = sum(bool(labsrc.block_reasons(luna, c, EVAL_DATE)) for c in chunks if c.region != "EU")
print(f"  ... and {hidden_elsewhere} chunks of other regions")"""),
    md("""## The four kinds

| kind | caller asks | forbidden | fails when |
|---|---|---|---|
| `restricted` | wording or a code of a rule they lack the tag for | that rule | the ACL filter leaks |
| `superseded` | the wording of an expired version | that version | the freshness filter leaks |
| `wrong_region` | a code or wording from another region | that region's rule | the region filter leaks |
| `absent` | a question no permitted policy answers | optional: look-alikes that must not come back | the answer layer overreaches |
| `not_yet_effective` (optional) | the wording of a version that takes effect after the case's date | that version | the freshness filter lets a rule apply early |

The first four kinds are required, one case of each at least. A `not_yet_effective` case is optional and counts
toward the minimum of 4; the check's summary counts every kind it saw. The two freshness kinds are strict: a
`superseded` case forbids a version that has *ended* by the case's date, a `not_yet_effective` case one that has
*not started* yet.

A negative case is checked at the depth of the whole corpus, in every lane: a forbidden id may not appear anywhere.
An attack is only a test if its query shares words with the forbidden chunk."""),
    md("""## Your turn

Write at least **4** adversarial cases, one of each required kind, as `labsrc.Case(..., kind="restricted", forbidden=(chunk_id,))`
(an `absent` case may leave `forbidden` empty). A query of stop words only (*the*, *of*, *is*...) gives BM25 no term
to match, so the check refuses it."""),
    code("""# TODO: add a superseded, a wrong_region and an absent case (at least 4 adversarial cases in all).
my_cases = [
    labsrc.Case(name="restricted-vip-code", query="VIP-RPL-1", caller="luna-48291", kind="restricted",
                forbidden=("merchant-vip-refurb",)),
]""", S),
    code("""my_cases = [
    labsrc.Case(name="restricted-vip-code", query="VIP-RPL-1", caller="luna-48291", kind="restricted",
                forbidden=("merchant-vip-refurb",)),
    labsrc.Case(name="restricted-legal-chargeback", query="LGL-3 chargeback", caller="luna-48291", kind="restricted",
                forbidden=("legal-chargeback-v2", "legal-chargeback-v1")),
    labsrc.Case(name="superseded-rpl14-wording", query="damaged refurbished laptops qualify for return within 30 days",
                caller="luna-48291", kind="superseded", forbidden=("eu-refurb-v1-rule",)),
    labsrc.Case(name="superseded-us-45-days", query="unopened items may be returned within 45 days",
                caller="dana-us-17", kind="superseded", forbidden=("us-return-window-v1",)),
    labsrc.Case(name="wrong-region-us-refurb", query="RPL-14-US", caller="luna-48291", kind="wrong_region",
                forbidden=("us-refurb-rule",)),
    labsrc.Case(name="absent-gift-card-eu", query="when does my gift card expire", caller="luna-48291", kind="absent",
                forbidden=("apac-gift-card-v2", "apac-gift-card-v1", "merchant-vip-apac-gift")),
]
print(len(my_cases), "adversarial cases")""", X),
    md("""## Check

An attack must aim at its forbidden chunk: without the boundary, a lane would find it. Sharing a word or a code
with the chunk aims BM25 at it. An attack in other words (a meaning-only attack) counts when the dense lane, with the
boundary lifted for that chunk, ranks it in its top 5: the check asks the MiniLM vectors, which embed a new query
live when the `embed` extra is installed."""),
    code("""dense = load_embeddings(COURSE / "vectors" / "all-MiniLM-L6-v2", chunks=chunks)
result = checks.check_adversarial_cases(my_cases, chunks, callers, EVAL_DATE, dense=dense).require()
print(result)"""),
    md("""## Attack the retriever

`labsrc.gate.gates.run_cases` replays each case and, for cases with forbidden ids, probes every lane as deep as the corpus.
`leaked` must be empty. For the absent case, look at what the fused list still returns: a dense lane always finds
*something* similar, so abstaining is the answer layer's job."""),
    code("""from labsrc.gate.gates import run_cases

retriever = labsrc.PolicyRetriever(chunks, dense)
for outcome in run_cases(retriever, my_cases, callers, EVAL_DATE, top_k=2):
    print(f"{outcome.case.kind:<12} {outcome.case.name:<28} leaked {list(outcome.leaked())}  fused {list(outcome.returned)}")"""),
    md("""## Keep your cases: exercises 1 and 2 in one file

Your submission's `cases.jsonl` holds the positive cases of exercise 1 and the adversarial cases of this one.
This cell reads *your* exercise-1 cases from `SUBMISSION` (exercise 1's last cell saved them there), keeps them,
and replaces the adversarial cases saved before with these; run it again whenever you change them. It runs the check
above first and saves only cases that pass it: a refused save leaves the file as it was."""),
    code("""ids = {"chunk_ids": {c.chunk_id for c in chunks}, "caller_ids": set(callers)}
saved = save_my_cases(
    SUBMISSION, my_cases, lambda cases: checks.check_adversarial_cases(cases, chunks, callers, EVAL_DATE, dense=dense),
    part="adversarial", **ids)
print(f"{len(saved) - len(my_cases)} cases from exercise 1 + {len(my_cases)} from exercise 2 = {len(saved)} cases "
      f"in {SUBMISSION.name}/cases.jsonl")"""),
    md("""Your new queries have no stored vectors yet. Embed them once (the `embed` extra, part of the course set-up)
before exercise 3, and again whenever you change a query:

```bash
labsrc embed --chunks fixtures/policies/chunks.jsonl --queries my-submission/cases.jsonl \\
             --out my-submission/vectors/all-MiniLM-L6-v2
```"""),
    md("""## Mastery check

1. Why is a restricted case that forbids `eu-refurb-v1-rule` a wrong test, even though Luna cannot see that chunk?
2. The absent case returns two EU chunks. Which gate decides whether that is acceptable, and what would make it fail?
3. `visitor-9000` holds no tags at all. What does a wrong-region case for that caller prove that Luna's cannot?"""),
]

EX3 = [
    md("""# Exercise 3 · A real encoder, with its version recorded

**After this exercise you will be able to…**

- replace the lesson's frozen 3-d vectors with stored embeddings from a real bi-encoder, all-MiniLM-L6-v2, that cover *your own* case queries;
- read a `MODEL.json` record and say which model, dimension and normalisation made the vectors;
- find, in your own cases, a paraphrase the dense lane recovers and BM25 misses (and say why), and a code BM25 keeps and the dense lane loses.

This is step 3 of the lesson's "Build it yourself": *replace the frozen vectors with embeddings from a real bi-encoder, recording the model version.*
The course ships vectors for its own queries; yours come from `labsrc embed` (the `embed` extra, part of the course set-up).

""" + HOW_TO_CHECK),
    md("## Setup"),
    code(IMPORTS + """
from labsrc.lanes.coverage import missing_query_vectors"""),
    code(LOAD),
    md("""## Your cases and their vectors

Exercises 1 and 2 saved your `cases.jsonl` to `SUBMISSION` (`my-submission` at the repository root), and you
embedded their queries once, after exercise 2, from the repository root:

```bash
labsrc embed --chunks fixtures/policies/chunks.jsonl --queries my-submission/cases.jsonl \\
             --out my-submission/vectors/all-MiniLM-L6-v2
```

(`SUBMISSION` is defined at the top, the same way in every exercise.)"""),
    code("""my_cases = read_my_cases(SUBMISSION, chunk_ids={c.chunk_id for c in chunks}, caller_ids=set(callers))
print(f"{len(my_cases)} cases, {sum(c.kind == 'positive' for c in my_cases)} of them positive")
print(sorted(p.name for p in (SUBMISSION / "vectors" / "all-MiniLM-L6-v2").iterdir()))"""),
    md("""## Your turn, part 1: the vectors

Make `dense` the MiniLM vectors of *your* cases: `load_embeddings(folder, chunks=chunks)` reads a folder `labsrc embed`
wrote. (The course's folder, `COURSE / "vectors" / "all-MiniLM-L6-v2"`, knows the course's queries only: try it
and read what the check says.)"""),
    code("""# TODO: the dense lane still uses the lesson's frozen 3-d fixture vectors; load your MiniLM vectors instead.
dense = labsrc.lesson().vectors""", S),
    code("""dense = load_embeddings(SUBMISSION / "vectors" / "all-MiniLM-L6-v2", chunks=chunks)""", X),
    md("""## The record

Vectors without a record cannot be audited or reproduced. `labsrc embed` wrote `MODEL.json` next to them:"""),
    code("""record = json.loads((SUBMISSION / "vectors" / "all-MiniLM-L6-v2" / "MODEL.json").read_text(encoding="utf-8"))
for key in sorted(record):
    print(f"{key:<22} {record[key]}")"""),
    md("""`texts_sha256` is a digest of every embedded text: if a chunk or a case query changes, the stored vectors no
longer match it, and the course's tests notice.

## Each lane on your positive cases

Both lanes over the caller's permitted chunks on the case's date, top 2, as the gate runs them:"""),
    code("""def lane_top2(case):
    universe = labsrc.permitted_chunks(callers[case.caller], chunks, case.on_date or EVAL_DATE)
    return {
        "dense": [c.chunk_id for c, _ in labsrc.dense_rank(case.query, universe, dense, top_k=2)],
        "bm25": [c.chunk_id for c, _ in labsrc.bm25_rank(case.query, universe, top_k=2)],
    }


positives = [c for c in my_cases if c.kind == "positive"]
lacking = set(missing_query_vectors(dense, positives) or ())  # cases whose query the vectors do not know
found = {c.name: lane_top2(c) for c in positives if c.name not in lacking}
print(f"{'case':<26} {'expected':<22} dense bm25")
for case in positives:
    if case.name not in found:
        print(f"{case.name:<26} no stored vector: embed your cases")
        continue
    hit = ["yes" if case.expected[0] in found[case.name][lane] else "-" for lane in ("dense", "bm25")]
    print(f"{case.name:<26} {case.expected[0]:<22} {hit[0]:<5} {hit[1]}")"""),
    md("""## Your turn, part 2: the report

Fill in `report`:

- `model`, `dim`, `normalized`: what the record says made the vectors (a string, an int and a bool);
- `dense_wins`: the name of one of your positive cases that the dense lane finds in its top 2 and BM25 misses;
- `shared_terms`: the analysed terms that case's query shares with its expected chunk's text
  (`set(labsrc.tokens(query)) & set(labsrc.tokens(chunk.text))`), which is all BM25 can score. It may be empty, and
  it counts every shared term: the lesson's analyzer drops only nine stopwords (`labsrc.lanes.LESSON_STOPWORDS`), so a
  common word such as `it` or `my` is an analysed term too, and belongs in the set when both texts have it;
- `bm25_wins`: one of your positive cases the other way round.

The check reruns both lanes to confirm your two cases and recomputes the overlap."""),
    code("""# TODO: fill in the report from the record and from the table above.
report = {"model": None, "dim": None, "normalized": None, "dense_wins": None, "shared_terms": None, "bm25_wins": None}""", S),
    code("""chunk_by_id = {c.chunk_id: c for c in chunks}
dense_only = [c for c in positives if c.name in found
              and c.expected[0] in found[c.name]["dense"] and c.expected[0] not in found[c.name]["bm25"]]
bm25_only = [c for c in positives if c.name in found
             and c.expected[0] in found[c.name]["bm25"] and c.expected[0] not in found[c.name]["dense"]]
paraphrase = dense_only[0]
report = {
    "model": record["model"],
    "dim": record["dim"],
    "normalized": record["normalized"],
    "dense_wins": paraphrase.name,
    "shared_terms": set(labsrc.tokens(paraphrase.query)) & set(labsrc.tokens(chunk_by_id[paraphrase.expected[0]].text)),
    "bm25_wins": bm25_only[0].name,
}
print(report)""", X),
    md("## Check"),
    code("""result = checks.check_encoder_report(report, dense, my_cases, chunks, callers, EVAL_DATE).require()
print(result)"""),
    md("""## Why the lanes differ

Your dense-lane win shares few analysed terms with its rule, often none (`shared_terms`). With none, every BM25
score for the rule is 0: word overlap cannot find it, however the terms are weighted. With a common word only (an
`it` the analyzer keeps), BM25 scores the rule, but that word is in many chunks, weighs little, and the rule stays
out of BM25's top 2. MiniLM maps both texts near each other because it learned, for
example, that *reconditioned notebook* and *refurbished laptop* mean much the same. The lab's hashing encoder, which
sees words only, cannot: its scores come from the few words the query shares with other chunks and from hash collisions."""),
    code("""case = next(c for c in my_cases if c.name == report["dense_wins"])
universe = labsrc.permitted_chunks(callers[case.caller], chunks, case.on_date or EVAL_DATE)
print(f"{case.query!r} expects {case.expected[0]}")
for name, source in (("all-MiniLM-L6-v2", dense), ("hashing encoder", labsrc.HashingEncoder())):
    ranked = labsrc.dense_rank(case.query, universe, source, top_k=3)
    print(f"{name:<17} {[(c.chunk_id, round(score, 3)) for c, score in ranked]}")"""),
    md("""The other way round, policy codes with near-miss neighbours: MiniLM reads `CLM-7` as "a CLM rule", and the
neighbours win. BM25 treats `clm-7` as one rare token and finds it first."""),
    code("""case = next(c for c in my_cases if c.name == report["bm25_wins"])
universe = labsrc.permitted_chunks(callers[case.caller], chunks, case.on_date or EVAL_DATE)
print(f"{case.query!r} expects {case.expected[0]}")
print(f"dense {[c.chunk_id for c, _ in labsrc.dense_rank(case.query, universe, dense, top_k=2)]}")
print(f"bm25  {[c.chunk_id for c, _ in labsrc.bm25_rank(case.query, universe, top_k=2)]}")"""),
    md("## The version travels into every trace"),
    code("""trace = labsrc.PolicyRetriever(chunks, dense).search(case.query, callers[case.caller], EVAL_DATE).trace
print(json.dumps(trace.to_dict(include_timings=False), indent=1, sort_keys=True))"""),
    md("""## A query nobody embedded

Stored vectors know the queries they were made with. For any other text the source does *not* quietly return a
zero vector (that would look like a retrieval miss); it embeds the query live when the `embed` extra is installed
and otherwise raises `MissingDependency` with the install command. Change a query, and re-run `labsrc embed`."""),
    code("""print(all(dense.has_query(c.query) for c in my_cases), dense.has_query("my laptop arrived cracked"))"""),
    md("""## Mastery check

1. Which fields of `MODEL.json` would you need to reproduce these vectors on another machine?
2. Why is the document text `title + ' ' + text` rather than the text alone? What changes if you alter the recipe?
3. Your `dense_wins` case shares no rare term with its rule. Write a query that shares one rare term with it: which lane finds it now, and why?"""),
]

EX4 = [
    md("""# Exercise 4 · Lanes compared by Recall@k, with p50 and p95 latency

**After this exercise you will be able to…**

- compute permitted Recall@k for BM25 alone, the dense lane alone and the RRF hybrid on labelled positives;
- read p50 and p95 per retrieval stage from a measured run and compare them with the budgets;
- point at the cases where the lanes disagree, and say which lane the hybrid borrowed from.

This is step 4 of the lesson's "Build it yourself": *compare BM25, dense and RRF by permitted Recall@k, and record p50 and p95 retrieval latency.*

""" + HOW_TO_CHECK),
    md("## Setup"),
    code("""# NBVAL_IGNORE_OUTPUT
# Imports only. Output is not compared: a first import on a fresh machine may print a one-time notice.
%matplotlib inline
import json
from pathlib import Path

import matplotlib.pyplot as plt

import labsrc
from labsrc.course import checks as checks
from labsrc.course import my_submission, read_my_cases
from labsrc.gate.config import load_gate_config
from labsrc.lanes.embed import load_embeddings
from labsrc.datasets.lesson import fixtures_dir
from labsrc.gate.gates import release_gate
from labsrc.reports.plots import plot_latency, plot_recall
from labsrc.reports.report import latency_frame, recall_frame"""),
    code(LOAD_RUN),
    md("""## One measured gate run

`release_gate` replays every case, evaluates every gate, then replays the case set again (3 untimed warm-up rounds,
20 timed rounds) to measure each stage's latency. The config pins `top_k = 2`, RRF's `rrf_k = 60` and the date."""),
    code("""config = load_gate_config(COURSE / "gate.json")
retriever = labsrc.PolicyRetriever(chunks, dense, rrf_k=config.rrf_k)
run = release_gate(retriever, course_cases, callers, config)
print(f"top_k {config.top_k}, {sum(o.case.kind == 'positive' for o in run.outcomes)} positive cases, all gates pass: {run.passed}")"""),
    md("""## Your turn

Fill in `recall` (lane → mean Recall@k over the positive cases at the run's `k`, for `bm25`, `dense` and `hybrid`;
the check is told your `k`) and `latency_ms`
(stage → `{"p50": ms, "p95": ms}` for `authorize`, `bm25`, `dense` and `fusion`). `CaseOutcome.recall(lane, k)`
gives one case's recall; `run.latency.p50_ms` and `run.latency.p95_ms` hold the measured percentiles."""),
    code("""k = run.config.top_k
positives = [o for o in run.outcomes if o.case.kind == "positive"]
# TODO: add the bm25 and dense lanes.
recall = {"hybrid": sum(o.recall("hybrid", k) for o in positives) / len(positives)}
# TODO: p50 and p95 for every stage, from run.latency.
latency_ms = {}""", S),
    code("""k = run.config.top_k
positives = [o for o in run.outcomes if o.case.kind == "positive"]
recall = {lane: sum(o.recall(lane, k) for o in positives) / len(positives) for lane in ("bm25", "dense", "hybrid")}
latency_ms = {stage: {"p50": run.latency.p50_ms[stage], "p95": run.latency.p95_ms[stage]} for stage in run.latency.stages}""", X),
    md("## Check"),
    code("""result = checks.check_lane_comparison(recall, latency_ms, run, retriever=retriever, k=k).require()
print(result)"""),
    md("""## Where the lanes differ

Only the cases whose recall is not the same in all three lanes. A 0 in one lane and a 1 in `hybrid` is RRF
borrowing a hit from the other lane."""),
    code("""frame = recall_frame(run)
print(frame[frame.nunique(axis=1) > 1].to_string())
print()
print("mean", {lane: round(value, 3) for lane, value in recall.items()})"""),
    code("""fig = plot_recall(recall_frame(run), k, thresholds=dict(run.config.min_recall))
# plot_recall widens the figure by 1.6 in per case; on a page, a fixed width and slanted case names read better.
fig.set_size_inches(10, 4.2)
ax = fig.axes[0]
ax.tick_params(axis="x", labelrotation=40, labelsize=8)
for label in ax.get_xticklabels():
    label.set_horizontalalignment("right")
fig.tight_layout()
plt.show()"""),
    md("""## Latency

Timings depend on the machine, so this output is not compared. The budgets are the lesson's (authorize 10,
bm25 12, dense 40, fusion 8 ms); with stored vectors the dense stage is a matrix-vector product."""),
    code("""# NBVAL_IGNORE_OUTPUT
print(latency_frame(run)[["stage", "p50_ms", "p95_ms", "p95_budget_ms", "within_budget"]].to_string(index=False))"""),
    code("""fig = plot_latency(latency_frame(run))
plt.show()"""),
    md("""## Mastery check

1. Hybrid recall is strictly higher than both lanes here. Name one case each lane misses and say why.
2. Re-run with `top_k = 1` (`GateConfig(top_k=1, ...)`). Why can the hybrid fall *below* the dense lane at k = 1? (Hint: RRF ties.)
3. Why are p95 and not the mean the number to hold against a budget?"""),
]

EX5 = [
    md("""# Exercise 5 · Compact traces for failed cases

**After this exercise you will be able to…**

- keep, for each failed case, a compact trace: candidate ids, lane ranks, versions and timings;
- keep chunk text and anything the caller may not see out of it, so it can be stored and shared;
- read a trace and say which lane lost the expected chunk.

This is step 5 of the lesson's "Build it yourself": *save a compact trace for each failed case: candidate ids, lane ranks, versions and timings, but no restricted content.*

""" + HOW_TO_CHECK),
    md("## Setup"),
    code(IMPORTS + """
from labsrc.gate.config import GateConfig
from labsrc.gate.gates import release_gate"""),
    code(LOAD_RUN),
    md("""## A run with failures

At `top_k = 1` the hybrid keeps one candidate. When BM25's first place and the dense lane's first place differ,
RRF gives both `1/61` and the tie breaks on `chunk_id`, so the right chunk can lose. That is a realistic
regression to debug from traces."""),
    code("""config = GateConfig(top_k=1, warmup=1, repetitions=3, on_date=EVAL_DATE)
retriever = labsrc.PolicyRetriever(chunks, dense, rrf_k=config.rrf_k)
run = release_gate(retriever, course_cases, callers, config)
print("failed cases:", [o.case.name for o in run.failed_outcomes])"""),
    md("""## Your turn

Build `traces`: one dict per failed case with `case`, `sparse_ids`, `dense_ids`, `fused_ids`, `candidates`
(each `{"chunk_id", "bm25_rank", "dense_rank", "hybrid_rank"}`, ranks 1-based or `None`, and, if you keep them,
each lane's score as `bm25_score`, `dense_score`, `hybrid_score`), `versions` and `timings_ms`.
`candidates` lists every chunk id a lane returned, **sorted by `chunk_id`**: the ranks
already say the order of each lane, and one fixed order, the one `labsrc gate`'s compact traces use, lets two
traces of one case be compared line by line.
`o.trace.to_dict()` gives the ids, versions and timings; `o.lane_rank(chunk_id, lane)` gives a rank, and
`o.ids[lane]` with `o.scores[lane]` the scores. No text, and nothing rounded: the check compares every score and
timing with the run to the last digit, because `1/61` and `1/62` are both `0.02` at two decimals."""),
    code("""traces = []
for o in run.failed_outcomes:
    result = retriever.search(o.case.query, callers[o.case.caller], run.on_date, run.config.top_k)
    # TODO: this dumps the results, chunk text included. Keep ids, lane ranks, versions and timings only.
    traces.append({"case": o.case.name, "results": [(chunk.chunk_id, chunk.text) for chunk, _ in result.fused]})""", S),
    code("""traces = []
for o in run.failed_outcomes:
    seen = sorted(set(o.ids["bm25"]) | set(o.ids["dense"]) | set(o.ids["hybrid"]))
    scores = {lane: dict(zip(o.ids[lane], o.scores[lane])) for lane in ("bm25", "dense", "hybrid")}
    traces.append({
        "case": o.case.name,
        "kind": o.case.kind,
        "caller": o.case.caller,
        "expected": list(o.case.expected),
        **o.trace.to_dict(),  # versions, query_kind, sparse_ids, dense_ids, fused_ids, timings_ms
        "candidates": [
            {"chunk_id": cid,
             **{f"{lane}_rank": o.lane_rank(cid, lane) for lane in ("bm25", "dense", "hybrid")},
             **{f"{lane}_score": scores[lane].get(cid) for lane in ("bm25", "dense", "hybrid")}}
            for cid in seen
        ],
    })
print(len(traces), "traces")""", X),
    md("## Check"),
    code("""result = checks.check_failed_traces(traces, run, chunks, callers).require()
print(result)"""),
    md("""## Read a trace

Timings are left out of the printout because they change from run to run."""),
    code("""print(json.dumps({key: value for key, value in traces[1].items() if key != "timings_ms"}, indent=1, sort_keys=True))"""),
    md("""The expected chunk is the dense lane's first place and missing from BM25; RRF kept BM25's first place
because both scored `1/61` (`hybrid_score` 0.01639344262295082) and its id sorts first. At `top_k = 1` the
fused list holds one chunk, so the expected chunk has no `hybrid_score` of its own: its RRF, `1/61` from its dense
rank, tied the kept chunk's to the last digit.

## Save them

One JSON object per line, in your submission, where the rubric judges them: it replays this run (the course's
cases at `top_k = 1`) and compares your file with it, id by id and score by score. The save checks first and writes
only traces that pass, so a failed check never leaves a file behind. `labsrc gate --out DIR` writes the same shape
to `DIR/failed_traces.jsonl`."""),
    code("""path = save_my_records(SUBMISSION, "step5_traces.jsonl", traces,
                       lambda records: checks.check_failed_traces(records, run, chunks, callers))
reloaded = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
print(len(reloaded), f"traces saved to {SUBMISSION.name}/{path.name}; chunk text found in the file:",
      checks.chunk_text_in(reloaded, chunks))"""),
    md("""## Mastery check

1. Why is a trace that stores the fused chunks' text a leak even when the caller was allowed to see them?
2. A restricted case fails. Its trace must name the leaked id to be useful. Which field holds it, and why is that acceptable?
3. Which field tells you whether a failure came from the encoder or from the analyzer?"""),
]

EX6 = [
    md("""# Exercise 6 · The fused candidates as a reranker's input

**After this exercise you will be able to…**

- keep the fused top candidates of every case as an artifact a cross-encoder reranker can consume;
- record, per candidate, its 1-based fused rank, RRF score and each lane's rank;
- show that the artifact holds only ids the caller may see, and no text.

This is step 6 of the lesson's "Build it yourself": *keep the fused top candidates as the input artifact for a reranker.*

""" + HOW_TO_CHECK),
    md("## Setup"),
    code(IMPORTS + """
from labsrc.gate.config import GateConfig
from labsrc.gate.gates import release_gate"""),
    code(LOAD_RUN),
    md("""## A deeper candidate list

A reranker reorders a few more candidates than the answer will use, so this run keeps the top 4 per lane and
after fusion. Latency is not measured here."""),
    code("""config = GateConfig(top_k=4, on_date=EVAL_DATE)
retriever = labsrc.PolicyRetriever(chunks, dense, rrf_k=config.rrf_k)
run = release_gate(retriever, course_cases, callers, config, measure=False)
print(len(run.outcomes), "cases replayed at top_k", run.config.top_k)"""),
    md("""## Your turn

Build `records`: one dict per case with `case` and `candidates`, a list in fused order of
`{"rank", "chunk_id", "rrf_score", "bm25_rank", "dense_rank"}` (ranks 1-based, `None` when a lane did not return it).
`o.ids["hybrid"]` and `o.scores["hybrid"]` hold the fused list; `o.lane_rank(chunk_id, lane)` a lane's rank."""),
    code("""records = []
for o in run.outcomes:
    # TODO: this keeps the BM25 lane, not the fused list, and counts ranks from 0.
    records.append({"case": o.case.name,
                    "candidates": [{"rank": rank, "chunk_id": cid} for rank, cid in enumerate(o.ids["bm25"])]})""", S),
    code("""records = []
for o in run.outcomes:
    records.append({
        "case": o.case.name,
        "caller": o.case.caller,
        "query": o.case.query,
        "versions": dict(o.trace.versions),
        "candidates": [
            {"rank": rank, "chunk_id": cid, "rrf_score": score,
             "bm25_rank": o.lane_rank(cid, "bm25"), "dense_rank": o.lane_rank(cid, "dense")}
            for rank, (cid, score) in enumerate(zip(o.ids["hybrid"], o.scores["hybrid"]), start=1)
        ],
    })
print(len(records), "records")""", X),
    md("## Check"),
    code("""result = checks.check_candidates_artifact(records, run, chunks, callers).require()
print(result)"""),
    md("## One record"),
    code("""record = next(r for r in records if r["case"] == "eu-paraphrase-rpl14")
for candidate in record["candidates"]:
    print({key: round(value, 6) if isinstance(value, float) else value for key, value in candidate.items()})"""),
    md("""`rrf_score` is a sum of `1/(60 + rank)` over the lanes that returned the chunk: `2/61` for a chunk both
lanes rank first, `1/61 + 1/62` for first and second.

## The reranker reads text through the boundary

The artifact holds ids only. When the reranker runs, it fetches each candidate's text from the caller's
permitted universe on the case's date, so it can never read a chunk the caller may not see."""),
    code("""path = save_my_records(SUBMISSION, "step6_candidates.jsonl", records,
                       lambda saved: checks.check_candidates_artifact(saved, run, chunks, callers))
print(f"{len(records)} records saved to {SUBMISSION.name}/{path.name}")
cases_by_name = {c.name: c for c in course_cases}
inside = 0
for line in path.read_text(encoding="utf-8").splitlines():
    record = json.loads(line)
    case = cases_by_name[record["case"]]
    universe = {c.chunk_id for c in retriever.universe(callers[case.caller], case.on_date or EVAL_DATE)}
    inside += all(c["chunk_id"] in universe for c in record["candidates"])
print(f"{inside} of {len(records)} records hold only permitted ids")"""),
    md("""## Hand it in

Your submission folder, `SUBMISSION` (`my-submission` at the repository root), holds `cases.jsonl`, your
`vectors/` (from `labsrc embed`), `step5_traces.jsonl` and `step6_candidates.jsonl` (exercises 5 and 6, which the
rubric checks against its own replay of their runs) and a `report/` folder from `labsrc gate`, which contains
`candidates.jsonl` in this shape. From the repository root:

```bash
labsrc gate --chunks fixtures/policies/chunks.jsonl --callers fixtures/policies/callers.json \\
            --cases my-submission/cases.jsonl --vectors my-submission/vectors/all-MiniLM-L6-v2 \\
            --config fixtures/policies/gate.json --out my-submission/report
labsrc rubric my-submission --min-level production-ready
```

## Mastery check

1. Why does the artifact keep the lane ranks, when the reranker will reorder the list anyway?
2. What would go wrong if the reranker fetched text from the whole store by id?
3. The absent case still has candidates. What should the reranker, or the answer layer, do with them?"""),
]

EXERCISES = {
    "01-positive-cases": EX1,
    "02-adversarial-cases": EX2,
    "03-real-encoder": EX3,
    "04-compare-lanes": EX4,
    "05-compact-traces": EX5,
    "06-reranker-candidates": EX6,
}


def build(cells, variant):
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    for kind, text, which in cells:
        if which not in (B, variant):
            continue
        cell = nbformat.v4.new_markdown_cell(text) if kind == "md" else nbformat.v4.new_code_cell(text)
        cell.id = f"cell-{len(nb.cells):02d}"  # stable, so regenerating a notebook changes only what changed
        nb.cells.append(cell)
    return nb


def seed() -> Path:
    """A fresh temporary my-submission seeded as notebooks/exercises/conftest.py seeds it for nbval."""
    import importlib.util
    import tempfile

    spec = importlib.util.spec_from_file_location("exercise_conftest", OUT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.seeded_submission(Path(tempfile.mkdtemp(prefix="labsrc-exercises-")))


if __name__ == "__main__":
    if sys.argv[1:] == ["--seed"]:
        print(seed())
        sys.exit(0)
    OUT.mkdir(parents=True, exist_ok=True)
    only = sys.argv[1:] or list(EXERCISES)
    for name in only:
        cells = EXERCISES[name]
        nbformat.write(build(cells, S), OUT / f"{name}.ipynb")
        nbformat.write(build(cells, X), OUT / f"{name}-solution.ipynb")
        print("wrote", name)
