"""The incremental scanner: feed text, get back what is safe to publish, and a finding.

Two detectors read the same characters:

* the markup judge (`judge`) finds where a marker begins outside the places where text is only
  shown, and holds the text from a place only while it could still become a marker;
* the blob probe (`blob`, content only) holds the whole reply while it could still be one JSON
  or pythonic tool-call blob.

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
from .judge import Judge
from .tools import ToolSet

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

    # The state a scanner starts in, as class attributes: one is built for every text field of
    # every choice, so its constructor sets only what differs.
    # Reasoning left in the content: after its first closer, the rest may be one blob.
    _after_probe: BlobProbe | None = None
    _after_from = -1
    _pending_len = 0
    _published = 0  # absolute offset of the first unpublished character
    _seen = 0  # absolute offset of the end of the input so far
    # The markup after a marker, kept for the finding's excerpt (`markup_limit`) and for repair
    # (`markup`, up to `hold_limit`); `_markup_seen` counts all of it.
    _markup_len = 0
    _markup_seen = 0
    _blob_markup: str | None = None
    _marker_family: str | None = None
    _marker_start = 0
    finding: Finding | None = None
    finished = False

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
        self._probe = BlobProbe(tools, hold_limit) if blobs and tools.names else None
        self._pending: list[str] = []  # received but not yet published
        self._judge = Judge(tools.names)
        self._markup: list[str] = []

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
        quiet = self._judge.feed(text)
        if quiet and self._clear():  # the common case
            self._published = self._seen
            return text
        self._pending.append(text)
        self._pending_len += len(text)
        fresh = self._after_probe is None
        if not quiet:
            self._take_verdicts()
        if self._marker_family is None:
            if self._probe is not None and self._probe.alive:
                self._probe.feed(text)
            if self._after_probe is not None and self._after_probe.alive:
                after = "".join(self._pending)[self._after_from - self._published :]
                self._after_probe.feed(after if fresh else text)
        return self._release()

    def feed_quiet(self, text: str) -> bool:
        """Take `text` only if `feed` would publish it whole at once and need no closer look
        (nothing held, no blob that may still open, nothing in it the judge must decide), and
        return True; else take nothing and return False. For a caller holding several deltas:
        they may be read as one text, since no verdict depends on how the text was cut."""
        if self.finished or self._marker_family is not None or not self._clear():
            return False
        if not self._judge.feed_quiet(text):
            return False
        self._seen += len(text)
        self._published = self._seen
        return True

    def _clear(self) -> bool:
        """Nothing is held, and no blob may still open: quiet text is published at once."""
        if self._pending:
            return False
        probe, rest = self._probe, self._after_probe
        return (probe is None or not probe.alive) and (rest is None or not rest.alive)

    def feed_quiet_run(self, texts: list[str]) -> int:
        """Take as many of `texts`, from the first, as `feed_quiet` takes read as one text, and
        return how many (0: none was taken)."""
        if len(texts) == 1:  # a paced stream's read: `_quiet` looks at it once
            return 1 if self.feed_quiet(texts[0]) else 0
        joined = "".join(texts)
        reach = self._judge.quiet_reach(joined)
        count = end = 0
        for text in texts:
            if end + len(text) > reach:
                break
            end += len(text)
            count += 1
        if count and self.feed_quiet(joined[:end]):
            return count
        return 0

    def finish(self) -> str:
        """End of the field: return the rest that may be published, and settle `finding`."""
        if self.finished:
            return ""
        self.finished = True
        if self._marker_family is None:
            self._judge.run(final=True)
            self._take_verdicts()
        if self._marker_family is not None:
            markup = "".join(self._markup)
            self._markup = [markup]
            family = markers.refine_family(self._marker_family, markup)
            name = markers.read_name(markup, self._tools.names)
            excerpt = markup[: self._markup_limit]
            self.finding = Finding(family, name, self._marker_start, self._field, excerpt)
            return self._release()
        self._judge.held = False
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

    def _safe(self) -> int:
        if self._probe is not None and self._probe.alive:
            return 0
        if self._marker_family is not None:
            return self._marker_start
        safe = self._judge.pos if self._judge.held else self._seen
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

    def _take_verdicts(self) -> None:
        """After the judge has read: a reasoning closer may start a blob, a marker a finding."""
        closer, marker = self._judge.first_closer, self._judge.marker
        if closer >= 0 and self._probe is not None and self._after_probe is None:
            self._after_probe = BlobProbe(self._tools, self._hold_limit)
            self._after_from = closer
        if marker is not None and self._marker_family is None:
            self._found_marker(*marker)

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

    def _keep_markup(self, text: str) -> None:
        self._markup_seen += len(text)
        room = max(self._markup_limit, self._hold_limit) - self._markup_len
        if room > 0:
            piece = text[:room]
            self._markup.append(piece)
            self._markup_len += len(piece)


# Where a blob may open: the blob probe's first characters after white space (`blob.BlobProbe`).
_BLOB_START = re.compile(r"[ \t\r\n]*[{\[`~]")


def may_find(text: str, tools: ToolSet, *, blobs: bool = True) -> bool:
    """Whether a finding can come of the whole text `text` at all. False when it holds none of
    the needles every marker and closer needs (`markers.NEEDLES`) and cannot start a blob: then
    a scanner fed it would publish it all and find nothing, and need not be built. For whole
    texts only: a stream's scanner must read every delta, for what it holds back."""
    if markers.has_needle(text):
        return True
    return blobs and _BLOB_START.match(text) is not None and bool(tools.names)


def inspect_text(
    text: str, tools: ToolSet, *, blobs: bool = True, field: str = "content"
) -> Finding | None:
    """The whole-reply check: the same scanner, fed once and finished."""
    if not may_find(text, tools, blobs=blobs):
        return None
    scanner = Scanner(tools, blobs=blobs, field=field)
    scanner.feed(text)
    scanner.finish()
    return scanner.finding
