"""The spellings that open a leaked tool call, where each may stand, and how to read a name.

Each `Spelling` is a drift-tolerant pattern (fullwidth, ASCII, doubled or `‖` bars; `▁`, `_` or
a space between words; Markdown backslash escapes) with a scope:

* DISTINCTIVE special tokens (DeepSeek's, DSML, Kimi's, Gemma's `<|tool_call>`, harmony's
  `<|channel|>commentary` and ` to=functions.`, `[TOOL_CALLS]`, MiniMax, xAI, ...) count
  anywhere in a line: real documentation puts them in backticks, fences or quotes, and chat
  templates glue them to the answer's last sentence.
* GENERIC tags that ordinary text and code use too (`<tool_call>`, `<function=`, `<invoke`,
  `<tools>`, `<|python_tag|>`, `functools[`, ...) count at the start of a line, and mid-line
  only when a well-formed call body naming a DECLARED tool follows them.
* Reasoning closers (`</think>`, `[/THINK]`, ...) are no call; what follows one is judged as the
  start of a line. `<pre>`/`<code>` open HTML code, which is never judged.

Some spellings carry a body that must follow (harmony's channel must be `commentary` or carry a
recipient; `<|channel|>final<|message|>` is leaked framing, not a call). The scanner matches
these patterns with partial matching, so a stream holds exactly the tail that could still
become one and releases it at the first character that rules it out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

import regex

# The most raw text one judgment reads: every pattern below matches less than this.
MAX_HEAD = 512
NAME_WINDOW = 4096

BAR = r"(?:\\?[|｜‖]){1,2}"  # | or ｜ or ‖, doubled, or Markdown-escaped
SEP = r"\\?[_▁ ]"  # between words: _ or ▁ or a space, maybe escaped
NAME = r"[A-Za-z_][\w.\-]{0,127}"
QNAME = r'[^"<>\n]{1,128}'  # a quoted name; may hold spaces
JSON_NAME = r'\s{0,24}\{\s{0,24}"(?:name|function)"\s{0,8}:\s{0,8}"(?P<%s>[^"\n]{1,128})"'
# The same object with its arguments first: `{"arguments": {...}, "name": "x"}`.
JSON_NAME_LAST = (
    r'\s{0,24}\{\s{0,24}"arguments"\s{0,8}:[^\n]{0,300}?'
    r'"name"\s{0,8}:\s{0,8}"(?P<%s>[^"\n]{1,128})"'
)
RECIPIENT = r"[a-z]{1,20} to=functions\."


def tok(*words: str) -> str:
    """A bar-framed special token such as <｜tool▁calls▁begin｜>."""
    return "<" + BAR + SEP.join(words) + BAR + ">"


class Kind(Enum):
    CALL = "call"
    CLOSER = "closer"  # reasoning ends here: a new line starts for the judge
    HTML_CODE = "html_code"  # <pre> or <code>: never judged until closed


class Scope(Enum):
    ANYWHERE = "anywhere"
    START = "start"  # at a line start (up to three spaces in), or right after a closer
    MID = "mid"  # anywhere but a line start


@dataclass(frozen=True)
class Spelling:
    family: str
    pattern: str  # a regular expression; named groups n0, n1, ... capture tool names
    scope: Scope = Scope.ANYWHERE
    declared: bool = False  # a captured name must be one the request declared
    glued_to: tuple[str, ...] = ()  # mid-line only right after one of these words
    after_closer: bool = False  # only right after a reasoning closer
    kind: Kind = Kind.CALL


def _names(pattern: str, count: int) -> str:
    return pattern % tuple(f"n{i}" for i in range(count))


S, A, M = Scope.START, Scope.ANYWHERE, Scope.MID
SPELLINGS: tuple[Spelling, ...] = (
    # ---- distinctive special tokens: anywhere ----------------------------------------------
    Spelling("deepseek", tok("tool", "calls", "begin")),
    Spelling("deepseek", tok("tool", "call", "begin")),  # also Kimi's inner opener: refined
    Spelling("kimi", tok("tool", "calls?", "section", "begin")),
    Spelling("kimi", tok("tool", "call", "argument", "begin")),  # the section opener lost
    Spelling("dsml", "<" + BAR + r"DSML?" + BAR),
    Spelling("dsml", "</" + BAR + r"DSML?" + BAR, S),  # closing tags left by a dropped opener
    Spelling("dsml", BAR + r"DSML?" + BAR + r"(?:invoke|parameter|function|tool|calls)", S),
    Spelling("gemma", "<" + BAR + "tool" + SEP + "call>"),
    Spelling("granite", tok("tool", "call")),
    Spelling("lfm2", tok("tool", "call", "start")),
    Spelling("harmony", "<" + BAR + "channel" + BAR + ">(?:commentary|" + RECIPIENT + ")"),
    Spelling(
        "harmony",
        "<"
        + BAR
        + "start"
        + BAR
        + ">assistant(?: to=functions\\.|<"
        + BAR
        + "channel"
        + BAR
        + ">(?:commentary|"
        + RECIPIENT
        + "))",
    ),
    # A bare recipient (the tokens around it lost). The scanner looks for it only right after
    # harmony's own words (`assistant`, `commentary`, `analysis`, `final`), after the end of a
    # sentence or a token, or at a line start: a space after any other word is never held.
    Spelling("harmony", r" to=functions\.[A-Za-z_]"),
    Spelling("mistral", r"\\?\[TOOL" + SEP + r"CALLS\\?\]", S),
    Spelling(
        "mistral",
        r"\\?\[TOOL" + SEP + r"CALLS\\?\][ \t]{0,4}(?:[\[{]|[A-Za-z_\\][\w.\-\\]{0,127}"
        r"[ \t]{0,4}(?:\\?\[CALL" + SEP + r"ID\\?\][^\[\]\n]{0,64})?"
        r"(?:\\?\[ARGS\\?\][ \t]{0,4})?\{)",  # the arguments: a JSON object, not prose
        M,
    ),
    Spelling("pythonic", tok("python", "start")),  # Llama 4's wrapper of the pythonic list
    Spelling("gigachat", tok("function", "call")),
    Spelling("gigachat", tok("message", "sep") + r"\s{0,4}function[ _]call<" + BAR + "role" + SEP),
    Spelling("gigachat", "function[ _]call<" + BAR + "role" + SEP + "sep" + BAR + ">", S),
    Spelling("apertus", tok("tools", "prefix")),
    Spelling("command_r", tok("START", "ACTION")),
    Spelling("internlm", tok("action", "start") + tok("plugin")),
    Spelling("internlm", tok("action", "start"), S),
    Spelling("minimax", r"\]<\]minimax\[>\["),
    Spelling("minimax", "<minimax:tool" + SEP + "call>"),
    Spelling("xai", "<xai:function" + SEP + "call"),
    Spelling("seed", "<seed:tool" + SEP + "call>"),
    Spelling("longcat", "<longcat" + SEP + "tool" + SEP + "call>"),
    Spelling("dots", "<dots" + SEP + "function" + SEP + "call>"),
    Spelling("k2_horizon", "<ifm" + BAR + "tool" + SEP + "calls?>"),
    Spelling("function_gemma", "<start" + SEP + "function" + SEP + "call>"),
    Spelling("kimi_k3", "<" + BAR + "open" + BAR + ">(?:tools<" + BAR + "sep|call tool=)"),
    # ---- generic tags: at a line start, or mid-line before a declared call body ------------
    Spelling("hermes", "<tool" + SEP + "call>", S),
    Spelling(
        "hermes",
        _names(
            "<tool_call>(?:"
            + JSON_NAME
            + "|"
            + JSON_NAME_LAST
            + r'|\s{0,8}<function="?(?P<%s>[^">\n]{1,128})"?>'
            r"|\s{0,8}(?P<%s>" + NAME + r")\s{0,8}(?:<arg_key>|</tool_call>))",
            4,
        ),
        M,
        declared=True,
    ),
    Spelling("deepseek", r"<tool_call\s{1,4}(?:id|name)=", S),
    Spelling(
        "deepseek",
        _names(r'<tool_call\s{1,4}[^>\n]{0,160}?name="(?P<%s>' + QNAME + ')"', 1),
        M,
        declared=True,
    ),
    Spelling("qwen3_coder", "<function=", S),
    Spelling("qwen3_coder", _names(r'<function="?(?P<%s>[^">\n]{1,128})"?>', 1), M, declared=True),
    Spelling(
        "minicpm",
        _names(
            r'<function\s{1,4}name="(?P<%s>' + QNAME + r')"\s{0,4}>\s{0,8}'
            r"(?:<param\s{1,4}name=|</function>)",  # a call, not a definition's <description>
            1,
        ),
        A,
        declared=True,
    ),
    Spelling(
        "claude_xml", _names(r'<invoke\s{1,4}name="(?P<%s>' + QNAME + ')"', 1), S, declared=True
    ),
    Spelling(
        "claude_xml",
        _names(
            r'<invoke\s{1,4}name="(?P<%s>' + QNAME + r')"\s{0,4}>\s{0,8}'
            r'(?:<parameter\s{1,4}name="|</invoke>)',
            1,
        ),
        M,
        declared=True,
    ),
    Spelling(
        "claude_xml",
        _names(r'<invoke\s{1,4}name="(?P<%s>' + QNAME + ')"', 1),
        M,
        declared=True,
        glued_to=("count", "call", "court"),
    ),
    Spelling(
        "olmo",  # refined to claude_xml when an <invoke> follows
        _names(
            r'<function_calls>\s{0,8}(?:<invoke\s{1,4}name="(?P<%s>'
            + QNAME
            + r')"|(?P<%s>'
            + NAME
            + r")\()",
            2,
        ),
        A,
        declared=True,
    ),
    Spelling("granite_fc", _names("<function_call>" + JSON_NAME, 1), A, declared=True),
    Spelling("qwen_tools", _names("<tools>" + JSON_NAME, 1), A, declared=True),
    Spelling("llama", tok("python", "tag"), S),
    Spelling("llama", _names(tok("python", "tag") + JSON_NAME, 1), M, declared=True),
    Spelling("functools", r"functools\[", S),
    Spelling("functools", _names(r"functools\[" + JSON_NAME, 1), M, declared=True),
    Spelling(
        "kimi",  # both openers lost: the call id starts the markup
        r"(?:functions\.)?" + NAME + r":\d{1,4}" + tok("tool", "call", "argument", "begin"),
        S,
    ),
    Spelling(
        "hermes",  # the opener lost after reasoning: `</think>{"name": ...}</tool_call>`
        _names(JSON_NAME, 1),
        S,
        declared=True,
        after_closer=True,
    ),
    Spelling("tool_calls_tag", "<tool" + SEP + "calls>", S),
    Spelling("tool_calls_tag", _names(r"<tool_calls>\s{0,8}\[?" + JSON_NAME, 1), M, declared=True),
    Spelling("nemotron", "<TOOLCALL>", S),
    Spelling("nemotron", _names(r"<TOOLCALL>\s{0,8}\[?" + JSON_NAME, 1), M, declared=True),
    Spelling(
        "command_r",  # older Command R+: a line "Action:" then a fenced JSON list
        _names(
            r"Action:[ \t]{0,4}(?:\r?\n[ \t]{0,4})?```(?:json)?[ \t]{0,4}\r?\n\s{0,24}\[\s{0,24}"
            r'\{\s{0,24}"tool_name"\s{0,8}:\s{0,8}"(?P<%s>[^"\n]{1,128})"',
            1,
        ),
        S,
        declared=True,
    ),
    # ---- not calls: reasoning closers, HTML code ---------------------------------------------
    Spelling(
        "",
        r"</think>|\[/THINK\]|" + tok("END", "THINKING") + r"|</mm:think>|◁/think▷",
        kind=Kind.CLOSER,
    ),
    Spelling("", r"<(?:pre|code)(?=[\s>])", kind=Kind.HTML_CODE),
)


def _alternation(scope: Scope, calls_only: bool = False, only: frozenset[int] | None = None) -> str:
    parts = []
    for i, spelling in enumerate(SPELLINGS):
        if (calls_only and spelling.kind is not Kind.CALL) or (only is not None and i not in only):
            continue
        if spelling.scope in (Scope.ANYWHERE, scope):
            pattern = spelling.pattern.replace("(?P<n", f"(?P<s{i}n")
            parts.append(f"(?P<s{i}>\\\\?(?:{pattern}))")  # Markdown may escape the first "<"
    return "|".join(parts) or "(?!)"  # none: an alternation that never matches


# One alternation per scope, compiled twice from the same text: the standard library's decides
# on complete text; `regex`'s matches partially at the end of a stream. `regex` may return a later
# spelling's complete match while an earlier one could still match the longer text, so each
# spelling is also compiled alone, to ask that of the earlier ones.
AT_START = re.compile(_alternation(Scope.START))
AT_MID = re.compile(_alternation(Scope.MID))
PARTIAL_AT_START = regex.compile(AT_START.pattern, regex.V0)
PARTIAL_AT_MID = regex.compile(AT_MID.pattern, regex.V0)
# A text that may only become a closer or `<pre>` is waited for, but not held back.
PARTIAL_CALLS = {
    scope: regex.compile(_alternation(scope, calls_only=True), regex.V0)
    for scope in (Scope.START, Scope.MID)
}
# Every spelling and closer matches only text holding one of these (tests/test_detect_fastpath.py
# reads it off the patterns): a text with none can open no marker, so the judge need not read it.
NEEDLES = ("<", "◁", "[TOOL", "[/THINK]", "functools[", "Action:", "to=functions.", "DSM")


def _gates() -> dict[str, tuple[tuple[str, int], ...]]:
    """Each needle is looked for from its first character that is not a letter (prose holds few
    of those), as (needle, where that character is in it), grouped by that character."""
    gates: dict[str, list[tuple[str, int]]] = {}
    for needle in NEEDLES:
        at = next((k for k, c in enumerate(needle) if not c.isalpha()), 0)
        gates.setdefault(needle[at], []).append((needle, at))
    return {gate: tuple(found) for gate, found in gates.items()}


_GATES = _gates()


def has_needle(text: str) -> bool:
    """Whether `text` holds one of `NEEDLES`: each gate character is found at C speed, and only
    where one stands is a needle compared."""
    for gate, needles in _GATES.items():
        if gate not in text:  # `in` costs a fraction of `find`'s call
            continue
        i = text.find(gate)
        while i >= 0:
            for needle, at in needles:
                if i >= at and text.startswith(needle, i - at):
                    return True
            i = text.find(gate, i + 1)
    return False


_ALPHABET = [chr(c) for c in range(32, 127)] + list("\t\n｜‖▁◁▷")


def _followers(prefix: str) -> str:
    """The characters that may follow `prefix` at the start of some spelling, in either scope:
    read off the patterns themselves, over every character a spelling's first places can hold
    (printable ASCII and the special glyphs)."""
    patterns = (PARTIAL_AT_START, PARTIAL_AT_MID)
    return "".join(
        c for c in _ALPHABET if any(p.match(prefix + c, partial=True) is not None for p in patterns)
    )


# For the scanner: what may follow each character that opens a spelling mid-line, and what may
# come third (so that runs like `<|<|<|` are skipped without a closer look).
FOLLOWERS = {
    first: {second: _followers(first + second) for second in _followers(first)} for first in "<[]◁"
}

PARTIAL_EACH = tuple(regex.compile(r"\\?(?:" + s.pattern + ")", regex.V0) for s in SPELLINGS)
IN_SCOPE = {
    scope: tuple(i for i, s in enumerate(SPELLINGS) if s.scope in (Scope.ANYWHERE, scope))
    for scope in (Scope.START, Scope.MID)
}


@dataclass(frozen=True)
class Alternations:
    """A scope's spellings as one alternation: complete (`re`), partial (`regex`), and partial
    of the calls only; `order` is the spellings' indices in it, in order."""

    whole: re.Pattern[str]
    partial: regex.Pattern[str]
    calls: regex.Pattern[str]
    order: tuple[int, ...]


