"""Create with tools, send_message, blocking run(); callbacks, state and every frame checked."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (  # noqa: E402
    ARGS,
    RESULT,
    StatusWatcher,
    check,
    conversation,
    finish,
    now,
    step,
    watch,
    workspace,
)


def main() -> None:
    ws = workspace()
    seen = []
    conv = step("create", lambda: conversation(ws, callbacks=[seen.append]))
    cid = str(conv.id)
    RESULT["conversation_id"] = cid
    watch(cid)
    status = StatusWatcher(cid)
    step("send_message", lambda: conv.send_message("Run the three steps."))
    RESULT["run_called"] = now()
    step("run", lambda: conv.run())
    RESULT["run_returned"] = now()
    RESULT["status_changes"] = status.stop()
    RESULT["status_finished_at"] = status.first("finished")
    final = step("state.execution_status", lambda: conv.state.execution_status.value)
    RESULT["final_status"] = final
    check("status is finished", final == "finished", final)
    kinds = [type(e).__name__ for e in seen]
    RESULT["callback_kinds"] = kinds
    check(
        "callbacks got the terminal observation", any(k == "ObservationEvent" for k in kinds), kinds
    )
    events = step("state.events", lambda: list(conv.state.events))
    outputs = " ".join(str(getattr(e, "observation", "")) for e in events)
    check("the terminal output reached the client", "hello-compat" in outputs, outputs[:500])
    check("the file was written", os.path.exists(os.path.join(ARGS["workspace"], "note.txt")))


finish(main)
