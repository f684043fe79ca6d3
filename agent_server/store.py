"""Small durable files moved to `core.files`."""

# re-export for modules not yet moved to core
from core.files import read_json, write_atomic, write_json

__all__ = ["read_json", "write_atomic", "write_json"]
