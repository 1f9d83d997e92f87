"""The incremental scanner: feed text, get back what is safe to publish, and a finding.

Two detectors read the same characters once each:

* the line judge looks at the head of every line outside a Markdown fence (after at most three
  spaces of indentation) and holds that head only while it could still spell a marker;
* the blob probe (content only) holds the whole reply while it could still be one JSON or
  pythonic tool-call blob.

What is published is the input up to the lower of the two safe offsets, so the published text of
a reply with no finding is the input exactly, and a reply with a finding publishes exactly the
text before its markup. Every verdict depends only on the characters seen, never on how they were
cut into deltas; feeding the whole text at once is the whole-reply check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import markers
from .blob import BlobProbe, classify
from .markers import FOUND, HOLD, MARKER_FIRST_CHARS
from .tools import ToolSet

_LINE_CAP = 256  # of a line we keep only its head: enough for fences and markers
# A line that may matter: a marker's first character after up to three spaces, or a fence
# character (after any indentation, or after a list-item marker).
_INTERESTING = re.compile(
    "^(?: {0,3}["
    + re.escape("".join(sorted(MARKER_FIRST_CHARS)))
    + r"]|[ \t]*[`~]| {0,3}(?:[-*+]|\d{1,9}[.)])[ \t]+[`~])",
    re.M,
)
_FENCE_OPEN = re.compile(r" {0,3}(?:(?:[-*+]|\d{1,9}[.)])[ \t]+)?(`{3,}|~{3,})(.*)")
DEFAULT_HOLD_LIMIT = 256 * 1024
DEFAULT_MARKUP_LIMIT = 64 * 1024


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
        self._probe = BlobProbe(tools, hold_limit) if blobs else None
        self._pending: list[str] = []  # received but not yet published
        self._pending_len = 0
        self._published = 0  # absolute offset of the first unpublished character
        self._seen = 0  # absolute offset of the end of the input so far
        self._line = ""  # head of the current line (at most _LINE_CAP characters)
        self._line_start = 0
        self._judging = True  # the current line's head is still being judged
        self._fence = ""  # the opening fence run ("```", "~~~~") while inside one
        self._markup: list[str] = []
        self._markup_len = 0
        self._marker_family: str | None = None
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

    def feed(self, text: str) -> str:
        """Take the next delta; return the text that may be published now."""
        if not text:
            return ""
        if self.finished:
            raise RuntimeError("feed() after finish()")
        base = self._seen
        self._seen += len(text)
        if self._marker_family is not None:
            self._keep_markup(text)
            return ""
        self._pending.append(text)
        self._pending_len += len(text)
        self._scan_lines(text, base)
        if self._probe is not None and self._probe.alive and self._marker_family is None:
            self._probe.feed(text)
        return self._release()

    def finish(self) -> str:
        """End of the field: return the rest that may be published, and settle `finding`."""
        if self.finished:
            return ""
        self.finished = True
        if self._marker_family is not None:
            markup = "".join(self._markup)
            family = markers.refine_family(self._marker_family, markup)
            name = markers.read_name(markup, self._tools.names)
            self.finding = Finding(family, name, self._line_start, self._field, markup)
            return self._release()
        if self._probe is not None and self._probe.alive:
            whole = "".join(self._pending)
            verdict = classify(whole, self._tools)
            if verdict is not None:
                excerpt = whole[: self._markup_limit]
                self.finding = Finding(verdict[0], verdict[1], 0, self._field, excerpt)
                return ""
            self._probe.alive = False
        self._judging = False
        return self._release()

    def _safe(self) -> int:
        if self._probe is not None and self._probe.alive:
            return 0
        if self._marker_family is not None or self._judging:
            return self._line_start
        return self._seen

    def _release(self) -> str:
        safe = self._safe()
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

    def _scan_lines(self, text: str, base: int) -> None:
        """Judge line heads. Lines that start with neither a marker's first character nor a
        fence character can neither open a marker nor change the fence state, so complete
        lines in between are skipped by one regular-expression scan."""
        first = text.find("\n")
        room = _LINE_CAP - len(self._line)
        if room > 0:  # the current line goes on
            self._line += text[: min(room, len(text) if first < 0 else first)]
        if self._judging and self._judge(line_complete=first >= 0):
            self._found_marker()
            return
        if first < 0:
            return
        self._end_line()
        last = text.rfind("\n")
        for match in _INTERESTING.finditer(text, first + 1, last + 1):
            start = match.start()
            stop = text.find("\n", start)
            self._line = text[start : min(stop, start + _LINE_CAP)]
            self._line_start, self._judging = base + start, True
            if self._judge(line_complete=True):
                self._found_marker()
                return
            self._end_line()
        self._line = text[last + 1 : last + 1 + _LINE_CAP]
        self._line_start, self._judging = base + last + 1, True
        if self._judge(line_complete=False):
            self._found_marker()

    def _found_marker(self) -> None:
        # Provisional until finish() reads the family and name from the whole markup.
        family = self._marker_family or "unknown"
        if self._probe is not None:
            self._probe.alive = False  # markup decides; the text before it is prose
        self.finding = Finding(family, None, self._line_start, self._field)
        joined = "".join(self._pending)
        self._keep_markup(joined[self._line_start - self._published :])
        self._pending_len = self._line_start - self._published
        self._pending = [joined[: self._pending_len]]

    def _judge(self, line_complete: bool) -> bool:
        """Judge the current line head; True when it opens a marker."""
        line = self._line
        if self._fence:
            self._judging = False
            return False
        indent = len(line) - len(line.lstrip(" "))
        if indent > 3 or indent == len(line):
            # Four spaces make an indented code block: never a marker. Up to three spaces may
            # still be followed by one, so hold them while the line goes on.
            self._judging = indent == len(line) <= 3 and not line_complete
            return False
        head = line[indent:]
        if head[:1] not in MARKER_FIRST_CHARS:
            self._judging = False
            return False
        verdict, family = markers.judge_head(head, line_complete or len(line) >= _LINE_CAP)
        if verdict == FOUND:
            self._marker_family = family
            return True
        self._judging = verdict == HOLD
        return False

    def _end_line(self) -> None:
        """Track Markdown fences: ``` or ~~~ runs opening after up to three spaces (or after a
        list-item marker), closing at any indentation."""
        line = self._line
        if self._fence:
            stripped = line.lstrip(" \t")
            run = len(stripped) - len(stripped.lstrip(self._fence[0]))
            if run >= len(self._fence) and not stripped[run:].strip() and len(line) < _LINE_CAP:
                self._fence = ""
            return
        opener = _FENCE_OPEN.match(line)
        if opener is not None:
            fence_run, info = opener.group(1), opener.group(2)
            if not (fence_run[0] == "`" and "`" in info):  # else inline code, not a fence
                self._fence = fence_run

    def _keep_markup(self, text: str) -> None:
        room = self._markup_limit - self._markup_len
        if room > 0:
            piece = text[:room]
            self._markup.append(piece)
            self._markup_len += len(piece)


def inspect_text(
    text: str, tools: ToolSet, *, blobs: bool = True, field: str = "content"
) -> Finding | None:
    """The whole-reply check: the same scanner, fed once and finished."""
    scanner = Scanner(tools, blobs=blobs, field=field)
    scanner.feed(text)
    scanner.finish()
    return scanner.finding
