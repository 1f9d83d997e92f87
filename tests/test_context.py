"""`context.py`'s per-request readings of the raw ASGI scope: the headers that go upstream, the
request id, and the dialect, each against the Starlette-based reading it replaced, and the one
pass that reads them all (`Context.incoming`) against each alone."""

from __future__ import annotations

import os
import re

from hypothesis import given
from hypothesis import strategies as st
from starlette.datastructures import Headers

from spillguard.context import (
    DIALECT_KEY,
    REQUEST_DROP,
    Context,
    new_request_id,
    request_end_to_end,
    request_id,
    speaks_anthropic,
)
from spillguard.observe import Observer
from spillguard.settings import Settings
from spillguard.upstream import Upstream, end_to_end

NAMES = st.sampled_from(
    [
        b"authorization",
        b"content-type",
        b"connection",
        b"keep-alive",
        b"x-custom",
        b"x-other",
        b"te",
        b"host",
        b"content-length",
        b"openai-organization",
    ]
)
VALUES = st.one_of(
    st.sampled_from([b"close", b"x-custom", b"X-Custom, te", b"keep-alive,x-other", b""]),
    st.binary(max_size=12).filter(lambda b: b"\r" not in b and b"\n" not in b),
    st.text(max_size=6).map(lambda t: t.encode()),
)


def _reference(raw: list[tuple[bytes, bytes]], drop: frozenset[str]) -> dict[str, str]:
    """What spillguard sent before: Starlette's headers through `end_to_end`, each value
    re-read as UTF-8 when its Latin-1 reading was not ASCII and it is UTF-8."""

    def utf8(value: str) -> str:
        if value.isascii():
            return value
        try:
            return value.encode("latin-1").decode("utf-8")
        except UnicodeError:
            return value

    return {k: utf8(v) for k, v in end_to_end(Headers(raw=raw), drop).items()}


@given(st.lists(st.tuples(NAMES, VALUES), max_size=8))
def test_the_headers_sent_upstream_are_those_starlette_gave(
    raw: list[tuple[bytes, bytes]],
) -> None:
    assert request_end_to_end(raw, REQUEST_DROP) == _reference(raw, REQUEST_DROP)


def test_a_repeated_header_is_joined_before_it_is_decoded() -> None:
    raw = [(b"x-a", b"\x80"), (b"x-a", "\u0080".encode())]  # Latin-1, then UTF-8
    assert request_end_to_end(raw, frozenset()) == _reference(raw, frozenset())


def test_a_header_named_in_connection_is_dropped_whatever_its_case() -> None:
    raw = [(b"connection", b"X-Custom"), (b"x-custom", b"1"), (b"x-kept", b"2")]
    assert request_end_to_end(raw, frozenset()) == {"x-kept": "2"}


def test_utf8_values_are_read_as_utf8_and_other_bytes_as_latin1() -> None:
    raw = [(b"x-a", "caf\u00e9".encode()), (b"x-b", b"caf\xe9")]
    assert request_end_to_end(raw, frozenset()) == {"x-a": "caf\u00e9", "x-b": "caf\u00e9"}


def test_the_request_id_is_the_clients_cut_to_128_or_a_new_one() -> None:
    assert request_id([(b"x-request-id", b"r" * 200)]) == "r" * 128
    made = request_id([(b"x-request-id", b"")])
    assert made.startswith("sg-") and len(made) == 35 and made != request_id([])
    int(made[3:], 16)


def test_own_ids_differ_in_a_forked_worker() -> None:
    """The ids come from the process's `random` generator, which a forked child seeds anew."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, and out
        os.write(write, new_request_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    mine = new_request_id()
    assert re.fullmatch(r"sg-[0-9a-f]{32}", child) and re.fullmatch(r"sg-[0-9a-f]{32}", mine)
    assert child != mine


def test_the_dialect_is_read_once_and_kept_in_the_scope() -> None:
    scope = {"path": "/v1/chat/completions", "headers": [(b"anthropic-version", b"1")]}
    assert speaks_anthropic(scope) is True
    assert scope[DIALECT_KEY] is True
    scope["headers"] = []  # not read again
    assert speaks_anthropic(scope) is True
    assert speaks_anthropic({"path": "/v1/messages/count_tokens", "headers": []}) is True
    assert speaks_anthropic({"path": "/v1/chat/completions", "headers": []}) is False


READ_NAMES = st.one_of(
    NAMES,
    st.sampled_from(
        [b"x-request-id", b"anthropic-version", b"x-spillguard-mode", b"content-length", b"expect"]
    ),
)
SETTINGS = Settings(
    upstream="http://127.0.0.1:9/v1", anthropic_upstream="http://127.0.0.1:10", incidents_db=""
)
CONTEXT = Context(
    SETTINGS, Upstream(SETTINGS), Observer(SETTINGS), Upstream(SETTINGS, "http://127.0.0.1:10/v1")
)


@given(
    st.lists(st.tuples(READ_NAMES, VALUES), max_size=8),
    st.sampled_from(["/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens"]),
)
def test_one_reading_of_the_headers_says_what_each_reading_alone_says(
    raw: list[tuple[bytes, bytes]], path: str
) -> None:
    scope = {"type": "http", "path": path, "headers": raw}
    came = CONTEXT.incoming(scope)
    expected = request_end_to_end(raw, REQUEST_DROP)
    expected["x-request-id"] = came.request_id
    assert came.headers == expected
    if any(name == b"x-request-id" and value for name, value in raw):
        assert came.request_id == request_id(raw)
    else:
        assert came.request_id.startswith("sg-") and len(came.request_id) == 35
    lengths = [value.decode("latin-1") for name, value in raw if name == b"content-length"]
    assert came.declared == (lengths[0] if lengths else "")
    assert came.asks_mode == any(name == b"x-spillguard-mode" for name, _ in raw)
    anthropic = speaks_anthropic({"path": path, "headers": raw})
    assert scope[DIALECT_KEY] is anthropic
    assert came.target.anthropic is anthropic
    assert came.upstream is (CONTEXT.anthropic if anthropic else CONTEXT.upstream)


def test_the_headers_that_go_upstream_are_not_in_the_readings_repr() -> None:
    settings = Settings(upstream="http://127.0.0.1:9/v1", incidents_db="", upstream_key="sk-x1")
    ctx = Context(settings, Upstream(settings), Observer(settings))
    came = ctx.incoming({"type": "http", "path": "/v1/chat/completions", "headers": []})
    assert came.headers["authorization"] == "Bearer sk-x1"
    assert "sk-x1" not in repr(came)
