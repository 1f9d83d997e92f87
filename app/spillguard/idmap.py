"""Which upstream response holds what the client received, for a response spliced from two.

A retry spliced into a started Responses stream gives the client one response under the first
attempt's id, while the upstream stored two: the leaked first attempt under that id, and the
retry under its own. A later request naming the client's response (`previous_response_id`) or
its first attempt's items (`item_reference`) must reach the upstream naming what the client
received instead: the retry's response, and the items as the client has them. This module is
that mapping, behind the small `IdMap` interface.

`LocalIdMap` keeps it in the process, for a lifetime and within a size bound. It is readable
by every replica only when there is one process: with more (`--workers`), a stored response
is never spliced (`proxy.py`), because a chained request may reach a process that does not
know the splice.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

TTL = 24 * 3600.0  # seconds a splice is remembered
ENTRIES = 10_000  # splices remembered at most
CHARS = 16 * 1024 * 1024  # characters of the client's items remembered at most


@dataclass(frozen=True)
class Spliced:
    """One spliced response: the id the client holds, the upstream response that holds what
    the client received, and the first attempt's items as the client received them, by id
    (closed at the text the client has; an upstream copy would hold the markup). `output` and
    `created_at` are what the client's final response listed and said, for a later `GET` of it
    (`chains.Lookup`)."""

    response_id: str
    upstream_id: str
    items: Mapping[str, dict[str, Any]]
    output: tuple[dict[str, Any], ...]
    created_at: Any

    @property
    def size(self) -> int:
        kept = [*self.items.values(), *self.output]
        return 1 + sum(len(str(item)) for item in kept)


class IdMap(Protocol):
    @property
    def shared(self) -> bool:
        """Every replica that may serve the client's next request reads this map."""

    def put(self, spliced: Spliced) -> None: ...

    def response(self, response_id: str) -> str | None:
        """The upstream response to name instead of the client's `response_id`, if spliced."""

    def item(self, item_id: str) -> dict[str, Any] | None:
        """The client's copy of a spliced response's first-attempt item, if it is one."""

    def holds_items(self) -> bool:
        """Some spliced response's items may be named (False: `item` finds none)."""

    def spliced(self, response_id: str) -> Spliced | None:
        """The splice that made the client's `response_id`, if it was spliced."""

    def forget(self, response_id: str) -> None:
        """The client's response is gone (it deleted it): its splice is no longer named."""


class LocalIdMap:
    """An `IdMap` in this process: each splice kept for `ttl` seconds, the oldest dropped first
    past `entries` splices or `chars` characters of items."""

    def __init__(
        self,
        *,
        shared: bool,
        ttl: float = TTL,
        entries: int = ENTRIES,
        chars: int = CHARS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._shared = shared
        self._ttl, self._entries, self._chars = ttl, entries, chars
        self._clock = clock
        self._splices: OrderedDict[str, tuple[float, Spliced]] = OrderedDict()
        self._items: dict[str, str] = {}  # item id -> the response id it belongs to
        self._size = 0

    @property
    def shared(self) -> bool:
        return self._shared

    def __len__(self) -> int:
        self._expire()
        return len(self._splices)

    def put(self, spliced: Spliced) -> None:
        self._drop(spliced.response_id)
        self._splices[spliced.response_id] = (self._clock() + self._ttl, spliced)
        self._items |= dict.fromkeys(spliced.items, spliced.response_id)
        self._size += spliced.size
        while self._splices and (len(self._splices) > self._entries or self._size > self._chars):
            self._drop(next(iter(self._splices)))
        self._expire()

    def response(self, response_id: str) -> str | None:
        found = self.spliced(response_id)
        return found.upstream_id if found is not None else None

    def item(self, item_id: str) -> dict[str, Any] | None:
        found = self.spliced(self._items.get(item_id, ""))
        return found.items.get(item_id) if found is not None else None

    def holds_items(self) -> bool:
        return bool(self._items)  # expired ones too, until they are dropped

    def spliced(self, response_id: str) -> Spliced | None:
        self._expire()
        entry = self._splices.get(response_id)
        return entry[1] if entry is not None else None

    def forget(self, response_id: str) -> None:
        self._drop(response_id)

    def _expire(self) -> None:
        now = self._clock()
        while self._splices:
            key, (until, _) = next(iter(self._splices.items()))
            if until > now:
                return
            self._drop(key)

    def _drop(self, response_id: str) -> None:
        entry = self._splices.pop(response_id, None)
        if entry is None:
            return
        spliced = entry[1]
        self._size -= spliced.size
        for item_id in spliced.items:
            if self._items.get(item_id) == response_id:
                del self._items[item_id]
