"""What a wire format supplies to the decision: its `Wire` record and the `Stream` it edits.

Pure, like the modules that implement it (`chat.py`, `responses.py`): no event loop, no HTTP, no
metrics or storage, so a wire can be tested by feeding it bytes. The decision in `proxy.py` talks
to every wire through these two types only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from .detect import Anomaly, Call, Finding, ToolSet, TurnScanner, may_find
from .errors import SpillguardError
from .idmap import IdMap, Spliced
from .jsonread import loads_text, read_all
from .rawjson import append_items
from .sse import Event, Out
from .start import KEEPALIVE
from .usage import Usage, reply_usage


def content_finding(
    texts: list[str], tools: ToolSet, hold_limit: int
) -> tuple[Finding, str] | None:
    """The first finding among a whole reply's text parts, each judged as a stream would judge
    it (a `TurnScanner` per part), with the turn's text up to the markup."""
    for n, text in enumerate(texts):
        if not may_find(text, tools):
            continue  # no scanner could find anything in this part
        turn = TurnScanner(tools, hold_limit)
        turn.feed_content(text)
        turn.finish()
        if turn.finding is not None:
            return turn.finding, "".join(texts[:n]) + text[: turn.finding.start]
    return None


class NamedEvents:
    """`feed` and `feed_all` of an editor of JSON events (Messages, Responses): each event's
    data read once (None when it is not JSON), an event of a type in `DELTAS` first offered to
    `_text_delta` (the short way, with the same bytes out; None declines it), the rest to
    `_feed`. A comment is dropped once the stream is certain to leak, else passed on. Once the
    client has had the stream's end (`closed`), every event goes as it came, unread."""

    DELTAS: ClassVar[tuple[str, ...]]  # a tuple: `in` compares, so a list-valued type is safe

    @property
    def certain(self) -> bool:
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        raise NotImplementedError

    def _text_delta(self, event: Event, data: dict[str, Any]) -> list[Out] | None:
        raise NotImplementedError

    def _feed(self, event: Event, data: Any) -> list[Out]:
        raise NotImplementedError

    def feed(self, event: Event) -> list[Out]:
        if self.closed:
            return [Out(event.raw, False)]
        if event.data is None:
            return [] if self.certain else [Out(event.raw, False)]
        return self._feed(event, _parsed(event.data))

    def feed_all(self, events: list[Event]) -> list[Out]:
        if self.closed:
            return [Out(event.raw, False) for event in events]
        outs: list[Out] = []
        for at, event in enumerate(events):
            if event.data is None:
                outs += self.feed(event)
                continue
            data = _parsed(event.data)
            if type(data) is dict and data.get("type") in self.DELTAS:
                out = self._text_delta(event, data)
                if out is not None:
                    outs += out
                    continue
            outs += self._feed(event, data)
            if self.closed:  # that was the end: the rest of the read goes as it came
                return outs + [Out(event.raw, False) for event in events[at + 1 :]]
        return outs


def _parsed(data: str) -> Any:
    try:
        return loads_text(data)
    except (ValueError, RecursionError):
        return None


class Stream(Protocol):
    """One upstream SSE stream being edited for the client: events in, publishable bytes out."""

    @property
    def finding(self) -> Finding | None:
        """The leak found so far (its family and name settle with `settle`)."""

    @property
    def certain(self) -> bool:
        """A finding is certain: nothing more of this stream may reach the client."""

    @property
    def holding(self) -> int:
        """Characters held back, for the hold limit."""

    @property
    def can_splice(self) -> bool:
        """A retry may continue this client stream after it has published."""

    @property
    def ended(self) -> bool:
        """The upstream has said its stream is over (after a finding: the leaking part is)."""

    @property
    def closed(self) -> bool:
        """The client has had the stream's end (chat's `[DONE]`, Messages' `message_stop`,
        Responses' terminal event; each published when it came): what follows goes as it came,
        unread, and a failure reading the rest of the upstream's body adds nothing to the
        client's stream (an SDK would raise on an error event there, after a whole answer)."""

    @property
    def trailer(self) -> bytes:
        """What closes the client's stream after `finish` (chat's `[DONE]`, when it has not gone
        out already), or b""."""

    def feed(self, event: Event) -> list[Out]: ...

    def feed_all(self, events: list[Event]) -> list[Out]:
        """`feed` each event in turn (the events of one read, taken together where that is
        quicker: chat's runs of content deltas, Messages' and Responses' text deltas)."""

    def finish(self) -> list[Out]:
        """The upstream ended: settle what was held back, and return what may now go out."""

    def settle(self) -> None:
        """After a finding: settle its family and name from all the markup read. Idempotent."""

    def leaked_text(self) -> str:
        """The prose the model wrote before the markup, never the markup: the retry's
        assistant turn (none when it is blank)."""

    @property
    def anomalies(self) -> list[Anomaly]:
        """The structured calls seen so far that are missing or malformed (`detect.anomalies`):
        reported, never edited."""


