"""What every request handler needs, and what a request's dialect decides.

A request speaks Anthropic when it carries `anthropic-version` (the Anthropic SDKs and Claude
Code always send it) or its path is under `/v1/messages`. With an Anthropic upstream configured,
such a request goes there whatever its path; every other request goes to the upstream. The
dialect also picks the header a key is injected in (`x-api-key`, else a bearer token), the
shape of spillguard's own errors, and whether `request-id` (Anthropic's spelling) is set.

Each named upstream (`mounts.py`) is a mount of its own, with its own Anthropic base and
injected key; a request's mount is the name its `/NAME/v1` prefix gave it, else the default.
Its policy is the first rule matching its mount and model, then its `x-spillguard-mode`.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from random import getrandbits

from starlette.types import Scope

from . import messages
from .detect import KnownTools
from .errors import SpillguardError
from .mounts import Mount, Target, mount_name, mounts_for
from .observe import Observer
from .outcome import Outcome
from .policy import MODE_HEADER, Policy, header_mode, with_header
from .proxy import Decision
from .rules import Rules
from .settings import DEFAULT_UPSTREAM, ModeHeader, Settings
from .upstream import HOP_BY_HOP, Upstream
from .wire import Wire

# Request headers never forwarded: the upstream sees its own Host, bodies are re-framed, and
# spillguard's own header is for spillguard.
REQUEST_DROP = frozenset({"host", "content-length", "expect", MODE_HEADER})
KEY_HEADERS = frozenset({"authorization", "api-key", "x-api-key"})
DIALECT_KEY = "spillguard.anthropic"  # where a request's dialect is kept in its scope
VERSION = messages.VERSION_HEADER.decode("latin-1")
READY_FOR = 5.0  # seconds a readiness probe's answer is reused
ErrorBody = Callable[[SpillguardError], bytes]


def speaks_anthropic(scope: Scope) -> bool:
    """Whether a request speaks Anthropic; asked several times a request, so the answer is
    kept in its scope."""
    known: bool | None = scope.get(DIALECT_KEY)
    if known is None:
        known = _anthropic_path(scope.get("path", ""))
        if not known:
            version = messages.VERSION_HEADER
            known = any(name == version for name, _ in scope.get("headers", ()))
        scope[DIALECT_KEY] = known
    return known


def _anthropic_path(path: str) -> bool:
    return path == messages.ROUTE or path.startswith(messages.ROUTE + "/")


def error_body_for(scope: Scope) -> ErrorBody:
    """spillguard's own errors, in the shape of the API the client speaks."""
    return messages.error_body if speaks_anthropic(scope) else SpillguardError.json_bytes


@dataclass(frozen=True, slots=True)
class Incoming:
    """What a request's scope says (`Context.incoming`)."""

    target: Target  # the named upstream it goes to, and whether to its Anthropic base
    upstream: Upstream  # the target's
    request_id: str  # the client's x-request-id (its first 128 characters), or a new one
    declared: str  # its Content-Length as sent ('' without one)
    asks_mode: bool  # it sends x-spillguard-mode
    headers: dict[str, str] = field(repr=False)  # what goes upstream (a key spillguard injects)


@dataclass
class Readiness:
    """The last upstream probe, reused for `READY_FOR` seconds: all of them, and each mount."""

    at: float = -READY_FOR
    ok: bool = False
    upstreams: dict[str, bool] = field(default_factory=dict)

    def body(self) -> dict[str, object]:
        """/readyz's answer: the verdict, and each upstream's by name."""
        each = {name: "ready" if ok else "unreachable" for name, ok in self.upstreams.items()}
        return {"status": "ready" if self.ok else "upstream unreachable", "upstreams": each}


