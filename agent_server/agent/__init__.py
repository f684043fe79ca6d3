"""The agent: what runs a conversation, built from narrow parts.

Layout: `contract` (what a conversation and its agent agree on; the conversations call the
agent through it only), `session` (AgentSession), `acp` (ACPSession), `loop` (one run: view ->
model -> ActionEvents -> tools -> observations), `model` (the Model seam over litellm, `llm`),
`active_llm`, `view`, `condenser`, `hooks`, `toolbox` (the tools, from a ToolContext), `sink`
(where events go, masked), `spec` (what the agent is told to be), `policies` (what is set
around its actions: the confirmation policy, the hooks), `usage` (token usage and totals),
and the small parts `confirmation` (asking before an action), `stuck`, `skills`, `prompt`, `mcp`
(the servers) and `mcp_config`. The factory that picks a session by the agent's kind is the
composition root's (`agent_server.services`).
"""
