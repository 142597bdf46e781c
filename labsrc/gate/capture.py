"""The retriever's stdout and stderr, captured per worker in a file with no name, and read back as text.

Every worker sends fd 1 and 2 (and those of every process it starts) into a
file of its own, so nothing a retriever prints lands among the gate's verdict
lines (:class:`~labsrc.gate.workers.IsolatedBuild` reads it when the worker ends).
"""

from __future__ import annotations

import os
import tempfile

__all__ = ["OUTPUT_LIMIT_BYTES", "capture_file", "read_capture"]

#: The most of one worker's output kept (its tail): a retriever that logs every request must not fill memory.
OUTPUT_LIMIT_BYTES = 64 * 1024


def capture_file() -> int:
    """A file for one worker's stdout and stderr, outside its temporary folder, with no name on disk.

    It is unlinked as soon as it is made: the gate and the worker hold it open,
    the gate reads it through its own descriptor (``pread``), and nothing is
    left on disk even when the gate itself is killed.
    """
    fd, path = tempfile.mkstemp(prefix="labsrc-gate-output-")
    os.unlink(path)
    return fd


def read_capture(fd: int, limit: int = OUTPUT_LIMIT_BYTES) -> str:
    """The captured text (its last ``limit`` bytes, with a note on what was cut); closes ``fd``."""
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - limit)
        data = os.pread(fd, size - start, start) if size else b""
    except OSError:
        return ""
    finally:
        os.close(fd)
    text = data.decode("utf-8", "replace")
    if start:
        text = text.split("\n", 1)[1] if "\n" in text[:200] else text  # from a whole line when one starts near
        text = f"[labsrc: output cut: {size} bytes written, the last {len(text.encode())} kept]\n" + text
    return text