@dataclass
class Context:
    """What every handler needs: the settings, the upstreams, the observer."""

    settings: Settings
    upstream: Upstream
    observer: Observer
    anthropic: Upstream | None = None  # where the default's Anthropic requests go, if set
    readiness: Readiness = field(default_factory=Readiness)
    known_tools: KnownTools = field(default_factory=KnownTools)  # tool arrays seen lately
    mounts: dict[str, Mount] = field(init=False)  # by name, the default first
    # Per mount: the client's key is dropped when spillguard has its own (proxy keys, or a
    # key it injects there).
    _drop: dict[str, frozenset[str]] = field(init=False)
    rules: Rules = field(init=False)
    _loosening: tuple[bytes, ...] = field(init=False)
    # Per mount: its targets, made once (the Anthropic one None without an Anthropic base).
    _targets: dict[str, tuple[Target, Target | None]] = field(init=False)
    mode: str = field(init=False)  # the options' mode, a request's until its policy is known

    def __post_init__(self) -> None:
        s = self.settings
        self.mounts = mounts_for(s, self.upstream, self.anthropic)
        self._drop = {
            name: REQUEST_DROP | (KEY_HEADERS if s.proxy_keys or m.key else frozenset())
            for name, m in self.mounts.items()
        }
        self.rules = Rules(s)
        self.mode = s.mode.value
        self._loosening = tuple(k.get_secret_value().encode() for k in s.loosening_keys)
        self._targets = {}
        for name, m in self.mounts.items():
            (plain, _), *anthropic = m.targets()
            self._targets[name] = (plain, anthropic[0][0] if anthropic else None)

    @property
    def policy(self) -> Policy:
        """The options' policy: a request's when no rule matches and it has no header."""
        return self.rules.default

    @property
    def upstreams(self) -> list[Upstream]:
        return [u for m in self.mounts.values() for _, u in m.targets()]

    def incoming(self, scope: Scope) -> Incoming:
        """What a request's scope says, its headers read once: where it goes, its request id,
        its declared length, whether it asks for a mode, and the headers that go upstream
        (end-to-end ones only, with the request id and the key spillguard injects, in the
        header the client's API uses for it)."""
        name = mount_name(scope)
        mount = self.mounts[name]
        headers, rid, declared, versioned, asks = _read(scope["headers"], self._drop[name])
        anthropic: bool | None = scope.get(DIALECT_KEY)
        if anthropic is None:
            anthropic = scope[DIALECT_KEY] = versioned or _anthropic_path(scope.get("path", ""))
        plain, other = self._targets[name]
        target = other if other is not None and anthropic else plain
        key = mount.key
        if key is not None and anthropic:
            headers["x-api-key"] = key.get_secret_value()
        elif key is not None:
            headers["authorization"] = f"Bearer {key.get_secret_value()}"
        rid = rid or new_request_id()
        headers["x-request-id"] = rid
        upstream = mount.anthropic if target.anthropic and mount.anthropic else mount.upstream
        return Incoming(target, upstream, rid, declared, asks, headers)

    def decisions(self, wire: Wire) -> dict[Target, Decision]:
        """One decision of `wire` per target: pick a request's by its `incoming(scope).target`."""
        return {
            t: Decision(self.settings, up, wire)
            for m in self.mounts.values()
            for t, up in m.targets()
        }

    def policy_for(
        self, headers: Mapping[str, str], model: str | None, upstream: str = DEFAULT_UPSTREAM
    ) -> Policy:
        """The policy a request is held to, from its (lower-case) headers, its model and the
        upstream it goes to: the first matching rule's, then the mode its header asks for
        (`policy.py`). A header that names no mode is a 400, a loosening not allowed a 403."""
        policy = self.rules.policy(upstream, model)
        asked = header_mode(headers)
        if asked is None or asked is policy.mode:
            return policy
        return with_header(policy, asked, self._may_loosen(headers))

    def _may_loosen(self, headers: Mapping[str, str]) -> bool:
        if self.settings.mode_header is ModeHeader.ANY:
            return True
        if not self._loosening:
            return False
        presented = _presented_key(headers)
        ok = False
        for key in self._loosening:  # compare with every key: the time taken says nothing
            ok |= hmac.compare_digest(presented, key)
        return ok

    async def ready(self) -> Readiness:
        """Every upstream probed at most every `READY_FOR` seconds: a mount is ready when all
        of its upstreams answer, spillguard when every mount is."""
        now = time.monotonic()
        if now - self.readiness.at > READY_FOR:
            answers = await asyncio.gather(*(_mount_ready(m) for m in self.mounts.values()))
            each = dict(zip(self.mounts, answers, strict=True))
            self.readiness = Readiness(now, all(answers), each)
        return self.readiness


