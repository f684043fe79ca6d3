"""OpenAI's Responses API end to end: the real server, litellm's `aresponses`, and the
scripted server's `/responses`, which refuses a reasoning item that does not come back as it
was given (as OpenAI does with its encrypted content)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import create
from tests.support.api import events, send, wait_status
from tests.support.llm import Reply, ScriptedLLM

pytestmark = pytest.mark.e2e


def start(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, **llm_extra: Any
) -> str:
    created = create(
        client,
        llm,
        key,
        tmp_path,
        tools=["file_editor"],
        message="say hi in a file",
        run=True,
        llm_extra={"model": "openai/gpt-5-mini", "reasoning_effort": "low", **llm_extra},
    )
    return str(created["id"])


def reasoning_items(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for item in request["input"] if item.get("type") == "reasoning"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_gpt5_model_reasons_through_the_responses_api_and_gets_its_reasoning_back(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, stream: bool
) -> None:
    llm.script(
        key,
        Reply(
            text="I will write it.",
            reasoning="A file named hi.txt will do.",
            tool_calls=[
                (
                    "file_editor",
                    {"command": "create", "path": str(tmp_path / "hi.txt"), "file_text": "hi\n"},
                )
            ],
        ),
        Reply(text="Written.", reasoning="The file exists now."),
    )
    cid = start(client, llm, key, tmp_path, stream=stream, log_completions=True)
    assert wait_status(client, cid) == "finished"
    assert (tmp_path / "hi.txt").read_text() == "hi\n"

    first, second = llm.requests_for(key)
    # The Responses API's shape: stateless, the reasoning asked for encrypted, tools flat.
    assert first["store"] is False and first["include"] == ["reasoning.encrypted_content"]
    assert first["reasoning"] == {"effort": "low"}
    assert {t["name"] for t in first["tools"]} >= {"file_editor", "finish"}
    assert first["instructions"] and not reasoning_items(first)
    # The reasoning item came back before the call it led to, exactly as given.
    [item] = reasoning_items(second)
    assert {k: item.get(k) for k in ("id", "summary", "encrypted_content")} == llm.reasoning_items[
        item["id"]
    ]
    kinds = [i.get("type") for i in second["input"]]
    assert kinds[kinds.index("reasoning") + 1 :][:3] == [
        "message",
        "function_call",
        "function_call_output",
    ]

    # The events show the summary as the step's reasoning and keep the item.
    action = events(client, cid, "ActionEvent")[0]
    assert action["reasoning_content"] == "A file named hi.txt will do."
    assert action["responses_reasoning_item"]["summary"] == ["A file named hi.txt will do."]
    assert action["tool_call"]["origin"] == "responses"
    reply = events(client, cid, "MessageEvent", source__eq="agent")[0]
    assert reply["llm_message"]["content"][0]["text"] == "Written."
    assert reply["llm_message"]["responses_reasoning_item"]["summary"] == ["The file exists now."]

    # Completion logs keep the reasoning's summary, never its encrypted content.
    logs = [e["log_data"] for e in events(client, cid, "LLMCompletionLogEvent")]
    assert len(logs) == 2 and "[encrypted]" in logs[1]
    assert not any("sealed" in log for log in logs) and "A file named" in logs[0]

    # The next turn sends both reasoning items back, in order.
    llm.script(key, Reply(text="Still there."))
    send(client, cid, "is it there?")
    assert wait_status(client, cid, "finished") == "finished"
    third = llm.requests_for(key)[2]
    assert [i["summary"][0]["text"] for i in reasoning_items(third)] == [
        "A file named hi.txt will do.",
        "The file exists now.",
    ]
    metrics = client.get(f"/api/conversations/{cid}").json()["metrics"]
    assert metrics["accumulated_cost"] > 0
    assert metrics["accumulated_token_usage"]["reasoning_tokens"] == 14


def test_api_mode_chat_keeps_a_gpt5_model_on_chat_completions(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path
) -> None:
    llm.script(key, Reply(text="hi"))
    cid = start(client, llm, key, tmp_path, api_mode="chat")
    assert wait_status(client, cid) == "finished"
    [request] = llm.requests_for(key)
    assert "messages" in request and "input" not in request