def _alternations(scope: Scope, only: frozenset[int]) -> Alternations:
    text = _alternation(scope, only=only)
    calls = _alternation(scope, calls_only=True, only=only)
    order = tuple(i for i in IN_SCOPE[scope] if i in only)
    return Alternations(
        re.compile(text), regex.compile(text, regex.V0), regex.compile(calls, regex.V0), order
    )


ALTERNATIONS = {
    scope: Alternations(whole, partial, PARTIAL_CALLS[scope], IN_SCOPE[scope])
    for scope, whole, partial in (
        (Scope.START, AT_START, PARTIAL_AT_START),
        (Scope.MID, AT_MID, PARTIAL_AT_MID),
    )
}


# The same for each `<` (escaped or not) and the character after it (the opener ordinary text
# holds most: HTML, generics, comparisons), with only the spellings that may begin with those
# characters: none for most of `_ALPHABET`.
def _after_lt() -> dict[tuple[Scope, str], Alternations]:
    compiled: dict[tuple[Scope, frozenset[int]], Alternations] = {}
    table = {}
    for scope in (Scope.START, Scope.MID):
        for head in (f"{lt}{second}" for lt in ("<", "\\<") for second in _ALPHABET):
            only = frozenset(
                i for i in IN_SCOPE[scope] if PARTIAL_EACH[i].match(head, partial=True)
            )
            if (scope, only) not in compiled:
                compiled[scope, only] = _alternations(scope, only)
            table[scope, head] = compiled[scope, only]
    return table


