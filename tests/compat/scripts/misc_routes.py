"""reject_pending_actions() with nothing pending, ask_agent, set_security_analyzer, condense-free
reads: the smaller conversation routes the client offers."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import RESULT, check, conversation, finish, http, step, watch, workspace  # noqa: E402
from openhands.sdk.security.llm_analyzer import LLMSecurityAnalyzer  # noqa: E402


def count(cid: str) -> int:
    with http() as c:
        return c.get(f"/api/conversations/{cid}/events/count").json()


def main() -> None:
    conv = step("create", lambda: conversation(workspace()))
    cid = str(conv.id)
    watch(cid)
    step("reject_pending_actions() with nothing pending", lambda: conv.reject_pending_actions())
    step("send_message", lambda: conv.send_message("hello"))
    step("run", lambda: conv.run(timeout=60))
    before = count(cid)
    answer = step("ask_agent", lambda: conv.ask_agent("What did you just do?"))
    RESULT["ask_agent"] = answer
    check("ask_agent answers from the LLM", "side-answer" in answer, answer)
    check("ask_agent adds no event", count(cid) == before, (before, count(cid)))
    step(
        "set_security_analyzer(LLMSecurityAnalyzer)",
        lambda: conv.set_security_analyzer(LLMSecurityAnalyzer()),
    )
    conv.state.refresh_from_server()
    analyzer = step("state.security_analyzer", lambda: conv.state.security_analyzer)
    check("the analyzer is kept", type(analyzer).__name__ == "LLMSecurityAnalyzer", analyzer)
    step("set_security_analyzer(None)", lambda: conv.set_security_analyzer(None))
    step("update_secrets", lambda: conv.update_secrets({"MY_TOKEN": "s3cret-value"}))
    step("set_title", lambda: conv.set_title("compat title"))


finish(main)
