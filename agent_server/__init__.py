"""agent-server: hosts the agent conversations of one sandbox."""

__version__ = "0.1.0"
