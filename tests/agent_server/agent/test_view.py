"""agent_server.agent.view: what the model sees, built from events."""

from __future__ import annotations

import itertools
from typing import Any

from agent_server.agent.view import ERROR_PREFIX, SUMMARY_PREFIX, View
from events import (
    ActionEvent,
    AgentErrorEvent,
    Condensation,
    CondensationRequest,
    Event,
    HookExecutionEvent,
    ImageContent,
    Message,
    MessageEvent,
    MessageToolCall,
    SystemPromptEvent,
    TextContent,
    UserRejectObservation,
)

_ids = itertools.count(1)


def stamped(event: Event) -> Event:
    event.id = f"e{next(_ids)}"
    return event


def user(text: str, *images: str) -> MessageEvent:
    content: list[Any] = [TextContent(text=text)]
    if images:
        content.append(ImageContent(image_urls=list(images)))
    return stamped(MessageEvent(source="user", llm_message=Message(role="user", content=content)))  # type: ignore[return-value]


def action(call_id: str, response: str, name: str = "think", thought: str = "") -> ActionEvent:
    return stamped(
        ActionEvent(  # type: ignore[return-value]
            thought=[TextContent(text=thought)] if thought else [],
            tool_name=name,
            tool_call_id=call_id,
            llm_response_id=response,
            tool_call=MessageToolCall(id=call_id, name=name, arguments="{}", origin="completion"),
        )
    )


def error(call_id: str, text: str = "boom") -> AgentErrorEvent:
    return stamped(AgentErrorEvent(tool_name="think", tool_call_id=call_id, error=text))  # type: ignore[return-value]


def view_of(*events: Event, vision: bool = False) -> View:
    view = View(vision=vision)
    for event in events:
        view.add(event)
    return view


def test_system_prompt_and_user_message() -> None:
    view = view_of(
        stamped(
            SystemPromptEvent(
                system_prompt=TextContent(text="be good"),
                tools=[],
                dynamic_context=TextContent(text="cwd: /w"),
            )
        ),
        u := user("hello"),
    )
    assert view.request() == [
        {
            "role": "system",
            "content": [{"type": "text", "text": "be good"}, {"type": "text", "text": "cwd: /w"}],
        },
        {"role": "user", "content": [{"type": "text", "text": "hello"}]},
    ]
    assert view.last_user_message_id == u.id


def test_images_only_for_a_vision_model() -> None:
    text_only = view_of(user("look", "data:image/png;base64,AAAA"))
    assert text_only.request()[0]["content"][1] == {"type": "text", "text": "[1 image(s) omitted]"}
    vision = view_of(user("look", "data:image/png;base64,AAAA"), vision=True)
    assert vision.request()[0]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,AAAA"},
    }


def test_calls_of_one_response_join_one_assistant_message() -> None:
    view = view_of(
        user("go"), action("a", "r1", thought="two things"), action("b", "r1"), action("c", "r2")
    )
    assistant = [m for m in view.request() if m["role"] == "assistant"]
    assert [[c["id"] for c in m["tool_calls"]] for m in assistant] == [["a", "b"], ["c"]]
    assert assistant[0]["content"] == "two things"
    assert list(view.pending) == ["a", "b", "c"]


def test_results_follow_their_call_even_after_a_user_message() -> None:
    view = view_of(
        user("go"),
        action("a", "r1"),
        action("b", "r1"),
        user("meanwhile"),
        error("b", "second failed"),
        stamped(
            UserRejectObservation(
                tool_name="think", tool_call_id="a", action_id="x", rejection_reason="no"
            )
        ),
    )
    roles = [(m["role"], m.get("tool_call_id")) for m in view.request()]
    assert roles == [
        ("user", None),
        ("assistant", None),
        ("tool", "b"),
        ("tool", "a"),
        ("user", None),
    ]
    contents = {m["tool_call_id"]: m["content"] for m in view.request() if m["role"] == "tool"}
    assert contents == {"b": "Error: second failed", "a": "Action rejected: no"}
    assert view.pending == {}


def test_a_result_for_an_unknown_call_is_ignored() -> None:
    view = view_of(user("go"), error("never-called"))
    assert [m["role"] for m in view.request()] == ["user"]


def test_a_blocked_prompt_leaves_the_view_and_context_joins_it() -> None:
    first, second = user("first"), user("second")
    view = view_of(
        first,
        second,
        stamped(
            HookExecutionEvent(
                hook_event_type="UserPromptSubmit",
                hook_command="x",
                success=False,
                blocked=True,
                exit_code=2,
                message_id=second.id,
            )
        ),
    )
    assert [m["content"][0]["text"] for m in view.request()] == ["first"]
    assert view.last_user_message_id == first.id
    view.add(
        stamped(
            HookExecutionEvent(
                hook_event_type="UserPromptSubmit",
                hook_command="x",
                success=True,
                blocked=False,
                exit_code=0,
                message_id=first.id,
                additional_context="more",
            )
        )
    )
    assert view.request()[0]["content"][-1] == {"type": "text", "text": "more"}


def test_condensation_forgets_and_places_the_summary() -> None:
    a, b, c = user("a"), user("b"), user("c")
    view = view_of(a, b, c, stamped(CondensationRequest()))
    assert view.condensation_requested
    view.add(
        stamped(
            Condensation(
                forgotten_event_ids=[a.id or "", b.id or ""],
                summary="a and b happened",
                summary_offset=0,
                llm_response_id="r",
            )
        )
    )
    texts = [m["content"][0]["text"] for m in view.request()]
    assert texts == [SUMMARY_PREFIX + "a and b happened", "c"]
    assert not view.condensation_requested


def test_request_is_a_new_list_and_size_measures_it() -> None:
    view = view_of(user("hi"))
    first = view.request()
    first.append({"role": "user", "content": "not in the view"})
    assert len(view.request()) == 1
    assert view.size() == len('[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]')
    assert ERROR_PREFIX.startswith("[An error occurred")
