"""The enums and records shared by the store, the services and the routes."""

from __future__ import annotations

from enum import Enum


class SandboxStatus(str, Enum):
    """SPEC 3.1."""

    STARTING = "STARTING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    ERROR = "ERROR"
    MISSING = "MISSING"

    @property
    def terminal(self) -> bool:
        return self in (SandboxStatus.ERROR, SandboxStatus.MISSING)


class SandboxReason(str, Enum):
    """Why a sandbox last changed status (with `status_detail`, the words for a person)."""

    USER = "USER"
    """Its user paused, resumed or deleted it."""
    IDLE = "IDLE"
    """No agent or user activity for the idle time (SPEC 3.1): paused."""
    SESSION_CAP = "SESSION_CAP"
    """RUNNING for 12 hours (SPEC 8): force-paused; resuming opens a new window."""
    DELETION_TIME = "DELETION_TIME"
    """PAUSED for the deletion time: deleted with its conversations."""
    VANISHED = "VANISHED"
    """Its process or container is gone: MISSING."""
    UNHEALTHY = "UNHEALTHY"
    """It failed its health check past the grace period: ERROR."""
    START_FAILED = "START_FAILED"
    """It could not be started: ERROR."""


class StartTaskStatus(str, Enum):
    """The stages of a conversation start (SPEC 2.2, 3.4); READY and ERROR end it."""

    WORKING = "WORKING"
    WAITING_FOR_SANDBOX = "WAITING_FOR_SANDBOX"
    PREPARING_REPOSITORY = "PREPARING_REPOSITORY"
    STARTING_CONVERSATION = "STARTING_CONVERSATION"
    READY = "READY"
    ERROR = "ERROR"

    @property
    def finished(self) -> bool:
        return self in (StartTaskStatus.READY, StartTaskStatus.ERROR)


class GroupingStrategy(str, Enum):
    """SPEC 1's 'Sandbox Grouping Strategy'."""

    NO_GROUPING = "NO_GROUPING"
    GROUP_BY_NEWEST = "GROUP_BY_NEWEST"
    LEAST_RECENTLY_USED = "LEAST_RECENTLY_USED"
    FEWEST_CONVERSATIONS = "FEWEST_CONVERSATIONS"
    ADD_TO_ANY = "ADD_TO_ANY"


class ExecutionStatus(str, Enum):
    """SPEC 3.2 (the agent server says it in lowercase; the record says it in uppercase)."""

    IDLE = "IDLE"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    WAITING_FOR_CONFIRMATION = "WAITING_FOR_CONFIRMATION"
    FINISHED = "FINISHED"
    ERROR = "ERROR"
    STUCK = "STUCK"

    @classmethod
    def parse(cls, value: object) -> ExecutionStatus | None:
        try:
            return cls(str(value).upper())
        except ValueError:
            return None
