"""The release gate's configuration: what "good enough to ship" means, in one record.

A gate config is a JSON or TOML file whose keys are the fields of
:class:`GateConfig`. Every key is optional; a missing key keeps its default::

    {
      "top_k": 2,
      "rrf_k": 60,
      "min_recall": {"hybrid": 1.0},
      "hybrid_rule": "strict",
      "p50_budget_ms": {"authorize": 10, "bm25": 12, "dense": 40, "fusion": 8},
      "p95_budget_ms": {"authorize": 10, "bm25": 12, "dense": 40, "fusion": 8},
      "warmup": 3,
      "repetitions": 20,
      "on_date": "2026-05-27",
      "require_cases": false,
      "noninterference": "exact",
      "build_timeout_s": 300,
      "search_timeout_s": 30,
      "concurrency": 16,
      "probe_budget": "auto",
      "probe_seed": 0,
      "min_coverage": null
    }

Budget tables are merged over the defaults (``{"p95_budget_ms": {"dense": 80}}`` changes one budget and
keeps the others); ``null`` (JSON) removes a stage's budget.
TOML needs Python 3.11+ (``tomllib``) or the ``tomli`` package; JSON works everywhere.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from labsrc.errors import InvalidArgument, InvalidRecord, MissingDependency
from labsrc.evaluation.budgets import BUDGET_STAGES, RETRIEVAL_BUDGET_MS
from labsrc.gate.noninterference import NONINTERFERENCE_MODES
from labsrc.gate.probe_budget import (AUTO_PROBE_BUDGET, CHUNKS_PER_AUTO_PROBE, DEFAULT_PROBE_BUDGET,
                                      MAX_AUTO_PROBE_BUDGET, MAX_PROBE_BUDGET, PROBE_TIERS, check_min_coverage,
                                      check_probe_budget, deep_top_k, default_probe_budget)
from labsrc.fusion.rrf import DEFAULT_RRF_K, check_rrf_k
from labsrc.ranking import check_top_k
from labsrc.records.loading import parse_date, parse_json, read_text, too_deep

__all__ = [
    "check_same_fusion",
    "AUTO_PROBE_BUDGET",
    "CHUNKS_PER_AUTO_PROBE",
    "DEFAULT_BUILD_TIMEOUT_S",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_PROBE_BUDGET",
    "DEFAULT_SEARCH_TIMEOUT_S",
    "PROBE_TIERS",
    "HYBRID_RULES",
    "LANES",
    "MAX_AUTO_PROBE_BUDGET",
    "MAX_CONCURRENCY",
    "MAX_PROBE_BUDGET",
    "MAX_REPETITIONS",
    "GateConfig",
    "check_min_coverage",
    "MAX_TIMEOUT_S",
    "check_timeout",
    "deep_top_k",
    "default_probe_budget",
    "load_gate_config",
]

#: Seconds a factory may take to build one corpus in its worker process.
DEFAULT_BUILD_TIMEOUT_S = 300.0
#: Seconds one search may take before its case fails with "timed out".
DEFAULT_SEARCH_TIMEOUT_S = 30.0
#: Threads the concurrency probe uses; 0 turns it off.
DEFAULT_CONCURRENCY = 16
MAX_CONCURRENCY = 256
#: The most replays of the case set ``warmup`` and ``repetitions`` may each ask for. One repetition
#: of the lesson's 7 cases took 8 ms in memory and 50 ms on the embedded postgres engine (measured
#: on the project's 2-core machine: ``labsrc report --repetitions 20000`` ran 166 s), so 1,000 is
#: 8 s to a minute and already gives p95 from 7,000 samples per stage; a typo such as 10,000,000
#: would otherwise run silently for a day in memory, a week on postgres.
MAX_REPETITIONS = 1000

#: The ranked lists a gate can inspect, in report order.
LANES = ("bm25", "dense", "hybrid")

#: How the hybrid must compare with each single lane on Recall@k.
HYBRID_RULES = {
    "at_least": "hybrid recall >= every single lane (the default: fusion must not lose evidence)",
    "strict": "hybrid recall > every single lane (the lesson's rule: fusion must add evidence)",
    "off": "no comparison",
}


def _budget_table(value: Mapping[str, float | None], name: str) -> Mapping[str, float]:
    """Merge ``value`` over the lesson budgets; ``None`` removes a stage."""
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"{name} must be a mapping of stage to milliseconds, not {type(value).__name__}")
    unknown = sorted(set(value) - set(BUDGET_STAGES))
    if unknown:
        raise InvalidArgument(f"{name} names unknown stage(s) {unknown}; valid stages are {list(BUDGET_STAGES)}")
    merged: dict[str, float] = dict(RETRIEVAL_BUDGET_MS)
    for stage, budget in value.items():
        if budget is None:
            merged.pop(stage, None)
            continue
        if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not math.isfinite(budget) or budget <= 0:
            raise InvalidArgument(f"{name}[{stage!r}] must be a positive number of milliseconds, not {budget!r}")
        merged[stage] = float(budget)
    # Keep the request order of the stages, whatever order the file used.
    return MappingProxyType({stage: merged[stage] for stage in BUDGET_STAGES if stage in merged})


def check_same_fusion(rrf_k: object, config: GateConfig) -> None:
    """Refuse a retriever that fuses with another ``rrf_k`` than the config: the report would describe another fusion."""
    if rrf_k is not None and float(rrf_k) != float(config.rrf_k):  # type: ignore[arg-type]
        raise InvalidArgument(
            f"the retriever fuses with rrf_k={rrf_k} but the config says rrf_k={config.rrf_k}; "
            "build the retriever with PolicyRetriever(..., rrf_k=config.rrf_k)"
        )


MAX_TIMEOUT_S = 86_400  #: The longest timeout, a day: longer is a mistake, and past ~3e11 s the clocks overflow.


def check_timeout(value: object, name: str) -> float:
    """A timeout in seconds: a finite number > 0, at most :data:`MAX_TIMEOUT_S` (the config's and a build's)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidArgument(f"{name} must be a number of seconds > 0, not {value!r}")
    if value > MAX_TIMEOUT_S:
        raise InvalidArgument(f"{name} must be at most {MAX_TIMEOUT_S:,} seconds (a day), not {value!r}")
    return float(value)


