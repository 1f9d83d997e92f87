"""`context.py`'s per-request readings of the raw ASGI scope: the headers that go upstream, the
request id, and the dialect, each against the Starlette-based reading it replaced."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from starlette.datastructures import Headers

from spillguard.context import (
    DIALECT_KEY,
    REQUEST_DROP,
    request_end_to_end,
    request_id,
    speaks_anthropic,
)
from spillguard.upstream import end_to_end

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


def test_the_dialect_is_read_once_and_kept_in_the_scope() -> None:
    scope = {"path": "/v1/chat/completions", "headers": [(b"anthropic-version", b"1")]}
    assert speaks_anthropic(scope) is True
    assert scope[DIALECT_KEY] is True
    scope["headers"] = []  # not read again
    assert speaks_anthropic(scope) is True
    assert speaks_anthropic({"path": "/v1/messages/count_tokens", "headers": []}) is True
    assert speaks_anthropic({"path": "/v1/chat/completions", "headers": []}) is False
