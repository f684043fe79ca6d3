"""The event schema (SPEC 2.7 and 6): round trips, the 6.2 table, constraints and golden files.

The SPEC table is written out below as data (required fields, default source, defaults) so a
change to a kind that drifts from the SPEC fails here, not in a client.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from ulid import ULID

import tools
from events import (
    EVENT_ADAPTER,
    EVENT_LIST_ADAPTER,
    KIND_NAMES,
    KINDS,
    CriticResult,
    Event,
    ImageContent,
    Message,
    MessageToolCall,
    ReasoningItemModel,
    RedactedThinkingBlock,
    SecurityRisk,
    TextContent,
    ThinkingBlock,
    ToolDefinition,
    format_timestamp,
    parse_event,
)
from events.content import ToolAnnotations
from events.tools import ACTION_TYPES, OBSERVATION_TYPES, Observation

GOLDEN = Path(__file__).parents[1] / "golden"
KIND_BY_NAME: dict[str, type[Event]] = {k.__name__: k for k in KINDS}
SOURCES = ("agent", "user", "environment", "hook")
COMMON = ("id", "timestamp", "source", "parent_id", "kind")
HOOK_EVENT_TYPES = (
    "PreToolUse",
    "PostToolUse",
    "UserPromptSubmit",
    "SessionStart",
    "SessionEnd",
    "Stop",
)

# -- SPEC 6.2, as data ---------------------------------------------------------------------

#: None: the kind has no default source, `source` is required.
DEFAULT_SOURCE: dict[str, str | None] = {
    "ServerErrorEvent": None,
    "ACPToolCallEvent": "agent",
    "Condensation": "environment",
    "CondensationRequest": "environment",
    "CondensationSummaryEvent": "environment",
    "ConversationErrorEvent": None,
    "ConversationStateUpdateEvent": "environment",
    "HookExecutionEvent": "hook",
    "LLMCompletionLogEvent": "environment",
    "ActionEvent": "agent",
    "MessageEvent": None,
    "AgentErrorEvent": "agent",
    "ObservationEvent": "environment",
    "UserRejectObservation": "environment",
    "SystemPromptEvent": "agent",
    "StreamingDeltaEvent": "agent",
    "TokenEvent": None,
    "InterruptEvent": "user",
    "PauseEvent": "user",
}

REQUIRED: dict[str, set[str]] = {
    "ServerErrorEvent": {"source", "code", "detail"},
    "ACPToolCallEvent": {"tool_call_id", "title"},
    "Condensation": {"llm_response_id"},
    "CondensationRequest": set(),
    "CondensationSummaryEvent": {"summary"},
    "ConversationErrorEvent": {"source", "code", "detail"},
    "ConversationStateUpdateEvent": set(),
    "HookExecutionEvent": {"hook_event_type", "hook_command", "success", "exit_code"},
    "LLMCompletionLogEvent": {"filename", "log_data"},
    "ActionEvent": {"thought", "tool_name", "tool_call_id", "tool_call", "llm_response_id"},
    "MessageEvent": {"source", "llm_message"},
    "AgentErrorEvent": {"tool_name", "tool_call_id", "error"},
    "ObservationEvent": {"tool_name", "tool_call_id", "observation", "action_id"},
    "UserRejectObservation": {"tool_name", "tool_call_id", "action_id"},
    "SystemPromptEvent": {"system_prompt", "tools"},
    "StreamingDeltaEvent": set(),
    "TokenEvent": {"source", "prompt_token_ids", "response_token_ids"},
    "InterruptEvent": set(),
    "PauseEvent": set(),
}

#: The optional kind-specific fields and the value an event gets when they are left out.
DEFAULTS: dict[str, dict[str, Any]] = {
    "ServerErrorEvent": {},
    "ACPToolCallEvent": {
        "status": None,
        "tool_kind": None,
        "raw_input": None,
        "raw_output": None,
        "content": None,
        "is_error": False,
    },
    "Condensation": {"forgotten_event_ids": [], "summary": None, "summary_offset": None},
    "CondensationRequest": {},
    "CondensationSummaryEvent": {},
    "ConversationErrorEvent": {},
    # The SPEC names no default key; "full_state" is ours.
    "ConversationStateUpdateEvent": {"key": "full_state", "value": None},
    "HookExecutionEvent": {
        "tool_name": None,
        "blocked": False,
        "stdout": "",
        "stderr": "",
        "reason": None,
        "additional_context": None,
        "error": None,
        "action_id": None,
        "message_id": None,
        "hook_input": None,
    },
    "LLMCompletionLogEvent": {"model_name": "unknown", "usage_id": "default"},
    "ActionEvent": {
        "reasoning_content": None,
        "thinking_blocks": [],
        "responses_reasoning_item": None,
        "action": None,
        "security_risk": "UNKNOWN",
        "critic_result": None,
        "summary": None,
    },
    "MessageEvent": {
        "llm_response_id": None,
        "activated_skills": [],
        "extended_content": [],
        "sender": None,
        "critic_result": None,
    },
    "AgentErrorEvent": {},
    "ObservationEvent": {"extended_content": []},
    "UserRejectObservation": {
        "rejection_reason": "User rejected the action",
        "rejection_source": "user",
    },
    "SystemPromptEvent": {"dynamic_context": None},
    "StreamingDeltaEvent": {"content": None, "reasoning_content": None},
    "TokenEvent": {},
    "InterruptEvent": {},
    "PauseEvent": {},
}


def golden(name: str) -> dict[str, Any]:
    return json.loads((GOLDEN / f"{name}.json").read_text())


def minimal(name: str) -> dict[str, Any]:
    """The golden example cut down to `kind` and the SPEC's required fields."""
    data = golden(name)
    return {k: v for k, v in data.items() if k == "kind" or k in REQUIRED[name]}


