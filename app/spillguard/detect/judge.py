"""The markup judge: where in a text a marker of `markers` begins, outside what is only shown.

It finds the places where a marker could begin (an opening character of a spelling, mid-line or
at a line start) outside the places where text is only shown (Markdown fences, indented code,
`>` quotes, inline code spans, reST literal blocks, Python triple-quoted strings, HTML
`<pre>`/`<code>`, a marker wrapped in quotation marks), and holds the text from such a place only
while it could still become a marker. Its verdicts depend only on the characters seen, never on
how they were cut.

It keeps only the text it has not decided yet (`tail`, after a few characters of context) and
the head of the current line; regular expressions (`events`) skip the rest, so each character is
read a bounded number of times.
"""

from __future__ import annotations

from .blocks import MAX_RST_INDENT, Block, BlockReader
from .events import (
    LINE_HEAD,
    LINE_OPENERS,
    LINE_START_REACH,
    QUIET,
    QUIET_TAIL,
    QUIET_TAIL_ENDS,
    QUIET_TAIL_REACH,
    REACH,
    TRIGGER,
    UNDECIDED,
    WAITING,
    WINDOW,
    Opened,
    at_end,
    opens,
    window_event,
)
from .markers import Kind, Scope

# Whether an inline code span is read at once (`_span_close`), and a backtick run mid-line
# without looking around it; the same verdicts as event by event (tests read both ways).
SKIM = True
_LINE_CAP = 256  # of a line only its head is kept: enough for indentation, quotes and fences
_CONTEXT = 16  # characters kept before the undecided text: line starts, quotes, glued words
_TAIL_WORD = 10  # of a partial QUIET_TAIL finds, this much may come before the text: `commentary`
_QUOTES = frozenset("\"'`“‘«„「『")
_SENTENCE_END = frozenset(".!?…")


def _quoted(t: str, j: int) -> bool:
    """The marker at `j` follows a quotation mark that opens a quote. One that ends a sentence's
    quote closes it instead (`…for "boots."<marker>`), as does German `“` or `‘` after a word
    (`„Wetter“<marker>`): a marker glued to those is not quoted."""
    mark = t[j - 1]
    if mark not in _QUOTES:
        return False
    before = t[j - 2 : j - 1]
    if mark in "\"'“‘" and before in _SENTENCE_END:
        return False
    return not (mark in "“‘" and before.isalnum() and before < "\u0250")  # a Latin word


def _span_close(t: str, at: int, run: int) -> int:
    """Where the inline code span opened by a run of `run` backticks ending at `at` closes,
    when the rest of its line in `t` holds its closing run (a run as long, which a character
    other than a backtick follows) and nothing that would change the judge's state in between
    (triple quotes open a block even in a span); else -1. Every other event inside a span is
    judged in it, which leaves the state as it was: so the span is skipped whole, with the
    same verdicts as read event by event, at the cost of a few searches instead of an event's
    for each backtick run and each opening character inside it. (Not on a line that opens a
    reST literal block: `_backticks` reads those event by event.)"""
    n, lo = len(t), at
    k = t.find("`", at)
    while k >= 0 and t.find("\n", lo, k) < 0:
        e = k + 1
        while e < n and t[e] == "`":
            e += 1
        if e - k == run:
            if e == n or t.find('"""', at, k) >= 0 or t.find("'''", at, k) >= 0:
                return -1
            return e
        lo, k = e, t.find("`", e)
    return -1


