"""argparse types more than one command shares, each light to import (a command loads only what it needs)."""

from __future__ import annotations

import argparse

from labsrc.errors import InvalidArgument
from labsrc.gate.recall_curve import parse_recall_at

__all__ = ["recall_at_option"]


def recall_at_option(value: str) -> tuple[int, ...]:
    """argparse type for ``--recall-at`` (``labsrc gate``, ``labsrc beir``): ``1,2,5,10`` → ``(1, 2, 5, 10)``."""
    try:
        return parse_recall_at(value)
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--recall-at: ")) from None
