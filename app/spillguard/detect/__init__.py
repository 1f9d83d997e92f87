"""spillguard's detection core: does this reply carry a tool call written out as text?

What it decides. A request that declared tools gets a reply; the core says whether that reply's
text is a tool call the model wrote out instead of making it: control markup of a known family
(`markers.SPELLINGS`: DeepSeek, DSML, Hermes/Qwen, GLM, Kimi, Mistral, Llama, harmony, Gemma, xAI,
MiniMax and the rest), or a whole answer that is nothing but a JSON (or pythonic) call naming a
declared tool. It reports the family, the tool name when one can be read, and where the markup
starts. Beside that, `anomalies` names the structured calls that are missing or malformed.

Why it is narrow. A false positive fails a good answer, so the core asks for structure, not
resemblance. Distinctive special tokens count anywhere in a line (chat templates glue them to the
answer's last sentence; documentation quotes them); generic tags count at a line start, or
mid-line before a call body naming a declared tool; nothing counts inside code spans, fences,
indented or reST literal blocks, triple-quoted strings, HTML code, quotes, or quotation marks. A
JSON blob counts only when it is the whole answer, every key is tool-call vocabulary and the name
is declared. Requests without tools, or with a `json_schema` response format, are never
inspected.

How it runs. Sans-IO: pure functions and small state machines, no asyncio or HTTP imports. One
`Scanner` serves both paths: a stream feeds it each delta and publishes what it returns; a whole
reply is the same scanner fed once and finished, so the two cannot disagree. Each character is
read a bounded number of times, and every regular expression sees a bounded window. Text with
nothing that could start a marker, code span, fence, blob or closer costs about one regular
expression scan (and a stream delta of it a few checks). A whole text is first asked
`may_find`: every spelling needs one of a few needles (`markers.NEEDLES`, read off the patterns
by the tests), so a text with none and no blob start is decided without a scanner.

Modules. `tools` reads what a request declared; `markers` is the table of spellings; `events`
says where in text something may happen and which spelling opens there; `blocks` reads past the
text that is only shown (fences, reST literal blocks, triple quotes, HTML code); `judge` is the
markup judge built on both; `blob` probes for a whole-answer blob; `scanner` runs the judge and
the probe over one field and decides what may be published; `turn` decides one assistant turn
(content, reasoning and structured calls); `anomalies` names malformed structured calls.

Repair. `read_calls(markup, family, tools)` turns a finding's markup (`TurnScanner.markup`: the
text from `Finding.start` on, bounded by the hold limit) into the `Call`s the model meant, for
`--mode repair`. One parser per family (`calls_json`, `calls_tokens`, `calls_xml`,
`calls_invoke`, `calls_python`, over `reading`'s cursor) must read the markup completely, every
call must name a declared tool, and its arguments, bare-text values typed by the tool's schema
(`values`, local `$ref`s followed), must validate against that schema (jsonschema, validators
cached per schema); anything else is None and the request is retried as without repair.
Pythonic arguments are read as literals, never evaluated.
"""

from .anomalies import Anomaly, AnomalyKind, call_anomalies
from .calls import Call, read_calls
from .scanner import Finding, Scanner, inspect_text, may_find
from .tools import NO_TOOLS, KnownTools, ToolSet, declared_tools
from .turn import TurnScanner

__all__ = [
    "NO_TOOLS",
    "Anomaly",
    "AnomalyKind",
    "Call",
    "Finding",
    "KnownTools",
    "Scanner",
    "ToolSet",
    "TurnScanner",
    "call_anomalies",
    "declared_tools",
    "inspect_text",
    "may_find",
    "read_calls",
]
