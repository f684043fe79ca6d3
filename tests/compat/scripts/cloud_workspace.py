"""The OpenHands Cloud workspace (openhands-workspace 1.58), unchanged, against the control
plane: the SDK's Cloud examples (06/07: a conversation in a Cloud sandbox with the client's own
LLM; 10: the LLM and the secrets inherited from the account).

ARGS: cloud_api_url, cloud_api_key (the control plane and an account key), llm_base_url (the
scripted LLM, as the account's settings name it too: example 06's client calls it; example 10's
conversation reaches it through the control plane's LLM gateway), secret_name, secret_tail.
"""

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import httpx  # noqa: E402
from _common import ARGS, RESULT, check, finish, llm, step  # noqa: E402
from openhands.sdk import Conversation, RemoteConversation  # noqa: E402
from openhands.tools.preset.default import get_default_agent  # noqa: E402
from openhands.workspace import OpenHandsCloudWorkspace  # noqa: E402

API = ARGS["cloud_api_url"]


def listed(conversation_id: str) -> dict:
    """The conversation as /api/v1 shows it, once its events arrived through the webhook (its
    info, finished, may come before the last batch of its events: both are waited for)."""
    headers = {"Authorization": f"Bearer {ARGS['cloud_api_key']}"}
    deadline = time.monotonic() + 60
    while True:
        found = httpx.get(
            f"{API}/api/v1/app-conversations", params={"ids": conversation_id}, headers=headers
        ).json()[0]
        count = httpx.get(
            f"{API}/api/v1/conversation/{conversation_id}/events/count", headers=headers
        ).json()
        if found is not None and count > 3 and found.get("execution_status") == "finished":
            return {**found, "stored_events": count}
        if time.monotonic() > deadline:
            raise AssertionError(f"not listed: {found} {count}")
        time.sleep(0.1)


def example_06() -> None:
    """A sandbox, commands, files, a conversation with the client's LLM; the sandbox deleted
    when the block ends."""
    with OpenHandsCloudWorkspace(cloud_api_url=API, cloud_api_key=ARGS["cloud_api_key"]) as ws:
        RESULT["06_sandbox"] = ws._sandbox_id
        r = step(
            "06: execute_command",
            lambda: ws.execute_command("echo 'Hello from the sandbox!' && pwd"),
        )
        check(
            "06: command ran in /workspace/project",
            r.exit_code == 0
            and "Hello from the sandbox!" in r.stdout
            and "/workspace/project" in r.stdout,
            r.model_dump(),
        )
        up = step(
            "06: file_upload", lambda: ws.file_upload(b"uploaded\n", "/workspace/project/up.txt")
        )
        check("06: upload succeeded", up.success, up.model_dump())
        local = os.path.join(tempfile.mkdtemp(), "down.txt")
        down = step(
            "06: file_download", lambda: ws.file_download("/workspace/project/up.txt", local)
        )
        check(
            "06: downloaded what was uploaded",
            down.success and open(local).read() == "uploaded\n",
            down.model_dump(),
        )
        step(
            "06: a repository",
            lambda: ws.execute_command(
                "git init -q . && git add up.txt"
                " && git -c user.name=t -c user.email=t@t commit -qm one"
                " && echo changed >> up.txt"
            ),
        )
        changes = step("06: git_changes", lambda: ws.git_changes("/workspace/project"))
        check(
            "06: the change listed",
            [str(c.path) for c in changes] == ["up.txt"],
            [c.model_dump() for c in changes],
        )
        diff = step("06: git_diff", lambda: ws.git_diff("/workspace/project/up.txt"))
        check(
            "06: its two sides",
            diff.original == "uploaded\n" and diff.modified == "uploaded\nchanged\n",
            diff.model_dump(),
        )
        agent = get_default_agent(llm=llm(), cli_mode=True)
        conversation = step(
            "06: Conversation", lambda: Conversation(agent=agent, workspace=ws, visualizer=None)
        )
        check("06: a RemoteConversation", isinstance(conversation, RemoteConversation))
        try:
            step("06: send_message", lambda: conversation.send_message("Write FACTS.txt"))
            step("06: run", conversation.run)
            facts = step("06: FACTS.txt", lambda: ws.execute_command("cat FACTS.txt"))
            check("06: the agent wrote FACTS.txt", "fact one" in facts.stdout, facts.model_dump())
            RESULT["06_conversation"] = str(conversation.id)
            RESULT["06_listed"] = step(
                "06: listed in /api/v1", lambda: listed(str(conversation.id))
            )
        finally:
            conversation.close()


def example_10() -> None:
    """The LLM, the MCP servers and the secrets inherited from the account; the sandbox kept."""
    with OpenHandsCloudWorkspace(
        cloud_api_url=API, cloud_api_key=ARGS["cloud_api_key"], keep_alive=True
    ) as ws:
        RESULT["10_sandbox"] = ws._sandbox_id
        inherited = step("10: get_llm", ws.get_llm)
        # The account's model, through the control plane's LLM gateway: the sandbox's own
        # token as the key, never the account's (issue 36).
        check(
            "10: the account's LLM, through the gateway",
            inherited.model == "openai/test-model"
            and str(inherited.base_url).endswith("/api/v1/llm")
            and inherited.api_key is not None
            and inherited.api_key.get_secret_value().startswith(f"sbt_{ws._sandbox_id}_"),
            (inherited.model, inherited.base_url),
        )
        mcp = step("10: get_mcp_config", ws.get_mcp_config)
        check("10: no MCP servers", mcp == {}, mcp)
        secrets = step("10: get_secrets", ws.get_secrets)
        check(
            "10: the account's secret names", list(secrets) == [ARGS["secret_name"]], list(secrets)
        )
        agent = get_default_agent(
            llm=inherited.model_copy(update={"num_retries": 1}), cli_mode=True
        )
        conversation = step(
            "10: Conversation", lambda: Conversation(agent=agent, workspace=ws, visualizer=None)
        )
        try:
            step("10: update_secrets", lambda: conversation.update_secrets(secrets))
            step("10: send_message", lambda: conversation.send_message("Check the secret"))
            step("10: run", conversation.run)
            tail = step(
                "10: SECRETS_CHECK.txt", lambda: ws.execute_command("cat SECRETS_CHECK.txt")
            )
            check(
                "10: the secret reached the command",
                ARGS["secret_tail"] in tail.stdout,
                tail.model_dump(),
            )
            RESULT["10_conversation"] = str(conversation.id)
            RESULT["10_listed"] = step(
                "10: listed in /api/v1", lambda: listed(str(conversation.id))
            )
        finally:
            conversation.close()


def main() -> None:
    example_06()
    example_10()


finish(main)
