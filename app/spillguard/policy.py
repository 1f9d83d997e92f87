"""What one request is held to: its mode, its hold limit and its retry's instructions.

`Context.policy_for` chooses it: the first `[[rules]]` entry matching the request's upstream and
model (`rules.py`), else the options; then the request's `x-spillguard-mode` header
(`with_header`). The decision reads only this record.

The header may always ask for a mode at least as strict as the one the request would get.
Strictness orders the modes observe < retry = repair < fail: observe lets a leak through, retry
and repair both keep it from the client (by asking again, or by making the call it spelled out),
fail refuses it. Asking for the same mode is a no-op; any other mode - a looser one, or the
other of retry and repair, which is not stricter - is a loosening, allowed only with
`mode_header = "any"` or a proxy key marked `may_loosen`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING

from .errors import ClientError

if TYPE_CHECKING:
    from .settings import Settings


class Mode(StrEnum):
    RETRY = "retry"
    FAIL = "fail"
    OBSERVE = "observe"
    REPAIR = "repair"  # a readable leak becomes the structured call; anything else retries


class ModeHeader(StrEnum):
    """What `x-spillguard-mode` may do to the mode a request's rules give it."""

    TIGHTEN = "tighten"  # only a mode at least as strict (policy.STRICTNESS)
    ANY = "any"  # any mode


MODE_HEADER = "x-spillguard-mode"
STRICTNESS = {Mode.OBSERVE: 0, Mode.RETRY: 1, Mode.REPAIR: 1, Mode.FAIL: 2}
MODES = ", ".join(m.value for m in sorted(Mode, key=STRICTNESS.__getitem__))


@dataclass(frozen=True)
class Policy:
    mode: Mode
    hold_limit: int
    correction: str
    correction_required: str
    correction_named: str  # `{name}` is replaced by the function tool_choice names
    correction_none: str

    @classmethod
    def of(cls, settings: Settings) -> Policy:
        return cls(
            mode=settings.mode,
            hold_limit=settings.hold_limit,
            correction=settings.correction,
            correction_required=settings.correction_required,
            correction_named=settings.correction_named,
            correction_none=settings.correction_none,
        )


def tightens(asked: Mode, given: Mode) -> bool:
    """`asked` holds a request at least as strictly as `given`: the same mode, or a stricter."""
    return asked is given or STRICTNESS[asked] > STRICTNESS[given]


def header_mode(headers: Mapping[str, str]) -> Mode | None:
    """The mode `x-spillguard-mode` asks for (any case, spaces around ignored); None when the
    header is absent. Anything else - no mode, or the header twice - is a 400."""
    getlist = getattr(headers, "getlist", None)  # Starlette's headers keep repeats
    if getlist is not None:  # (and `get` of an absent name costs them a KeyError)
        values = getlist(MODE_HEADER)
        if len(values) > 1:
            raise ClientError(400, "INVALID_MODE_HEADER", f"{MODE_HEADER} was sent more than once")
        value = values[0] if values else None
    else:
        value = headers.get(MODE_HEADER)
    if value is None:
        return None
    try:
        return Mode(value.strip().lower())
    except ValueError:
        shown = value[:40]
        raise ClientError(
            400, "INVALID_MODE_HEADER", f"{MODE_HEADER} must be one of {MODES}, not {shown!r}"
        ) from None


def with_header(policy: Policy, asked: Mode | None, may_loosen: bool) -> Policy:
    """`policy` held to the mode the header asked for, when that is allowed (403 otherwise)."""
    if asked is None or asked is policy.mode:
        return policy
    if not may_loosen and not tightens(asked, policy.mode):
        raise ClientError(
            403,
            "MODE_LOOSENING_NOT_ALLOWED",
            f"{MODE_HEADER}: {asked} is not stricter than this request's mode ({policy.mode}); "
            "only a stricter mode may be asked for (observe < retry = repair < fail)",
        )
    return replace(policy, mode=asked)
