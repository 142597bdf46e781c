"""Progress bars for long CLI runs, drawn by tqdm (``tqdm.auto``, so they also draw in Jupyter).

The library's long runs report ``progress(phase, done, total)`` and know
nothing about drawing; :class:`TqdmProgress` turns those calls into one tqdm
bar per phase. It draws only when the stream is a terminal (CI logs and pipes
stay clean) unless told otherwise, and ``--no-progress`` turns it off.
"""

from __future__ import annotations

import sys
from typing import TextIO

from tqdm.auto import tqdm

__all__ = ["TqdmProgress", "make_progress"]


class TqdmProgress:
    """``progress(phase, done, total)`` drawn as one tqdm bar per phase, on ``stream`` (stderr)."""

    def __init__(self, stream: TextIO | None = None, *, enabled: bool | None = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)()) if enabled is None else enabled
        self._bar: tqdm | None = None
        self._phase: str | None = None

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


def make_progress(no_progress: bool = False) -> TqdmProgress | None:
    """The CLI's progress callback: ``None`` with ``--no-progress``, else a bar when stderr is a terminal."""
    return None if no_progress else TqdmProgress()