def errors_of(exc: pytest.ExceptionInfo[ValidationError]) -> list[tuple[str, tuple[Any, ...]]]:
    return [(e["type"], tuple(e["loc"])) for e in exc.value.errors()]


# -- strategies ----------------------------------------------------------------------------

text = st.text(max_size=16)
opt_text = st.none() | text
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=6), json_values, max_size=3)

ulids = st.integers(min_value=0, max_value=2**128 - 1).map(lambda n: str(ULID.from_int(n)))
event_ids = ulids | st.uuids().map(str) | text

offsets = st.integers(min_value=-86399, max_value=86399).map(
    lambda s: timezone(timedelta(seconds=s))
)
# Years 2..9998 so that no offset moves the UTC form out of the datetime range.
aware_moments = st.datetimes(
    min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31), timezones=offsets
)


def render_timestamp(moment: datetime, style: str) -> str:
    if style == "Z":
        return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return moment.isoformat(timespec=style)


timestamp_texts = st.builds(
    render_timestamp,
    aware_moments,
    st.sampled_from(["auto", "seconds", "milliseconds", "microseconds", "Z"]),
)

text_contents = st.builds(TextContent, text=text, cache_prompt=st.booleans())
image_contents = st.builds(
    ImageContent, image_urls=st.lists(text, max_size=2), cache_prompt=st.booleans()
)
contents = text_contents | image_contents
thinking_blocks = st.builds(ThinkingBlock, thinking=text, signature=opt_text) | st.builds(
    RedactedThinkingBlock, data=text
)
reasoning_items = st.builds(
    ReasoningItemModel,
    id=opt_text,
    summary=st.lists(text, max_size=2),
    content=st.none() | st.lists(text, max_size=2),
    encrypted_content=opt_text,
    status=opt_text,
)
tool_calls = st.builds(
    MessageToolCall,
    id=text,
    responses_item_id=opt_text,
    name=text,
    arguments=json_objects.map(json.dumps),
    origin=st.sampled_from(["completion", "responses"]),
)
critic_results = st.builds(
    CriticResult,
    score=st.floats(min_value=0.0, max_value=1.0),
    message=opt_text,
    metadata=st.none() | json_objects,
)
messages = st.builds(
    Message,
    role=st.sampled_from(["user", "system", "assistant", "tool"]),
    content=st.lists(contents, max_size=3),
    tool_calls=st.none() | st.lists(tool_calls, max_size=2),
    tool_call_id=opt_text,
    name=opt_text,
    reasoning_content=opt_text,
    thinking_blocks=st.lists(thinking_blocks, max_size=2),
    responses_reasoning_item=st.none() | reasoning_items,
)
tool_definitions = st.builds(
    ToolDefinition,
    kind=text,
    title=text,
    description=text,
    action_type=st.sampled_from([t.__name__ for t in ACTION_TYPES]),
    observation_type=st.none() | st.sampled_from([t.__name__ for t in OBSERVATION_TYPES]),
    parameters=json_objects,
    annotations=st.none()
    | st.builds(
        ToolAnnotations,
        title=opt_text,
        readOnlyHint=st.booleans(),
        destructiveHint=st.booleans(),
        idempotentHint=st.booleans(),
        openWorldHint=st.booleans(),
    ),
    meta=st.none() | json_objects,
)


