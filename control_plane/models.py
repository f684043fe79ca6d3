"""The enums and records shared by the store, the services and the routes.

The records are what the store reads (one frozen dataclass per row kind) and the services hand
to the routes: the routes read them, only the store makes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from pydantic import BaseModel

from control_plane.network.policy import NetworkPolicy
from events.status import ExecutionStatus
from web.errors import Conflict, Gone, InvalidTransition
from web.states import Moves


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


_S = SandboxStatus
#: The moves of a sandbox's status. ERROR and MISSING are read-only for good (SPEC 3.1): ERROR
#: only goes on to MISSING (deleted), MISSING nowhere. Staying put is no move.
SANDBOX_TRANSITIONS: dict[SandboxStatus, frozenset[SandboxStatus]] = {
    _S.STARTING: frozenset({_S.RUNNING, _S.ERROR, _S.MISSING}),
    _S.RUNNING: frozenset({_S.PAUSED, _S.ERROR, _S.MISSING}),
    _S.PAUSED: frozenset({_S.RUNNING, _S.ERROR, _S.MISSING}),
    _S.ERROR: frozenset({_S.MISSING}),
    _S.MISSING: frozenset(),
}


SANDBOX_MOVES = Moves(SANDBOX_TRANSITIONS)


def entered_from(status: SandboxStatus) -> list[SandboxStatus]:
    """The statuses `status` may be entered from: the store writes a move only on a row still
    in one of them, so a move races nothing (a deletion, which waits for no guard, wins)."""
    return SANDBOX_MOVES.sources(status)


def transition(sandbox_id: str, current: SandboxStatus, wanted: SandboxStatus, doing: str) -> bool:
    """Whether `current` -> `wanted` is a move (False: it is there already). A move the table
    does not allow raises, naming the allowed ones: Gone (410) for a MISSING sandbox,
    InvalidTransition (409) otherwise. `doing` words the move for a person ("paused")."""
    refusal = f"sandbox {sandbox_id} is {current.value}: it cannot be {doing} now"
    try:
        return SANDBOX_MOVES.check(current, wanted, refusal)
    except InvalidTransition as refused:
        if current is SandboxStatus.MISSING:
            raise Gone(refused.detail) from None
        raise


def ensure_usable(sandbox_id: str, status: SandboxStatus, consequence: str) -> None:
    """The one rule for using a sandbox (starting a conversation in it, reaching its agent
    server): ERROR refuses (409), MISSING is gone (410); `consequence` says what that means
    to the caller."""
    if status is SandboxStatus.MISSING:
        raise Gone(f"sandbox {sandbox_id} is MISSING: {consequence}")
    if status is SandboxStatus.ERROR:
        raise Conflict(f"sandbox {sandbox_id} is in ERROR: {consequence}")


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


_T = StartTaskStatus
#: The moves of a start task's stage. READY and ERROR end it, once: nothing leaves them. READY
#: comes only after the conversation was created (STARTING_CONVERSATION, or the clone it waits
#: for); a task taken up again (the database failed in a way that passes, or its control plane
#: died) goes on from its stored stage, waiting for its sandbox again.
START_STAGES: dict[StartTaskStatus, frozenset[StartTaskStatus]] = {
    # Placed: WAITING_FOR_SANDBOX, in the placement's transaction.
    _T.WORKING: frozenset({_T.WORKING, _T.WAITING_FOR_SANDBOX, _T.ERROR}),
    _T.WAITING_FOR_SANDBOX: frozenset({_T.WAITING_FOR_SANDBOX, _T.STARTING_CONVERSATION, _T.ERROR}),
    _T.STARTING_CONVERSATION: frozenset(
        {_T.PREPARING_REPOSITORY, _T.READY, _T.WAITING_FOR_SANDBOX, _T.ERROR}
    ),
    _T.PREPARING_REPOSITORY: frozenset({_T.READY, _T.WAITING_FOR_SANDBOX, _T.ERROR}),
    _T.READY: frozenset(),
    _T.ERROR: frozenset(),
}
START_MOVES = Moves(START_STAGES)


class GroupingStrategy(str, Enum):
    """SPEC 1's 'Sandbox Grouping Strategy'."""

    NO_GROUPING = "NO_GROUPING"
    GROUP_BY_NEWEST = "GROUP_BY_NEWEST"
    LEAST_RECENTLY_USED = "LEAST_RECENTLY_USED"
    FEWEST_CONVERSATIONS = "FEWEST_CONVERSATIONS"
    ADD_TO_ANY = "ADD_TO_ANY"