class Repairable(Protocol):
    """A stream whose leak may be answered with the calls its markup spells out (repair mode).
    The decision reads the upstream's stream to its end first (`Stream.ended`), then asks."""

    @property
    def markup(self) -> str | None:
        """The leaking turn's markup, from the finding's start to the end of its field
        (`TurnScanner.markup`); None when it cannot be repaired (more than the hold limit was
        read, or the finding is not in a field this stream can replace)."""

    def repair(self, calls: tuple[Call, ...]) -> list[Out] | None:
        """What finishes the client's stream with `calls` in place of the markup: the calls,
        the finish, usage and the trailer, every other field as the upstream sent it. None when
        this stream cannot carry them (the decision falls back to the retry)."""


@dataclass(frozen=True)
class Chaining:
    """For an API whose later requests name earlier responses and items by id (Responses)."""

    # The upstream keeps this request's response, so a later request may name it.
    stored: Callable[[dict[str, Any]], bool]
    # A spliced stream that has completed, as the `IdMap` keeps it; None before then.
    spliced: Callable[[Stream], Spliced | None]
    # The request (raw, parsed) naming what the client received instead of a spliced
    # response's upstream parts; None when it names none.
    request: Callable[[bytes, dict[str, Any], IdMap], tuple[bytes, dict[str, Any]] | None]


@dataclass(frozen=True)
class Wire:
    """One API's shapes, as the decision needs them. A new wire is a module that builds one of
    these, plus one line in `asgi.WIRES`."""

    route: str  # the name in metrics and logs
    path: str  # under /v1/
    retry_key: str  # the top-level array a retry appends its messages to
    inspect_reply: Callable[[Any, ToolSet, int], tuple[Finding, str] | None]
    new_stream: Callable[[ToolSet, int, Stream | None], Stream]
    error_event: Callable[[SpillguardError, Stream | None], bytes]
    # The parsed request with the retry's items appended, its own way; raises TypeError when
    # the request has no place for them.
    retry_body: Callable[[dict[str, Any], list[dict[str, Any]]], dict[str, Any]]
    # The raw JSON of a `retry_key` value that is a string, as the raw JSON of the one item it
    # stands for (Responses' `input` may be a string); None when only an array is valid.
    item_from_string: Callable[[str], str] | None = None
    # The missing or malformed structured calls of a whole reply (reported, never edited).
    reply_anomalies: Callable[[Any, ToolSet], list[Anomaly]] = lambda reply, tools: []
    # What keeps a held-back stream open before it has published anything (Messages: `ping`).
    keepalive: bytes = KEEPALIVE
    # spillguard's own error as a response body, in the API's error shape.
    error_body: Callable[[SpillguardError], bytes] = SpillguardError.json_bytes
    # What the upstream billed for a whole reply, and for a stream (None: it did not say).
    reply_usage: Callable[[Any], Usage | None] = reply_usage
    stream_usage: Callable[[Stream], Usage | None] = lambda stream: None
    chaining: Chaining | None = None
    # Top-level keys read only now and then (the conversation, for a retry written out by
    # hand; the tools, when a reply needs them): a long request leaves them as their bytes
    # (`jsonread.loads_leaving`), and whoever reads one reads it through `jsonread.value`.
    unread: frozenset[str] = frozenset()
    # Repair mode. The whole reply with `calls` in place of its markup, from (raw reply, parsed
    # reply, finding, prose before the markup, calls); None when this reply cannot carry them.
    # A wire without it retries instead.
    repair_reply: Callable[[bytes, Any, Finding, str, tuple[Call, ...]], bytes | None] | None = None
    # The finding's markup in a parsed whole reply (its field from `Finding.start` on); None
    # when there is none this wire can replace.
    reply_markup: Callable[[Any, Finding], str | None] = lambda reply, finding: None
    # The stream as one that can repair its leak; None when this stream cannot (retry).
    repairable: Callable[[Stream], Repairable | None] = lambda stream: None

    def retry_request(
        self, raw: bytes, body: dict[str, Any], leaked: str, correction: str
    ) -> bytes:
        """The request once more, with the prose before the markup as the assistant turn (none
        when there is no prose: the model never sees its markup) and the corrective instruction.

        The messages are spliced into the client's own bytes, so every other field reaches the
        upstream as written. When that is not possible (the value is neither an array nor a
        string the wire accepts), the parsed body is written out again instead. Raises
        TypeError, ValueError or RecursionError when neither can be done: no retry."""
        items = [{"role": "assistant", "content": leaked}] if leaked.strip() else []
        items.append({"role": "user", "content": correction})
        spliced = append_items(raw, self.retry_key, items, self.item_from_string)
        if spliced is not None:
            return spliced
        return json.dumps(self.retry_body(read_all(body), items), allow_nan=False).encode()
