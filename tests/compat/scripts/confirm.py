"""AlwaysConfirm: run() returns on waiting_for_confirmation; accept (run again) and reject."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import RESULT, StatusWatcher, check, conversation, finish, now, step, watch, workspace  # noqa: E402
from openhands.sdk.conversation.state import ConversationState  # noqa: E402
from openhands.sdk.security.confirmation_policy import AlwaysConfirm  # noqa: E402


def main() -> None:
    conv = step("create", lambda: conversation(workspace()))
    cid = str(conv.id)
    watch(cid)
    status = StatusWatcher(cid)
    step(
        "set_confirmation_policy(AlwaysConfirm)",
        lambda: conv.set_confirmation_policy(AlwaysConfirm()),
    )
    check(
        "state.confirmation_policy is AlwaysConfirm",
        type(step("state.confirmation_policy", lambda: conv.state.confirmation_policy)).__name__
        == "AlwaysConfirm",
    )
    step("send_message", lambda: conv.send_message("Echo twice."))
    decisions, waits = [], []
    for round_ in range(6):
        started = now()
        step(f"run #{round_}", lambda: conv.run(timeout=60))
        returned = now()
        current = step(
            f"state.execution_status #{round_}", lambda: conv.state.execution_status.value
        )
        # No change seen when the status went away and back between two polls (25 ms).
        changed = status.first(current, after=started) or started
        waits.append(
            {
                "status": current,
                "lag": None if changed is None else round(returned - changed, 3),
                "elapsed": round(returned - started, 3),
            }
        )
        if current == "finished":
            break
        check(f"run #{round_} stopped to ask", current == "waiting_for_confirmation", current)
        pending = ConversationState.get_unmatched_actions(list(conv.state.events))
        commands = [getattr(p.action, "command", None) for p in pending]
        check(f"one action pending #{round_}", len(pending) >= 1, commands)
        if any(c and "reject-me" in c for c in commands):
            decisions.append("reject")
            step(
                f"reject_pending_actions #{round_}",
                lambda: conv.reject_pending_actions("not this one"),
            )
        else:
            decisions.append("accept")  # the SDK's way to accept: run() again
    RESULT["decisions"], RESULT["waits"] = decisions, waits
    RESULT["status_changes"] = status.stop()
    events = list(conv.state.events)
    kinds = [type(e).__name__ for e in events]
    outputs = " ".join(str(getattr(e, "observation", "")) for e in events)
    check("the accepted command ran", "accepted-output" in outputs, outputs[:400])
    check("the rejected command did not run", "reject-output" not in outputs, outputs[:400])
    check("a UserRejectObservation was stored", "UserRejectObservation" in kinds, kinds)
    check("finished", waits and waits[-1]["status"] == "finished", waits)


finish(main)