_AFTER_LT = _after_lt()


def alternations_at(scope: Scope, t: str, j: int, end: int) -> Alternations:
    """The alternations to try at `j` in `t[:end]`. Its match is the scope's, complete or
    partial: an alternation's is that of its first alternative that matches, and a spelling
    left out cannot begin with the characters there, so it fails within them (before the end
    of a text that holds them all) and adds no partial match either."""
    first = t[j]
    if first == "<" and end - j >= 2:
        found = _AFTER_LT.get((scope, t[j : j + 2]))
    elif first == "\\" and end - j >= 3 and t[j + 1] == "<":
        found = _AFTER_LT.get((scope, t[j : j + 3]))
    else:
        found = None
    return ALTERNATIONS[scope] if found is None else found


def spelling_index(match: re.Match[str] | regex.Match[str]) -> int:
    """Which spelling a match of one of the alternations above found."""
    return int((match.lastgroup or "s0")[1:])


def spelling_of(match: re.Match[str] | regex.Match[str]) -> tuple[Spelling, str | None]:
    """The spelling a match of AT_START/AT_MID found, and the tool name it captured."""
    group = match.lastgroup or ""
    spelling = SPELLINGS[spelling_index(match)]
    for key, value in match.groupdict().items():
        if value is not None and key.startswith(group + "n"):
            return spelling, value.strip()
    return spelling, None