def free_json(annotation: Any) -> st.SearchStrategy[Any]:
    """JSON values for an annotation that holds Any (hypothesis cannot make an Any)."""
    if annotation is Any:
        return json_values
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, UnionType):
        return st.one_of(*(free_json(a) for a in args))
    if origin is dict:
        return st.dictionaries(free_json(args[0]), free_json(args[1]), max_size=3)
    if origin is list:
        return st.lists(free_json(args[0]), max_size=3)
    return st.from_type(annotation)


def mentions_any(annotation: Any) -> bool:
    return annotation is Any or any(mentions_any(a) for a in get_args(annotation))


def payloads(cls: type[Any]) -> st.SearchStrategy[Any]:
    """Instances of a registered Action or Observation kind, whatever its fields are.

    builds() fills the required fields from their types; fields typed with Any get JSON.
    """
    given_fields: dict[str, st.SearchStrategy[Any]] = {
        name: free_json(info.annotation)
        for name, info in cls.model_fields.items()
        if mentions_any(info.annotation)
    }
    if issubclass(cls, Observation):
        given_fields |= {"content": st.lists(contents, max_size=2), "is_error": st.booleans()}
    return st.builds(cls, **given_fields)


actions = st.sampled_from(ACTION_TYPES).flatmap(payloads)
observations = st.sampled_from(OBSERVATION_TYPES).flatmap(payloads)

