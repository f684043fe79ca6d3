"""The bridge's one exception tree, and how each failure reaches the editor as an ACP error.

Every message is written for the person at the editor and is safe to show: it names the
service by scheme, host and port only (never a path, a query or credentials) and never holds
a key. The JSON-RPC error's `message` is that text itself, so an editor that shows only the
message still says what went wrong; `data.reason` names the class for programs.
"""

from __future__ import annotations

from acp import RequestError


class BridgeError(Exception):
    """A failure of the service or of reaching it, in words for the editor."""

    #: The JSON-RPC error code it is answered with (-32603: internal error).
    code = -32603

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        #: The HTTP status the service answered, when it answered.
        self.status = status

    def to_acp(self) -> RequestError:
        return RequestError(self.code, self.message, {"reason": type(self).__name__})


class Unreachable(BridgeError):
    """No answer: refused connection, a timeout, a stream that could not be resumed."""


class Refused(BridgeError):
    """The key was refused (401, 403; a socket closed with 4001)."""

    code = -32000  # ACP's "authentication required"


class NotFound(BridgeError):
    """The conversation (the ACP session) does not exist, or no longer does."""

    code = -32002  # ACP's "resource not found"


class Invalid(BridgeError):
    """The service refused the request as given (409, 422, another 4xx)."""

    code = -32602


class ServiceFailed(BridgeError):
    """The service answered with a failure of its own (5xx) or with something unreadable."""


class StartFailed(BridgeError):
    """The control plane's start task ended in ERROR."""


__all__ = [
    "BridgeError",
    "Invalid",
    "NotFound",
    "Refused",
    "ServiceFailed",
    "StartFailed",
    "Unreachable",
]
