"""The gateway's own answers, in the words of the provider the client thought it called.

A model client parses its provider's error body: an OpenAI client reads `{"error": {"message",
"type", "code"}}`, an Anthropic one `{"type": "error", "error": {"type", "message"}}`. So a
refusal of the gateway (no token, a budget spent) is shaped like the provider's own, and the
client shows its message as it would the provider's. Which shape: Anthropic's for a request to
`.../messages` or one carrying `anthropic-version`, OpenAI's (the common one) otherwise.

    Refusal(kind)      status  OpenAI type / code                      Anthropic type
    AUTHENTICATION     401     invalid_request_error / invalid_api_key  authentication_error
    NO_UPSTREAM        400     invalid_request_error / no_base_url      invalid_request_error
    TARGET_REFUSED     403     invalid_request_error / forbidden_target permission_error
    TOO_LARGE          413     invalid_request_error / request_too_large request_too_large
    RATE               429     requests / rate_limit_exceeded           rate_limit_error
    BUDGET             402     insufficient_quota / daily_budget_...    billing_error
    UNREACHABLE        502     api_error / upstream_unreachable         api_error
    UNAVAILABLE        503     api_error / storage_unavailable          api_error

A spent budget is 402, not 429: litellm makes every 429 a RateLimitError, which the agent
(and the OpenAI and Anthropic SDKs) try again, so a 429 would hold a run in pointless retries
until midnight or until its retries ran out; a 402 ends it at once with the message, as
OpenRouter's exhausted credits do. For the same reason its message never says "rate limit":
litellm reads that phrase in any error as a rate limit, whatever the status.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping

from starlette.responses import Response


class Kind(enum.Enum):
    # (status, OpenAI type, OpenAI code, Anthropic type)
    AUTHENTICATION = (401, "invalid_request_error", "invalid_api_key", "authentication_error")
    NO_UPSTREAM = (400, "invalid_request_error", "no_base_url", "invalid_request_error")
    TARGET_REFUSED = (403, "invalid_request_error", "forbidden_target", "permission_error")
    TOO_LARGE = (413, "invalid_request_error", "request_too_large", "request_too_large")
    RATE = (429, "requests", "rate_limit_exceeded", "rate_limit_error")
    BUDGET = (402, "insufficient_quota", "daily_budget_exceeded", "billing_error")
    UNREACHABLE = (502, "api_error", "upstream_unreachable", "api_error")
    UNAVAILABLE = (503, "api_error", "storage_unavailable", "api_error")

    @property
    def status(self) -> int:
        return int(self.value[0])


class Refusal(Exception):
    """A request the gateway answers itself instead of forwarding it."""

    def __init__(self, kind: Kind, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.headers = dict(headers or {})


def anthropic_shaped(path: str, headers: Mapping[str, str]) -> bool:
    """Whether the client speaks Anthropic's messages API (its errors are shaped so)."""
    return "anthropic-version" in headers or path.rstrip("/").endswith(
        ("/messages", "/messages/count_tokens")
    )


def body(refusal: Refusal, anthropic: bool) -> dict[str, object]:
    _, type_, code, anthropic_type = refusal.kind.value
    if anthropic:
        return {"type": "error", "error": {"type": anthropic_type, "message": refusal.message}}
    return {"error": {"message": refusal.message, "type": type_, "param": None, "code": code}}


def response(refusal: Refusal, anthropic: bool) -> Response:
    return Response(
        json.dumps(body(refusal, anthropic)),
        status_code=refusal.kind.status,
        media_type="application/json",
        headers={"Cache-Control": "no-store", **refusal.headers},
    )
