"""The executable cache: one compiled program per placement class, shared, bounded, thread-safe.

The shardlaw cache policy keeps one executable per (function, input types, placement class
of every kept input and every result, device assignment, options). Two calls whose
shardings are written differently but place every block on the same device (renamed mesh
axes, a GSPMDSharding for a NamedSharding, size-1 axes, trailing Nones, a one-device mesh
for a SingleDeviceSharding) share one executable.

The cache is one least-recently-used table for the whole process (its capacity is
:func:`set_capacity`), guarded by a lock. Entries belong to a function: when the function
is garbage-collected its entries go. A compile in progress is shared: a second thread that
needs the same executable waits for the first instead of compiling it again.
"""

from __future__ import annotations

import collections
import itertools
import os
import threading
import weakref
from typing import Any, Callable

from . import internals

__all__ = ["ExecutableCache", "Entry", "CACHE", "set_capacity", "owner_token"]


class Entry:
    """One compiled executable and what the engine knows about it."""

    __slots__ = ("key", "owner", "facts", "out_committed", "seconds", "users", "context",
                 "__weakref__")

    def __init__(self, key: Any, owner: int, facts: Any, seconds: float, context: bool) -> None:
        self.key = key
        self.owner = owner
        self.facts = facts
        self.context = context    # compiled under a context mesh
        self.out_committed: tuple[bool, ...] | None = None
        self.seconds = seconds
        self.users: weakref.WeakSet = weakref.WeakSet()   # engines whose plans use it


class _Pending:
    """A compile in progress, which other threads wait for."""

    __slots__ = ("done", "entry", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.entry: Entry | None = None
        self.error: BaseException | None = None


class ExecutableCache:
    """A bounded LRU table of executables, keyed by (owner, placement-class key)."""

    def __init__(self, capacity: int) -> None:
        self._lock = threading.RLock()
        self._table: collections.OrderedDict[tuple, Entry] = collections.OrderedDict()
        self._pending: dict[tuple, _Pending] = {}
        # Each function's keys, so that a function's entries are found without a scan of
        # the table (a program of many small functions drops one with each that dies).
        self._owned: dict[int, dict[tuple, None]] = collections.defaultdict(dict)
        self._capacity = max(1, int(capacity))
        self.evictions = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    def set_capacity(self, capacity: int) -> None:
        with self._lock:
            self._capacity = max(1, int(capacity))
            evicted = self._evict_over_capacity()
        _notify(evicted)

    def __len__(self) -> int:
        return len(self._table)

    def get_or_compile(self, owner: int, key: Any, compile: Callable[[], Entry]
                       ) -> tuple[Entry, bool]:
        """The entry for ``key`` (and False), or the entry ``compile()`` makes (and True)."""
        full = (owner, key)
        while True:
            with self._lock:
                entry = self._table.get(full)
                if entry is not None:
                    self._table.move_to_end(full)
                    return entry, False
                pending = self._pending.get(full)
                if pending is None:
                    pending = self._pending[full] = _Pending()
                    mine = True
                else:
                    mine = False
            if not mine:
                pending.done.wait()
                if pending.entry is not None:
                    return pending.entry, False
                continue  # the other compile failed: try ourselves (and fail the same way)
            try:
                entry = compile()
            except BaseException as error:
                with self._lock:
                    del self._pending[full]
                pending.error = error
                pending.done.set()
                raise
            with self._lock:
                self._table[full] = entry
                self._table.move_to_end(full)
                self._owned[owner][full] = None
                del self._pending[full]
                evicted = self._evict_over_capacity()
            pending.entry = entry
            pending.done.set()
            _notify(evicted)
            return entry, True

    def _evict_over_capacity(self) -> list[Entry]:
        evicted = []
        while len(self._table) > self._capacity:
            full, entry = self._table.popitem(last=False)
            self._disown(full)
            evicted.append(entry)
        self.evictions += len(evicted)
        return evicted

    def _disown(self, full: tuple) -> None:
        keys = self._owned.get(full[0])
        if keys is not None:
            keys.pop(full, None)
            if not keys:
                del self._owned[full[0]]

    def drop_owner(self, owner: int) -> int:
        """Forget every executable of one function; how many went."""
        with self._lock:
            gone = self._owned.pop(owner, {})
            entries = [self._table.pop(k) for k in gone]
        _notify(entries)
        return len(entries)

    def count(self, owner: int) -> int:
        with self._lock:
            return len(self._owned.get(owner, ()))

    def entries(self, owner: int) -> list[Entry]:
        with self._lock:
            return [self._table[k] for k in self._owned.get(owner, ())]

    def clear(self) -> None:
        with self._lock:
            entries = list(self._table.values())
            self._table.clear()
            self._owned.clear()
        _notify(entries)


def _notify(entries: list[Entry]) -> None:
    """Tell the engines that used evicted entries to drop their plans for them."""
    for entry in entries:
        while True:
            try:
                users = list(entry.users)
                break
            except RuntimeError:  # another thread added a user meanwhile
                continue
        for engine in users:
            engine.forget(entry)


CACHE = ExecutableCache(int(os.environ.get("SHARDLAW_ENGINE_CACHE", "1024")))
# jax.clear_caches() clears the engine's executables too (and so every plan that used one).
internals.clear_with_jax(CACHE.clear, "shardlaw.engine executables")


def set_capacity(capacity: int) -> None:
    """How many executables the engine keeps, for all functions together (LRU beyond that)."""
    CACHE.set_capacity(capacity)


_counter = itertools.count(1)
_tokens: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()
_tokens_lock = threading.Lock()


def owner_token(fun: Any, fallback_owner: Any) -> int:
    """A number for ``fun`` whose executables are dropped when ``fun`` is garbage-collected.

    A function that cannot be weakly referenced gets a number of ``fallback_owner`` (the
    engine object) instead, dropped with it.
    """
    with _tokens_lock:
        try:
            token = _tokens.get(fun)
        except TypeError:
            token = None
            fun = fallback_owner
        if token is not None:
            return token
        token = next(_counter)
        try:
            _tokens[fun] = token
        except TypeError:
            fun = fallback_owner
        weakref.finalize(fun, CACHE.drop_owner, token)
        return token
