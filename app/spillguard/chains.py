"""The decision's side of chaining after a splice, over the wire's `Chaining` and an `IdMap`.

A request naming a spliced response or its items is rewritten to name what the client received;
a stored response is spliced only where every replica can read the map; a splice is remembered
once its retry has completed, before the client can hold the id to name it. A `GET` of a spliced
response, passed through otherwise untouched, fetches the retry's response and answers with what
the client received (`Lookup`); a spliced response the client deletes is forgotten.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, unquote

from .exchange import Exchange
from .idmap import IdMap, LocalIdMap, Spliced
from .rawjson import with_values
from .responses_events import dumps
from .responses_repair import output_text
from .settings import Settings
from .wire import Chaining, Stream

# A response by id, as the path under /v1/ names it (`responses/{id}`; its input items and
# `cancel` are other paths).
_RESPONSE = re.compile(r"responses/([^/]+)")


@dataclass(frozen=True)
class Lookup:
    """A `GET` of a spliced response. The upstream keeps the leaked first attempt under the
    client's id and what the client received under the retry's: `rest` (the path under /v1/)
    fetches the retry's response, with the client's headers and query, so the upstream still
    decides who may read it; `reply` makes its body the response the client received."""

    rest: str
    spliced: Spliced

    def reply(self, status: int, body: bytes) -> bytes:
        """The upstream's answer for `rest` as the client's response: a 200 JSON object for the
        retry's response gets the client's `id`, `created_at` and `output` (and `output_text`,
        when the upstream writes one), every other byte as the upstream sent it. Anything else
        (an error, a body that is not that response) passes as it came."""
        s = self.spliced
        try:
            obj = json.loads(body) if status == 200 else None
        except (ValueError, RecursionError):
            obj = None
        if not isinstance(obj, dict) or obj.get("id") != s.upstream_id:
            return body
        output = list(s.output)
        changes = {"id": dumps(s.response_id), "output": dumps(output)}
        if "created_at" in obj:
            changes["created_at"] = dumps(s.created_at)
        if isinstance(obj.get("output_text"), str):
            changes["output_text"] = dumps(output_text(output))
        return with_values(body, obj, changes) or body


def _streamed(query: str) -> bool:
    """A `GET` asking for the response's events again (`stream=true`), not the response."""
    return any(k == "stream" and v.lower() != "false" for k, v in parse_qsl(query))


def _response_id(rest: str) -> str | None:
    match = _RESPONSE.fullmatch(unquote(rest))
    return match.group(1) if match else None


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

    def lookup(self, method: str, rest: str, query: str) -> Lookup | None:
        """For a request passed through (`rest`: its raw path under /v1/): a `GET` of a spliced
        response is answered from the retry's response (`Lookup`); None for any other request,
        and for a replay of a response's events (`stream=true`), which passes untouched."""
        if self.chaining is None or method != "GET" or _streamed(query):
            return None
        response_id = _response_id(rest)
        spliced = self.ids.spliced(response_id) if response_id is not None else None
        if spliced is None:
            return None
        return Lookup("responses/" + quote(spliced.upstream_id, safe=""), spliced)

    def passed(self, method: str, rest: str, status: int) -> None:
        """A request passed through was answered `status`: a spliced response the client
        deleted is forgotten (a later `GET` of it reaches the upstream, which has it no more)."""
        if self.chaining is None or method != "DELETE" or not 200 <= status < 300:
            return
        response_id = _response_id(rest)
        if response_id is not None:
            self.ids.forget(response_id)
