"""HTTP and websocket endpoints; the route table itself is in agent_server.app."""
