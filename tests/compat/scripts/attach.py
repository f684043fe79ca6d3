"""Attach by conversation id (Conversation(conversation_id=...) and RemoteConversation.attach)
and the state reads: agent, workspace, stats, persistence_dir, confirmation policy."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (  # noqa: E402
    ARGS,
    RESULT,
    TOOLS,
    check,
    conversation,
    finish,
    http,
    step,
    validate_stored,
    watch,
    workspace,
)
from openhands.sdk.agent.base import AgentBase  # noqa: E402
from openhands.sdk.conversation.conversation_stats import ConversationStats  # noqa: E402
from openhands.sdk.conversation.impl.remote_conversation import RemoteConversation  # noqa: E402


def state_reads(conv, label: str) -> None:
    st = conv.state
    ag = step(f"{label}: state.agent", lambda: st.agent)
    check(f"{label}: state.agent is an AgentBase", isinstance(ag, AgentBase), type(ag))
    check(
        f"{label}: its tools",
        [t.name for t in ag.tools][:3] == list(TOOLS),
        [t.name for t in ag.tools],
    )
    wsp = step(f"{label}: state.workspace", lambda: st.workspace)
    check(
        f"{label}: workspace.working_dir",
        isinstance(wsp, dict) and wsp.get("working_dir") == ARGS["workspace"],
        wsp,
    )
    stats = step(f"{label}: state.stats", lambda: st.stats)
    check(f"{label}: stats is ConversationStats", isinstance(stats, ConversationStats), type(stats))
    step(f"{label}: stats.get_combined_metrics()", lambda: stats.get_combined_metrics())
    step(f"{label}: state.persistence_dir", lambda: st.persistence_dir)
    step(f"{label}: state.confirmation_policy", lambda: st.confirmation_policy)
    step(f"{label}: state.execution_status", lambda: st.execution_status)
    step(f"{label}: conversation_stats", lambda: conv.conversation_stats)


def main() -> None:
    ws = workspace()
    first = step("create", lambda: conversation(ws))
    cid = str(first.id)
    RESULT["conversation_id"] = cid
    watch(cid)
    step("send_message", lambda: first.send_message("Hello."))
    step("run", lambda: first.run(timeout=60))
    state_reads(first, "creator")
    stored_count = validate_stored(cid)["count"]

    again = step(
        "reattach with conversation_id", lambda: conversation(ws, conversation_id=first.id)
    )
    check("reattached, not created anew", str(again.id) == cid, again.id)
    check(
        "reattached sees the stored events",
        len(list(again.state.events)) >= stored_count,
        (len(list(again.state.events)), stored_count),
    )
    state_reads(again, "reattached")

    attached = step(
        "RemoteConversation.attach",
        lambda: RemoteConversation.attach(ws, first.id, visualizer=None),
    )
    state_reads(attached, "attached")
    with http() as c:
        count = c.get("/api/conversations/count").json()
    RESULT["conversation_count"] = count


finish(main)
