"""/api/conversations: create, read, list, search, delete, and the run controls."""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import Response

from agent_server.agent.policies import HookConfig
from agent_server.api.io import conversation, read_body, service, services
from agent_server.api.schemas import (
    AgentAnswer,
    AskAgent,
    ConfirmationResponse,
    ConversationIds,
    ConversationInfo,
    ConversationPage,
    LoadPlugin,
    Navigate,
    SetConfirmationPolicy,
    SetSecurityAnalyzer,
    UpdateSecrets,
)
from agent_server.record import (
    ConversationSearch,
    CreateConversation,
    ForkRequest,
    secret_values,
)
from events import CondensationRequest
from web.errors import NotFound
from web.io import Success, doc, located, read_query, reply


@doc(
    summary="Create a conversation (201), or return the one with this conversation_id (200)",
    body=CreateConversation,
    response=ConversationInfo,
    status=201,
    also={200: "A conversation with this conversation_id exists: it, unchanged"},
)
async def create(request: Request) -> Response:
    body = await read_body(request, CreateConversation)
    with located("body"):
        conv, created = await service(request).create(body)
    info = (await conv.opened_info()).model_dump_json()  # encoded once, for both
    if created:
        services(request).delivery.notify(info.encode())
    return Response(info, 201 if created else 200, media_type="application/json")


def notify(request: Request, info: ConversationInfo, status: str | None = None) -> None:
    """The conversation webhook (the OpenHands agent server's): `status` overrides."""
    data = info.model_dump(mode="json")
    if status is not None:
        data["execution_status"] = status
    services(request).delivery.notify(json.dumps(data).encode())


@doc(summary="A conversation, with its execution_status", response=ConversationInfo, errors=(404,))
async def get(request: Request) -> Response:
    conv = conversation(request)
    info = await conv.opened_info()
    conv.shown.publish_if_settled(conv.running)
    return reply(info)


@doc(
    summary="Conversations by id (null for an unknown id)",
    query=ConversationIds,
    response=list[ConversationInfo | None],
)
async def batch_get(request: Request) -> Response:
    query = read_query(request, ConversationIds)
    found = [service(request).get(i) for i in query.ids]
    return reply([None if c is None else c.shown.info().model_dump(mode="json") for c in found])


@doc(summary="Search conversations", query=ConversationSearch, response=ConversationPage)
async def search(request: Request) -> Response:
    query = read_query(request, ConversationSearch)
    page, next_id = service(request).search(query)
    return reply(ConversationPage(items=[c.shown.info() for c in page], next_page_id=next_id))


@doc(summary="Count conversations", query=ConversationSearch, response=int)
async def count(request: Request) -> Response:
    query = read_query(request, ConversationSearch)
    return reply(len(service(request).matching(query)))


@doc(
    summary="Delete a conversation: stops its run and removes its log (the workspace stays)",
    response=Success,
    errors=(404,),
)
async def delete(request: Request) -> Response:
    conv = conversation(request)
    info = await conv.opened_info()
    if not await service(request).delete(conv.record.id):
        raise NotFound(f"Conversation {conv.id} not found")
    services(request).commands.forget(conv.id)
    notify(request, info, "deleting")
    return reply(Success())


@doc(
    summary="Start the agent; when it is already running it keeps running",
    response=Success,
    errors=(404,),
)
async def run(request: Request) -> Response:
    await conversation(request).run()
    return reply(Success())


@doc(summary="Pause between steps (a PauseEvent)", response=Success, errors=(404,))
async def pause(request: Request) -> Response:
    conv = conversation(request)
    await conv.pause()
    notify(request, await conv.opened_info())
    return reply(Success())


@doc(
    summary="Interrupt at once: cancels the in-flight LLM call or tool (an InterruptEvent)",
    response=Success,
    errors=(404,),
)
async def interrupt(request: Request) -> Response:
    await conversation(request).interrupt()
    return reply(Success())


