"""Token callbacks fire for the deltas of a streaming LLM (StreamingDeltaEvent frames)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import RESULT, agent, check, conversation, finish, step, watch, workspace  # noqa: E402


def main() -> None:
    tokens = []
    conv = step(
        "create",
        lambda: conversation(workspace(), agent(stream=True), token_callbacks=[tokens.append]),
    )
    watch(str(conv.id))
    step("send_message", lambda: conv.send_message("Say something long."))
    step("run", lambda: conv.run())
    pieces = [c.delta.content for t in tokens for c in t.choices if c.delta and c.delta.content]
    RESULT["token_count"] = len(tokens)
    RESULT["streamed_text"] = "".join(pieces)
    check("token callbacks fired", len(tokens) > 0, "no token callback")
    check(
        "the streamed text is the reply",
        "streamed-words-of-the-reply" in "".join(pieces),
        "".join(pieces),
    )
    check("token ids are set", all(t.id for t in tokens), [t.id for t in tokens][:5])


finish(main)
