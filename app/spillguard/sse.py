"""A sans-IO server-sent-events decoder that keeps every event's exact bytes.

Feed it bytes as they arrive, cut anywhere (inside a line, inside a CRLF, inside a multi-byte
character); it returns complete events. Each event carries the raw bytes it was made of, so an
event spillguard does not change is forwarded byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_EVENT = 1024 * 1024
_DROPPED = (b"id:", b"retry:", b"id\r", b"id\n", b"retry\r", b"retry\n")  # such lines


class SSEError(ValueError):
    """The byte stream is not server-sent events spillguard can read (an event too large)."""


# The records made per event are plain slotted dataclasses: a frozen one costs about three times
# as much to make (each field set through object.__setattr__), and nothing mutates them.
@dataclass(slots=True)
class Event:
    raw: bytes
    data: str | None = None  # the data lines joined by "\n"; None when the event had none
    event: str | None = None  # the `event:` field (Responses API streams name their events)

    @property
    def is_comment(self) -> bool:
        return self.data is None and self.event is None


class SSEDecoder:
    def __init__(self, max_event: int = DEFAULT_MAX_EVENT) -> None:
        self._buf = bytearray()
        self._scan = 0  # where the search for the next line end resumes
        self._line_start = 0  # start in _buf of the current (incomplete) line
        self._event_start = 0  # start in _buf of the event being assembled
        self._data: list[bytes] = []
        self._name: bytes | None = None
        self._strip = False  # the event has id: or retry: lines to drop
        self._max_event = max_event

    def feed(self, chunk: bytes) -> list[Event]:
        last = chunk.rfind(b"\n\n") if chunk.find(b"\r") < 0 else -1  # `find`: 2.5x `in`
        if last >= 0:
            # A read of a fast stream: the rest of the event left pending by the last one, whole
            # events, the start of another. The whole ones are cut at C speed (`_whole_events`);
            # after any blank line nothing is pending, so the two ends go the general way.
            first = chunk.find(b"\n\n") + 2 if self._buf else 0  # after the pending event
            end = last + 2  # after the last blank line
            if first < end:
                whole = _whole_events(chunk[first:end] if first or end < len(chunk) else chunk)
                if whole is not None:
                    head = self._feed(chunk[:first]) if first else []
                    tail = self._feed(chunk[end:]) if end < len(chunk) else []
                    return head + whole + tail if head or tail else whole
        return self._feed(chunk)

    def _feed(self, chunk: bytes) -> list[Event]:
        # With nothing pending the piece is read in place, each event one slice of it; what
        # is left of it after the last whole event is kept.
        buf: bytes | bytearray = chunk if not self._buf else self._buf
        if buf is self._buf:
            self._buf += chunk
        events: list[Event] = []
        n, start, pos = len(buf), self._line_start, self._scan
        lf = buf.find(b"\n", pos)  # found once, then again only when passed: linear on CR-only
        while True:
            if 0 <= lf < pos:
                lf = buf.find(b"\n", pos)
            if (
                lf >= 0
                and start == self._event_start
                and lf + 1 < n
                and buf[lf + 1] == 0x0A
                and buf.startswith(b"data:", start)
                and not self._data
                and self._name is None
                and not self._strip
                and buf.find(b"\r", start, lf) < 0
            ):
                # The common event, one data line and a blank one: what `_field` and `_emit`
                # would make of it, made at once.
                value = buf[start + (6 if buf[start + 5] == 0x20 else 5) : lf]
                nxt = lf + 2
                events.append(Event(bytes(buf[start:nxt]), value.decode("utf-8", "replace")))
                self._event_start = start = pos = nxt
                lf = buf.find(b"\n", pos)
                continue
            cr = buf.find(b"\r", pos, lf if lf >= 0 else n)
            if cr >= 0:
                if cr + 1 == n:  # a CR at the end may be the first half of a CRLF
                    pos = cr
                    break
                end, nxt = cr, cr + 2 if buf[cr + 1] == 0x0A else cr + 1
            elif lf >= 0:
                end, nxt = lf, lf + 1
            else:
                pos = n
                break
            if end == start:  # a blank line ends the event (even an empty one: bytes are kept)
                events.append(self._emit(bytes(buf[self._event_start : nxt])))
                self._event_start = nxt
            else:
                self._field(bytes(buf[start:end]))
            start = pos = nxt
        if buf is not self._buf:
            self._buf += buf[self._event_start :]
        elif self._event_start:  # drop what has been delivered; keep the partial event
            del self._buf[: self._event_start]
        start -= self._event_start
        pos -= self._event_start
        self._event_start = 0
        self._line_start, self._scan = start, pos
        if len(self._buf) > self._max_event:
            raise SSEError(f"an event exceeded {self._max_event} bytes")
        return events

    def flush(self) -> list[Event]:
        """End of stream: an unterminated last event is still delivered (a proxy must not lose
        it); its raw bytes are exactly what was received."""
        if not self._buf:
            return []
        rest = bytes(self._buf)
        tail = rest[self._line_start :].rstrip(b"\r\n")
        if tail:
            self._field(tail)
        self._buf.clear()
        self._line_start = self._scan = 0
        return [self._emit(rest)]

    def _field(self, line: bytes) -> None:
        if line[:1] == b":":
            return
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._name = value
        elif name in (b"id", b"retry"):
            self._strip = True

    def _emit(self, raw: bytes) -> Event:
        data = b"\n".join(self._data).decode("utf-8", "replace") if self._data else None
        name = self._name.decode("utf-8", "replace") if self._name is not None else None
        if self._strip:
            # `id:` and `retry:` never go to a client: openai-python keeps the last id forever
            # and then reads a later comment-only block (a keep-alive) as an empty event.
            raw = b"".join(
                line for line in raw.splitlines(keepends=True) if not line.startswith(_DROPPED)
            )
        self._data, self._name, self._strip = [], None, False
        return Event(raw=raw, data=data, event=name)


def _whole_events(chunk: bytes) -> list[Event] | None:
    """A piece made of whole common events (one `data:` line each, LF line ends) and nothing
    else, with nothing pending, cut into them at C speed; None for any other piece. What a
    streaming upstream sends a read. A piece of one event is that event's bytes, not copied."""
    if chunk.find(b"\n") == len(chunk) - 2:  # one line and the blank one: a paced stream's read
        if chunk[:6] == b"data: ":
            return [Event(chunk, chunk[6:-2].decode("utf-8", "replace"))]
        if chunk[:5] == b"data:":
            return [Event(chunk, chunk[5:-2].decode("utf-8", "replace"))]
        return None
    pieces = chunk.split(b"\n\n")
    if pieces.pop():  # something after the last blank line
        return None
    if chunk.count(b"\n") != 2 * len(pieces):  # a line end not the blank lines' own
        return _named_events(chunk, pieces)
    events: list[Event] = []
    one = len(pieces) == 1
    for piece in pieces:
        if piece[:6] == b"data: ":
            value = piece[6:]
        elif piece[:5] == b"data:":
            value = piece[5:]
        else:
            return None
        events.append(Event(chunk if one else piece + b"\n\n", value.decode("utf-8", "replace")))
    return events