def response_ids(scope: Scope, headers: dict[str, str], outcome: Outcome) -> dict[str, str]:
    """The request ids on a response: the upstream's own `x-request-id` (and Anthropic's
    `request-id`) pass through, as an SDK's `.request_id`, what its provider's support asks for;
    spillguard's id fills them otherwise, and is always in `x-spillguard-request-id`. Header
    names here are lower case."""
    headers.setdefault("x-request-id", outcome.request_id)
    if speaks_anthropic(scope):
        headers.setdefault("request-id", outcome.request_id)
    headers["x-spillguard-request-id"] = outcome.request_id
    return headers


def new_request_id() -> str:
    """An id of spillguard's own: `sg-` and 128 random bits in hex, from the process's `random`
    generator (seeded from the OS, and again in a forked child) rather than from the OS each
    time, which costs a system call a request. An id names a request and grants nothing: a
    client may send any id it likes."""
    return f"sg-{getrandbits(128):032x}"


def request_id(headers: list[tuple[bytes, bytes]]) -> str:
    """The client's x-request-id (its first 128 characters), or a new one."""
    for name, value in headers:
        if name == b"x-request-id" and value:
            return value.decode("latin-1")[:128]
    return new_request_id()


def request_end_to_end(headers: list[tuple[bytes, bytes]], drop: frozenset[str]) -> dict[str, str]:
    """`upstream.end_to_end` of a request's raw ASGI headers, each value as the client's bytes
    meant it: UTF-8 when they are, else Latin-1 (aiohttp encodes what it sends as UTF-8)."""
    return _read(headers, drop)[0]


def _read(
    headers: list[tuple[bytes, bytes]], drop: frozenset[str]
) -> tuple[dict[str, str], str | None, str, bool, bool]:
    """One pass over a request's raw headers: `request_end_to_end`'s headers; the client's
    request id (as `request_id` reads it; None without one); its first Content-Length as sent
    ('' without one) and whether it sends x-spillguard-mode, when `drop` holds them; and
    whether it sends anthropic-version."""
    named: frozenset[str] = frozenset()
    raw: dict[str, bytes] = {}
    rid: str | None = None
    declared: str | None = None
    versioned = asks = False
    for raw_name, raw_value in headers:
        name = raw_name.decode("latin-1").lower()
        if name in HOP_BY_HOP or name in drop:
            if name == "connection":
                more = raw_value.decode("latin-1").split(",")
                named = named | {t.strip().lower() for t in more}
            elif name == "content-length":
                if declared is None:
                    declared = raw_value.decode("latin-1")
            elif name == MODE_HEADER:
                asks = True
            continue
        if name == "x-request-id":
            if rid is None and raw_value:
                rid = raw_value.decode("latin-1")[:128]
        elif name == VERSION:
            versioned = True
        # Repeated: joined as HTTP allows (a request has no Set-Cookie), before decoding.
        raw[name] = raw[name] + b", " + raw_value if name in raw else raw_value
    out: dict[str, str] = {}
    for name, value in raw.items():
        if name in named:
            continue
        try:
            out[name] = value.decode()
        except UnicodeDecodeError:
            out[name] = value.decode("latin-1")
    return out, rid, declared or "", versioned, asks


def _presented_key(headers: Mapping[str, str]) -> bytes:
    """The key a request presents, read as `limits.bearer` reads it."""
    authorization = headers.get("authorization")
    if authorization is not None:
        scheme, _, token = authorization.partition(" ")
        return token.strip().encode("latin-1") if scheme.lower() == "bearer" else b""
    value = headers.get("x-api-key", headers.get("api-key", ""))
    return value.strip().encode("latin-1")


async def _mount_ready(mount: Mount) -> bool:
    answers = await asyncio.gather(*(probe(u) for _, u in mount.targets()))
    return all(answers)


async def probe(upstream: Upstream) -> bool:
    """Reachable: any HTTP answer from the upstream's models route counts."""
    try:
        async with asyncio.timeout(3):
            reply = await upstream.open("GET", upstream.url("models", ""), {}, None)
            reply.close()
        return True
    except (SpillguardError, TimeoutError):
        return False
