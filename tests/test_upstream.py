"""The upstream hop: header hygiene both ways, no cookie jar, no environment proxies, no followed
redirects, compression, and an upstream origin that no request can change (SSRF).

Unit tests call `end_to_end`, `target_path` and `Upstream.url` directly; end-to-end tests send raw
bytes to a real spillguard and read what a recording upstream (and a second "evil" listener that
must never hear from spillguard) saw.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from urllib.parse import unquote

import httpx
import pytest
import yarl
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict

from spillguard.errors import ClientError
from spillguard.scripted import Turn, chunks, completion
from spillguard.settings import Settings
from spillguard.upstream import HOP_BY_HOP, Upstream, end_to_end, target_path
from tests.conftest import chat_body
from tests.faults import (
    HANG,
    JSON,
    SSE,
    RawConn,
    RawRequest,
    RawUpstream,
    chunk,
    error_of,
    free_port,
    head,
    raw_http,
    reply,
    serve,
    sse_events,
    status_of,
)

HOP_REQUEST = [
    ("Connection", "keep-alive, X-Hop-A, x-hop-b"),
    ("X-Hop-A", "1"),
    ("X-Hop-B", "1"),
    ("Keep-Alive", "timeout=5"),
    ("Proxy-Connection", "keep-alive"),
    ("TE", "trailers"),
    ("Trailer", "X-T"),
    ("Proxy-Authorization", "Basic c2VjcmV0"),
]
END_TO_END_REQUEST = [
    ("X-Keep", "yes"),
    ("OpenAI-Organization", "org-1"),
    ("OpenAI-Beta", "assistants=v2"),
    ("Authorization", "Bearer sk-client"),
    ("X-Request-Id", "rid-1"),
]
HOP_NAMES = {"x-hop-a", "x-hop-b", "x-hop-c"} | HOP_BY_HOP


# ---- unit: end_to_end -----------------------------------------------------------------------


def test_end_to_end_drops_hop_by_hop_and_named_headers() -> None:
    headers = CIMultiDict(HOP_REQUEST + END_TO_END_REQUEST)
    headers.add("Connection", "X-Hop-C")  # a second Connection header
    headers.add("X-Hop-C", "1")
    headers.add("Upgrade", "h2c")
    headers.add("Transfer-Encoding", "chunked")
    out = end_to_end(headers)
    assert {k.lower() for k in out} == {k.lower() for k, _ in END_TO_END_REQUEST}


def test_end_to_end_drop_set_and_repeats() -> None:
    headers = CIMultiDict([("Host", "a"), ("X-A", "1"), ("X-A", "2"), ("Content-Length", "3")])
    assert end_to_end(headers, frozenset({"host", "content-length"})) == {"x-a": "1, 2"}


def test_end_to_end_on_a_plain_mapping() -> None:
    assert end_to_end({"connection": "x-b", "x-b": "1", "x-c": "2"}) == {"x-c": "2"}


# ---- unit: target_path and Upstream.url ------------------------------------------------------

HOSTILE_RESTS = [
    "/evil.example/x",  # from /v1//evil.example/x
    "../admin",
    "./models",
    "models/../../admin",
    "%2e%2e/admin",
    "%2E%2E/admin",
    ".%2e/admin",
    "%252e%252e/admin",
    "x@evil.example",
    "x%40evil.example",
    "..\\admin",
    "models\\..\\..\\admin",
    "%5c%5cevil.example/x",
    "http://evil.example/x",
    "http:%2f%2fevil.example/x",
    "%2f%2fevil.example/x",
    "%2F%2Fevil.example",
    "a//b",
    "models%00",
    "models%0d%0aHost:%20evil",
    "models\r\nHost: evil",
    "models\t",
]
BENIGN_RESTS = [
    "models",
    "models/gpt-4o",
    "models/ft:gpt-4o-mini:org:custom:abc123",
    "files/file-abc/content",
    "chat/completions",
    "responses/resp_123/input_items",
    "models/a%20b",
    "models/..x",  # a name that starts with dots is not a dot segment
]


@pytest.mark.parametrize("rest", HOSTILE_RESTS)
def test_target_path_refuses_anything_that_leaves_the_base(rest: str) -> None:
    with pytest.raises(ClientError) as info:
        target_path("/v1", rest)
    assert info.value.status == 400
    assert info.value.code == "INVALID_PATH"


@pytest.mark.parametrize("rest", BENIGN_RESTS)
def test_target_path_keeps_ordinary_paths(rest: str) -> None:
    assert target_path("/v1", rest) == f"/v1/{rest}"
    assert target_path("/v1/", rest) == f"/v1/{rest}"
    assert target_path("", rest) == f"/{rest}"


def upstream_for(base: str) -> Upstream:
    return Upstream(Settings(upstream=base))


@settings(max_examples=400, deadline=None)
@given(
    rest=st.lists(
        st.sampled_from([*"ab./\\@:%2eEfF5c?#;=&~ \t\r\n\x00", "%2e", "%2f", "%5c", "%40"]),
        max_size=24,
    ).map("".join),
    query=st.sampled_from(["", "x=1", "u=http://evil.example/", "a=%2F%2Fevil"]),
)
def test_upstream_url_never_leaves_the_configured_origin(rest: str, query: str) -> None:
    """Whatever the path, the URL aiohttp will request (after yarl's own normalisation) has the
    configured scheme, host and port, and a path under the configured base."""
    up = upstream_for("http://127.0.0.1:9/v1")
    try:
        url = up.url(rest, query)
    except ClientError:
        return
    parsed = yarl.URL(url)
    assert (parsed.scheme, parsed.host, parsed.port) == ("http", "127.0.0.1", 9)
    assert parsed.path.startswith("/v1/")
    assert ".." not in unquote(unquote(parsed.raw_path)).split("/")
    assert parsed.user is None and parsed.password is None


# ---- end to end: a recording upstream and an "evil" listener ---------------------------------


async def post_chat(url: str, stream: bool) -> httpx.Response:
    async with httpx.AsyncClient(timeout=HANG) as http:
        return await http.post(url + "/chat/completions", json=chat_body(stream=stream))


async def ok_json(conn: RawConn, req: RawRequest) -> None:
    await reply(conn, 200, JSON, b'{"object": "list", "data": []}')


def raw_request(
    port: int,
    method: str,
    target: str,
    headers: list[tuple[str, str]] | None = None,
    body: bytes = b"",
    host: str | None = None,
) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host or f'127.0.0.1:{port}'}"]
    lines += [f"{k}: {v}" for k, v in headers or []]
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def response_headers(response: bytes) -> list[tuple[str, str]]:
    head_ = response.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")[1:]
    return [(k.strip().lower(), v.strip()) for k, _, v in (line.partition(":") for line in head_)]


@pytest.mark.parametrize(
    "route",
    ["inspected", "inspected-stream", "forwarded", "models"],
)
async def test_request_hop_by_hop_headers_never_reach_the_upstream(route: str) -> None:
    async def answer(conn: RawConn, req: RawRequest) -> None:
        if route == "inspected-stream":
            body = b"".join(chunks(Turn(content="hi"), "m"))
            await conn.send(head(200, SSE) + chunk(body) + chunk(b""))
        else:
            await ok_json(conn, req)

    async with RawUpstream(answer) as up, serve(up.url) as sg:
        if route == "models":
            data = raw_request(sg.port, "GET", "/v1/models", HOP_REQUEST + END_TO_END_REQUEST)
        else:
            body = chat_body(stream=route == "inspected-stream")
            if route == "forwarded":
                del body["tools"]
            payload = json.dumps(body).encode()
            data = raw_request(
                sg.port, "POST", "/v1/chat/completions", HOP_REQUEST + END_TO_END_REQUEST, payload
            )
        response = await asyncio.wait_for(raw_http(sg.port, data), HANG)
        assert status_of(response) == 200, response[:300]
        seen = {k for k, _ in up.requests[0].headers}
        assert not seen & HOP_NAMES - {"transfer-encoding"}, seen & HOP_NAMES
        assert up.requests[0].header("transfer-encoding") is None
        for key, value in END_TO_END_REQUEST:
            if key.lower() != "x-request-id":
                assert up.requests[0].header(key.lower()) == value
        assert up.requests[0].header("host") == f"127.0.0.1:{up.port}"


async def test_upgrade_requests_are_not_passed_on() -> None:
    async with RawUpstream(ok_json) as up, serve(up.url) as sg:
        headers = [("Connection", "Upgrade, X-Hop-A"), ("Upgrade", "h2c"), ("X-Hop-A", "1")]
        headers += [("HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA")]
        response = await asyncio.wait_for(
            raw_http(sg.port, raw_request(sg.port, "GET", "/v1/models", headers)), HANG
        )
        status = status_of(response)
        assert status != 101 and status < 500
        for seen in up.requests:
            assert seen.header("upgrade") is None and seen.header("x-hop-a") is None


async def test_names_in_a_second_connection_header_are_dropped_too() -> None:
    async with RawUpstream(ok_json) as up, serve(up.url) as sg:
        headers = [("Connection", "keep-alive"), ("Connection", "X-Hop-C"), ("X-Hop-C", "1")]
        response = await raw_http(sg.port, raw_request(sg.port, "GET", "/v1/models", headers))
        assert status_of(response) == 200
        assert up.requests[0].header("x-hop-c") is None


async def test_chunked_request_body_is_reframed() -> None:
    async with RawUpstream(ok_json) as up, serve(up.url) as sg:
        payload = json.dumps(chat_body()).encode()
        data = (
            (
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                b"Connection: close\r\n\r\n"
            )
            + chunk(payload[:50])
            + chunk(payload[50:])
            + b"0\r\n\r\n"
        )
        response = await asyncio.wait_for(raw_http(sg.port, data), HANG)
        assert status_of(response) == 200
        seen = up.requests[0]
        assert seen.body == payload
        assert seen.header("content-length") == str(len(payload))
        assert seen.header("transfer-encoding") is None


HOP_RESPONSE = {
    "Connection": "keep-alive, X-Hop-A",
    "X-Hop-A": "1",
    "Keep-Alive": "timeout=5, max=100",
    "Proxy-Connection": "keep-alive",
    "Trailer": "X-T",
    "Upgrade": "h2c",
    "Proxy-Authenticate": "Basic",
    "X-Keep": "yes",
    "retry-after": "3",
    "openai-processing-ms": "12",
    "x-ratelimit-remaining-requests": "9",
}


@pytest.mark.parametrize("route", ["inspected", "inspected-stream", "forwarded", "models"])
async def test_response_hop_by_hop_headers_never_reach_the_client(route: str) -> None:
    stream = route == "inspected-stream"

    async def answer(conn: RawConn, req: RawRequest) -> None:
        if stream:
            body = b"".join(chunks(Turn(content="hi"), "m"))
            await conn.send(head(200, SSE | HOP_RESPONSE) + chunk(body) + chunk(b""))
        else:
            body = b'{"object": "list", "data": []}'
            await conn.send(head(200, JSON | HOP_RESPONSE) + chunk(body) + chunk(b""))

    async with RawUpstream(answer) as up, serve(up.url) as sg:
        if route == "models":
            data = raw_request(sg.port, "GET", "/v1/models")
        else:
            body = chat_body(stream=stream)
            if route == "forwarded":
                del body["tools"]
            data = raw_request(
                sg.port, "POST", "/v1/chat/completions", [], json.dumps(body).encode()
            )
        response = await asyncio.wait_for(raw_http(sg.port, data), HANG)
        assert status_of(response) == 200, response[:300]
        got = response_headers(response)
        names = [k for k, _ in got]
        # The only hop-by-hop headers are spillguard's own framing, each at most once.
        assert names.count("transfer-encoding") + names.count("content-length") == 1, got
        # no Connection value from the upstream (spillguard's own keep-alive/close only)
        assert {v for k, v in got if k == "connection"} <= {"close", "keep-alive"}, got
        assert not set(names) & (HOP_NAMES - {"transfer-encoding", "connection"}), got
        for key in ("x-keep", "retry-after", "openai-processing-ms"):
            assert dict(got)[key] == HOP_RESPONSE.get(key, HOP_RESPONSE.get(key.title())), key
        if "content-length" in names:
            body = response.split(b"\r\n\r\n", 1)[1]
            assert len(body) == int(dict(got)["content-length"])


async def test_upstream_sees_its_own_host_not_the_clients() -> None:
    async with RawUpstream(ok_json) as up, serve(up.url) as sg:
        for target in ("/v1/models", "/v1/chat/completions"):
            body = json.dumps(chat_body()).encode() if "chat" in target else b""
            method = "POST" if body else "GET"
            evil = [("X-Forwarded-Host", "evil.example")]
            data = raw_request(sg.port, method, target, evil, body, host="evil.example")
            assert status_of(await raw_http(sg.port, data)) == 200
        for seen in up.requests:
            assert seen.header("host") == f"127.0.0.1:{up.port}"


async def test_no_cookie_jar_between_requests() -> None:
    """Alice's Set-Cookie reaches Alice (end to end) and never comes back from spillguard on
    anyone else's request: each request below is a fresh client that holds no cookies."""

    async def cookies(conn: RawConn, req: RawRequest) -> None:
        headers = JSON | {"Set-Cookie": f"session=secret-{req.index}; Path=/; HttpOnly"}
        await reply(conn, 200, headers, b'{"object": "list", "data": []}')

    async with RawUpstream(cookies) as up, serve(up.url) as sg:
        for i in range(4):
            async with httpx.AsyncClient(timeout=HANG) as fresh:
                if i % 2:
                    r = await fresh.post(sg.url + "/chat/completions", json=chat_body())
                else:
                    r = await fresh.get(sg.url + "/models")
                assert f"secret-{i}" in r.headers["set-cookie"]
        assert len(up.requests) == 4
        for seen in up.requests:
            assert seen.header("cookie") is None


async def test_repeated_set_cookie_headers_stay_separate() -> None:
    async def two(conn: RawConn, req: RawRequest) -> None:
        raw = (
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n"
            "set-cookie: __cf_bm=a; path=/; expires=Thu, 01 Jan 2099 00:00:00 GMT\r\n"
            "set-cookie: _cfuvid=b; path=/\r\n\r\n{}"
        )
        await conn.send(raw.encode())

    async with RawUpstream(two) as up, serve(up.url) as sg:
        response = await raw_http(sg.port, raw_request(sg.port, "GET", "/v1/models"))
        cookies = [v for k, v in response_headers(response) if k == "set-cookie"]
        assert len(cookies) == 2, cookies


async def test_environment_proxies_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    async def trap(conn: RawConn, req: RawRequest) -> None:
        await reply(conn, 599, JSON, b'{"trap": true}')

    async with RawUpstream(trap) as evil, RawUpstream(ok_json) as up:
        dead = f"http://127.0.0.1:{free_port()}"
        live = f"http://127.0.0.1:{evil.port}"
        for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.setenv(name, live)
        for name in ("HTTPS_PROXY", "https_proxy"):
            monkeypatch.setenv(name, dead)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        async with serve(up.url) as sg, httpx.AsyncClient(timeout=HANG, trust_env=False) as http:
            assert (await http.get(sg.url + "/models")).status_code == 200
            r = await http.post(sg.url + "/chat/completions", json=chat_body())
            assert r.status_code == 200
        assert evil.requests == [] and evil.conns == []
        assert len(up.requests) == 2


@pytest.mark.parametrize("route", ["inspected", "inspected-stream", "models"])
@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_redirects_are_passed_to_the_client_not_followed(route: str, status: int) -> None:
    async with RawUpstream(ok_json) as evil:
        where = f"http://127.0.0.1:{evil.port}/v1/elsewhere"

        async def redirect(conn: RawConn, req: RawRequest) -> None:
            await reply(conn, status, JSON | {"Location": where}, b"{}")

        async with (
            RawUpstream(redirect) as up,
            serve(up.url) as sg,
            httpx.AsyncClient(timeout=HANG, follow_redirects=False) as http,
        ):
            if route == "models":
                r = await http.get(sg.url + "/models")
            else:
                body = chat_body(stream=route == "inspected-stream")
                r = await http.post(sg.url + "/chat/completions", json=body)
        assert r.status_code == status
        assert r.headers["location"] == where
        assert len(up.requests) == 1
        assert evil.requests == [] and evil.conns == []


# ---- compression: Content-Length and Content-Encoding match the bytes sent ------------------


def _compress(data: bytes, encoding: str) -> bytes:
    return gzip.compress(data) if encoding == "gzip" else zlib.compress(data)


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
@pytest.mark.parametrize("stream", [False, True])
async def test_compressed_reply_on_an_inspected_route_is_decoded(
    encoding: str, stream: bool
) -> None:
    plain = (
        b"".join(chunks(Turn(content="Sunny."), "m"))
        if stream
        else json.dumps(completion(Turn(content="Sunny."), "m")).encode()
    )

    async def squeeze(conn: RawConn, req: RawRequest) -> None:
        assert req.header("accept-encoding") == "identity"
        ctype = SSE if stream else JSON
        await reply(conn, 200, ctype | {"Content-Encoding": encoding}, _compress(plain, encoding))

    async with RawUpstream(squeeze) as up, serve(up.url) as sg:
        body = json.dumps(chat_body(stream=stream)).encode()
        data = raw_request(sg.port, "POST", "/v1/chat/completions", [], body)
        response = await asyncio.wait_for(raw_http(sg.port, data), HANG)
        assert status_of(response) == 200
        got = dict(response_headers(response))
        assert "content-encoding" not in got
        if not stream:
            assert response.split(b"\r\n\r\n", 1)[1] == plain
            assert got["content-length"] == str(len(plain))
        else:
            data = sse_events(response.split(b"\r\n\r\n", 1)[1].decode())
            deltas = [json.loads(d)["choices"][0]["delta"] for d in data[:-1]]
            assert "".join(d.get("content") or "" for d in deltas) == "Sunny."
            assert data[-1] == "[DONE]"


async def test_compressed_reply_on_a_forwarded_route_passes_as_sent() -> None:
    plain = b'{"object": "list", "data": [' + b'{"id": "m"},' * 200 + b'{"id": "z"}]}'
    packed = gzip.compress(plain)

    async def squeeze(conn: RawConn, req: RawRequest) -> None:
        await reply(conn, 200, JSON | {"Content-Encoding": "gzip"}, packed)

    async with RawUpstream(squeeze) as up, serve(up.url) as sg:
        async with httpx.AsyncClient(timeout=HANG) as http:
            r = await http.get(sg.url + "/models")
        assert r.status_code == 200
        assert r.headers["content-encoding"] == "gzip"
        assert r.headers["content-length"] == str(len(packed))
        assert r.content == plain  # httpx decoded it: the framing matched the bytes


PACKED = gzip.compress(json.dumps(completion(Turn(content="Sunny " * 40), "m")).encode())
PACKED_SSE = gzip.compress(b"".join(chunks(Turn(content="Sunny " * 40), "m")))


@pytest.mark.parametrize("stream", [False, True])
async def test_corrupt_compressed_reply_is_502(stream: bool) -> None:
    bad = (PACKED_SSE if stream else PACKED)[:10] + b"\xff\xff\xff\xff"  # invalid block type

    async def corrupt(conn: RawConn, req: RawRequest) -> None:
        await reply(conn, 200, (SSE if stream else JSON) | {"Content-Encoding": "gzip"}, bad)

    async with RawUpstream(corrupt) as up, serve(up.url) as sg:
        r = await asyncio.wait_for(post_chat(sg.url, stream), HANG)
        assert r.status_code == 502
        assert error_of(r.content)["code"] == "UPSTREAM_UNAVAILABLE"


@pytest.mark.parametrize("stream", [False, True])
async def test_truncated_compressed_reply_is_an_error(stream: bool) -> None:
    cut = (PACKED_SSE if stream else PACKED)[:-40]

    async def truncated(conn: RawConn, req: RawRequest) -> None:
        await reply(conn, 200, (SSE if stream else JSON) | {"Content-Encoding": "gzip"}, cut)

    async with RawUpstream(truncated) as up, serve(up.url) as sg:
        r = await asyncio.wait_for(post_chat(sg.url, stream), HANG)
        if stream and r.status_code == 200:
            assert error_of(sse_events(r.text)[-2])["code"] == "UPSTREAM_UNAVAILABLE"
        else:
            assert r.status_code == 502
            assert error_of(r.content)["code"] == "UPSTREAM_UNAVAILABLE"


@pytest.mark.parametrize("stream", [False, True])
async def test_compressed_reply_whose_header_arrives_alone_is_read_whole(stream: bool) -> None:
    packed = PACKED_SSE if stream else PACKED

    async def split(conn: RawConn, req: RawRequest) -> None:
        ctype = (SSE if stream else JSON) | {"Content-Encoding": "gzip"}
        await conn.send(head(200, ctype, content_length=str(len(packed))) + packed[:10])
        await asyncio.sleep(0.1)  # the header alone is read first
        await conn.send(packed[10:])

    async with RawUpstream(split) as up, serve(up.url) as sg:
        r = await asyncio.wait_for(post_chat(sg.url, stream), HANG)
        assert r.status_code == 200
        assert r.content == gzip.decompress(packed)


async def test_streamed_response_carries_one_connection_header() -> None:
    async def answer(conn: RawConn, req: RawRequest) -> None:
        body = b"".join(chunks(Turn(content="hi"), "m"))
        await conn.send(head(200, SSE) + chunk(body) + chunk(b""))

    async with RawUpstream(answer) as up, serve(up.url) as sg:
        body = json.dumps(chat_body(stream=True)).encode()
        data = raw_request(sg.port, "POST", "/v1/chat/completions", [], body)
        response = await asyncio.wait_for(raw_http(sg.port, data), HANG)
        values = [v for k, v in response_headers(response) if k == "connection"]
        assert values == ["close"], values


# ---- SSRF end to end ---------------------------------------------------------------------------

TARGETS = [
    "//evil.example/x",
    "//127.0.0.1:{evil}/v1/models",
    "/v1//evil.example/x",
    "/v1//127.0.0.1:{evil}/v1/models",
    "/v1/../admin",
    "/v1/./../admin",
    "/v1/%2e%2e/admin",
    "/v1/%2E%2E/%2E%2E/admin",
    "/v1/.%2e/admin",
    "/v1/%252e%252e/admin",
    "/v1/..%2fadmin",
    "/v1/x@evil.example",
    "/v1/x%40127.0.0.1:{evil}",
    "/v1/@127.0.0.1:{evil}/v1/models",
    "/v1/..\\admin",
    "/v1/%5c%5c127.0.0.1:{evil}/x",
    "/v1/http://127.0.0.1:{evil}/v1/models",
    "/v1/http:%2f%2f127.0.0.1:{evil}/v1/models",
    "/v1/%2f%2f127.0.0.1:{evil}/v1/models",
    "/v1/models?next=http://127.0.0.1:{evil}/v1/models",
    "/v1/models#@127.0.0.1:{evil}",
    "http://127.0.0.1:{evil}/v1/models",
    "http://evil.example/v1/models",
    "http://127.0.0.1:{evil}//v1/models",
]


@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize("target", TARGETS)
async def test_no_request_target_reaches_another_host(target: str, method: str) -> None:
    async with RawUpstream(ok_json) as evil, RawUpstream(ok_json) as up, serve(up.url) as sg:
        path = target.format(evil=evil.port)
        body = json.dumps(chat_body()).encode() if method == "POST" else b""
        data = raw_request(sg.port, method, path, [], body)
        response = await asyncio.wait_for(raw_http(sg.port, data), HANG)
        status = status_of(response)
        assert status < 500, response[:300]
        assert evil.requests == [] and evil.conns == []
        for seen in up.requests:  # what did reach the configured upstream stayed under /v1/
            assert seen.target.startswith("/v1/")
            assert ".." not in unquote(unquote(seen.target)).split("?")[0].split("/")
            assert seen.header("host") == f"127.0.0.1:{up.port}"
        if status == 400:
            assert error_of(response.split(b"\r\n\r\n", 1)[1])["code"] == "INVALID_PATH"


async def test_base_url_fields_in_the_body_are_not_honoured() -> None:
    async with RawUpstream(ok_json) as evil, RawUpstream(ok_json) as up, serve(up.url) as sg:
        there = f"http://127.0.0.1:{evil.port}/v1"
        body = chat_body(api_base=there, base_url=there, extra_body={"base_url": there})
        headers = {"X-Forwarded-Host": f"127.0.0.1:{evil.port}", "Forwarded": f"host={there}"}
        async with httpx.AsyncClient(timeout=HANG) as http:
            r = await http.post(sg.url + "/chat/completions", json=body, headers=headers)
        assert r.status_code == 200
        assert evil.conns == []
        assert len(up.requests) == 1


async def test_connect_and_asterisk_form_are_refused_cleanly() -> None:
    async with RawUpstream(ok_json) as evil, RawUpstream(ok_json) as up, serve(up.url) as sg:
        for data in (
            f"CONNECT 127.0.0.1:{evil.port} HTTP/1.1\r\nHost: 127.0.0.1:{evil.port}\r\n\r\n",
            "OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        ):
            response = await asyncio.wait_for(raw_http(sg.port, data.encode()), HANG)
            assert response == b"" or status_of(response) < 500
        assert evil.conns == [] and up.requests == []
