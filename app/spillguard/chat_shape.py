"""A chat stream's content deltas and argument chunks read by their bytes, without parsing.

Most chunks of a stream are a delta of content alone of one choice (`content_delta`), and one
stream's such chunks differ only in their text: the same id, model and fields around it. Once
one has been parsed and its text found in its bytes, the bytes around the text are a `Shape`.
A later event with the same bytes around a text holding nothing JSON reads specially (no `"`,
no backslash, no control character) is, by JSON's grammar, the same chunk with that text: the
string token sits at the same place and holds exactly those characters. One whose text has
escapes (a newline, a quote) is that chunk too when the bytes between the quotes make one
string token, whose text the token spells (`jsonread.string_body`). A shape is kept only
once a probe (another text in the same place, parsed) has shown that the place is the delta's
content, and not some other field that happens to hold the same text. A call's chunks that
only add arguments (`arguments_delta`) are read the same way, by a shape around their arguments.
"""

from __future__ import annotations

from typing import Any

from .jsonread import loads_text, string_body
from .sse import Event

_SPECIAL = bytes(range(0x20)) + b'"\\'  # what a JSON string spells with an escape
_PROBE = "spillguard probe"
# Each key as compact JSON writes it and as Python's `json.dumps` does by default (a space
# after the colon); the probe, not the key, decides what the place holds.
_KEYS = (b'"content":"', b'"content": "')
_ARGUMENTS_KEYS = (b'"arguments":"', b'"arguments": "')
_ARGUMENT_KEYS = {"index", "function", "type"}  # of a call's chunk that only adds arguments


def _one_field(chunk: Any) -> tuple[Any, dict[str, Any]] | None:
    """(choice index, delta) of a chunk of one choice whose delta has one field, with no finish
    and no usage; None for any other chunk."""
    if type(chunk) is not dict or chunk.get("usage") is not None:
        return None
    choices = chunk.get("choices")
    if type(choices) is not list or len(choices) != 1 or type(choices[0]) is not dict:
        return None
    choice = choices[0]
    delta = choice.get("delta")
    if type(delta) is not dict or len(delta) != 1 or choice.get("finish_reason") is not None:
        return None
    return choice.get("index", 0), delta


def content_delta(chunk: Any) -> tuple[int, str] | None:
    """(choice index, text) of a chunk that is a delta of content alone of one choice, with no
    finish and no usage (most of a stream); None for any other chunk."""
    one = _one_field(chunk)
    if one is None:
        return None
    index, delta = one
    text = delta.get("content")
    if type(text) is not str or not isinstance(index, int):
        return None
    return index, text


def arguments_delta(chunk: Any) -> tuple[int, int, str] | None:
    """(choice index, call index, text) of a chunk that only adds arguments to one call of one
    choice (most of a call's chunks: no id, no name, no finish, no usage); None for any other."""
    one = _one_field(chunk)
    if one is None:
        return None
    index, delta = one
    calls = delta.get("tool_calls")
    if type(calls) is not list or len(calls) != 1 or type(calls[0]) is not dict:
        return None
    call = calls[0]
    number, fn = call.get("index"), call.get("function")
    if type(index) is not int or type(number) is not int or type(fn) is not dict or len(fn) != 1:
        return None
    text = fn.get("arguments")
    if type(text) is not str or not call.keys() <= _ARGUMENT_KEYS:
        return None
    return index, number, text


class Shape:
    """The bytes of one stream's content-delta events around their text; or, with `call`, of
    its argument chunks of one call (`arguments_delta`) around their arguments."""

    __slots__ = ("_prefix", "_suffix", "call", "index")

    def __init__(self, index: int, prefix: bytes, suffix: bytes, call: int | None = None) -> None:
        self.index, self.call = index, call
        self._prefix, self._suffix = prefix, suffix

    @classmethod
    def learn(
        cls, event: Event, chunk: Any, index: int, text: str, call: int | None = None
    ) -> Shape | None:
        """The shape of `event`, whose parsed data is `chunk`, a delta of `text` alone (or of
        arguments `text` alone for call `call`); None when its bytes do not show it plainly (a
        text with escapes, a data line cut in two)."""
        raw, data = event.raw, event.data
        if data is None or raw != b"data: " + data.encode("utf-8", "surrogatepass") + b"\n\n":
            return None
        encoded = text.encode("utf-8", "surrogatepass")  # a lone surrogate is never found
        if len(encoded.translate(None, _SPECIAL)) != len(encoded):
            return None
        for key in _KEYS if call is None else _ARGUMENTS_KEYS:
            at = raw.rfind(key + encoded + b'"')
            if at >= 0:
                break
        else:
            return None
        cut = at + len(key)
        shape = cls(index, raw[:cut], raw[cut + len(encoded) :], call)
        # Another text in the same place, parsed: never the text itself, which would show
        # nothing about the place.
        other = _PROBE if text != _PROBE else _PROBE + "!"
        probe = loads_text((shape._prefix + other.encode() + shape._suffix)[6:-2].decode())
        if call is None:
            if content_delta(probe) != (index, other):
                return None
            probe["choices"][0]["delta"]["content"] = text
        else:
            if arguments_delta(probe) != (index, call, other):
                return None
            probe["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] = text
        return shape if probe == chunk else None

    def texts(self, events: list[Event], at: int) -> list[str]:
        """The texts of `events` from `at` on, as long as each is an event of this shape (its
        bytes around a text that is one JSON string token), in one loop: most of a fast stream's
        read."""
        prefix, suffix = self._prefix, self._suffix
        start, end = len(prefix), -len(suffix)  # never empty: the closing quote at least
        out: list[str] = []
        for n in range(at, len(events)):
            raw = events[n].raw
            if not raw.startswith(prefix) or not raw.endswith(suffix, start):  # apart, in order
                break
            text = raw[start:end]
            if len(text.translate(None, _SPECIAL)) == len(text):
                out.append(text.decode("utf-8", "replace"))
                continue
            body = string_body(text)  # escapes (a newline, a quote) or what JSON refuses
            if body is None:
                break
            out.append(body)
        return out
