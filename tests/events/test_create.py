"""The create request of the wire contract (`events.create`) against the agent server's own
reading of it: every body the control plane builds from these types is one the agent server
takes, each field where it reads it."""

from __future__ import annotations

from agent_server.record import CreateConversation
from events.content import TextContent
from events.create import (
    AgentRequest,
    CreateRequest,
    InitialMessage,
    LLMTarget,
    RepositoryRequest,
    ToolName,
    WorkspaceRequest,
)

CID = "6f1c1a52-6a53-4f3e-9f57-3c1f1d0c9a11"


def test_a_whole_request_is_read_by_the_agent_server_field_for_field() -> None:
    made = CreateRequest(
        conversation_id=CID,
        agent=AgentRequest(
            llm=LLMTarget(
                model="openai/gpt-5",
                base_url="http://10.9.0.1:3000/api/v1/llm",
                api_key="sk-sandbox-token",
                stream=True,
            ),
            tools=[ToolName(name="terminal"), ToolName(name="file_editor")],
            mcp_config={"mcpServers": {"fetch": {"command": "uvx", "args": ["mcp-fetch"]}}},
        ),
        workspace=WorkspaceRequest(working_dir="/workspace/c1"),
        secrets={"GITHUB_TOKEN": "ghp_x"},
        title="Fix the build",
        initial_message=InitialMessage(content=[TextContent(text="hello")], run=False),
        repository=RepositoryRequest(url="https://forge.test/acme/demo.git", branch="dev"),
        observability_span_name="start",
        observability_tags=["a"],
        observability_metadata={"k": "v"},
    )
    read = CreateConversation.model_validate(made.body())
    assert str(read.conversation_id) == CID
    assert read.agent is not None and read.agent.kind == "Agent"
    llm = read.agent.llm
    assert (llm.model, llm.base_url, llm.stream) == (
        "openai/gpt-5",
        "http://10.9.0.1:3000/api/v1/llm",
        True,
    )
    assert llm.api_key is not None and llm.api_key.get_secret_value() == "sk-sandbox-token"
    assert [t.name for t in read.agent.tools] == ["terminal", "file_editor"]
    assert read.agent.mcp_config is not None
    assert set(read.agent.mcp_config["mcpServers"]) == {"fetch"}
    assert read.workspace is not None and read.workspace.working_dir == "/workspace/c1"
    assert read.secrets["GITHUB_TOKEN"] == "ghp_x"
    assert read.title == "Fix the build"
    assert read.initial_message is not None and read.initial_message.run is False
    assert [c.text for c in read.initial_message.contents() if isinstance(c, TextContent)] == [
        "hello"
    ]
    assert read.repository is not None
    assert (read.repository.url, read.repository.branch) == (
        "https://forge.test/acme/demo.git",
        "dev",
    )
    assert (read.observability_span_name, read.observability_tags, read.observability_metadata) == (
        "start",
        ["a"],
        {"k": "v"},
    )


def test_what_is_not_given_is_left_to_the_agent_servers_defaults() -> None:
    body = CreateRequest(
        conversation_id=CID,
        agent=AgentRequest(llm=LLMTarget(model="m")),
        workspace=WorkspaceRequest(working_dir="/w"),
    ).body()
    assert "title" not in body and "repository" not in body and "initial_message" not in body
    assert body["agent"]["llm"] == {"model": "m"}
    read = CreateConversation.model_validate(body)
    assert read.agent is not None and read.agent.llm.stream is False and read.title is None
