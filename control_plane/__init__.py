"""The control plane: accounts, sandboxes, start tasks and app conversations (SPEC 1-5, /api/v1).

It starts one agent server per sandbox and talks to it only over HTTP; the only agent-server
module it imports is the event schema (`events`), to validate webhook bodies.
"""

__version__ = "0.0.1"
