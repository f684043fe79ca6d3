"""The benchmark's client round trip: create -> send_message -> blocking run() of a 3-step run."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import RESULT, conversation, finish, now, step, workspace  # noqa: E402


def main() -> None:
    started = now()
    conv = step("create", lambda: conversation(workspace()))
    RESULT["create_s"] = round(now() - started, 3)
    step("send_message", lambda: conv.send_message("Run the three steps."))
    run_started = now()
    step("run", lambda: conv.run(timeout=120))
    RESULT["run_s"] = round(now() - run_started, 3)
    RESULT["roundtrip_s"] = round(now() - started, 3)
    RESULT["status"] = conv.state.execution_status.value


finish(main)
