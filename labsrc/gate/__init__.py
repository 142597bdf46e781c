"""The release gate: judge a retriever.

Takes a factory (the lab's retrievers or anyone else's), chunks, callers,
cases and a gate config; builds each retriever in its own worker process,
replays the cases, probes whether its answers can be compared (canary,
repeat builds, concurrent requests), checks noninterference by rebuild and
bait, and returns the verdicts (:class:`GateRun`). Measuring is
:mod:`labsrc.evaluation`; reports of a run are :mod:`labsrc.reports`.

A run reads as plan → run → judge: :mod:`~labsrc.gate.plan` says what the gate
will run (every build, every request, and why), :mod:`~labsrc.gate.run` runs it,
:mod:`~labsrc.gate.judge` turns the answers into findings and verdicts.
"""

from labsrc.gate.bait import (
    bait_chunks,
    BAIT_REASONS,
    bait_text,
    BaitVectors,
)
from labsrc.gate.case_rules import (
    case_problems,
    CaseProblem,
    cases_problems,
    check_cases,
    OWN_REASONS,
)
from labsrc.gate.config import (
    MAX_TIMEOUT_S,
    check_timeout,
    DEFAULT_BUILD_TIMEOUT_S,
    DEFAULT_CONCURRENCY,
    DEFAULT_SEARCH_TIMEOUT_S,
    GateConfig,
    HYBRID_RULES,
    LANES,
    load_gate_config,
    MAX_CONCURRENCY,
    MAX_REPETITIONS,
)
from labsrc.gate.gate_rules import gate_names
from labsrc.gate.gates import (
    CaseOutcome,
    evaluate_gates,
    gate_lab_engine,
    gate_retriever,
    GATE_TABLE,
    GateRun,
    lane_recall,
    release_gate,
    run_cases,
)
from labsrc.gate.noninterference import (
    boundary_violations,
    compare_observations,
    Comparison,
    LaneDiff,
    NONINTERFERENCE_MODES,
    reason_detail,
    reason_label,
    Violation,
)
from labsrc.gate.outcomes import (
    as_caller_map,
    replay_cases,
    stored_chunks,
)
from labsrc.gate.judge import (
    judge,
    Rules,
    rules_now,
)
from labsrc.gate.plan import (
    Ask,
    BuildStep,
    case_groups,
    GatePlan,
    Phase,
    plan_gate,
    RULES,
    Withhold,
)
from labsrc.gate.answers import Answers
from labsrc.gate.run import (
    Builder,
    Prebuilt,
    run_plan,
)
from labsrc.gate.probes import (
    canary_chunk,
    canary_vectors,
    CanaryCheck,
    CONCURRENCY_ROUNDS,
    ConcurrencyCheck,
    interleaved,
    Probes,
    Repeatability,
    repeatability,
)
from labsrc.gate.verdicts import (
    GateResult,
    NOT_TESTED,
    not_tested,
    plural,
)
from labsrc.gate.worker_loop import (
    plain_observation,
    run_worker,
    unplain_observation,
)
from labsrc.gate.workers import (
    IsolatedBuild,
    live_workers,
)

__all__ = [
    "as_caller_map",
    "bait_chunks",
    "BAIT_REASONS",
    "bait_text",
    "BaitVectors",
    "boundary_violations",
    "Builder",
    "canary_chunk",
    "canary_vectors",
    "CanaryCheck",
    "case_groups",
    "case_problems",
    "CaseOutcome",
    "CaseProblem",
    "cases_problems",
    "check_cases",
    "MAX_TIMEOUT_S",
    "check_timeout",
    "compare_observations",
    "Comparison",
    "CONCURRENCY_ROUNDS",
    "ConcurrencyCheck",
    "DEFAULT_BUILD_TIMEOUT_S",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_SEARCH_TIMEOUT_S",
    "evaluate_gates",
    "gate_names",
    "gate_lab_engine",
    "gate_retriever",
    "GATE_TABLE",
    "GateConfig",
    "GateResult",
    "GateRun",
    "HYBRID_RULES",
    "interleaved",
    "IsolatedBuild",
    "lane_recall",
    "LaneDiff",
    "LANES",
    "live_workers",
    "load_gate_config",
    "MAX_CONCURRENCY",
    "MAX_REPETITIONS",
    "NONINTERFERENCE_MODES",
    "NOT_TESTED",
    "not_tested",
    "OWN_REASONS",
    "plain_observation",
    "plural",
    "Probes",
    "reason_detail",
    "reason_label",
    "release_gate",
    "Repeatability",
    "repeatability",
    "replay_cases",
    "run_cases",
    "run_worker",
    "stored_chunks",
    "unplain_observation",
    "Violation",
    "Answers",
    "Ask",
    "BuildStep",
    "GatePlan",
    "judge",
    "Phase",
    "plan_gate",
    "Prebuilt",
    "Rules",
    "RULES",
    "rules_now",
    "run_plan",
    "Withhold",
]
