"""spillguard's errors, all in the OpenAI error shape.

    SpillguardError                   HTTP status, error code, message
    ├── LeakedToolCall                502 TEXT_ENCODED_TOOL_CALL (after a retry, or in fail mode)
    ├── UpstreamUnavailable           502 UPSTREAM_UNAVAILABLE (connect failed, reset, bad reply)
    ├── UpstreamTimeout               504 UPSTREAM_TIMEOUT (connect, read-idle or total deadline)
    ├── UpstreamError                 502 UPSTREAM_ERROR (a spliced retry failed mid-stream)
    ├── ReplyTooLarge                 502 REPLY_TOO_LARGE (over the hold-back cap)
    ├── InternalError                 500 INTERNAL_ERROR (a defect of spillguard's, no traceback)
    └── ClientError                   4xx from spillguard itself (body too large, bad target,
                                      proxy key missing, overloaded)

Foreign exceptions (aiohttp, asyncio, json) are mapped to these at the boundary in `upstream.py`
and `proxy.py`; nothing else reaches a client.
"""

from __future__ import annotations

import json
from typing import Any


class SpillguardError(Exception):
    status = 502
    code = "SPILLGUARD_ERROR"
    type = "spillguard_error"

    def __init__(self, message: str, *, meta: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.meta = meta

    @property
    def client_message(self) -> str:
        """The message as clients get it in the OpenAI shape."""
        return self.message

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {
            "message": self.client_message,
            "type": self.type,
            "param": None,
            "code": self.code,
        }
        if self.meta is not None:
            error["meta"] = self.meta
        return {"error": error}

    def json_bytes(self) -> bytes:
        return json.dumps(self.body(), ensure_ascii=False).encode()


class LeakedToolCall(SpillguardError):
    code = "TEXT_ENCODED_TOOL_CALL"
    type = "upstream_error"

    def __init__(self, meta: dict[str, Any], leaked_tokens: int | None = None) -> None:
        super().__init__("Model returned tool-control text instead of a final answer", meta=meta)
        self.leaked_tokens = leaked_tokens  # what the upstream billed the leaked attempts, if known

    @property
    def client_message(self) -> str:
        """With the code in front: some clients (LiteLLM) keep only an error's message."""
        return f"{self.code}: {self.message}"


class UpstreamUnavailable(SpillguardError):
    code = "UPSTREAM_UNAVAILABLE"
    type = "upstream_error"


class UpstreamTimeout(SpillguardError):
    status = 504
    code = "UPSTREAM_TIMEOUT"
    type = "upstream_error"


class UpstreamError(SpillguardError):
    """The upstream failed a retry after the client's stream had started."""

    code = "UPSTREAM_ERROR"
    type = "upstream_error"


class ReplyTooLarge(SpillguardError):
    code = "REPLY_TOO_LARGE"
    type = "upstream_error"


class InternalError(SpillguardError):
    """A defect in spillguard itself, reported cleanly (no traceback reaches a client)."""

    status = 500
    code = "INTERNAL_ERROR"
    type = "server_error"


class ClientError(SpillguardError):
    type = "invalid_request_error"

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