def _count(value: object, name: str, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (maximum is not None and value > maximum):
        bound = f"an int >= {minimum}" if maximum is None else f"an int from {minimum} to {maximum:,}"
        raise InvalidArgument(f"{name} must be {bound}, not {value!r}")
    return value


@dataclass(frozen=True)
class GateConfig:
    """Gate thresholds, fusion settings and latency budgets, with the lesson's defaults.

    Parameters
    ----------
    top_k:
        Results kept per lane and after fusion; Recall@k uses this k.
    rrf_k:
        RRF's smoothing constant (60, per Cormack et al. 2009). It is *not* the
        number of results; that is ``top_k``.
    min_recall:
        Minimum mean Recall@k per lane (``bm25``, ``dense``, ``hybrid``). A lane
        with no threshold is reported but does not gate.
    hybrid_rule:
        One of :data:`HYBRID_RULES`: ``"at_least"`` (default), ``"strict"`` (the
        lesson) or ``"off"``.
    p50_budget_ms, p95_budget_ms:
        Per-stage budgets for the median and the 95th percentile of the measured
        stage timings, merged over the lesson budgets (authorize 10, bm25 12,
        dense 40, fusion 8 ms).
    warmup, repetitions:
        Untimed replays of the case set before measuring, and timed replays
        (each at most :data:`MAX_REPETITIONS`, 1,000).
    on_date:
        The evaluation date; ``None`` means "today" at run time. Pin it in CI so
        freshness, and therefore every result, replays identically.
    require_cases:
        Whether a gate with no cases to replay (reported ``NOT TESTED``, neither
        PASS nor FAIL) fails the run. ``False`` by default: the run passes and the
        report says what was not tested; set it in CI once the case file is complete.
    noninterference:
        How a gate run with a factory (:func:`~labsrc.gate.gates.gate_retriever`,
        ``labsrc gate``) compares each case with a build over the caller's permitted
        chunks only and with a build holding bait: ``"exact"`` (ids, order and
        scores ``==``, the default), ``"ids"`` (for engines whose scores are not
        reproducible) or ``"off"`` (see :data:`NONINTERFERENCE_MODES`).
    build_timeout_s, search_timeout_s:
        With a factory, every build runs in its own worker process
        (:mod:`~labsrc.gate.workers`): a build that takes longer than
        ``build_timeout_s`` fails, a search that takes longer than
        ``search_timeout_s`` fails its case ("timed out after N s") and its worker
        is killed. Defaults: 300 s and 30 s.
    concurrency:
        Threads the concurrency probe replays every case from at once, on one build
        (16 by default; 0 turns the probe off).
    probe_budget, probe_seed:
        With a factory, the gate also makes up probes of its own from the corpus and
        the callers (:mod:`~labsrc.gate.generate`): every case's query as every caller, a
        hidden chunk's own code and rarest terms, each version's edge dates; each probe is
        asked at ``top_k`` and at :func:`deep_top_k`. At most ``probe_budget`` probes (up
        to :data:`MAX_PROBE_BUDGET`; 0 makes none), chosen deterministically from
        ``probe_seed``. The default, ``"auto"``, sizes it from the corpus
        (:func:`default_probe_budget`: 400 up to 10,000 chunks, at most 2,000).
    min_coverage:
        A floor on the share of each tier of hidden-chunk targets (:data:`PROBE_TIERS`,
        counted per caller and date) that the generated probes attack: one number in
        [0, 1] for every tier, or a mapping of tier to one (a tier left out has no floor).
        When a tier's share is below its floor, the ``generated probes`` gate fails,
        naming the tier, its share and the floor. ``None`` (the default): no floor.
    """

    top_k: int = 2
    rrf_k: float = DEFAULT_RRF_K
    min_recall: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({"hybrid": 1.0}))
    hybrid_rule: str = "at_least"
    p50_budget_ms: Mapping[str, float] = field(default_factory=lambda: MappingProxyType(dict(RETRIEVAL_BUDGET_MS)))
    p95_budget_ms: Mapping[str, float] = field(default_factory=lambda: MappingProxyType(dict(RETRIEVAL_BUDGET_MS)))
    warmup: int = 3
    repetitions: int = 20
    on_date: dt.date | None = None
    require_cases: bool = False
    noninterference: str = "exact"
    build_timeout_s: float = DEFAULT_BUILD_TIMEOUT_S
    search_timeout_s: float = DEFAULT_SEARCH_TIMEOUT_S
    concurrency: int = DEFAULT_CONCURRENCY
    probe_budget: int | str = AUTO_PROBE_BUDGET
    probe_seed: int = 0
    min_coverage: float | Mapping[str, float] | None = None

    def __post_init__(self) -> None:
        check_top_k(self.top_k)
        check_rrf_k(self.rrf_k)
        if not isinstance(self.min_recall, Mapping):
            raise InvalidArgument(f"min_recall must be a mapping of lane to a number in [0, 1], not {self.min_recall!r}")
        unknown = sorted(set(self.min_recall) - set(LANES))
        if unknown:
            raise InvalidArgument(f"min_recall names unknown lane(s) {unknown}; valid lanes are {list(LANES)}")
        for lane, value in self.min_recall.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise InvalidArgument(f"min_recall[{lane!r}] must be a number in [0, 1], not {value!r}")
        object.__setattr__(
            self, "min_recall", MappingProxyType({lane: float(self.min_recall[lane]) for lane in LANES if lane in self.min_recall})
        )
        if self.hybrid_rule not in HYBRID_RULES:
            raise InvalidArgument(f"hybrid_rule must be one of {sorted(HYBRID_RULES)}, not {self.hybrid_rule!r}")
        object.__setattr__(self, "p50_budget_ms", _budget_table(self.p50_budget_ms, "p50_budget_ms"))
        object.__setattr__(self, "p95_budget_ms", _budget_table(self.p95_budget_ms, "p95_budget_ms"))
        _count(self.warmup, "warmup", 0, MAX_REPETITIONS)
        _count(self.repetitions, "repetitions", 1, MAX_REPETITIONS)
        if self.on_date is not None and (not isinstance(self.on_date, dt.date) or isinstance(self.on_date, dt.datetime)):
            raise InvalidArgument(f"on_date must be a datetime.date or None, not {self.on_date!r}")
        if not isinstance(self.require_cases, bool):
            raise InvalidArgument(f"require_cases must be true or false, not {self.require_cases!r}")
        if self.noninterference not in NONINTERFERENCE_MODES:
            raise InvalidArgument(
                f"noninterference must be one of {list(NONINTERFERENCE_MODES)}, not {self.noninterference!r}"
            )
        for name in ("build_timeout_s", "search_timeout_s"):
            object.__setattr__(self, name, check_timeout(getattr(self, name), name))
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) or self.concurrency == 1 \
                or not 0 <= self.concurrency <= MAX_CONCURRENCY:
            raise InvalidArgument(
                f"concurrency must be 0 (no concurrency probe) or a number of threads from 2 to {MAX_CONCURRENCY}, "
                f"not {self.concurrency!r}"
            )

        check_probe_budget(self.probe_budget)
        _count(self.probe_seed, "probe_seed", 0)
        object.__setattr__(self, "min_coverage", check_min_coverage(self.min_coverage))

    def eval_date(self) -> dt.date:
        """``on_date`` if pinned, else today's date."""
        return self.on_date if self.on_date is not None else dt.date.today()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict that :func:`load_gate_config` reads back to an equal config."""
        rrf_k = int(self.rrf_k) if float(self.rrf_k).is_integer() else self.rrf_k
        return {
            "top_k": self.top_k,
            "rrf_k": rrf_k,
            "min_recall": dict(self.min_recall),
            "hybrid_rule": self.hybrid_rule,
            "p50_budget_ms": dict(self.p50_budget_ms),
            "p95_budget_ms": dict(self.p95_budget_ms),
            "warmup": self.warmup,
            "repetitions": self.repetitions,
            "on_date": None if self.on_date is None else self.on_date.isoformat(),
            "require_cases": self.require_cases,
            "noninterference": self.noninterference,
            "build_timeout_s": self.build_timeout_s,
            "search_timeout_s": self.search_timeout_s,
            "concurrency": self.concurrency,
            "probe_budget": self.probe_budget,
            "probe_seed": self.probe_seed,
            "min_coverage": None if self.min_coverage is None else dict(self.min_coverage),
        }


_KEYS = tuple(f.name for f in fields(GateConfig))


def _parse_toml(text: str, path: Path) -> Any:
    try:
        import tomllib  # Python 3.11+
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise MissingDependency(
                f"{path}: reading a TOML gate config needs Python 3.11+ or the 'tomli' package "
                "(pip install tomli); or write the same keys as a .json file"
            ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"line (\d+)", str(exc))
        line = int(match.group(1)) if match else None
        raise InvalidRecord(f"malformed TOML: {exc}", path=path, line=line) from exc
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise too_deep(text, path=path) from None


def _key_line(text: str, parts: Sequence[str], toml: bool) -> int | None:
    """Best-effort 1-based line of a (nested) key, so errors can point at it.

    Walks the lines once, finding each part of the key path after the previous
    one: ``"part"`` in JSON, ``part =`` or a ``[...part]`` table header in TOML.
    """
    lines = text.splitlines()
    start, found = 0, None
    for part in parts:
        escaped = re.escape(part)
        if toml:
            pattern = re.compile(rf'^\s*(?:\[[^\]]*\b{escaped}\]|"?{escaped}"?\s*=)')
        else:
            pattern = re.compile(rf'"{escaped}"\s*:')
        for number in range(start, len(lines)):
            if pattern.search(lines[number]):
                found, start = number + 1, number + 1
                break
        else:
            return found
    return found


def load_gate_config(path: str | Path) -> GateConfig:
    """Read a gate config from ``.json`` or ``.toml``; missing keys keep their defaults.

    Errors are :class:`~labsrc.errors.InvalidRecord` naming the file, the line of
    the offending key (found on a best-effort basis) and the field.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".json", ".toml"):
        raise InvalidRecord(f"a gate config must be a .json or .toml file, not {suffix or 'no suffix'!r}", path=path)
    text = read_text(path)
    toml = suffix == ".toml"
    if toml:
        data = _parse_toml(text, path)
    else:
        data = parse_json(text, path=path)
    if not isinstance(data, dict):
        raise InvalidRecord(f"expected an object of settings, got {type(data).__name__}", path=path)

    def error(key: str, message: str, *sub: str) -> InvalidRecord:
        return InvalidRecord(message, path=path, line=_key_line(text, (key, *sub), toml), field=".".join((key, *sub)))

    for key in data:
        if key not in _KEYS:
            raise error(key, f"unknown setting; valid settings are {list(_KEYS)}")
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key == "on_date":
            if isinstance(value, dt.date) and not isinstance(value, dt.datetime):  # TOML has native dates
                values[key] = value
                continue
            try:
                values[key] = None if value is None else parse_date(value)
            except ValueError as exc:
                raise error(key, str(exc)) from exc
            continue
        if key == "min_coverage" and isinstance(value, dict):  # a number is one floor for every tier
            for sub, entry in value.items():
                try:
                    GateConfig(min_coverage={sub: entry})
                except InvalidArgument as exc:
                    raise error(key, str(exc), sub) from exc
        if key in ("min_recall", "p50_budget_ms", "p95_budget_ms"):
            if not isinstance(value, dict):
                raise error(key, f"must be a table/object, got {type(value).__name__}")
            # Validate one entry at a time, so the error can point at its line.
            for sub, entry in value.items():
                try:
                    GateConfig(**{key: {sub: entry}})
                except InvalidArgument as exc:
                    raise error(key, str(exc), sub) from exc
        try:
            GateConfig(**{key: value})
        except (InvalidArgument, TypeError) as exc:
            raise error(key, str(exc)) from exc
        values[key] = value
    return GateConfig(**values)
