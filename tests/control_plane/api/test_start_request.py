"""The start request of SPEC 2.5 (control_plane.start_request), in-process."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from control_plane.start_request import StartRequest


def test_start_request_follows_spec_2_5() -> None:
    ok = StartRequest.model_validate(
        {
            "initial_message": {
                "role": "user",
                "content": [{"type": "text", "text": "hi"}],
                "run": True,
            },
            "selected_repository": "acme/demo",
            "selected_branch": "feature/x",
            "secrets": {"GH_TOKEN": "tok-1"},
            "observability_span_name": "nightly.review",
            "observability_tags": ["a"],
            "observability_metadata": {
                "n": 1,
                "ok": True,
                "s": "x",
                "ids": [1, 2.5],
                "flags": [True],
            },
            "plugins": [
                {"name": "web", "url": "https://mcp.example/mcp", "headers": {"A": "${GH_TOKEN}"}}
            ],
            "something_else": 1,  # other clients send more: ignored
        }
    )
    assert ok.plugins[0].server() == {
        "url": "https://mcp.example/mcp",
        "headers": {"A": "${GH_TOKEN}"},
    }
    for bad in (
        {"observability_metadata": {"mixed": [1, "a"]}},
        {"observability_metadata": {"bools_and_numbers": [True, 1]}},
        {"observability_metadata": {"nested": {"a": 1}}},
        {"observability_metadata": {"null": None}},
        {"observability_span_name": "has spaces in it"},
        {"selected_repository": "acme"},
        {"selected_branch": "main"},
        {"selected_repository": "a/b", "selected_branch": "../x"},
        {"secrets": {"1BAD": "v"}},
        {"plugins": [{"name": "x", "command": "a", "url": "http://b"}]},
        {"initial_message": {"role": "assistant", "content": [{"text": "x"}]}},
    ):
        with pytest.raises(ValidationError):
            StartRequest.model_validate(bad)
