"""Progress for long CLI runs: tqdm bars on a terminal, a heartbeat line elsewhere.

The library's long runs report ``progress(phase, done, total)`` and know
nothing about drawing. On a terminal, :class:`TqdmProgress` turns those calls
into one tqdm bar per phase (``tqdm.auto``, so they also draw in Jupyter). In a
CI log or a pipe a bar would be noise, but silence is worse: a long run looks
hung. There :class:`Heartbeat` writes one plain line at most every
:data:`HEARTBEAT_S` seconds, naming the phase and how far it got. ``--no-progress``
turns both off.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from tqdm.auto import tqdm

__all__ = ["HEARTBEAT_S", "Heartbeat", "TqdmProgress", "make_progress"]

#: Seconds between heartbeat lines when stderr is not a terminal: often enough that a CI log shows
#: the run is alive, rarely enough that a run of several minutes writes a screenful, not a flood.
HEARTBEAT_S = 15.0


class TqdmProgress:
    """``progress(phase, done, total)`` drawn as one tqdm bar per phase, on ``stream`` (stderr)."""

    def __init__(self, stream: TextIO | None = None, *, enabled: bool | None = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)()) if enabled is None else enabled
        self._bar: tqdm | None = None
        self._phase: str | None = None

    @property
    def draws(self) -> bool:
        """Whether bars are drawn (callers that hide other libraries' bars in logs check this)."""
        return self.enabled

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not self.enabled or total <= 0:
            return
        if self._bar is None or phase != self._phase or total != self._bar.total:
            self.close()
            self._bar = tqdm(total=total, desc=phase, file=self.stream, leave=True, dynamic_ncols=True)
            self._phase = phase
        self._bar.update(done - self._bar.n)
        if done >= total:
            self.close()

    def close(self) -> None:
        """Finish the current bar (its last state stays on screen)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
            self._phase = None


class Heartbeat:
    """``progress(phase, done, total)`` as one line at most every ``interval_s`` seconds, for a log.

    The first line comes ``interval_s`` after the heartbeat is made, so a short run
    writes nothing; each line reads ``labsrc: timing 700/1,400 (50%), 30 s so far``.
    ``clock`` is injectable for tests.
    """

    #: Never draws a bar: callers that hide other libraries' bars in logs (``labsrc embed``) check this.
    draws = False

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        interval_s: float = HEARTBEAT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.interval_s = interval_s
        self.clock = clock
        self._started = self._last = clock()

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = self.clock()
        if now - self._last < self.interval_s:
            return
        self._last = now
        share = f" ({100 * done // total}%)" if total > 0 else ""
        print(f"labsrc: {phase} {done:,}/{total:,}{share}, {now - self._started:.0f} s so far",
              file=self.stream, flush=True)

    def close(self) -> None:
        """Nothing to finish: every line is complete when written."""


def make_progress(no_progress: bool = False, *, interval_s: float = HEARTBEAT_S) -> TqdmProgress | Heartbeat | None:
    """The CLI's progress callback: ``None`` with ``--no-progress``, bars on a terminal, else a heartbeat."""
    if no_progress:
        return None
    bars = TqdmProgress()
    return bars if bars.enabled else Heartbeat(interval_s=interval_s)
