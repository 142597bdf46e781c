"""A tiny least-recently-used cache: retrievers per corpus, statistics per permission mask.

Keys are values (a tuple of frozen chunks, a mask's bits), so a changed chunk
or a different permitted set is a new key: a stale entry can never be served,
and nothing needs invalidating by hand. An identity key is only used for a
tuple, which cannot change (see :func:`labsrc.retriever.policy.corpus_key`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from labsrc.errors import InvalidArgument

__all__ = ["LRUCache"]

V = TypeVar("V")


class LRUCache(Generic[V]):
    def __init__(self, maxsize: int = 8) -> None:
        if not isinstance(maxsize, int) or maxsize <= 0:
            raise InvalidArgument(f"maxsize must be a positive int, not {maxsize!r}")
        self.maxsize = maxsize
        self._data: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get_or_build(self, key: Hashable, build: Callable[[], V]) -> V:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                return self._data[key]
        value = build()
        with self._lock:
            self.misses += 1
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)
