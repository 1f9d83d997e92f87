"""Where something may happen in ordinary text, found by regular expressions, and which marker
of `markers` opens at such a place. The markup judge (`judge`) reads only from these places;
everything between them is published as is.

Most patterns are written so that every alternative starts with a literal character: `re`
then skips the characters that start none at C speed, which is what makes ordinary prose cost
about one scan.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import regex

from . import markers
from .markers import MAX_HEAD, Scope


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
    r"|(?P<start>^ {0,3}(?=[fA|｜‖\\]))",
    re.M,
)
_CHAR_EVENT = re.compile(
    _openers("") + r"|\\(?=" + _openers("") + ")"
    r"| (?:(?<=assistant )|(?<=commentary )|(?<=analysis )|(?<=final )"
    r"|(?<=[.!?>\n] )|(?<=[^\"]: ))"  # a colon after a JSON key's quote ends no sentence
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
    r"|<[^\n]?\Z|\[[^\n]?\Z|\][^\n]?\Z|◁[^\n]?\Z"  # a marker's first characters,
    r"|\\(?:[<\[\]◁][^\n]?)?\Z"  # escaped (where `_CHAR_EVENT` may find the escape)
    r"| (?:(?<=assistant )|(?<=commentary )|(?<=analysis )|(?<=final )"
    r"|(?<=[.!?>\n] )|(?<=[^\"]: ))"  # a colon after a JSON key's quote ends no sentence
    r"(?:" + _prefixes("to=functions.") + r")\Z"
    r"|f(?<!\wf)(?:" + _prefixes("unctools[") + r")\Z"
)
_WAITS_AT_END = frozenset(":\"'")  # the first characters of `_CHAR_AT_END`'s waiting kind
# How far before the end `_at_end` looks: from a last line's start when a directive may be
# forming there (`.. ` plus a name of up to 40 characters and `::`), else the partials after it
# (`::` with spaces, a recipient's ` to=functions`, `functools[`).
LINE_END_REACH = 64
PARTIAL_REACH = 16
# Where an event can begin, found at C speed before `window_event` looks closer: the characters that
# open markers, code spans and fences, and the literals of the rarer events. It looks from
# REACH characters before such a place (its line starts and look-behinds need that) to
# WINDOW after it.
# One search finds both. Every alternative starts with a literal character, so `re` skips the
# characters that start none at C speed; a recipient is found by its `=` (`t` is too common a
# first character), and begins two characters before it.
TRIGGER = re.compile(
    _openers(r"|\Z") + r"|\\(?=" + _openers(r"|\Z") + r"|\Z)|`|~"
    r"|=(?<=to=)functions\.|functools\[|Action:|function|DSM|\"\"\"|'''|::|\.\."
)
# A delta with none of these characters can begin no event on a line already past its start
# (`feed`'s fast path); the last two guard the tail partials of a recipient and `functools[`.
QUIET = re.compile(r"<|\[|\]|◁|`|\\|~|\n|:|=|'''|\"\"\"|'\Z|\"\Z")
# Every alternative of both starts with a literal character, so `re` skips the others at C speed.
# A recipient's space comes after its word or mark: one of those ending the text, with nothing
# after it, is no partial yet (the judge reads the next text together with it).
_RECIPIENT_AFTER = ("assistant", "commentary", "analysis", "final", r"\.", "!", r"\?", ">")
QUIET_TAIL = re.compile(
    "|".join(word + r"(?: [a-z=]{0,13}|[a-z=]{1,13})\Z" for word in _RECIPIENT_AFTER)
    + r"|f(?<!\wf)(?:"
    + _prefixes("unctools[")
    + r")\Z"
)
QUIET_TAIL_REACH = 24  # its longest match: `commentary`, a space and 13 letters
# A tail ending in none of these characters cannot match `QUIET_TAIL` (checked first).
QUIET_TAIL_ENDS = frozenset("abcdefghijklmnopqrstuvwxyz= .!?>[")
# How far into a line its start may still matter to an event at the end of the text: its
# indentation, a fence run after a list marker, `Action:`, `functions.`, `|DSML|` (directives
# are told by their leading `..`).
LINE_START_REACH = 20
LINE_OPENERS = frozenset("-*+0123456789`~.fA|｜‖\\\t<[]◁")
# A line that starts with one of these (after up to three spaces) stops mattering, before
# LINE_START_REACH, once its head can no longer be the start of what `LINE_HEAD[first]` matches
# (partially): a fence after a list marker, or a spelling at a line start that can begin with
# that character (so that each pattern is small).
LINE_HEAD_FIRSTS = "-*+0123456789fA|｜‖"


def _line_head(first: str) -> regex.Pattern[str]:
    spellings = [
        spelling.pattern.replace("(?P<n", f"(?P<s{i}n")
        for i, spelling in enumerate(markers.SPELLINGS)
        if i in markers.IN_SCOPE[Scope.START]
        and markers.PARTIAL_EACH[i].match(first, partial=True) is not None
    ]
    fence = r"(?:(?:[-*+]|\d{1,9}[.)])[ \t]{1,4})?(?:`{3,}|~{3,})"
    return regex.compile(r" {0,3}(?:" + "|".join([fence, *spellings]) + ")", regex.V0)


LINE_HEAD = {first: _line_head(first) for first in LINE_HEAD_FIRSTS}
REACH = 32
WINDOW = 96


Event = tuple[str, int, int]  # (kind, start, end) of an event in the text


def window_event(t: str, lo: int, hi: int) -> Event | None:
    """The first event in `t[lo:hi]`: a line event where a line starts, unless a character event
    begins before that line (at the same place, the line event wins). A run of backticks or
    tildes that reaches `hi` is read whole: its length decides whether it is a fence."""
    if 0 < hi < len(t) and t[hi - 1] in "`~":
        run = t[hi - 1]
        while hi < len(t) and t[hi] == run:
            hi += 1
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
        if m is not None and m.lastgroup != "wait":
            return m.lastgroup or "", m.start(), m.end()
        if m is not None:
            # A fence or directive may still form from the line's start: the line is published
            # meanwhile, unless a marker may form later in it too (`1. to=functions.`).
            char = _char_at_end(t, max(start, line))
            held = char is not None and char[0] != "wait"
            return ("hold" if held else "wait"), m.start(), m.end()
    return _char_at_end(t, max(start, line))


def _char_at_end(t: str, start: int) -> Event | None:
    c = _CHAR_AT_END.search(t, start)
    if c is None:
        return None
    if t[c.start()] not in _WAITS_AT_END:
        return "cand", c.start(), c.end()
    # `: ` at the end is also where a bare harmony recipient may begin (`: to=functions.`), which
    # the whole text finds from its space: that must be held, not only waited for. (Not after a
    # JSON key's `"`: a colon that ends a key is no sentence's end.)
    hold = t.endswith(": ") and t[-3:-2] != '"'
    return ("hold" if hold else "wait"), c.start(), c.end()


def at_end(t: str, i: int, bound: int) -> Event | None:
    """An event that may still form at the end of the text, beginning no later than
    `bound`: looked for from the start of a short last line (its start may matter), else in
    the last characters only."""
    n = len(t)
    newline = t.rfind("\n", max(i - 1, n - LINE_END_REACH))
    if newline >= 0 and (
        n - newline <= LINE_START_REACH + 1 or t[newline + 1 :].lstrip(" \t")[:1] == "."
    ):
        start = max(i, newline + 1)
    else:
        start = max(i, n - PARTIAL_REACH)
    if start > bound:
        return None
    end = end_event(t, start)
    return end if end is not None and end[1] <= bound else None


@dataclass(frozen=True)
class Opened:
    """A spelling that opens at some place: what it is, the name it captured, where it ends."""

    spelling: markers.Spelling
    name: str | None
    end: int


UNDECIDED = "undecided"  # a call may still open here: the text from here on is held
WAITING = "waiting"  # only a closer may still open here: read on later, publish meanwhile


def opens(t: str, j: int, scope: Scope, final: bool) -> Opened | str | None:
    """The spelling that opens at `j`, None when none can, or UNDECIDED while one could."""
    end = min(len(t), j + MAX_HEAD)
    alternations = markers.alternations_at(scope, t, j, end)
    match: re.Match[str] | regex.Match[str] | None
    if final or end < len(t):  # the text that decides is all there
        match = alternations.whole.match(t, j, end)
    else:
        match = alternations.partial.match(t, j, end, partial=True)
        if match is not None and match.partial:
            calls = alternations.calls.match(t, j, end, partial=True)
            return UNDECIDED if calls is not None else WAITING
        if match is not None:
            chosen = markers.spelling_index(match)
            for index in alternations.order:
                if index >= chosen:
                    break
                if markers.PARTIAL_EACH[index].match(t, j, end, partial=True) is not None:
                    return UNDECIDED
    if match is None:
        return None
    spelling, name = markers.spelling_of(match)
    return Opened(spelling, name, match.end())
