"""The blocks whose text is only shown: Markdown fences, reST literal blocks, Python
triple-quoted strings and HTML `<pre>`/`<code>`. Nothing inside one is judged; `BlockReader`
finds where each ends. The markup judge (`judge.Judge`) is one, and says where each opens.
"""

from __future__ import annotations

import re
from enum import Enum

# Inside a fence: a line that may close it (or a blank one, or the unfinished last line).
_FENCE_LINE = re.compile(r"^[ \t]{0,64}(?:([`~]{1,64})[ \t]{0,64}\r?)?(?:\n|\Z)", re.M)
# Inside a reST literal block of indentation K: the first line that ends it.
_RST_END = tuple(re.compile(rf"^ {{0,{k}}}[^ \t\r\n]", re.M) for k in range(33))
MAX_RST_INDENT = len(_RST_END) - 1
_HTML_CLOSE = re.compile(r"</(?:pre|code)[ \t]{0,8}>", re.I)


class Block(Enum):
    TEXT = "text"
    FENCE = "fence"
    RST = "rst"
    TRIPLE = "triple"
    HTML = "html"


class BlockReader:
    """The reading position's block, and how to read on inside it. A reader returns the index
    to read on from, or `_stop`'s code for the place where the undecided text starts."""

    # The state a reader starts in, as class attributes (one is built for every text field).
    held = False  # the undecided text could still open a marker
    _block = Block.TEXT
    _fence = ""  # the opening fence run, inside a fence
    _opening: tuple[str, int] | None = None  # a fence opener line being read
    _opening_ok = True
    _opening_run = False  # its run of fence characters may still go on
    _rst_indent = 0
    _triple = ""

    def _stop(self, at: int, held: bool) -> int:
        self.held = held
        return -at - 2

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
            self._block, self._fence = Block.FENCE, self._opening[0] * self._opening[1]
        self._opening = None
        return newline + 1

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
                self._block, self._fence = Block.TEXT, ""
                return m.end()
            if not ended:
                return len(t)
            i = m.end()

    def _in_rst(self, t: str, i: int, final: bool) -> int:
        m = _RST_END[self._rst_indent].search(t, i)
        if m is not None:
            self._block = Block.TEXT
            return m.start()
        last = t.rfind("\n") + 1
        if not final and last >= i and len(t) - last <= 64 and not t[last:].strip(" "):
            return self._stop(last, held=True)  # only spaces yet: the line may end the block
        return len(t)

    def _in_triple(self, t: str, i: int, final: bool) -> int:
        end = t.find(self._triple, i)
        if end >= 0:
            self._block = Block.TEXT
            return end + 3
        quotes = len(t) - len(t.rstrip(self._triple[0]))
        if quotes and not final:
            return self._stop(max(i, len(t) - min(quotes, 2)), held=False)
        return len(t)

    def _in_html(self, t: str, i: int, final: bool) -> int:
        m = _HTML_CLOSE.search(t, i)
        if m is not None:
            self._block = Block.TEXT
            return m.end()
        lt = t.rfind("<", max(i, len(t) - 16))
        if lt >= 0 and not final:
            return self._stop(lt, held=False)
        return len(t)
