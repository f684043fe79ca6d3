"""pause() from another thread while run() blocks: run() returns soon after the status changes."""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import RESULT, StatusWatcher, check, conversation, finish, now, step, watch, workspace  # noqa: E402


def main() -> None:
    conv = step("create", lambda: conversation(workspace()))
    cid = str(conv.id)
    watch(cid)
    status = StatusWatcher(cid)
    step("send_message", lambda: conv.send_message("Keep echoing."))

    def pause_later() -> None:
        time.sleep(1.5)
        RESULT["pause_called"] = now()
        try:
            conv.pause()
            RESULT["pause_returned"] = now()
        except Exception as exc:  # noqa: BLE001
            RESULT["pause_error"] = f"{type(exc).__name__}: {exc}"

    threading.Thread(target=pause_later, daemon=True).start()
    RESULT["run_called"] = now()
    step("run (blocking, paused from another thread)", lambda: conv.run(timeout=60))
    RESULT["run_returned"] = now()
    RESULT["status_changes"] = status.stop()
    RESULT["status_paused_at"] = status.first("paused")
    final = step("state.execution_status", lambda: conv.state.execution_status.value)
    RESULT["final_status"] = final
    check("pause() succeeded", "pause_error" not in RESULT, RESULT.get("pause_error"))
    check("status is paused", final == "paused", final)


finish(main)