#: A strategy for every kind-specific field of every kind.
FIELDS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "ServerErrorEvent": {"code": text, "detail": text},
    "ACPToolCallEvent": {
        "tool_call_id": text,
        "title": text,
        "status": opt_text,
        "tool_kind": opt_text,
        "raw_input": json_values,
        "raw_output": json_values,
        "content": st.none() | st.lists(json_values, max_size=3),
        "is_error": st.booleans(),
    },
    "Condensation": {
        "forgotten_event_ids": st.lists(event_ids, unique=True, max_size=4),
        "summary": opt_text,
        "summary_offset": st.none() | st.integers(min_value=0),
        "llm_response_id": text,
    },
    "CondensationRequest": {},
    "CondensationSummaryEvent": {"summary": text},
    "ConversationErrorEvent": {"code": text, "detail": text},
    "ConversationStateUpdateEvent": {"key": text, "value": json_values},
    "HookExecutionEvent": {
        "hook_event_type": st.sampled_from(HOOK_EVENT_TYPES),
        "hook_command": text,
        "tool_name": opt_text,
        "success": st.booleans(),
        "blocked": st.booleans(),
        "exit_code": st.integers(min_value=-(2**31), max_value=2**31 - 1),
        "stdout": text,
        "stderr": text,
        "reason": opt_text,
        "additional_context": opt_text,
        "error": opt_text,
        "action_id": opt_text,
        "message_id": opt_text,
        "hook_input": st.none() | json_objects,
    },
    "LLMCompletionLogEvent": {
        "filename": text,
        "log_data": json_values.map(json.dumps),
        "model_name": text,
        "usage_id": text,
    },
    "ActionEvent": {
        "thought": st.lists(text_contents, max_size=2),
        "reasoning_content": opt_text,
        "thinking_blocks": st.lists(thinking_blocks, max_size=2),
        "responses_reasoning_item": st.none() | reasoning_items,
        "action": st.none() | actions,
        "tool_name": text,
        "tool_call_id": text,
        "tool_call": tool_calls,
        "llm_response_id": text,
        "security_risk": st.sampled_from(SecurityRisk),
        "critic_result": st.none() | critic_results,
        "summary": opt_text,
    },
    "MessageEvent": {
        "llm_message": messages,
        "llm_response_id": opt_text,
        "activated_skills": st.lists(text, max_size=2),
        "extended_content": st.lists(text_contents, max_size=2),
        "sender": opt_text,
        "critic_result": st.none() | critic_results,
    },
    "AgentErrorEvent": {"tool_name": text, "tool_call_id": text, "error": text},
    "ObservationEvent": {
        "tool_name": text,
        "tool_call_id": text,
        "observation": observations,
        "action_id": text,
        "extended_content": st.lists(text_contents, max_size=2),
    },
    "UserRejectObservation": {
        "tool_name": text,
        "tool_call_id": text,
        "action_id": text,
        "rejection_reason": text,
        "rejection_source": st.sampled_from(["user", "hook"]),
    },
    "SystemPromptEvent": {
        "system_prompt": text_contents,
        "tools": st.lists(tool_definitions, max_size=2),
        "dynamic_context": st.none() | text_contents,
    },
    "StreamingDeltaEvent": {
        "content": opt_text,
        "reasoning_content": opt_text,
        "tool_call_id": opt_text,
        "output": opt_text,
    },
    "TokenEvent": {
        "prompt_token_ids": st.lists(st.integers(min_value=0), max_size=8),
        "response_token_ids": st.lists(st.integers(min_value=0), max_size=8),
    },
    "InterruptEvent": {},
    "PauseEvent": {},
}


def events_of(name: str) -> st.SearchStrategy[Event]:
    """Events of one kind; optional fields are sometimes left out so defaults are exercised."""
    cls = KIND_BY_NAME[name]
    required = {k: s for k, s in FIELDS[name].items() if k in REQUIRED[name]}
    optional = {k: s for k, s in FIELDS[name].items() if k not in REQUIRED[name]}
    optional |= {"id": event_ids, "timestamp": timestamp_texts, "parent_id": st.none() | event_ids}
    (required if "source" in REQUIRED[name] else optional)["source"] = st.sampled_from(SOURCES)
    return st.fixed_dictionaries(required, optional=optional).map(lambda kw: cls(**kw))


@pytest.mark.e2e
def test_the_schema_and_the_tools_import_on_their_own() -> None:
    # Tools import their payloads from the schema, which imports no tool: each may be a
    # process's first import (a process whose first import was `tools` once died here), and
    # the schema alone (what the control plane and the bridge read) loads no tool code.
    alone = "import sys, events; assert not [m for m in sys.modules if m.split('.')[0] == 'tools']"
    for code in ("import tools", "import tools.always", "import events.tools.always", alone):
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            cwd=GOLDEN.parent.parent,
        )
        assert done.returncode == 0, done.stderr.strip().splitlines()[-1]


# -- the table -----------------------------------------------------------------------------


def test_there_are_19_kinds_each_named_by_its_kind_field() -> None:
    assert len(KINDS) == 19
    assert set(KIND_NAMES) == set(DEFAULT_SOURCE)
    for cls in KINDS:
        assert cls.model_fields["kind"].default == cls.__name__


#: Fields of ours beyond SPEC 6.2's row, left out of the JSON when null (a client validating the
#: SPEC's shape never meets them): a running tool's output on the transient path.
OURS = {"StreamingDeltaEvent": {"tool_call_id", "output"}}