def stored_status(status: ExecutionStatus) -> str:
    """The execution status as its column holds it: uppercase, as stored since the first
    schema (the wire contract's `events.status` says it in lowercase)."""
    return status.value.upper()


# -- records ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class User:
    id: str
    name: str


class DiskUsage(BaseModel):
    """What a sandbox's own filesystem holds, in bytes, and its size (its disk limit)."""

    used: int
    limit: int


@dataclass(frozen=True)
class SandboxRow:
    id: str
    user_id: str
    spec_id: str
    status: SandboxStatus
    status_detail: str | None
    session_key_hash: str
    session_key_enc: str
    port: int | None
    ref: str | None
    """The provider's key to its sandbox (`Handle.ref`); None before its start stored one."""
    root_dir: str
    created_at: datetime
    updated_at: datetime
    last_activity_at: datetime
    running_since: datetime | None = None
    """When it last became RUNNING (the 12-hour cap counts from here)."""
    paused_at: datetime | None = None
    """When it was paused (the deletion time counts from here)."""
    status_reason: SandboxReason | None = None
    """Why the status last changed."""
    unhealthy_since: datetime | None = None
    """When its health check began to fail (ERROR after the grace period)."""
    reconcile_after: datetime | None = None
    """Wall-clock time before which no reconciler round looks at it again."""
    reconciled_by: str | None = None
    """The control plane that claimed its last reconciler round."""
    cleanup_after: datetime | None = None
    """ERROR or MISSING with remains (process, container, volume, files) still to be removed:
    the reconciler removes them from then on (set when it became terminal, moved later when a
    clean-up failed); None once they are gone."""
    pausing_reason: SandboxReason | None = None
    """A pause under way, recorded before its runs are paused and the sandbox frozen: a control
    plane that finds it so (its pauser died) finishes the pause."""
    pausing_detail: str | None = None
    host: str | None = None
    """Where its port is published (a cluster node's address, a process sandbox's own
    address behind the network boundary); None: this machine's loopback."""
    network_policy: dict[str, Any] | None = None
    """Its egress policy as stored (`network`; None for a sandbox made before there was one:
    `open`)."""
    name: str = ""
    """Its readable name ("brisk-otter-42"), unique among its user's sandboxes
    (`sandboxes.names`)."""

    @property
    def network(self) -> NetworkPolicy:
        return NetworkPolicy.model_validate(self.network_policy or {})


@dataclass(frozen=True)
class ConversationRow:
    """An app conversation, with its sandbox's status (joined) for the record."""

    id: str
    user_id: str
    sandbox_id: str
    start_task_id: str | None
    started: bool
    title: str | None
    tags: dict[str, str]
    selected_repository: str | None
    selected_branch: str | None
    working_dir: str
    execution_status: str | None
    metrics: dict[str, Any] | None
    observability: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime
    last_activity_at: datetime
    sandbox_status: SandboxStatus
    resume_run: bool = False
    """Its run was paused with its sandbox: it goes on when the sandbox resumes."""
    llm_model: str | None = None
    trigger: str | None = None
    pr_number: list[int] | None = None
    git_provider: str | None = None
    public: bool | None = None
    parent_conversation_id: str | None = None


@dataclass(frozen=True)
class ConversationFilters:
    """A conversation search's conditions (all of them hold)."""

    title_contains: str | None = None
    created_at_gte: datetime | None = None
    created_at_lt: datetime | None = None
    updated_at_gte: datetime | None = None
    updated_at_lt: datetime | None = None
    sandbox_id: str | None = None
    top_level: bool = False
    """Only conversations that are no sub-agent's (no parent conversation)."""


@dataclass(frozen=True)
class TaskRow:
    """A start task: its stage, and its placement once made."""

    id: str
    user_id: str
    status: StartTaskStatus
    detail: str | None
    request_enc: str
    app_conversation_id: str | None
    sandbox_id: str | None
    created_at: datetime
    updated_at: datetime
    made_sandbox: bool = False
    """The placement's sandbox was made for this task (removed with it when it fails)."""


@dataclass(frozen=True)
class EventFilters:
    """A stored-event search's conditions; timestamps in the schema's stored text form."""

    kind: str | None = None
    source: str | None = None
    timestamp_gte: str | None = None
    timestamp_lt: str | None = None


@dataclass(frozen=True)
class UsageRow:
    """What one sandbox of a user spent on the LLM through the gateway on one UTC day."""

    user_id: str
    sandbox_id: str
    day: str
    """`YYYY-MM-DD`, UTC."""
    requests: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    updated_at: datetime
