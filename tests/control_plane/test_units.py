"""In-process checks of the control plane's pure parts: the start request of SPEC 2.5, grouping
choices, usage metrics from stats events, error bodies, the cipher, container addresses, durations in words."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from control_plane.app_conversations import metrics_from_stats
from control_plane.crypto import Cipher, hash_key, new_key
from control_plane.grouping import Candidate, choose
from control_plane.lifecycle import duration
from control_plane.models import ExecutionStatus, GroupingStrategy
from control_plane.sandboxes.docker import for_container
from control_plane.start_request import StartRequest
from web.errors import from_pydantic

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_start_request_follows_spec_2_5() -> None:
    ok = StartRequest.model_validate({
        "initial_message": {"role": "user", "content": [{"type": "text", "text": "hi"}], "run": True},
        "selected_repository": "acme/demo", "selected_branch": "feature/x",
        "secrets": {"GH_TOKEN": "t"}, "observability_span_name": "nightly.review",
        "observability_tags": ["a"], "observability_metadata": {"n": 1, "ok": True, "s": "x",
                                                                "ids": [1, 2.5], "flags": [True]},
        "plugins": [{"name": "web", "url": "https://mcp.example/mcp", "headers": {"A": "${GH_TOKEN}"}}],
        "something_else": 1,  # other clients send more: ignored
    })
    assert ok.plugins[0].server() == {"url": "https://mcp.example/mcp", "headers": {"A": "${GH_TOKEN}"}}
    for bad in ({"observability_metadata": {"mixed": [1, "a"]}},
                {"observability_metadata": {"bools_and_numbers": [True, 1]}},
                {"observability_metadata": {"nested": {"a": 1}}},
                {"observability_metadata": {"null": None}},
                {"observability_span_name": "has spaces in it"},
                {"selected_repository": "acme"}, {"selected_branch": "main"},
                {"selected_repository": "a/b", "selected_branch": "../x"},
                {"secrets": {"1BAD": "v"}},
                {"plugins": [{"name": "x", "command": "a", "url": "http://b"}]},
                {"initial_message": {"role": "assistant", "content": [{"text": "x"}]}}):
        with pytest.raises(ValidationError):
            StartRequest.model_validate(bad)


def test_choices_of_each_strategy() -> None:
    def c(name: str, age: int, idle: int, n: int) -> Candidate:
        return Candidate(name, T0 - timedelta(minutes=age), T0 - timedelta(minutes=idle), n)
    available = [c("old", 60, 50, 5), c("mid", 30, 1, 1), c("new", 10, 20, 1)]
    assert choose(GroupingStrategy.NO_GROUPING, available) is None
    assert choose(GroupingStrategy.GROUP_BY_NEWEST, available) == "new"
    assert choose(GroupingStrategy.LEAST_RECENTLY_USED, available) == "old"
    assert choose(GroupingStrategy.FEWEST_CONVERSATIONS, available) == "mid"  # tie: the older
    assert choose(GroupingStrategy.ADD_TO_ANY, available) == "old"
    for strategy in GroupingStrategy:
        assert choose(strategy, []) is None


def test_metrics_sum_every_llm_of_the_conversation() -> None:
    stats = {"usage_to_metrics": {
        "default": {"accumulated_cost": 0.5, "response_count": 2,
                    "accumulated_token_usage": {"prompt_tokens": 10, "completion_tokens": 3,
                                                "reasoning_tokens": 1}},
        "condenser": {"accumulated_cost": 0.25, "accumulated_token_usage": {"prompt_tokens": 5}},
        "junk": "not a dict"}}
    assert metrics_from_stats(stats) == {
        "accumulated_cost": 0.75, "prompt_tokens": 15, "completion_tokens": 3,
        "cache_read_tokens": 0, "cache_write_tokens": 0, "reasoning_tokens": 1, "response_count": 2}
    assert metrics_from_stats("nothing") is None and metrics_from_stats({}) is None
    assert ExecutionStatus.parse("waiting_for_confirmation") is ExecutionStatus.WAITING_FOR_CONFIRMATION
    assert ExecutionStatus.parse("nonsense") is None


def test_validation_errors_never_echo_secrets() -> None:
    from control_plane.settings import SettingsPatch

    with pytest.raises(ValidationError) as caught:
        SettingsPatch.model_validate({"llm_api_key": 123456789, "secrets": {"bad name": "sk-live"}})
    error = from_pydantic(caught.value, "body")
    assert error.status_code == 422
    text = str(error.errors)
    assert "123456789" not in text and "sk-live" not in text
    assert all(item["loc"][0] == "body" for item in error.errors)


def test_cipher_and_keys(tmp_path: Path) -> None:
    cipher = Cipher.for_config(None, tmp_path)
    token = cipher.encrypt("sk-secret")
    assert "sk-secret" not in token and cipher.decrypt(token) == "sk-secret"
    assert Cipher.for_config(None, tmp_path).decrypt(token) == "sk-secret"  # the same key file
    with pytest.raises(ValueError, match="SECRET_KEY"):
        Cipher("another passphrase").decrypt(token)
    assert Cipher("a passphrase").decrypt(Cipher("a passphrase").encrypt("x")) == "x"
    key = new_key("cp")
    assert key.startswith("cp_") and len(key) > 40 and hash_key(key) != key


def test_containers_reach_the_host_by_its_alias() -> None:
    assert for_container("http://127.0.0.1:3000/api/v1/webhooks") == \
        "http://host.docker.internal:3000/api/v1/webhooks"
    assert for_container("http://0.0.0.0:3000/x") == "http://host.docker.internal:3000/x"
    assert for_container("http://localhost/x") == "http://host.docker.internal/x"
    assert for_container("https://cp.example.com:8443/x") == "https://cp.example.com:8443/x"
    assert for_container("http://172.17.0.1:3000/x") == "http://172.17.0.1:3000/x"


def test_durations_read_as_a_person_says_them() -> None:
    assert [duration(s) for s in (45, 60, 1800, 3600, 5400, 86400, 7 * 86400, 90.5)] == \
        ["45 s", "1 min", "30 min", "1 h", "1 h 30 min", "1 day", "7 days", "90.5 s"]
