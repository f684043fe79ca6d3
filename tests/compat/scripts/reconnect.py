"""A forced websocket reconnect mid-run: the client reconnects, replays what it missed once,
and run() still returns when the server's run ends."""

import asyncio
import os
import sys
import threading
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import websockets  # noqa: E402
from _common import (  # noqa: E402
    RESULT,
    StatusWatcher,
    check,
    conversation,
    finish,
    now,
    step,
    validate_stored,
    watch,
    workspace,
)
from openhands.sdk.conversation.impl import remote_conversation as rc  # noqa: E402

CONNECTIONS: list[tuple[object, asyncio.AbstractEventLoop, float]] = []


class CapturingConnect(websockets.connect):  # type: ignore[misc, valid-type]
    async def __aenter__(self):  # type: ignore[no-untyped-def]
        ws = await super().__aenter__()
        CONNECTIONS.append((ws, asyncio.get_running_loop(), now()))
        return ws


rc.websockets = types.SimpleNamespace(connect=CapturingConnect)  # only the SDK client's socket


def main() -> None:
    seen = []
    conv = step("create", lambda: conversation(workspace(), callbacks=[seen.append]))
    cid = str(conv.id)
    watch(cid)
    status = StatusWatcher(cid)
    step("send_message", lambda: conv.send_message("Echo slowly."))

    def drop_socket() -> None:
        time.sleep(1.0)
        ws, loop, _ = CONNECTIONS[-1]
        RESULT["dropped_at"] = now()
        loop.call_soon_threadsafe(ws.transport.abort)  # as a network failure would

    threading.Thread(target=drop_socket, daemon=True).start()
    RESULT["run_called"] = now()
    step("run (socket dropped mid-run)", lambda: conv.run(timeout=90))
    RESULT["run_returned"] = now()
    RESULT["status_changes"] = status.stop()
    RESULT["status_finished_at"] = status.first("finished")
    RESULT["connections"] = [round(at - RESULT["run_called"], 3) for _, _, at in CONNECTIONS]
    check("the client reconnected", len(CONNECTIONS) >= 2, RESULT["connections"])
    ids = [
        e.id
        for e in seen
        if type(e).__name__ not in ("ConversationStateUpdateEvent", "StreamingDeltaEvent")
    ]
    check("no event reached the callbacks twice", len(ids) == len(set(ids)), ids)
    stored = validate_stored(cid)
    missing = [i for i in stored["ids"] if i not in set(ids)]
    RESULT["missing_from_callbacks"] = missing
    cached = {e.id for e in conv.state.events}
    check(
        "the client's event list matches the server's",
        set(stored["ids"]) <= cached,
        [i for i in stored["ids"] if i not in cached],
    )
    outputs = " ".join(str(getattr(e, "observation", "")) for e in conv.state.events)
    check("the output produced while disconnected arrived", "after-drop" in outputs, outputs[:400])


finish(main)
