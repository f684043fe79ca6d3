"""bridge: an editor's Agent Client Protocol session bridged to the service.

`agent-server acp` speaks ACP as an agent on stdin and stdout, so editors that run agents
as subprocesses (Zed, JetBrains IDEs, Neovim plugins) drive our agent in an isolated,
resumable sandbox. It is a client of the service's HTTP and websocket interfaces, never of
the agent server's internals; it reads the event schema in one place (`schema`).

    cli.py           flags and environment -> Config (config.py) -> the ACP connection
    agent.py         the ACP agent: initialize, session/new, load, prompt, cancel, set_mode
    session.py       one session = one conversation: its event follower and its turns
    updates.py       events -> session updates (text, plans, diffs, files written back)
    toolcalls.py     ... the tool calls: their kind and title, their ends, those remembered
    editor.py        what goes to the editor, masked
    content.py       prompt blocks -> message content
    modes.py         approval modes <-> confirmation policies
    mcp.py           the editor's MCP servers -> the service's entries and secrets
    service.py       what a session needs of the service (the Service protocol)
    agentserver.py   ... over one agent server (session key, websocket)
    controlplane.py  ... over a control plane (account key, start tasks, its event stream)
    http.py, reconnect.py, errors.py   the HTTP client, stream resumption, the error tree
"""
