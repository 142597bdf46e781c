"""How many probes the gate makes up, how deep it asks them, and the floor on what they must cover.

The numbers behind ``probe_budget`` and ``min_coverage`` of a gate config
(:class:`~labsrc.gate.config.GateConfig`), checked the way the config checks its
other fields: :class:`~labsrc.errors.InvalidArgument` naming the field and value.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from labsrc.errors import InvalidArgument

__all__ = ["AUTO_PROBE_BUDGET", "CHUNKS_PER_AUTO_PROBE", "DEFAULT_PROBE_BUDGET", "MAX_AUTO_PROBE_BUDGET",
           "MAX_PROBE_BUDGET", "PROBE_TIERS", "check_min_coverage", "check_probe_budget", "deep_top_k",
           "default_probe_budget"]

#: Generated probes per run on a small corpus (``probe_budget`` "auto", the default, up to 10,000 chunks; each
#: probe is asked at ``top_k`` and at :func:`deep_top_k`): on the lab's retrievers a few seconds, on the audited
#: ones tens of seconds.
DEFAULT_PROBE_BUDGET = 400
#: ``probe_budget`` "auto" (the default): the budget is sized from the corpus (:func:`default_probe_budget`).
AUTO_PROBE_BUDGET = "auto"
#: Stored chunks per generated probe of the "auto" budget above :data:`DEFAULT_PROBE_BUDGET`.
CHUNKS_PER_AUTO_PROBE = 25
#: The largest "auto" budget, reached at 50,000 chunks (the gate's time at that size: docs/gating.md).
MAX_AUTO_PROBE_BUDGET = 2_000
#: The most generated probes ``probe_budget`` may ask for: at a few ms a request, minutes, not days.
MAX_PROBE_BUDGET = 100_000
#: The tiers of the hidden-chunk family's targets, in the order its budget is spent (:mod:`~labsrc.gate.generate`):
#: per (caller, date), the hidden chunks likeliest to leak to that caller first.
PROBE_TIERS: Mapping[str, str] = MappingProxyType(
    {
        "sibling": "another version or another region's edition of a document the caller may see a chunk of",
        "shared": "a hidden chunk whose code or one of its rarest terms, a rare one, is in a chunk the caller may see "
                  "or in a case's query",
        "rest": "every other hidden chunk",
    }
)


def deep_top_k(top_k: int) -> int:
    """The second depth each generated probe is asked at: ``max(10, 5 * top_k)``.

    A retriever that pads a short list from an unfiltered ranking, or cuts a lane before
    filtering it, often does so only when ``k`` is large; asking at ``top_k`` alone misses it.
    """
    return max(10, 5 * top_k)


def default_probe_budget(chunks: int) -> int:
    """The "auto" probe budget for a corpus of ``chunks`` stored chunks.

    ``min(MAX_AUTO_PROBE_BUDGET, max(DEFAULT_PROBE_BUDGET, ceil(chunks / CHUNKS_PER_AUTO_PROBE)))``:
    400 up to 10,000 chunks (every small corpus keeps the budget it always had), one probe per 25
    chunks beyond, at most 2,000 (from 50,000 chunks on), so that the gate's time stays bounded.
    """
    return min(MAX_AUTO_PROBE_BUDGET, max(DEFAULT_PROBE_BUDGET, -(-chunks // CHUNKS_PER_AUTO_PROBE)))


def check_min_coverage(value: object) -> Mapping[str, float] | None:
    """``min_coverage`` as a read-only mapping of tier to floor (a number applies to every tier), or None.

    Raises :class:`~labsrc.errors.InvalidArgument` naming the tier and the valid ones.
    """
    if value is None:
        return None
    expected = f"a number in [0, 1] (a floor for every tier) or a mapping of tier to one (tiers {list(PROBE_TIERS)})"
    if isinstance(value, Mapping):
        unknown = sorted(map(str, set(value) - set(PROBE_TIERS)))
        if unknown:
            raise InvalidArgument(f"min_coverage names unknown tier(s) {unknown}; valid tiers are {list(PROBE_TIERS)}")
        entries = [(f"min_coverage[{tier!r}]", tier, share) for tier, share in value.items()]
    else:
        entries = [("min_coverage", tier, value) for tier in PROBE_TIERS]
    floors = {}
    for name, tier, share in entries:
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 <= share <= 1.0:
            raise InvalidArgument(f"{name} must be {expected if name == 'min_coverage' else 'a number in [0, 1]'}, "
                                  f"not {share!r}")
        floors[tier] = float(share)
    return MappingProxyType({tier: floors[tier] for tier in PROBE_TIERS if tier in floors})


def check_probe_budget(value: object) -> int | str:
    """``probe_budget`` as given: ``"auto"`` or an int from 0 to :data:`MAX_PROBE_BUDGET`.

    Raises :class:`~labsrc.errors.InvalidArgument` naming the value.
    """
    if value == AUTO_PROBE_BUDGET:
        return AUTO_PROBE_BUDGET
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PROBE_BUDGET:
        raise InvalidArgument(f"probe_budget must be {AUTO_PROBE_BUDGET!r} (sized from the corpus) or an int "
                              f"from 0 to {MAX_PROBE_BUDGET:,}, not {value!r}")
    return value