# ---- reading the name and the family, once, from the whole markup -------------------------------

_NAME_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"tool[_ ]sep\|>\s{0,8}(" + NAME + ")"),  # DeepSeek V3: TYPE<sep>NAME
    re.compile(r"tool[_ ]call[_ ]begin\|>\s{0,8}(" + NAME + r")\s{0,8}<\|tool[_ ]sep"),  # V3.1
    re.compile(r"to=functions\.(" + NAME + ")"),  # harmony
    re.compile(r"functions\.(" + NAME + r")(?::\d{1,6})?"),  # Kimi
    re.compile(r"tool[_ ]call[_ ]begin\|>\s{0,8}(" + NAME + r"):\d{1,6}"),  # Kimi, bare id
    re.compile(r"(?:\|DSML?\|\s{0,4}|<)invoke\s{1,8}name=\"([^\"<>]{1,128})\""),  # DSML, Claude
    re.compile(r"function_call\s{1,8}name=\"([^\"<>]{1,128})\""),  # xAI
    re.compile(r"<function\s{1,8}name=\"([^\"<>]{1,128})\""),  # MiniCPM
    re.compile(r"<function=\"?([^\">\n]{1,128})\"?>"),  # Qwen3-Coder, Seed
    re.compile(r"<tool_call\s[^>\n]{0,160}?name=\"([^\"<>]{1,128})\""),  # DeepSeek V4
    re.compile(r"\[TOOL_CALLS\]\s{0,8}(" + NAME + r")\s{0,8}\["),  # Mistral v11+
    re.compile(r"tool_call>\s{0,8}(?:call)?:(" + NAME + r")\{"),  # Gemma 4
    re.compile(r"start_function_call>\s{0,8}(?:call)?:(" + NAME + r")\{"),  # FunctionGemma
    re.compile(r"tools_prefix\|>\s{0,8}\[\s{0,8}\{\s{0,8}\"(" + NAME + r")\"\s{0,8}:"),  # Apertus
    re.compile(r"call\s{1,8}tool=\"([^\"<>]{1,128})\""),  # Kimi K3
    re.compile(r"<ifm\|tool_call>\s{0,8}(" + NAME + ")"),  # K2 Horizon
    re.compile(r"<function_calls>\s{0,8}(" + NAME + r")\("),  # OLMo 3
    re.compile(r"\"(?:name|tool|tool_name)\"\s{0,8}:\s{0,8}\"([^\"]{1,128})\""),  # JSON bodies
    re.compile(r"<tool_call>\s{0,8}(" + NAME + r")\s{0,8}(?:<arg_key>|\n|$)"),  # GLM
    re.compile(
        r"\|DSML\|\s{0,8}(?!invoke|parameter|function_calls|tool_calls|calls)(" + NAME + ")"
    ),
    re.compile(r"\[\s{0,8}(" + NAME + r")\("),  # pythonic, LFM2
)


