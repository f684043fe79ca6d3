"""The agent: what runs a conversation, built from narrow parts.

Layout: `session` (AgentSession, the only thing the conversations use), `loop` (one run:
view -> model -> ActionEvents -> tools -> observations), `model` (the Model seam over litellm,
`llm`), `view`, `condenser`, `hooks`, `toolbox` (the tools, from a ToolContext), `sink`
(where events go, masked), `spec` (what the agent is told to be), and the small policies
`confirmation`, `stuck`, `skills`, `prompt`, `mcp` (the servers) and `mcp_config`.
"""
