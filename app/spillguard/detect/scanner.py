"""The incremental scanner: feed text, get back what is safe to publish, and a finding.

Two detectors read the same characters:

* the markup judge finds the places where a marker could begin (an opening character of a
  spelling in `markers`, mid-line or at a line start) outside the places where text is only shown
  (Markdown fences, indented code, `>` quotes, inline code spans, reST literal blocks, Python
  triple-quoted strings, HTML `<pre>`/`<code>`, a marker wrapped in quotation marks), and holds
  the text from such a place only while it could still become a marker;
* the blob probe (content only) holds the whole reply while it could still be one JSON or
  pythonic tool-call blob.

What is published is the input up to the lower of the two safe offsets, so the published text of
a reply with no finding is the input exactly, and a reply with a finding publishes exactly the
text before its markup. Every verdict depends only on the characters seen, never on how they were
cut into deltas; feeding the whole text at once is the whole-reply check.

The judge keeps only the text it has not decided yet (`_tail`, after a few characters of context)
and the head of the current line; regular expressions skip the rest, so each character is read a
bounded number of times.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

import regex

from . import markers
from .blob import BlobProbe, classify
from .markers import MAX_HEAD, Kind, Scope
from .tools import ToolSet

DEFAULT_HOLD_LIMIT = 256 * 1024
DEFAULT_MARKUP_LIMIT = 64 * 1024
_LINE_CAP = 256  # of a line only its head is kept: enough for indentation, quotes and fences
_CONTEXT = 16  # characters kept before the undecided text: line starts, quotes, glued words
_QUOTES = frozenset("\"'`“‘«„")


def _prefixes(word: str) -> str:
    return "|".join(re.escape(word[:k]) for k in range(len(word), -1, -1))


def _openers(end: str) -> str:
    """`<`, `[`, `]` or `◁` only where the next two characters can go on to spell something
    (runs like `<<<<` or `<|<|` are skipped at C speed), or `end` comes before they are seen."""

    def chars(text: str) -> str:
        return "[" + "".join(re.escape(c) for c in text) + "]"

    parts = []
    for first, seconds in markers.FOLLOWERS.items():
        ahead = [re.escape(c) + "(?:" + chars(third) + end + ")" for c, third in seconds.items()]
        parts.append(re.escape(first) + "(?=" + "|".join(ahead) + end + ")")
    return "|".join(parts)


# Where something may happen in ordinary text. Everything between two matches is published as is.
# No part of it looks at the end of the text, so it may be searched within a window. The events
# that open at a line start are tried only where lines start (`window_event`); every other one
# starts with a literal character that tells its kind, so `re` skips the rest at C speed.
_LINE_EVENT = re.compile(
    r"(?P<fence>^ {0,3}(?:(?:[-*+]|\d{1,9}[.)])[ \t]{1,4})?(?:`{3,}|~{3,}))"
    r"|(?P<directive>^[ \t]{0,16}\.\.[ \t]{1,4}[\w-]{1,40}::)"
    r"|(?P<start>^ {0,3}(?=[fA|｜‖]))",
    re.M,
)
_CHAR_EVENT = re.compile(
    _openers("") + r"|\\(?=[<\[])"
    r"| (?:(?<=assistant )|(?<=commentary )|(?<=analysis )|(?<=final )|(?<=[.!?:>\n] ))"
    r"(?=to=functions\.)"
    r"|f(?<!\wf)(?=unctools\[)"
    r"|``*"
    r"|::[ \t]{0,16}(?=\r?\n)"
    r'|"""'
    r"|'''"
)
_CHAR_KIND = {"`": "tick", ":": "rst", '"': "triple", "'": "triple"}  # any other: "cand"
# At the very end of the text seen so far: what may still become an event once more arrives.
# No part of either spans a newline, so both are looked for in the last line only.
_LINE_AT_END = re.compile(
    r"(?P<indent>^ {1,3}\Z)"  # a line start's indentation: a marker there starts the finding
    r"|(?P<start>^ {0,3}(?=[fA|｜‖\\][^\n]{0,15}\Z))"  # `Action:`, `functions.`... still coming
    r"|(?P<wait>^ {0,3}(?:[-*+]|\d{1,9}[.)]?)?[ \t]{0,4}[`~]{0,2}\Z"  # a fence, or
    r"|^[ \t]{0,16}\.(?:\.(?:[ \t]{1,4}[\w-]{0,40}:?)?)?\Z)",  # a directive
    re.M,
)
_CHAR_AT_END = re.compile(
    r"::?[ \t]{0,16}\r?\Z|\"\"?\Z|''?\Z"  # waiting: `::`, triple quotes
    r"|<[^\n]?\Z|\[[^\n]?\Z|\][^\n]?\Z|◁[^\n]?\Z|\\[^\n]?\Z"  # a marker's first characters
    r"| (?:(?<=assistant )|(?<=commentary )|(?<=analysis )|(?<=final )|(?<=[.!?:>\n] ))"
    r"(?:" + _prefixes("to=functions.") + r")\Z"
    r"|f(?<!\wf)(?:" + _prefixes("unctools[") + r")\Z"
)
_WAITS_AT_END = frozenset(":\"'")  # the first characters of `_CHAR_AT_END`'s waiting kind
# How far before the end `_at_end` looks: from a last line's start when a directive may be
# forming there (`.. ` plus a name of up to 40 characters and `::`), else the partials after it
# (`::` with spaces, a recipient's ` to=functions`, `functools[`).
_LINE_END_REACH = 64
_PARTIAL_REACH = 16
# Where an event can begin, found at C speed before `window_event` looks closer: the characters that
# open markers, code spans and fences, and the literals of the rarer events. It looks from
# _REACH characters before such a place (its line starts and look-behinds need that) to
# _WINDOW after it.
# One search finds both. Every alternative starts with a literal character, so `re` skips the
# characters that start none at C speed; a recipient is found by its `=` (`t` is too common a
# first character), and begins two characters before it.
_TRIGGER = re.compile(
    _openers(r"|\Z") + r"|\\(?=[<\[]|\Z)|`|~"
    r"|=(?<=to=)functions\.|functools\[|Action:|function|DSM|\"\"\"|'''|::|\.\."
)
# A delta with none of these characters can begin no event on a line already past its start
# (`feed`'s fast path); the last two guard the tail partials of a recipient and `functools[`.
_QUIET = re.compile(r"<|\[|\]|◁|`|\\|~|\n|:|=|'''|\"\"\"|'\Z|\"\Z")
# Every alternative of both starts with a literal character, so `re` skips the others at C speed.
_QUIET_TAIL = re.compile(
    r"assistant ?[a-z=]{0,13}\Z|commentary ?[a-z=]{0,13}\Z|analysis ?[a-z=]{0,13}\Z"
    r"|final ?[a-z=]{0,13}\Z|\. ?[a-z=]{0,13}\Z|! ?[a-z=]{0,13}\Z|\? ?[a-z=]{0,13}\Z"
    r"|> ?[a-z=]{0,13}\Z|f(?<!\wf)(?:" + _prefixes("unctools[") + r")\Z"
)
_QUIET_TAIL_REACH = 24  # its longest match: `commentary`, a space and 13 letters
# How far into a line its start may still matter to an event at the end of the text: its
# indentation, a fence run after a list marker, `Action:`, `functions.`, `|DSML|` (directives
# are told by their leading `..`).
_LINE_START_REACH = 20
_LINE_OPENERS = frozenset("-*+0123456789`~.fA|｜‖\\\t<[]◁")
_REACH = 32
_WINDOW = 96

