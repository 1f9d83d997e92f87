"""The control spellings that open a leaked tool call, and how to read a name out of one.

Markers are compared after `canon`, which folds the spelling drift seen in the wild onto one
form: fullwidth bars become ASCII, runs of bars collapse, backslashes (Markdown escapes) vanish,
and `▁` or a space stands for `_`. `canon` is prefix-monotone (the canon of a prefix is a prefix
of the canon of the whole), which is what lets a stream decide on partial lines exactly as the
whole text would.
"""

from __future__ import annotations

import re

# Longest raw line head that can still spell a marker, drift included; heads are judged on this
# many characters at most so that any chunking gives the same verdict.
MAX_HEAD = 64

# canonical marker -> family. Order matters only for readability; matching is by prefix.
MARKERS: dict[str, str] = {
    # DeepSeek V3 / R1 / V3.1 native tokens (the inner opener too: streams drop outer ones).
    "<|tool_calls_begin|>": "deepseek",
    "<|tool_call_begin|>": "deepseek",  # also Kimi's inner opener; refined by the body
    # DeepSeek V3.2 / V4 DSML, and an orphan invoke whose wrapper was dropped.
    "<|DSML|function_calls>": "dsml",
    "<|DSML|tool_calls>": "dsml",
    "<|DSML|invoke": "dsml",
    # Hermes / Qwen2.5 / Qwen3 / ERNIE JSON, Qwen3-Coder XML, GLM: refined by the body.
    "<tool_call>": "hermes",
    "<function=": "qwen3_coder",
    # Kimi K2 sections (plural and singular).
    "<|tool_calls_section_begin|>": "kimi",
    "<|tool_call_section_begin|>": "kimi",
    # Mistral, both generations.
    "[TOOL_CALLS]": "mistral",
    # Llama 3.x JSON and Llama 4 pythonic wrappers.
    "<|python_tag|>": "llama",
    "<|python_start|>": "llama",
    # gpt-oss harmony.
    "<|channel|>": "harmony",
    "<|start|>assistant": "harmony",
    # xAI Grok code models.
    "<xai:function_call": "xai",
    # Granite 3.0.
    "<|tool_call|>": "granite",
    # Phi-4-mini / Firefunction.
    "functools[": "functools",
    # MiniMax-M2.
    "<minimax:tool_call>": "minimax",
    # Jamba, Hunyuan, MiniMax-M1.
    "<tool_calls>": "tool_calls_tag",
    # InternLM2.
    "<|action_start|>": "internlm",
    # Seed-OSS, Longcat, Nemotron, Command-R7B.
    "<seed:tool_call>": "seed",
    "<longcat_tool_call>": "longcat",
    "<TOOLCALL>": "nemotron",
    "<|START_ACTION|>": "command_r",
}

_CANON_TABLE = str.maketrans({"｜": "|", "▁": "_", " ": "_", "\\": None})
_BAR_RUN = re.compile(r"\|{2,}")


def canon(text: str) -> str:
    """Fold spelling drift so that every variant of a marker compares equal."""
    folded = text.translate(_CANON_TABLE)
    return _BAR_RUN.sub("|", folded) if "||" in folded else folded


_CANONICAL = tuple((canon(m), fam) for m, fam in MARKERS.items())

_BY_MARKER = dict(_CANONICAL)
_LENGTHS = sorted({len(m) for m in _BY_MARKER})
_PREFIXES = frozenset(m[:i] for m in _BY_MARKER for i in range(len(m) + 1))  # "" included

# Characters a line may start with (after up to three spaces) and still open a marker.
MARKER_FIRST_CHARS = frozenset(m[0] for m, _ in _CANONICAL) | {"\\"}

FOUND, HOLD, RELEASE = "found", "hold", "release"


def judge_head(head: str, line_complete: bool) -> tuple[str, str | None]:
    """Judge the start of a line (indentation already removed).

    Returns (FOUND, family) when it opens a marker, (HOLD, None) while it could still become one,
    and (RELEASE, None) once it cannot. Set look-ups only: most heads are rejected by their first
    two characters.
    """
    folded = canon(head[:MAX_HEAD])
    if folded[:2] not in _PREFIXES:
        return RELEASE, None
    for length in _LENGTHS:
        family = _BY_MARKER.get(folded[:length])
        if family is not None:
            return FOUND, family
    if folded in _PREFIXES and not line_complete and len(head) < MAX_HEAD:
        return HOLD, None
    return RELEASE, None


# Name extraction runs once per finding over a bounded slice of the markup, so these patterns see
# at most NAME_WINDOW characters; each is a plain scan with bounded repetitions.
NAME_WINDOW = 4096
_NAME = r"([A-Za-z_][\w.\-]{0,127})"
_NAME_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"tool[_ ]sep\|>\s{0,8}" + _NAME),  # DeepSeek V3: TYPE<sep>NAME
    re.compile(r"tool[_ ]call[_ ]begin\|>\s{0,8}" + _NAME + r"\s{0,8}<\|tool[_ ]sep"),  # V3.1
    re.compile(r"to=functions\." + _NAME),  # harmony
    re.compile(r"functions\." + _NAME + r"(?::\d{1,6})?"),  # Kimi
    re.compile(r"<(?:\|DSML\|)?invoke\s{1,8}name=\"([^\"<>]{1,128})\""),  # DSML, MiniMax
    re.compile(r"function_call\s{1,8}name=\"([^\"<>]{1,128})\""),  # xAI
    re.compile(r"<function=\"?([^\">\n]{1,128})\"?>"),  # Qwen3-Coder, Seed
    re.compile(r"\[TOOL_CALLS\]\s{0,8}" + _NAME + r"\s{0,8}\["),  # Mistral v11+
    re.compile(r"\"(?:name|tool|tool_name)\"\s{0,8}:\s{0,8}\"([^\"]{1,128})\""),  # JSON bodies
    re.compile(r"<tool_call>\s{0,8}" + _NAME + r"\s{0,8}(?:<arg_key>|\n|$)"),  # GLM
    re.compile(r"\[\s{0,8}" + _NAME + r"\("),  # pythonic
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


_LIGHT_TABLE = str.maketrans({"｜": "|", "▁": "_", "\\": None})


def canon_light(text: str) -> str:
    """`canon` without the space folding, for reading names that may contain spaces."""
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
        if body.startswith("functions."):
            return "kimi"
    return family