@doc(
    summary="Add or replace the conversation's secrets (names only are ever returned)",
    body=UpdateSecrets,
    response=Success,
    errors=(404,),
)
async def update_secrets(request: Request) -> Response:
    conv = conversation(request)
    given = (await read_body(request, UpdateSecrets)).secrets
    with located("body"):
        await conv.add_secrets(await secret_values(given))
    return reply(Success())


@doc(
    summary="Set the confirmation policy (NeverConfirm, AlwaysConfirm, ConfirmRisky)",
    body=SetConfirmationPolicy,
    response=Success,
    errors=(404,),
)
async def set_confirmation_policy(request: Request) -> Response:
    conv = conversation(request)
    await conv.set_confirmation_policy((await read_body(request, SetConfirmationPolicy)).policy)
    return reply(Success())


@doc(
    summary="Accept (run) or reject the actions waiting for confirmation",
    body=ConfirmationResponse,
    response=Success,
    errors=(404, 409),
)
async def respond_to_confirmation(request: Request) -> Response:
    conv = conversation(request)
    answer = await read_body(request, ConfirmationResponse)
    await conv.respond(answer.accept, answer.reason)
    return reply(Success())


@doc(summary="The conversation's hook configuration", response=HookConfig, errors=(404,))
async def hooks(request: Request) -> Response:
    config = conversation(request).record.hook_config
    return reply(config if config is not None else HookConfig())


@doc(
    summary="Ask for a condensation of the history: the next step condenses",
    response=Success,
    errors=(404,),
)
async def condense(request: Request) -> Response:
    await conversation(request).append(CondensationRequest())
    return reply(Success())


@doc(
    summary="Move HEAD of the conversation tree to an event (null: the empty tree): the next "
    "event starts a sibling branch there, and the model sees the branch root to HEAD",
    body=Navigate,
    response=ConversationInfo,
    errors=(404, 409),
)
async def navigate(request: Request) -> Response:
    conv = conversation(request)
    body = await read_body(request, Navigate)
    await conv.navigate(body.event_id)
    return reply(await conv.opened_info())


@doc(
    summary="Fork: a new conversation with this one's history (all of it, or the branch from "
    "the root to from_event_id), agent and workspace; it rests (idle)",
    body=ForkRequest,
    response=ConversationInfo,
    status=201,
    errors=(404, 409),
)
async def fork(request: Request) -> Response:
    source = conversation(request)
    body = await read_body(request, ForkRequest)
    forked = await service(request).fork(source, body)
    return reply(await forked.opened_info(), 201)


@doc(
    summary="Ask a side question: answered by the LLM from the conversation's view (an ACP "
    "agent: in a side session), with no event added and the status untouched "
    "(allowed while running)",
    body=AskAgent,
    response=AgentAnswer,
    errors=(404, 429, 502),
)
async def ask_agent(request: Request) -> Response:
    conv = conversation(request)
    body = await read_body(request, AskAgent)
    return reply(AgentAnswer(response=await conv.ask(body.question)))


@doc(
    summary="Set (or clear with null) the security analyzer, kept and shown as given",
    body=SetSecurityAnalyzer,
    response=Success,
    errors=(404,),
)
async def set_security_analyzer(request: Request) -> Response:
    conv = conversation(request)
    body = await read_body(request, SetSecurityAnalyzer)
    analyzer = body.security_analyzer
    await conv.set_security_analyzer(None if analyzer is None else analyzer.model_dump())
    return reply(Success())


@doc(
    summary="Load a plugin: this server has none to load, so every reference is unknown (404)",
    body=LoadPlugin,
    response=Success,
    errors=(404,),
)
async def load_plugin(request: Request) -> Response:
    conversation(request)
    body = await read_body(request, LoadPlugin)
    raise NotFound(f"Plugin {body.plugin_ref!r} not found: this server loads no plugins")
