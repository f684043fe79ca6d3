"""agent-server: hosts the agent conversations of one sandbox."""

from importlib.metadata import PackageNotFoundError, version

try:  # the version pyproject.toml gives, as installed (pip install -e . in a checkout)
    __version__ = version("agent-server")
except PackageNotFoundError:  # run from a tree that was never installed
    __version__ = "0+unknown"