def read_name(markup: str, declared: frozenset[str]) -> str | None:
    """The tool name a piece of markup calls, preferring a declared one, if one can be read."""
    window = canon_light(markup[:NAME_WINDOW])
    first: str | None = None
    for pattern in _NAME_PATTERNS:
        for match in pattern.finditer(window):
            name = match.group(1).strip()
            if name in declared:
                return name
            if first is None and name:
                first = name
    return first


_KIMI_ID = re.compile(NAME + r":\d")
_LIGHT_TABLE = str.maketrans({"｜": "|", "‖": "|", "▁": "_", "\\": None})
_BAR_RUN = re.compile(r"\|{2,}")


def canon_light(text: str) -> str:
    """Fold bar and separator drift (not spaces: names may hold them) for reading names."""
    folded = text.translate(_LIGHT_TABLE)
    return _BAR_RUN.sub("|", folded) if "||" in folded else folded


def refine_family(family: str, markup: str) -> str:
    """Tell apart the families that share an opener, by the body that follows it."""
    light = canon_light(markup[:NAME_WINDOW])
    if family == "hermes":
        body = light.split("<tool_call>", 1)[-1].lstrip()
        if body.startswith("<function="):
            return "qwen3_coder"
        if body[:1] not in ("{", "[", ""):
            return "glm"
    elif family == "deepseek" and "｜" not in markup[:NAME_WINDOW]:
        body = light.replace("tool call begin", "tool_call_begin")
        body = body.split("tool_call_begin|>", 1)[-1].lstrip()
        if body.startswith("functions.") or _KIMI_ID.match(body[:140]):
            return "kimi"
    elif family == "olmo" and "<invoke" in light[:200]:
        return "claude_xml"
    return family