# Inside a fence: a line that may close it (or a blank one, or the unfinished last line).
_FENCE_LINE = re.compile(r"^[ \t]{0,64}(?:([`~]{1,64})[ \t]{0,64}\r?)?(?:\n|\Z)", re.M)
# Inside a reST literal block of indentation K: the first line that ends it.
_RST_END = tuple(re.compile(rf"^ {{0,{k}}}[^ \t\r\n]", re.M) for k in range(33))
_HTML_CLOSE = re.compile(r"</(?:pre|code)[ \t]{0,8}>", re.I)


Event = tuple[str, int, int]  # (kind, start, end) of an event in the text


def window_event(t: str, lo: int, hi: int) -> Event | None:
    """The first event in `t[lo:hi]`: a line event where a line starts, unless a character event
    begins before that line (at the same place, the line event wins)."""
    c = _CHAR_EVENT.search(t, lo, hi)
    top = c.start() if c is not None else hi - 1  # the last place a line event may begin
    p = lo if lo == 0 or t[lo - 1] == "\n" else t.find("\n", lo, top) + 1 or -1
    while 0 <= p <= top:
        m = _LINE_EVENT.match(t, p, hi)
        if m is not None:
            return m.lastgroup or "", m.start(), m.end()
        p = t.find("\n", p, top) + 1 or -1
    if c is None:
        return None
    return _CHAR_KIND.get(t[c.start()], "cand"), c.start(), c.end()


