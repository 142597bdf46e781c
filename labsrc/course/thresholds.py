"""A submission's own gate config against the course's: which thresholds it relaxes.

The rubric grades every submission against the course's ``gate.json``, so a
relaxed copy cannot raise a grade; it still shows the learner's config and
names every setting that would have made the gates easier to pass.
"""

from __future__ import annotations

from labsrc.gate.config import LANES, GateConfig

__all__ = ["HYBRID_RULE_STRENGTH", "describe_config", "relaxed_settings"]

#: How much each hybrid rule demands; a lower number is a weaker rule.
HYBRID_RULE_STRENGTH = {"off": 0, "at_least": 1, "strict": 2}


def describe_config(config: GateConfig) -> str:
    """One line: ``top_k 2, rrf_k 60, min_recall hybrid 1.00, hybrid_rule 'strict', p95 dense 40 ms, ..., on_date ...``."""
    data = config.to_dict()
    recall = ", ".join(f"{lane} {value:.2f}" for lane, value in config.min_recall.items()) or "none"
    p95 = ", ".join(f"{stage} {value:g}" for stage, value in config.p95_budget_ms.items()) or "none"
    return (f"top_k {config.top_k}, rrf_k {data['rrf_k']}, min_recall {recall}, hybrid_rule {config.hybrid_rule!r}, "
            f"p95 budgets (ms) {p95}, repetitions {config.repetitions}, on_date {data['on_date']}")


def relaxed_settings(course: GateConfig, own: GateConfig) -> list[str]:
    """Every way ``own`` is easier to pass than ``course``, one sentence each, in config order."""
    out: list[str] = []
    if own.top_k > course.top_k:
        out.append(f"top_k {own.top_k} > the course's {course.top_k} (a deeper list makes Recall@k easier)")
    for lane in LANES:
        if lane not in course.min_recall:
            continue
        mine = own.min_recall.get(lane)
        if mine is None:
            out.append(f"min_recall[{lane}] removed (the course's is {course.min_recall[lane]:.2f})")
        elif mine < course.min_recall[lane]:
            out.append(f"min_recall[{lane}] {mine:.2f} < the course's {course.min_recall[lane]:.2f}")
    if HYBRID_RULE_STRENGTH[own.hybrid_rule] < HYBRID_RULE_STRENGTH[course.hybrid_rule]:
        out.append(f"hybrid_rule {own.hybrid_rule!r} is weaker than the course's {course.hybrid_rule!r}")
    for stat, mine_table, course_table in (("p50", own.p50_budget_ms, course.p50_budget_ms),
                                           ("p95", own.p95_budget_ms, course.p95_budget_ms)):
        for stage, budget in course_table.items():
            mine = mine_table.get(stage)
            if mine is None:
                out.append(f"{stat}_budget_ms[{stage}] removed (the course's is {budget:g} ms)")
            elif mine > budget:
                out.append(f"{stat}_budget_ms[{stage}] {mine:g} ms > the course's {budget:g} ms")
    if own.repetitions < course.repetitions:
        out.append(f"repetitions {own.repetitions} < the course's {course.repetitions} (fewer timed samples)")
    if course.on_date is not None and own.on_date != course.on_date:
        out.append(f"on_date {own.on_date} instead of the course's {course.on_date} (the replay changes with the date)")
    return out
