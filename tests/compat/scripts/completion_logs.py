"""An LLM with log_completions: the client writes each LLMCompletionLogEvent it is sent to its
own log_completions_folder (the SDK's remote behaviour), one JSON file per LLM call."""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import ARGS, RESULT, agent, check, conversation, finish, step, watch, workspace  # noqa: E402


def main() -> None:
    folder = os.path.join(ARGS["workspace"], "completion-logs")
    conv = step(
        "create",
        lambda: conversation(
            workspace(), agent(log_completions=True, log_completions_folder=folder)
        ),
    )
    watch(str(conv.id))
    step("send_message", lambda: conv.send_message("Log what you do."))
    step("run", lambda: conv.run())
    deadline = time.monotonic() + 10  # the last event may come just after run() returns
    while (
        time.monotonic() < deadline and len(os.listdir(folder) if os.path.isdir(folder) else []) < 2
    ):
        time.sleep(0.05)
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    RESULT["files"] = names
    logs = []
    for name in names:
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            logs.append(json.load(f))
    RESULT["log_messages"] = [len(log.get("messages", [])) for log in logs]
    check("one file per LLM call", len(names) == 2, names)
    check(
        "each holds the request and the response",
        all(log.get("messages") and log.get("response") for log in logs),
        RESULT["log_messages"],
    )


finish(main)