@pytest.mark.parametrize("name", KIND_NAMES)
def test_fields_are_the_spec_fields(name: str) -> None:
    cls = KIND_BY_NAME[name]
    assert list(cls.model_fields)[:5] == list(COMMON)  # the log reads these off the line front
    spec_fields = set(COMMON) | (REQUIRED[name] - {"source"}) | set(DEFAULTS[name])
    assert set(cls.model_fields) == spec_fields | OURS.get(name, set())
    assert set(FIELDS[name]) == spec_fields - set(COMMON) | OURS.get(name, set())  # every field
    unset = cls.model_validate(minimal(name)).model_dump(mode="json")
    assert not set(unset) & OURS.get(name, set())


@pytest.mark.parametrize("name", KIND_NAMES)
def test_required_fields_are_the_spec_ones(name: str) -> None:
    cls = KIND_BY_NAME[name]
    assert {f for f, info in cls.model_fields.items() if info.is_required()} == REQUIRED[name]
    for field in REQUIRED[name]:
        data = minimal(name)
        del data[field]
        with pytest.raises(ValidationError) as exc:
            parse_event(data)
        assert ("missing", (name, field)) in errors_of(exc)


@pytest.mark.parametrize("name", KIND_NAMES)
def test_optional_fields_take_the_spec_defaults(name: str) -> None:
    data = minimal(name)
    data.pop("source", None)
    if DEFAULT_SOURCE[name] is None:
        data["source"] = "environment"
    event = parse_event(data)
    assert type(event) is KIND_BY_NAME[name]
    dumped = event.model_dump(mode="json")
    assert dumped["id"] is None and dumped["timestamp"] is None and dumped["parent_id"] is None
    assert {k: dumped[k] for k in DEFAULTS[name]} == DEFAULTS[name]
    if DEFAULT_SOURCE[name] is not None:
        assert event.source == DEFAULT_SOURCE[name]


@pytest.mark.parametrize("name", [n for n, s in DEFAULT_SOURCE.items() if s is None])
def test_kinds_without_a_default_source_require_one(name: str) -> None:
    data = golden(name)
    del data["source"]
    with pytest.raises(ValidationError) as exc:
        parse_event(data)
    assert ("missing", (name, "source")) in errors_of(exc)
    cls = KIND_BY_NAME[name]
    with pytest.raises(ValidationError):
        cls.model_validate({k: v for k, v in golden(name).items() if k != "source"})


@pytest.mark.parametrize("name", KIND_NAMES)
def test_source_is_one_of_the_four(name: str) -> None:
    for source in SOURCES:
        assert parse_event({**golden(name), "source": source}).source == source
    for bad in ("system", "Agent", "", None):
        with pytest.raises(ValidationError):
            parse_event({**golden(name), "source": bad})


# -- kind ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", KIND_NAMES)
def test_missing_kind_is_rejected(name: str) -> None:
    data = golden(name)
    del data["kind"]
    with pytest.raises(ValidationError) as exc:
        parse_event(data)
    assert [t for t, _ in errors_of(exc)] == ["union_tag_not_found"]
    with pytest.raises(ValidationError):
        parse_event(json.dumps(data))


@pytest.mark.parametrize("name", KIND_NAMES)
def test_wrong_kind_is_rejected(name: str) -> None:
    for bad in ("NoSuchEvent", name.lower(), name + " ", "Event", "", 7, None):
        with pytest.raises(ValidationError):
            parse_event({**golden(name), "kind": bad})
    # A model of one kind never accepts another kind's name.
    other = "PauseEvent" if name != "PauseEvent" else "InterruptEvent"
    with pytest.raises(ValidationError) as exc:
        KIND_BY_NAME[name].model_validate({**golden(name), "kind": other})
    assert ("literal_error", ("kind",)) in errors_of(exc)


# -- unknown fields ------------------------------------------------------------------------

#: Fields whose value is free-form JSON (any keys allowed inside).
FREE_FORM = {"raw_input", "raw_output", "value", "hook_input", "metadata", "parameters", "meta"}


