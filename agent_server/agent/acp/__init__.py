"""External agents over the Agent Client Protocol: a conversation's agent as a child process.

    session.py    ACPSession, the conversation's side (a `Session` like our own agent's)
    client.py     WorkspaceClient, what the agent may ask of us (files, permissions, terminals)
    calls.py      tool calls as ACPToolCallEvents, bounded
    process.py    the agent's process: own session, protocol lines only, stderr tail
    terminals.py  the commands the agent runs through us
"""

from agent_server.agent.acp.session import ACPSession

__all__ = ["ACPSession"]
