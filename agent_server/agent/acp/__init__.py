"""External agents over the Agent Client Protocol: a conversation's agent as a child process.

session.py    ACPSession, the conversation's side (a `contract.Session`) and its turn
link.py       AgentLink, the agent's connection across its process's lives: started when
              needed, its session resumed, a new one kept by the next turn, stopped
turn.py       where the turn is (TurnState) and the moves it may make
side.py       side questions (ask_agent), in sessions of their own
client.py     WorkspaceClient, what the agent may ask of us (files, permissions, terminals)
calls.py      tool calls as ACPToolCallEvents, bounded
messages.py   user messages (those not yet sent) as prompt blocks; the agent's chunks
              as one MessageEvent
saved.py      what is kept across restarts: the last message sent, the agent's session
process.py    the agent's process (own session, protocol lines only, stderr tail, its
              environment) and the protocol session opened over it
terminals.py  the commands the agent runs through us
"""

from agent_server.agent.acp.session import ACPSession

__all__ = ["ACPSession"]