def _named_events(chunk: bytes, pieces: list[bytes]) -> list[Event] | None:
    """`_whole_events` of a piece whose every event is named (Anthropic's, Responses'): an
    `event:` line, then one `data:` line."""
    if chunk.count(b"\n") != 3 * len(pieces):  # each has one more line end, as each must
        return None
    events: list[Event] = []
    one = len(pieces) == 1
    for piece in pieces:
        cut = piece.find(b"\n")
        if piece[:6] != b"event:" or cut < 0:
            return None
        name = piece[7 if piece[6:7] == b" " else 6 : cut].decode("utf-8", "replace")
        if piece[cut + 1 : cut + 7] == b"data: ":
            value = piece[cut + 7 :]
        elif piece[cut + 1 : cut + 6] == b"data:":
            value = piece[cut + 6 :]
        else:
            return None
        raw = chunk if one else piece + b"\n\n"
        events.append(Event(raw, value.decode("utf-8", "replace"), name))
    return events


@dataclass(slots=True)
class Out:
    """Bytes for the client; `meaningful` when they carry something the client will show or
    act on (so a response may start for them), not just a role chunk or a comment."""

    data: bytes
    meaningful: bool = True


def encode_data(data: str) -> bytes:
    """One `data:` event; `data` must be single-line (JSON is)."""
    return b"data: " + data.encode() + b"\n\n"


def encode_event(name: str, data: str) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + data.encode() + b"\n\n"
