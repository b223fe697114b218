"""A cache bounded in bytes, for everything the proxy remembers by request data.

The proxy remembers what a client sends request after request (the path a route resolved
to, the header names' plan, a Host found served) so as not to work it out again. Such a key
is the client's to choose and can be tens of kilobytes long: a bound on the number of
entries alone lets a client invent a thousand 60 KB keys and keep 60 MiB alive. Each
:class:`BoundedCache` counts what it holds, in bytes as its user accounts them (the key
and the value, with :func:`size_of`), and starts again empty when the next entry would go
over its budget: a client inventing keys only ever empties it, and the keys that come
back request after request are back after one miss each. A hit is a plain dict lookup.
"""

from __future__ import annotations

import sys
from typing import Generic, TypeVar

__all__ = ["ENTRY_BYTES", "BoundedCache", "size_of"]

K = TypeVar("K")
V = TypeVar("V")

ENTRY_BYTES = 160
"""What an entry costs beyond its key's and its value's own objects: the dict's slot and
the tuples around them, about."""


def size_of(*parts: str | bytes) -> int:
    """The bytes ``parts`` take in memory (each its object's size, header included)."""
    return sum(sys.getsizeof(part) for part in parts)


class BoundedCache(Generic[K, V]):
    """A dict of at most ``budget`` bytes and ``max_entries`` entries (see the module);
    ``get`` is the dict's own method, ``size`` the bytes it holds now."""

    __slots__ = ("_data", "budget", "get", "max_entries", "size")

    def __init__(self, budget: int, *, max_entries: int = 4096) -> None:
        self._data: dict[K, V] = {}
        self.get = self._data.get
        self.budget = budget
        self.max_entries = max_entries
        self.size = 0

    def put(self, key: K, value: V, cost: int) -> None:
        """Keep ``value`` under ``key``; ``cost``: the bytes both take (with
        :data:`ENTRY_BYTES` added here). An entry over the whole budget is not kept."""
        cost += ENTRY_BYTES
        data = self._data
        if cost > self.budget or key in data:
            return
        if self.size + cost > self.budget or len(data) >= self.max_entries:
            data.clear()
            self.size = 0
        data[key] = value
        self.size += cost

    def set(self, key: K, value: V, cost: int) -> None:
        """Keep ``value`` under ``key``, in place of what was there (its cost is counted
        again: a key set over and over empties the cache sooner, never later)."""
        data = self._data
        if key in data and cost + ENTRY_BYTES <= self.budget - self.size:
            data[key] = value
            self.size += cost + ENTRY_BYTES
            return
        data.pop(key, None)
        self.put(key, value, cost)

    def clear(self) -> None:
        self._data.clear()
        self.size = 0

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data
