"""Named upstreams: each `[upstreams.NAME]` served at `/NAME/v1/...` beside the default at `/v1`.

`Prefixes` is the ASGI wrapper in front of the application: a request to `/NAME/v1/...` for a
configured NAME goes on as `/v1/...` (its `path` and `raw_path` without the prefix), with NAME
recorded in its scope, so every route, limit and handler serves it unchanged and `Context`
picks the upstream, key and decision by the name (`mount_name`). Anything else passes as it
came: an unknown name is a 404 like any unknown path.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr
from starlette.types import ASGIApp, Receive, Scope, Send

from .settings import DEFAULT_UPSTREAM, Settings
from .upstream import Upstream

SCOPE_KEY = "spillguard.upstream"  # the name a request's prefix gave it


@dataclass(frozen=True)
class Target:
    """Where a request goes: a named upstream, and whether to its Anthropic base."""

    upstream: str
    anthropic: bool


@dataclass(frozen=True)
class Mount:
    """One upstream as served: its OpenAI-compatible base, its Anthropic one when configured,
    and the key spillguard injects there (None: the client's own goes through)."""

    name: str
    upstream: Upstream
    anthropic: Upstream | None
    key: SecretStr | None

    @property
    def prefix(self) -> str:
        return "/v1" if self.name == DEFAULT_UPSTREAM else f"/{self.name}/v1"

    def targets(self) -> list[tuple[Target, Upstream]]:
        out = [(Target(self.name, False), self.upstream)]
        if self.anthropic is not None:
            out.append((Target(self.name, True), self.anthropic))
        return out


def mounts_for(
    settings: Settings, upstream: Upstream, anthropic: Upstream | None
) -> dict[str, Mount]:
    """The default mount (the given upstreams) first, then every named one."""
    found = {DEFAULT_UPSTREAM: Mount(DEFAULT_UPSTREAM, upstream, anthropic, settings.upstream_key)}
    for name, entry in settings.upstreams.items():
        base = entry.anthropic
        messages = Upstream(settings, f"{base}/v1") if base is not None else None
        found[name] = Mount(name, Upstream(settings, entry.url), messages, entry.key)
    return found


def mount_name(scope: Scope) -> str:
    name: str = scope.get(SCOPE_KEY, DEFAULT_UPSTREAM)
    return name


class Prefixes:
    """Serves `/NAME/v1/...` as `/v1/...` for each name in `names`, the name in the scope."""

    def __init__(self, app: ASGIApp, names: Iterable[str]) -> None:
        self.app = app
        self.names = frozenset(names) - {DEFAULT_UPSTREAM}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.names:
            scope = self.route(scope)
        await self.app(scope, receive, send)

    def route(self, scope: Scope) -> Scope:
        path: str = scope["path"]
        name, _, rest = path[1:].partition("/")
        if name not in self.names or not (rest == "v1" or rest.startswith("v1/")):
            return scope
        prefix = f"/{name}"
        raw: bytes | None = scope.get("raw_path")
        # The raw path must spell the prefix plainly too: one that percent-encodes it is not
        # routed (the path and the raw path could otherwise name two different places).
        if raw is not None and not raw.startswith(prefix.encode() + b"/"):
            return scope
        routed: dict[str, Any] = dict(scope)
        routed["path"] = path[len(prefix) :]
        if raw is not None:
            routed["raw_path"] = raw[len(prefix) :]
        routed[SCOPE_KEY] = name
        return routed
