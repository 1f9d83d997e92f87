"""The decision's side of chaining after a splice, over the wire's `Chaining` and an `IdMap`.

A request naming a spliced response or its items is rewritten to name what the client received;
a stored response is spliced only where every replica can read the map; a splice is remembered
once its retry has completed, before the client can hold the id to name it.
"""

from __future__ import annotations

from typing import Any

from .exchange import Exchange
from .idmap import IdMap, LocalIdMap
from .settings import Settings
from .wire import Chaining, Stream


class Chains:
    def __init__(self, settings: Settings, chaining: Chaining | None) -> None:
        self.chaining = chaining
        # One process is every replica; with more, stored responses are never spliced.
        self.ids: IdMap = LocalIdMap(shared=settings.workers == 1)

    def rewrite(self, ex: Exchange) -> None:
        """The request as it goes upstream, naming what the client received."""
        ex.body, ex.obj = self.request(ex.body, ex.obj)

    def request(self, body: bytes, obj: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
        """A request (raw, parsed) naming what the client received; as it was when it names
        no splice. Requests that are not inspected (no tools) go through this too."""
        found = self.chaining.request(body, obj, self.ids) if self.chaining else None
        return found if found is not None else (body, obj)

    def stored(self, ex: Exchange) -> bool:
        """The upstream keeps this request's response, so a later request may name it."""
        return self.chaining is not None and self.chaining.stored(ex.obj)

    def may_splice(self, ex: Exchange, stream: Stream) -> bool:
        """A retry may continue the started stream: the wire can, and a response the upstream
        stores can be mapped for every replica."""
        return stream.can_splice and (self.ids.shared or not self.stored(ex))

    def remember(self, stream: Stream) -> bool:
        """Keep a spliced stream whose retry has completed; True once it is kept."""
        spliced = self.chaining.spliced(stream) if self.chaining else None
        if spliced is not None:
            self.ids.put(spliced)
        return spliced is not None