def object_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths to every JSON object inside a golden event that is a schema model."""
    found: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        found.append(path)
        for key, inner in value.items():
            if key in FREE_FORM or (
                path == () and value.get("kind") == "ACPToolCallEvent" and key == "content"
            ):
                continue
            found.extend(object_paths(inner, (*path, key)))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            found.extend(object_paths(inner, (*path, i)))
    return found


#: Tags pydantic puts in an error's loc inside discriminated unions (not part of the JSON path).
UNION_TAGS = {t.__name__ for t in [*ACTION_TYPES, *OBSERVATION_TYPES]} | {
    "text",
    "image",
    "thinking",
    "redacted_thinking",
}
NESTED = [(name, path) for name in KIND_NAMES for path in object_paths(golden(name))]


def test_nested_models_are_all_probed() -> None:
    probed = {(name, path) for name, path in NESTED}
    for expected in [
        ("ActionEvent", ("tool_call",)),
        ("ActionEvent", ("action",)),
        ("ActionEvent", ("critic_result",)),
        ("ActionEvent", ("thinking_blocks", 1)),
        ("ActionEvent", ("responses_reasoning_item",)),
        ("MessageEvent", ("llm_message",)),
        ("MessageEvent", ("llm_message", "content", 1)),
        ("ObservationEvent", ("observation", "content", 0)),
        ("SystemPromptEvent", ("tools", 0, "annotations")),
        ("SystemPromptEvent", ("dynamic_context",)),
    ]:
        assert expected in probed


@pytest.mark.parametrize(
    ("name", "path"), NESTED, ids=[f"{n}:{'.'.join(map(str, p)) or '<top>'}" for n, p in NESTED]
)
def test_unknown_fields_are_rejected(name: str, path: tuple[Any, ...]) -> None:
    data = golden(name)
    target = data
    for step in path:
        target = target[step]
    target["surprise"] = 1
    with pytest.raises(ValidationError) as exc:
        parse_event(data)
    assert ("extra_forbidden", (name, *path, "surprise")) in [
        (t, tuple(x for x in loc if x not in UNION_TAGS)) for t, loc in errors_of(exc)
    ]
    with pytest.raises(ValidationError):
        parse_event(json.dumps(data))


def test_an_unregistered_action_kind_is_rejected() -> None:
    data = golden("ActionEvent")
    data["action"] = {"kind": "TerminalActionThatDoesNotExist", "command": "ls"}
    with pytest.raises(ValidationError):
        parse_event(data)
    data = golden("ObservationEvent")
    data["observation"] = {"kind": "NoSuchObservation", "content": [], "is_error": False}
    with pytest.raises(ValidationError):
        parse_event(data)


def test_the_always_present_tools_are_registered() -> None:
    names = [t.__name__ for t in ACTION_TYPES]
    assert {"FinishAction", "ThinkAction"} <= set(names)  # SPEC 2.6 rule 1
    assert len(names) == len(set(names))
    observations = [t.__name__ for t in OBSERVATION_TYPES]
    assert len(observations) == len(set(observations))


def test_the_schema_knows_every_kind_the_tools_run() -> None:
    # The schema lists its payloads itself (events never imports tools); the tool sets list
    # theirs: the two lists are the same classes, in the same order.
    assert tools.action_types() == list(ACTION_TYPES)
    assert tools.observation_types() == list(OBSERVATION_TYPES)


@pytest.mark.parametrize("payload", [*ACTION_TYPES, *OBSERVATION_TYPES], ids=lambda t: t.__name__)
@given(data=st.data())
@settings(max_examples=10, deadline=None)
def test_every_registered_kind_travels_inside_its_event(payload: type, data: st.DataObject) -> None:
    value = data.draw(payloads(payload))
    if payload in ACTION_TYPES:
        event = parse_event({**golden("ActionEvent"), "action": value.model_dump(mode="json")})
        assert type(event.action) is payload and event.action == value  # type: ignore[attr-defined]
    else:
        data = {**golden("ObservationEvent"), "observation": value.model_dump(mode="json")}
        event = parse_event(data)
        assert type(event.observation) is payload  # type: ignore[attr-defined]
        assert event.observation == value  # type: ignore[attr-defined]


# -- constraints ---------------------------------------------------------------------------


@pytest.mark.parametrize("score", [-0.0001, 1.0001, -1, 2, math.inf, -math.inf, math.nan, "high"])
@pytest.mark.parametrize("name", ["ActionEvent", "MessageEvent"])
def test_critic_score_outside_0_1_is_rejected(name: str, score: Any) -> None:
    data = golden(name)
    data["critic_result"] = {"score": score, "message": None, "metadata": None}
    with pytest.raises(ValidationError):
        parse_event(data)


@pytest.mark.parametrize("score", [0, 0.0, 0.5, 1, 1.0])
def test_critic_score_bounds_are_inclusive(score: float) -> None:
    data = golden("ActionEvent")
    data["critic_result"] = {"score": score, "message": "ok", "metadata": None}
    assert parse_event(data).critic_result.score == score  # type: ignore[attr-defined]


def test_critic_message_is_required_even_though_it_may_be_null() -> None:
    data = golden("ActionEvent")
    data["critic_result"] = {"score": 0.5}
    with pytest.raises(ValidationError) as exc:
        parse_event(data)
    assert ("missing", ("ActionEvent", "critic_result", "message")) in errors_of(exc)


@pytest.mark.parametrize("offset", [-1, -(2**40)])
def test_negative_summary_offset_is_rejected(offset: int) -> None:
    with pytest.raises(ValidationError) as exc:
        parse_event({**golden("Condensation"), "summary_offset": offset})
    assert [loc for _, loc in errors_of(exc)] == [("Condensation", "summary_offset")]


@pytest.mark.parametrize("offset", [0, 1, 10**6, None])
def test_summary_offset_zero_positive_or_null_is_accepted(offset: int | None) -> None:
    event = parse_event({**golden("Condensation"), "summary_offset": offset})
    assert event.summary_offset == offset  # type: ignore[attr-defined]


@given(st.lists(text, min_size=1, max_size=6), st.data())
@settings(max_examples=50, deadline=None)
def test_duplicate_forgotten_ids_are_rejected(ids: list[str], data: st.DataObject) -> None:
    repeated = data.draw(st.sampled_from(ids))
    position = data.draw(st.integers(0, len(ids)))
    with_dup = [*ids[:position], repeated, *ids[position:]]
    with pytest.raises(ValidationError) as exc:
        parse_event({**golden("Condensation"), "forgotten_event_ids": with_dup})
    assert [loc for _, loc in errors_of(exc)] == [("Condensation", "forgotten_event_ids")]


@pytest.mark.parametrize(
    "stamp",
    [
        "2026-01-31T12:00:00",  # naive
        "2026-01-31T12:00:00.123456",  # naive
        "2026-01-31",  # a date is naive too
        "2026-01-31 12:00:00",
        "yesterday",
        "",
        "2026-13-01T00:00:00+00:00",
        "2026-01-31T12:00:00+25:00",
    ],
)
def test_bad_timestamps_are_rejected(stamp: str) -> None:
    with pytest.raises(ValidationError) as exc:
        parse_event({**golden("PauseEvent"), "timestamp": stamp})
    assert [loc for _, loc in errors_of(exc)] == [("PauseEvent", "timestamp")]


@pytest.mark.parametrize("stamp", ["0001-01-01T00:30:00+01:00", "9999-12-31T23:00:00-05:00"])
def test_timestamps_whose_utc_form_is_out_of_range_are_a_validation_error(stamp: str) -> None:
    # Bug: format_timestamp's astimezone raises OverflowError, which pydantic does not turn
    # into a ValidationError, so a webhook body with such a time would be a 500, not a 422.
    with pytest.raises(ValidationError):
        parse_event({**golden("PauseEvent"), "timestamp": stamp})


@given(timestamp_texts)
@settings(max_examples=200, deadline=None)
def test_timestamps_are_normalised_to_utc_and_keep_their_instant(stamp: str) -> None:
    event = parse_event({"kind": "PauseEvent", "timestamp": stamp})
    assert event.timestamp is not None
    assert event.timestamp.endswith("+00:00") and len(event.timestamp) == 32
    moment = datetime.fromisoformat(event.timestamp)
    assert moment == datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    assert event.timestamp == format_timestamp(moment)
    assert parse_event(event.model_dump_json()).timestamp == event.timestamp


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        (("llm_message", "role"), "robot"),
        (("llm_message", "content", 0, "type"), "video"),
        (("llm_message", "thinking_blocks"), [{"type": "thinking"}]),
    ],
)
def test_message_enums_and_required_parts(path: tuple[Any, ...], bad: Any) -> None:
    data = golden("MessageEvent")
    target = data
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = bad
    with pytest.raises(ValidationError):
        parse_event(data)


@pytest.mark.parametrize(
    ("name", "field", "bad"),
    [
        ("ActionEvent", "security_risk", "CRITICAL"),
        ("ActionEvent", "security_risk", "low"),
        ("HookExecutionEvent", "hook_event_type", "PreCompact"),
        ("UserRejectObservation", "rejection_source", "agent"),
        ("ActionEvent", "thought", "not a list"),
        ("TokenEvent", "prompt_token_ids", ["one"]),
        ("SystemPromptEvent", "tools", [{"title": "think"}]),
    ],
)
def test_enum_and_type_violations_are_rejected(name: str, field: str, bad: Any) -> None:
    with pytest.raises(ValidationError) as exc:
        parse_event({**golden(name), field: bad})
    assert all(loc[:2] == (name, field) for _, loc in errors_of(exc))


@pytest.mark.parametrize("origin", ["chat", None])
def test_tool_call_origin_is_completion_or_responses(origin: Any) -> None:
    data = golden("ActionEvent")
    data["tool_call"]["origin"] = origin
    with pytest.raises(ValidationError):
        parse_event(data)
    del data["tool_call"]["origin"]
    with pytest.raises(ValidationError):
        parse_event(data)


def test_security_risk_is_ordered_unknown_to_high() -> None:
    assert [r.value for r in sorted(SecurityRisk, key=lambda r: r.rank)] == [
        "UNKNOWN",
        "LOW",
        "MEDIUM",
        "HIGH",
    ]


# -- round trips ---------------------------------------------------------------------------

EVENTS = {name: events_of(name) for name in KIND_NAMES}


@pytest.mark.parametrize("name", KIND_NAMES)
@given(data=st.data())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_model_json_model_round_trip(name: str, data: st.DataObject) -> None:
    event = data.draw(EVENTS[name], label=name)
    text_form = event.model_dump_json()
    again = parse_event(text_form)
    assert type(again) is type(event)
    assert again == event
    assert again.model_dump_json() == text_form
    assert parse_event(json.loads(text_form)) == event
    assert parse_event(text_form.encode()) == event
    assert list(json.loads(text_form))[:5] == list(COMMON)
    assert EVENT_ADAPTER.validate_json(EVENT_ADAPTER.dump_json(event)) == event
    assert EVENT_LIST_ADAPTER.validate_json(EVENT_LIST_ADAPTER.dump_json([event, event])) == [
        event,
        event,
    ]


# -- golden files --------------------------------------------------------------------------


def test_there_is_one_golden_file_per_kind() -> None:
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == sorted(KIND_NAMES)


@pytest.mark.parametrize("name", KIND_NAMES)
def test_golden_example_parses_and_reserialises_to_the_same_json(name: str) -> None:
    raw = (GOLDEN / f"{name}.json").read_text()
    data = json.loads(raw)
    event = parse_event(raw)
    assert type(event) is KIND_BY_NAME[name]
    # every field written out (ours only when set)
    assert set(data) == set(KIND_BY_NAME[name].model_fields) - OURS.get(name, set())
    assert list(data)[:5] == list(COMMON)
    assert json.loads(event.model_dump_json()) == data
    assert json.loads(EVENT_ADAPTER.dump_json(event)) == data
