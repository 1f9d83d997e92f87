"""Named upstreams: the /NAME/v1 prefix (`mounts.Prefixes`), and what `Context` does with the
name - the upstream, the injected key, the decision, the outcome's label, readiness."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from starlette.types import Message, Receive, Scope, Send

from spillguard import chat, messages
from spillguard.context import Context
from spillguard.mounts import SCOPE_KEY, Prefixes, Target, mount_name
from spillguard.observe import Observer
from spillguard.scripted import ScriptedUpstream, Turn
from spillguard.settings import Settings
from spillguard.upstream import Upstream


def http_scope(path: str, raw: bytes | None = None, **extra: Any) -> Scope:
    scope: dict[str, Any] = {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode() if raw is None else raw,
        "query_string": b"",
        "headers": [],
        **extra,
    }
    return scope


async def routed(app: Prefixes, scope: Scope) -> Scope:
    seen: list[Scope] = []

    async def inner(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope)

    app.app = inner
    await app(scope, _receive, _send)
    (got,) = seen
    return got


async def _receive() -> Message:
    return {"type": "http.disconnect"}


async def _send(message: Message) -> None:
    pass


@pytest.mark.parametrize(
    ("path", "raw", "expected_path", "name"),
    [
        ("/grok/v1/chat/completions", None, "/v1/chat/completions", "grok"),
        ("/grok/v1", None, "/v1", "grok"),
        ("/deep-seek/v1/models", None, "/v1/models", "deep-seek"),
        ("/v1/chat/completions", None, "/v1/chat/completions", "default"),  # the default's
        ("/other/v1/chat/completions", None, "/other/v1/chat/completions", "default"),  # unknown
        ("/grok/v10/x", None, "/grok/v10/x", "default"),  # not /v1
        ("/grok/v1x", None, "/grok/v1x", "default"),
        ("/grok", None, "/grok", "default"),
        ("/grokv1/models", None, "/grokv1/models", "default"),
        ("/default/v1/models", None, "/default/v1/models", "default"),  # reserved: not mounted
        # The raw path spells the prefix in percent-encoding: not routed (they must agree).
        ("/grok/v1/models", b"/%67rok/v1/models", "/grok/v1/models", "default"),
    ],
)
async def test_the_prefix_names_the_upstream(
    path: str, raw: bytes | None, expected_path: str, name: str
) -> None:
    app = Prefixes(_no_app, ["grok", "deep-seek", "default"])
    got = await routed(app, http_scope(path, raw))
    assert got["path"] == expected_path
    assert mount_name(got) == name
    if name != "default":
        assert got["raw_path"] == (raw or path.encode())[len(name) + 1 :]


async def test_the_prefix_keeps_the_rest_of_the_raw_path_as_sent() -> None:
    raw = b"/grok/v1/files/a%2Fb"
    got = await routed(Prefixes(_no_app, ["grok"]), http_scope("/grok/v1/files/a/b", raw))
    assert (got["path"], got["raw_path"], got[SCOPE_KEY]) == (
        "/v1/files/a/b",
        b"/v1/files/a%2Fb",
        "grok",
    )


async def test_other_scopes_pass_untouched() -> None:
    app = Prefixes(_no_app, ["grok"])
    lifespan: Scope = {"type": "lifespan"}
    assert await routed(app, lifespan) is lifespan
    plain = http_scope("/healthz")
    assert await routed(app, plain) is plain


async def _no_app(scope: Scope, receive: Receive, send: Send) -> None:
    raise AssertionError("replaced in the test")


# ---- Context by mount --------------------------------------------------------------------------


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SG_TEST_XAI_KEY", "xai-key-1")
    monkeypatch.setenv("SG_TEST_DS_KEY", "ds-key-2")


def context(**settings: Any) -> Context:
    s = Settings(
        incidents_db="",
        upstream="http://127.0.0.1:9/v1",
        upstreams={
            "grok": {"url": "http://127.0.0.1:10/v1", "api_key_env": "SG_TEST_XAI_KEY"},
            "ds": {
                "url": "deepseek",
                "api_key_env": "SG_TEST_DS_KEY",
                "anthropic": "deepseek",
            },
            "open": {"url": "http://127.0.0.1:11/base/v1"},  # no key of its own
        },
        **settings,
    )
    return Context(s, Upstream(s), Observer(s))


def request(path: str, name: str | None = None, **headers: str) -> dict[str, Any]:
    """The scope of a request to `path` through the mount `name`."""
    scope = http_scope(path)
    scope["headers"] = [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    if name is not None:
        scope[SCOPE_KEY] = name
    return scope


def test_each_mount_has_its_upstreams(keys: None) -> None:
    ctx = context()
    assert list(ctx.mounts) == ["default", "grok", "ds", "open"]
    assert [m.prefix for m in ctx.mounts.values()] == ["/v1", "/grok/v1", "/ds/v1", "/open/v1"]
    origins = [u.origin + u.base_path for u in ctx.upstreams]  # each started and closed
    assert origins == [
        "http://127.0.0.1:9/v1",
        "http://127.0.0.1:10/v1",
        "https://api.deepseek.com/v1",
        "https://api.deepseek.com/anthropic/v1",
        "http://127.0.0.1:11/base/v1",
    ]
    chat_request = request("/v1/chat/completions", "ds")
    claude = request("/v1/messages", "ds", anthropic_version="2023-06-01")
    assert ctx.incoming(chat_request).upstream is ctx.mounts["ds"].upstream
    assert ctx.incoming(claude).upstream is ctx.mounts["ds"].anthropic
    assert ctx.incoming(chat_request).target == Target("ds", False)
    assert ctx.incoming(claude).target == Target("ds", True)
    # A mount without an Anthropic base sends every request to its one upstream.
    grok_messages = ctx.incoming(request("/v1/messages", "grok"))
    assert grok_messages.target == Target("grok", False)
    assert grok_messages.upstream is ctx.mounts["grok"].upstream
    assert ctx.incoming(request("/v1/models")).upstream is ctx.upstream


def test_decisions_one_per_target(keys: None) -> None:
    ctx = context()
    decisions = ctx.decisions(chat.WIRE)
    assert set(decisions) == {
        Target("default", False),
        Target("grok", False),
        Target("ds", False),
        Target("ds", True),
        Target("open", False),
    }
    for target, decision in decisions.items():
        mount = ctx.mounts[target.upstream]
        assert decision.upstream is (mount.anthropic if target.anthropic else mount.upstream)
        assert decision.wire is chat.WIRE


def test_each_mount_injects_its_own_key(keys: None) -> None:
    ctx = context(upstream_key="default-key")
    sent = {"authorization": "Bearer client", "x_spillguard_mode": "fail", "x_other": "1"}

    def upstream_headers(name: str | None, path: str = "/v1/chat/completions", **more: str) -> Any:
        return ctx.incoming(request(path, name, **sent, **more)).headers

    assert upstream_headers(None)["authorization"] == "Bearer default-key"
    assert upstream_headers("grok")["authorization"] == "Bearer xai-key-1"
    claude = upstream_headers("ds", "/v1/messages", anthropic_version="2023-06-01")
    assert claude["x-api-key"] == "ds-key-2" and "authorization" not in claude
    # Without a key of its own (and no proxy keys), the client's goes through.
    assert upstream_headers("open")["authorization"] == "Bearer client"
    for name in (None, "grok", "ds", "open"):
        headers = upstream_headers(name)
        assert "x-spillguard-mode" not in headers  # spillguard's own header stays here
        assert headers["x-other"] == "1"


def test_with_proxy_keys_no_client_key_goes_upstream(keys: None) -> None:
    ctx = context(proxy_keys=("pk",))
    headers = ctx.incoming(request("/v1/x", "open", authorization="Bearer pk")).headers
    assert "authorization" not in headers


def test_a_request_names_its_mount(keys: None) -> None:
    ctx = context()
    assert ctx.incoming(request("/v1/chat/completions", "grok")).target.upstream == "grok"
    assert ctx.incoming(request("/v1/chat/completions")).target.upstream == "default"


def test_the_settings_hold_every_key_for_redaction(keys: None) -> None:
    secrets = context(upstream_key="default-key", proxy_keys=("pk",)).settings.secrets()
    assert sorted(secrets) == ["default-key", "ds-key-2", "pk", "xai-key-1"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_readiness_reports_each_upstream(keys: None) -> None:
    up = await ScriptedUpstream(lambda record: Turn(content="ok")).start()
    try:
        dead = f"http://127.0.0.1:{_closed_port()}/v1"
        s = Settings(
            incidents_db="",
            upstream=up.url,
            upstreams={
                "alive": {"url": up.url, "anthropic": up.url.removesuffix("/v1")},
                "dead": {"url": dead},
                "half": {"url": up.url, "anthropic": dead.removesuffix("/v1")},
            },
        )
        ctx = Context(s, Upstream(s), Observer(s))
        for each in ctx.upstreams:
            await each.start()
        try:
            ready = await ctx.ready()
            assert ready.body() == {
                "status": "upstream unreachable",
                "upstreams": {
                    "default": "ready",
                    "alive": "ready",
                    "dead": "unreachable",
                    "half": "unreachable",  # its Anthropic base does not answer
                },
            }
            assert await ctx.ready() is ready  # reused for READY_FOR seconds
        finally:
            for each in ctx.upstreams:
                await each.close()
    finally:
        await up.stop()


def test_messages_route_speaks_anthropic_by_path(keys: None) -> None:
    ctx = context()
    assert ctx.incoming(request(messages.ROUTE, "ds")).target.anthropic
    assert not ctx.incoming(request(messages.ROUTE, "grok")).target.anthropic