def end_event(t: str, start: int) -> Event | None:
    """The first event from `start` on that may still form at the end of the text."""
    line = t.rfind("\n") + 1
    if line >= start:
        m = _LINE_AT_END.match(t, line)
        if m is not None:
            return m.lastgroup or "", m.start(), m.end()
    c = _CHAR_AT_END.search(t, max(start, line))
    if c is None:
        return None
    return ("wait" if t[c.start()] in _WAITS_AT_END else "cand"), c.start(), c.end()


class _Block(Enum):
    TEXT = "text"
    FENCE = "fence"
    RST = "rst"
    TRIPLE = "triple"
    HTML = "html"


@dataclass(frozen=True)
class _Opened:
    """A spelling that opens at some place: what it is, the name it captured, where it ends."""

    spelling: markers.Spelling
    name: str | None
    end: int


_UNDECIDED = "undecided"  # a call may still open here: the text from here on is held
_WAITING = "waiting"  # only a closer may still open here: read on later, publish meanwhile


@dataclass(frozen=True)
class Finding:
    """A tool call written as text. `start` is the offset, in characters of the inspected field,
    where the markup begins: everything before it is prose that may stay published."""

    family: str
    tool_name: str | None
    start: int
    field: str = "content"
    excerpt: str = ""


class Scanner:
    """One text field of one choice (`content`, or `reasoning_content` with blobs=False)."""

    def __init__(
        self,
        tools: ToolSet,
        *,
        blobs: bool = True,
        field: str = "content",
        hold_limit: int = DEFAULT_HOLD_LIMIT,
        markup_limit: int = DEFAULT_MARKUP_LIMIT,
    ) -> None:
        self._tools = tools
        self._field = field
        self._markup_limit = markup_limit
        self._hold_limit = hold_limit
        self._probe = BlobProbe(tools, hold_limit) if blobs else None
        # Reasoning left in the content: after its first closer, the rest may be one blob.
        self._after_probe: BlobProbe | None = None
        self._after_from = -1
        self._pending: list[str] = []  # received but not yet published
        self._pending_len = 0
        self._published = 0  # absolute offset of the first unpublished character
        self._seen = 0  # absolute offset of the end of the input so far
        # The judge: `_tail` is context, then the undecided text from `_pos` on.
        self._tail = "\n"  # the start of the text is a line start
        self._ctx = 1
        self._pos = 0
        self._held = False  # the text from `_pos` on could still open a marker
        self._line_start = 0  # where the line holding `_pos` starts
        self._head = ""  # its first _LINE_CAP characters seen so far
        self._block = _Block.TEXT
        self._fence = ""  # the opening fence run, inside a fence
        self._opening: tuple[str, int] | None = None  # a fence opener line being read
        self._opening_ok = True
        self._opening_run = False  # its run of fence characters may still go on
        self._ticks = 0  # a backtick run still going on at the end of the text seen
        # Within one `_judge` call: where the next trigger occurs, and how far the
        # search for the current line's start has gone.
        self._next = -1
        self._scanned = 0
        self._line_rel = -1
        self._rst_next = -1  # the line ending now opens a reST literal block this indented
        self._rst_indent = 0
        self._triple = ""
        self._code: tuple[int, int] | None = None  # (line start, backtick run) of a code span
        self._after_closer = -1  # where the text after a reasoning closer starts
        self._closer_next = False  # the text right after a closer is still to be judged
        # The markup after a marker, kept for the finding's excerpt (`markup_limit`) and for
        # repair (`markup`, up to `hold_limit`); `_markup_seen` counts all of it.
        self._markup: list[str] = []
        self._markup_len = 0
        self._markup_seen = 0
        self._blob_markup: str | None = None
        self._marker_family: str | None = None
        self._marker_start = 0
        self.finding: Finding | None = None
        self.finished = False

    @property
    def marker_seen(self) -> bool:
        """A marker has opened: a finding is certain, only its name and family are not."""
        return self._marker_family is not None

    @property
    def holding(self) -> int:
        """How many characters are held back right now."""
        return self._seen - self._published

    @property
    def markup(self) -> str | None:
        """After a finding: its whole markup so far (from `Finding.start` to the end of what was
        fed), or None when it ran past the hold limit."""
        if self._marker_family is None:
            return self._blob_markup if self.finding is not None else None
        if self._markup_seen > self._hold_limit:
            return None
        if len(self._markup) > 1:
            self._markup = ["".join(self._markup)]
        return self._markup[0] if self._markup else ""

    def feed(self, text: str) -> str:
        """Take the next delta; return the text that may be published now."""
        if not text:
            return ""
        if self.finished:
            raise RuntimeError("feed() after finish()")
        self._seen += len(text)
        if self._marker_family is not None:
            self._keep_markup(text)
            return ""
        tail = self._tail + text
        quiet = self._quiet(text, tail)
        if quiet:
            self._pos += len(text)
            if len(self._head) < _LINE_CAP:
                self._head += text[: _LINE_CAP - len(self._head)]
            self._tail = tail[-_CONTEXT:]
            self._ctx = len(self._tail)
            if not self._pending and not self._blob_possible():  # the common case: pass it on
                self._published = self._seen
                return text
        self._pending.append(text)
        self._pending_len += len(text)
        fresh = self._after_probe is None
        if not quiet:
            self._tail = tail
            self._judge(final=False)
        if self._marker_family is None:
            if self._probe is not None and self._probe.alive:
                self._probe.feed(text)
            if self._after_probe is not None and self._after_probe.alive:
                after = "".join(self._pending)[self._after_from - self._published :]
                self._after_probe.feed(after if fresh else text)
        return self._release()

    def finish(self) -> str:
        """End of the field: return the rest that may be published, and settle `finding`."""
        if self.finished:
            return ""
        self.finished = True
        if self._marker_family is None:
            self._judge(final=True)
        if self._marker_family is not None:
            markup = "".join(self._markup)
            self._markup = [markup]
            family = markers.refine_family(self._marker_family, markup)
            name = markers.read_name(markup, self._tools.names)
            excerpt = markup[: self._markup_limit]
            self.finding = Finding(family, name, self._marker_start, self._field, excerpt)
            return self._release()
        self._held = False
        for probe, start in ((self._probe, 0), (self._after_probe, self._after_from)):
            if probe is not None and probe.alive:
                probe.alive = False
                rest = "".join(self._pending)[start - self._published :]
                verdict = classify(rest, self._tools)
                if verdict is not None:
                    self._blob_markup = rest
                    excerpt = rest[: self._markup_limit]
                    self.finding = Finding(verdict[0], verdict[1], start, self._field, excerpt)
                    return self._release_to(start)
        return self._release()

    # ---- publishing --------------------------------------------------------------------------

    def _blob_possible(self) -> bool:
        return (self._probe is not None and self._probe.alive) or (
            self._after_probe is not None and self._after_probe.alive
        )

    def _safe(self) -> int:
        if self._probe is not None and self._probe.alive:
            return 0
        if self._marker_family is not None:
            return self._marker_start
        safe = self._pos if self._held else self._seen
        if self._after_probe is not None and self._after_probe.alive:
            return min(safe, self._after_from)
        return safe

    def _release(self) -> str:
        return self._release_to(self._safe())

    def _release_to(self, safe: int) -> str:
        if safe <= self._published:
            return ""
        cut = safe - self._published
        self._published = safe
        if cut == self._pending_len:
            out = "".join(self._pending)
            self._pending, self._pending_len = [], 0
            return out
        joined = "".join(self._pending)
        self._pending, self._pending_len = [joined[cut:]], self._pending_len - cut
        return joined[:cut]

    def _found_marker(self, start: int, family: str) -> None:
        self._marker_family, self._marker_start = family, start
        for probe in (self._probe, self._after_probe):
            if probe is not None:
                probe.alive = False  # markup decides; the text before it is prose
        self.finding = Finding(family, None, start, self._field)  # refined by finish()
        joined = "".join(self._pending)
        self._keep_markup(joined[start - self._published :])
        self._pending_len = start - self._published
        self._pending = [joined[: self._pending_len]]
        self._tail = ""

    def _keep_markup(self, text: str) -> None:
        self._markup_seen += len(text)
        room = max(self._markup_limit, self._hold_limit) - self._markup_len
        if room > 0:
            piece = text[:room]
            self._markup.append(piece)
            self._markup_len += len(piece)

    # ---- the judge ---------------------------------------------------------------------------

    def _line_settled(self) -> bool:
        """The current line's start can no longer matter to an event at the end of the text:
        it is far enough behind, or its first character opens nothing a line start can."""
        first = self._head.lstrip(" ")[:1]
        if first == ".":  # a reST directive names itself late
            return False
        if self._pos - self._line_start >= _LINE_START_REACH:
            return True
        return first != "" and first not in _LINE_OPENERS

    def _quiet(self, text: str, tail: str) -> bool:
        """Nothing in `text` can begin an event or finish one the judge is waiting on: the
        judge has nothing undecided, is in plain text, well into a line, and `text` has none of
        the characters any event needs (nor does `tail`, the context and `text`, end in a
        partial recipient or `functools[`)."""
        return (
            self._ctx == len(self._tail)
            and self._tail[-1:] not in ".!?:>"
            and _QUIET.search(text) is None
            and self._block is _Block.TEXT
            and not (self._opening or self._ticks or self._closer_next or self._rst_next >= 0)
            and self._line_settled()
            and _QUIET_TAIL.search(tail, max(0, len(tail) - _QUIET_TAIL_REACH)) is None
        )

    def _judge(self, final: bool) -> None:
        """Read the undecided text as far as it can be decided; keep the rest for later."""
        t, i = self._tail, self._ctx
        self._held = False
        self._next, self._scanned, self._line_rel = -1, i, -1
        while i < len(t):
            if self._block is _Block.TEXT:
                i = self._text(t, i, final)
            elif self._block is _Block.FENCE:
                i = self._in_fence(t, i, final)
            elif self._block is _Block.RST:
                i = self._in_rst(t, i, final)
            elif self._block is _Block.TRIPLE:
                i = self._in_triple(t, i, final)
            else:
                i = self._in_html(t, i, final)
            if self._marker_family is not None:
                return
            if i < 0:  # stopped: -i - 2 is where the undecided text starts
                i = -i - 2
                break
        self._keep(t, min(i, len(t)))

    def _keep(self, t: str, i: int) -> None:
        """Everything before `i` is decided: move the line bookkeeping past it."""
        done = t[self._ctx : i]
        newline = done.rfind("\n")
        if newline >= 0:
            self._line_start = self._pos + newline + 1
            self._head = done[newline + 1 : newline + 1 + _LINE_CAP]
        elif len(self._head) < _LINE_CAP:
            self._head += done[: _LINE_CAP - len(self._head)]
        self._pos += len(done)
        context = t[max(0, i - _CONTEXT) : i]
        self._tail, self._ctx = context + t[i:], len(context)

    def _stop(self, at: int, held: bool) -> int:
        self._held = held
        return -at - 2

    def _abs(self, i: int) -> int:
        return self._pos + i - self._ctx

    def _line(self, t: str, j: int) -> tuple[int, str]:
        """(absolute start, head) of the line holding tail index `j`. Calls come in increasing
        `j`: each part of the tail is searched for a newline once."""
        if j > self._scanned:
            newline = t.rfind("\n", self._scanned, j)
            if newline >= 0:
                self._line_rel = newline + 1
            self._scanned = j
        if self._line_rel >= 0:
            at = self._line_rel
            return self._abs(at), t[at : at + _LINE_CAP]
        rest = t[self._ctx : self._ctx + _LINE_CAP - len(self._head)]
        return self._line_start, self._head + rest

    def _next_event(self, t: str, i: int) -> int:
        """The first place from `i` on where an event can begin, or len(t) if none can."""
        at = self._next
        if at < i:
            m = _TRIGGER.search(t, i)
            while m is not None and t[m.start()] == "=" and m.start() - 2 < i:
                m = _TRIGGER.search(t, m.start() + 1)  # a recipient begun before `i`
            at = len(t) if m is None else m.start() - (2 if t[m.start()] == "=" else 0)
            self._next = at
        return at

    def _at_end(self, t: str, i: int, bound: int) -> Event | None:
        """An event that may still form at the end of the text, beginning no later than
        `bound`: looked for from the start of a short last line (its start may matter), else in
        the last characters only."""
        n = len(t)
        newline = t.rfind("\n", max(i - 1, n - _LINE_END_REACH))
        if newline >= 0 and (
            n - newline <= _LINE_START_REACH + 1 or t[newline + 1 :].lstrip(" \t")[:1] == "."
        ):
            start = max(i, newline + 1)
        else:
            start = max(i, n - _PARTIAL_REACH)
        if start > bound:
            return None
        end = end_event(t, start)
        return end if end is not None and end[1] <= bound else None

    def _text(self, t: str, i: int, final: bool) -> int:
        if self._opening is not None:
            return self._opener_line(t, i, final)
        if self._closer_next:  # right after a closer, whatever its first character
            k = i
            while k < len(t) and k - i < 3 and t[k] == " ":
                k += 1
            if k == len(t) and not final:
                return self._stop(i, held=False)
            if k < len(t) and (t[k].isalnum() or t[k] in "_{|｜‖"):
                after = self._candidate(t, k, final, at_start=False)
                self._closer_next = after < 0 and self._held  # still undecided
                return after
            self._closer_next = False
        if self._ticks:
            return self._backticks(t, i, i, final)
        n = len(t)
        first = self._next_event(t, i)
        event = None
        if first < n:
            event = window_event(t, max(i, first - _REACH), min(n, first + _WINDOW))
        if not final:
            # Only when nothing may begin before it: an empty window says nothing past itself.
            bound = event[1] if event is not None else first if first < n else n
            end = self._at_end(t, i, bound)
            if end is not None:
                event = end
        newline = t.find("\n", i) if self._rst_next >= 0 else -1
        if newline >= 0 and (event is None or event[1] > newline):
            self._block, self._rst_indent, self._rst_next = _Block.RST, self._rst_next, -1
            return newline + 1
        if event is None:  # nothing began at that place: look on from just after it
            return n if first >= n else first + 1
        kind, j, e = event
        if kind == "cand":
            return self._candidate(t, j, final, at_start=False)
        if kind == "start":
            return self._candidate(t, e, final, at_start=True)
        if kind == "indent":
            return self._stop(j, held=True)
        if kind == "wait":
            return self._stop(j, held=False)
        if kind == "tick":
            return self._backticks(t, j, e, final)
        if kind == "fence":
            run = t[j:e].lstrip(" -*+.)0123456789\t")
            self._opening, self._opening_ok = (run[0], len(run)), True
            self._opening_run = True
            return e
        if kind == "triple":
            self._block, self._triple = _Block.TRIPLE, t[j:e]
            return e
        # A reST literal block opens after this line: `text::` at its end, or a directive.
        head = self._line(t, j)[1]
        self._rst_next = min(len(head) - len(head.lstrip(" ")), len(_RST_END) - 1)
        return e

    def _opener_line(self, t: str, i: int, final: bool) -> int:
        """The rest of a line that starts with a fence run: a fence when its info string has no
        backtick. Nothing on it is judged."""
        assert self._opening is not None
        char, run = self._opening
        if self._opening_run:  # the fence run may have gone on past the last text
            more = len(t) - i - len(t[i:].lstrip(char)) if t[i : i + 1] == char else 0
            self._opening = (char, run + more)
            i += more
            if i == len(t) and not final:
                return len(t)
            self._opening_run = False
        newline = t.find("\n", i)
        if self._opening[0] == "`" and "`" in t[i : newline if newline >= 0 else len(t)]:
            self._opening_ok = False
        if newline < 0:
            return len(t)
        if self._opening_ok:
            self._block, self._fence = _Block.FENCE, self._opening[0] * self._opening[1]
        self._opening = None
        return newline + 1

    def _backticks(self, t: str, j: int, end: int, final: bool) -> int:
        """A run of backticks from `j` to `end` (plus `_ticks` of it before the text seen so
        far): it opens or closes an inline code span on its line once it has ended."""
        while end < len(t) and t[end] == "`":
            end += 1
        if end == len(t) and not final:  # the run may go on in the next delta
            self._ticks += end - j
            return end
        start = self._line(t, j)[0]
        run, self._ticks = self._ticks + end - j, 0
        if self._code is not None and self._code[0] == start:
            if self._code[1] == run:
                self._code = None
        else:
            self._code = (start, run)
        return end

    def _candidate(self, t: str, j: int, final: bool, at_start: bool) -> int:
        """Judge the place `j` where a marker may begin."""
        start, head = self._line(t, j)
        indent = len(head) - len(head.lstrip(" "))
        if (
            head[indent : indent + 1] in (">", "\t")
            or indent > 3
            or (self._code is not None and self._code[0] == start)
            or t[j - 1] in _QUOTES
        ):
            return j + 1
        at = self._abs(j)
        line_start = at_start or at - start == indent
        gap = at - self._after_closer
        after_closer = 0 <= gap <= 3 and not t[max(0, j - gap) : j].strip(" ")
        scope = Scope.START if line_start or after_closer else Scope.MID
        opened = self._opens(t, j, scope, final)
        if opened is None:
            return j + 1
        if opened == _UNDECIDED:  # from the line start: a finding there starts at the line start
            return self._stop(j - (at - start) if line_start else j, held=True)
        if opened == _WAITING:
            return self._stop(j, held=False)
        assert isinstance(opened, _Opened)
        spelling, name = opened.spelling, opened.name
        if spelling.kind is Kind.CLOSER:
            self._after_closer, self._closer_next = self._abs(opened.end), True
            if self._probe is not None and self._after_probe is None:
                self._after_probe = BlobProbe(self._tools, self._hold_limit)
                self._after_from = self._after_closer
            return opened.end
        if spelling.kind is Kind.HTML_CODE:
            self._block = _Block.HTML
            return opened.end
        if spelling.declared and name not in self._tools.names:
            return j + 1
        if spelling.after_closer and not after_closer:
            return j + 1
        if spelling.glued_to and not t[max(0, j - 5) : j].lower().endswith(spelling.glued_to):
            return j + 1
        self._found_marker(start if line_start else at, spelling.family)
        return len(t)

    def _opens(self, t: str, j: int, scope: Scope, final: bool) -> _Opened | str | None:
        """The spelling that opens at `j`, None when none can, or _UNDECIDED while one could."""
        end = min(len(t), j + MAX_HEAD)
        match: re.Match[str] | regex.Match[str] | None
        if final or end < len(t):  # the text that decides is all there
            match = (markers.AT_START if scope is Scope.START else markers.AT_MID).match(t, j, end)
        else:
            partial = markers.PARTIAL_AT_START if scope is Scope.START else markers.PARTIAL_AT_MID
            match = partial.match(t, j, end, partial=True)
            if match is not None and match.partial:
                calls = markers.PARTIAL_CALLS[scope].match(t, j, end, partial=True)
                return _UNDECIDED if calls is not None else _WAITING
            if match is not None:
                chosen = markers.spelling_index(match)
                for index in markers.IN_SCOPE[scope]:
                    if index >= chosen:
                        break
                    if markers.PARTIAL_EACH[index].match(t, j, end, partial=True) is not None:
                        return _UNDECIDED
        if match is None:
            return None
        spelling, name = markers.spelling_of(match)
        return _Opened(spelling, name, match.end())

    # ---- blocks whose text is only shown ---------------------------------------------------------

    def _in_fence(self, t: str, i: int, final: bool) -> int:
        while True:
            m = _FENCE_LINE.search(t, i)
            if m is None:
                return len(t)
            ended = m.end() > m.start() and t[m.end() - 1] == "\n"
            if not ended and not final:  # the last line may still close the fence
                return self._stop(m.start(), held=False)
            run = m.group(1) or ""
            if run[:1] == self._fence[0] and len(run) >= len(self._fence):
                self._block, self._fence = _Block.TEXT, ""
                return m.end()
            if not ended:
                return len(t)
            i = m.end()

    def _in_rst(self, t: str, i: int, final: bool) -> int:
        m = _RST_END[self._rst_indent].search(t, i)
        if m is not None:
            self._block = _Block.TEXT
            return m.start()
        last = t.rfind("\n") + 1
        if not final and last >= i and len(t) - last <= 64 and not t[last:].strip(" "):
            return self._stop(last, held=True)  # only spaces yet: the line may end the block
        return len(t)

    def _in_triple(self, t: str, i: int, final: bool) -> int:
        end = t.find(self._triple, i)
        if end >= 0:
            self._block = _Block.TEXT
            return end + 3
        quotes = len(t) - len(t.rstrip(self._triple[0]))
        if quotes and not final:
            return self._stop(len(t) - min(quotes, 2), held=False)
        return len(t)

    def _in_html(self, t: str, i: int, final: bool) -> int:
        m = _HTML_CLOSE.search(t, i)
        if m is not None:
            self._block = _Block.TEXT
            return m.end()
        lt = t.rfind("<", max(i, len(t) - 16))
        if lt >= 0 and not final:
            return self._stop(lt, held=False)
        return len(t)


def inspect_text(
    text: str, tools: ToolSet, *, blobs: bool = True, field: str = "content"
) -> Finding | None:
    """The whole-reply check: the same scanner, fed once and finished."""
    scanner = Scanner(tools, blobs=blobs, field=field)
    scanner.feed(text)
    scanner.finish()
    return scanner.finding