class Judge(BlockReader):
    """Reads one field's text as it arrives. `pos` is the absolute offset where the undecided
    text starts (`held`: it could still open a marker); `marker` is (start, family) once one has
    opened, after which nothing more is read; `first_closer` is where the text after the first
    reasoning closer starts (-1 before one)."""

    # The state a judge starts in, as class attributes (one is built for every text field).
    tail = "\n"  # context, then the undecided text; the text starts at a line start
    _ctx = 1
    pos = 0
    marker: tuple[int, str] | None = None
    first_closer = -1
    _line_start = 0  # where the line holding `pos` starts
    _head = ""  # its first _LINE_CAP characters seen so far
    _ticks = 0  # a backtick run still going on at the end of the text seen
    # Within one `run`: where the next trigger occurs, and how far the search for the current
    # line's start has gone.
    _next = -1
    _scanned = 0
    _line_rel = -1
    _rst_next = -1  # the line ending now opens a reST literal block this indented
    _code: tuple[int, int] | None = None  # (line start, backtick run) of a code span
    _after_closer = -1  # where the text after a reasoning closer starts
    _closer_next = False  # the text right after a closer is still to be judged
    _calm = False  # known calm (`_calmed`) since the last `run`
    _tail_clear = False  # the last text was quiet: the tail ends in no partial of QUIET_TAIL

    def __init__(self, tool_names: frozenset[str]) -> None:
        self._names = tool_names

    def feed(self, text: str) -> bool:
        """Read the next text; True when it was quiet: nothing in it needed a closer look."""
        if self.feed_quiet(text):
            return True
        self.tail += text
        self.run(final=False)
        return False

    def quiet_reach(self, text: str) -> int:
        """How much of `text`, from its start, `_quiet` could find quiet at most: up to the
        first character it would look at closer."""
        if self._block is Block.FENCE:
            found = [i for i in (text.find("\n"), text.find("`"), text.find("~")) if i >= 0]
            return min(found, default=len(text))
        match = QUIET.search(text)
        return len(text) if match is None else match.start()

    def feed_quiet(self, text: str) -> bool:
        """Read `text` if it is quiet, and return True; else leave it unread (the judge's state
        as it was, but for what `_quiet` learned of it) and return False."""
        if not text:  # nothing to read: `_quiet` would take the tail's end for the text's
            return True
        tail = self.tail + text
        if not self._quiet(text, tail):
            return False
        self.pos += len(text)
        if len(self._head) < _LINE_CAP:
            self._head += text[: _LINE_CAP - len(self._head)]
        self.tail = tail[-_CONTEXT:]
        self._ctx = len(self.tail)
        return True

    def _line_settled(self) -> bool:
        """The current line's start can no longer matter to an event at the end of the text:
        it is far enough behind, its first character opens nothing a line start can, or its
        head can no longer become what does."""
        first = self._head.lstrip(" ")[:1]
        if first == ".":  # a reST directive names itself late
            return False
        if self.pos - self._line_start >= LINE_START_REACH:
            return True
        head = LINE_HEAD.get(first)
        if head is not None:
            return head.match(self._head, partial=True) is None
        return first != "" and first not in LINE_OPENERS

    def _quiet(self, text: str, tail: str) -> bool:
        """Nothing in `text` can begin an event or finish one the judge is waiting on: the
        judge has nothing undecided, is in plain text well into a line or in a fence (`_calm`),
        and `text` has none of the characters any event needs there (nor does `tail`, the
        context and `text`, end in a partial recipient or `functools[`)."""
        if not self._calm and not self._calmed():
            return False
        if self._block is Block.FENCE:  # only a line that closes the fence matters there
            return "\n" not in text and "`" not in text and "~" not in text
        # After a quiet text the tail is known to end in no partial, so one can only begin in
        # this text or in the word or mark of QUIET_TAIL that ends the tail before it.
        reach = len(text) + _TAIL_WORD if self._tail_clear else QUIET_TAIL_REACH
        self._tail_clear = QUIET.search(text) is None and (
            text[-1:] not in QUIET_TAIL_ENDS
            or QUIET_TAIL.search(tail, max(0, len(tail) - reach)) is None
        )
        return self._tail_clear

    def _calmed(self) -> bool:
        """Whether the judge is calm: nothing undecided, in plain text with its line settled or
        in a fence. A quiet text keeps it so, and once the line's first character is seen its
        being settled stays true for the rest of the line, so it is remembered until the next
        `run`."""
        if self._block is Block.FENCE:  # a line with more than blanks cannot close a fence
            self._calm = self._ctx == len(self.tail) and self._head.strip(" \t") != ""
            return self._calm
        calm = (
            self._ctx == len(self.tail)
            and self._block is Block.TEXT
            and not (self._opening or self._ticks or self._closer_next or self._rst_next >= 0)
            and self._line_settled()
        )
        self._calm = calm and self._head.lstrip(" ") != ""
        return calm

    def run(self, final: bool) -> None:
        """Read the undecided text as far as it can be decided; keep the rest for later."""
        t, i = self.tail, self._ctx
        self.held = False
        self._calm = self._tail_clear = False
        self._next, self._scanned, self._line_rel = -1, i, -1
        while i < len(t):
            if self._block is Block.TEXT:
                i = self._text(t, i, final)
            elif self._block is Block.FENCE:
                i = self._in_fence(t, i, final)
            elif self._block is Block.RST:
                i = self._in_rst(t, i, final)
            elif self._block is Block.TRIPLE:
                i = self._in_triple(t, i, final)
            else:
                i = self._in_html(t, i, final)
            if self.marker is not None:
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
            self._line_start = self.pos + newline + 1
            self._head = done[newline + 1 : newline + 1 + _LINE_CAP]
        elif len(self._head) < _LINE_CAP:
            self._head += done[: _LINE_CAP - len(self._head)]
        self.pos += len(done)
        context = t[max(0, i - _CONTEXT) : i]
        self.tail, self._ctx = context + t[i:], len(context)

    def _abs(self, i: int) -> int:
        return self.pos + i - self._ctx

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
            m = TRIGGER.search(t, i)
            while m is not None and t[m.start()] == "=" and m.start() - 2 < i:
                m = TRIGGER.search(t, m.start() + 1)  # a recipient begun before `i`
            at = len(t) if m is None else m.start() - (2 if t[m.start()] == "=" else 0)
            self._next = at
        return at

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
                self._closer_next = after < 0 and self.held  # still undecided
                return after
            self._closer_next = False
        if self._ticks:
            return self._backticks(t, i, i, final)
        n = len(t)
        first = self._next_event(t, i)
        if SKIM and i > 0 and first <= n - 3 and t[first] == "`" and t.find("\n", i - 1, first) < 0:
            # A backtick run on the line `i` is in, the text going on past it: the event
            # `window_event` and `at_end` would find (every character event but a recipient
            # starts where `TRIGGER` finds it, a recipient just before, no line event can start
            # before the run, and none at the end of the text can include it).
            return self._backticks(t, first, first + 1, final)
        event = None
        if first < n:
            event = window_event(t, max(i, first - REACH), min(n, first + WINDOW))
        if not final:
            # Only when nothing may begin before it: an empty window says nothing past itself.
            bound = event[1] if event is not None else first if first < n else n
            end = at_end(t, i, bound)
            if end is not None:
                event = end
        newline = t.find("\n", i) if self._rst_next >= 0 else -1
        if newline >= 0 and (event is None or event[1] > newline):
            self._block, self._rst_indent, self._rst_next = Block.RST, self._rst_next, -1
            return newline + 1
        if event is None:  # nothing began at that place: look on from just after it
            return n if first >= n else first + 1
        kind, j, e = event
        if kind == "cand":
            return self._candidate(t, j, final, at_start=False)
        if kind == "start":
            return self._candidate(t, e, final, at_start=True)
        if kind in ("indent", "hold"):
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
            self._block, self._triple = Block.TRIPLE, t[j:e]
            return e
        # A reST literal block opens after this line: `text::` at its end, or a directive.
        head = self._line(t, j)[1]
        self._rst_next = min(len(head) - len(head.lstrip(" ")), MAX_RST_INDENT)
        return e

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
        code = self._code
        if code is not None and code[0] == start:
            if code[1] == run:
                self._code = None
            return end
        # Not on a line that opens a reST literal block: there, a stretch of the line with no
        # event sends the judge into the block at the line's end, which a skip would pass over.
        close = _span_close(t, end, run) if SKIM and self._rst_next < 0 else -1
        if close < 0:
            self._code = (start, run)
            return end
        self._code = None  # as the span's own closing run leaves it, read event by event
        return close

    def _candidate(self, t: str, j: int, final: bool, at_start: bool) -> int:
        """Judge the place `j` where a marker may begin."""
        start, head = self._line(t, j)
        indent = len(head) - len(head.lstrip(" "))
        if (
            head[indent : indent + 1] in (">", "\t")
            or indent > 3
            or (self._code is not None and self._code[0] == start)
            or _quoted(t, j)
        ):
            return j + 1
        at = self._abs(j)
        line_start = at_start or at - start == indent
        gap = at - self._after_closer
        after_closer = 0 <= gap <= 3 and not t[max(0, j - gap) : j].strip(" ")
        scope = Scope.START if line_start or after_closer else Scope.MID
        opened = opens(t, j, scope, final)
        if opened is None:
            return j + 1
        if opened == UNDECIDED:  # from the line start: a finding there starts at the line start
            return self._stop(j - (at - start) if line_start else j, held=True)
        if opened == WAITING:
            return self._stop(j, held=False)
        assert isinstance(opened, Opened)
        spelling, name = opened.spelling, opened.name
        if spelling.kind is Kind.CLOSER:
            self._after_closer, self._closer_next = self._abs(opened.end), True
            if self.first_closer < 0:
                self.first_closer = self._after_closer
            return opened.end
        if spelling.kind is Kind.HTML_CODE:
            self._block = Block.HTML
            return opened.end
        if spelling.declared and name not in self._names:
            return j + 1
        if spelling.after_closer and not after_closer:
            return j + 1
        if spelling.glued_to and not t[max(0, j - 5) : j].lower().endswith(spelling.glued_to):
            return j + 1
        self.marker, self.tail = (start if line_start else at, spelling.family), ""
        return len(t)
