"""The app-conversation record's parts (control_plane.app_conversations), in-process."""

from __future__ import annotations

from control_plane.app_conversations import metrics_from_stats


def test_metrics_sum_every_llm_of_the_conversation() -> None:
    stats = {
        "usage_to_metrics": {
            "default": {
                "accumulated_cost": 0.5,
                "response_count": 2,
                "accumulated_token_usage": {
                    "prompt_tokens": 10,
                    "completion_tokens": 3,
                    "reasoning_tokens": 1,
                },
            },
            "condenser": {
                "accumulated_cost": 0.25,
                "accumulated_token_usage": {"prompt_tokens": 5},
            },
            "junk": "not a dict",
        }
    }
    # The OpenHands SDK's MetricsSnapshot (what the app server's record and the frontend read).
    assert metrics_from_stats(stats) == {
        "model_name": "default",
        "accumulated_cost": 0.75,
        "max_budget_per_task": None,
        "accumulated_token_usage": {
            "model": "",
            "prompt_tokens": 15,
            "completion_tokens": 3,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "reasoning_tokens": 1,
            "context_window": 0,
            "per_turn_token": 0,
            "response_id": "",
        },
    }
    assert metrics_from_stats("nothing") is None and metrics_from_stats({}) is None
