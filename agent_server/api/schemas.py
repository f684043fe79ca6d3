"""Request and response bodies of the HTTP interface that no domain module needs (SPEC 4.4).

Requests tolerate unknown fields; responses are exact. Shapes follow the public OpenHands
agent server where the SPEC is silent.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from agent_server.agent.policies import ConfirmationPolicy
from agent_server.agent.spec import (
    EnvName,
    Lenient,
)
from agent_server.record import ConversationInfo as ConversationInfo
from agent_server.record import Secrets, Tags
from agent_server.workspace import NAME_MAX
from core.ids import EVENT_ID_PATTERN
from events.kinds import KindName


class SetConfirmationPolicy(Lenient):
    """POST .../confirmation_policy: `{"policy": {...}}` (OpenHands) or the policy itself."""

    policy: ConfirmationPolicy

    @model_validator(mode="before")
    @classmethod
    def _bare(cls, data: Any) -> Any:
        if isinstance(data, dict) and "policy" not in data and "kind" in data:
            return {"policy": data}
        return data


class ConfirmationResponse(Lenient):
    """POST .../events/respond_to_confirmation."""

    accept: bool
    reason: str = Field(default="User rejected the action.", max_length=10_000)


class UpdateSecrets(Lenient):
    """POST /api/conversations/{id}/secrets: add or replace."""

    secrets: Secrets


class Navigate(Lenient):
    """POST .../navigate."""

    event_id: str | None = Field(max_length=100)
    """The event to make HEAD; null: the empty tree (the next event is a new root). Required, so
    an empty body is refused rather than read as a move to the empty tree."""


class AskAgent(Lenient):
    """POST .../ask_agent: a side question, answered from the conversation without adding to it."""

    question: str = Field(min_length=1, max_length=100_000)


class AgentAnswer(BaseModel):
    response: str


class SecurityAnalyzer(Lenient):
    """An OpenHands SDK security analyzer, kept as given (e.g. {"kind": "LLMSecurityAnalyzer"})."""

    model_config = ConfigDict(extra="allow")
    kind: str = Field(min_length=1, max_length=100)


class SetSecurityAnalyzer(Lenient):
    """POST .../security_analyzer: `{"security_analyzer": {...} | null}`."""

    security_analyzer: SecurityAnalyzer | None


class LoadPlugin(Lenient):
    """POST .../load_plugin."""

    plugin_ref: str = Field(min_length=1, max_length=2000)


class ConversationPage(BaseModel):
    items: list[ConversationInfo]
    next_page_id: str | None = None


class ConversationIds(Lenient):
    ids: list[UUID] = Field(min_length=1, max_length=100)


class EventSearch(Lenient):
    """Filters of GET .../events/search and .../events/count (SPEC 4.4, OpenHands names too)."""

    kind__eq: KindName | None = None
    kind: KindName | None = None
    source__eq: Literal["agent", "user", "environment", "hook"] | None = None
    source: Literal["agent", "user", "environment", "hook"] | None = None
    timestamp__gte: datetime | None = None
    timestamp__lt: datetime | None = None
    sort_order: Literal["TIMESTAMP", "TIMESTAMP_DESC"] = "TIMESTAMP"
    limit: int = Field(default=100, ge=1, le=1000)
    page_id: str | None = Field(default=None, pattern=rf"^{EVENT_ID_PATTERN}$")
    branch: str | None = Field(default=None, pattern=rf"^({EVENT_ID_PATTERN}|head)$")
    """Only the events on the branch ending at this event id (`head`: the current branch)."""
    body: str | None = Field(default=None, min_length=1, max_length=1000)
    """Only messages whose text holds this, whatever the case (OpenHands' filter)."""

    @field_validator("timestamp__gte", "timestamp__lt", mode="before")
    @classmethod
    def _iso(cls, value: Any) -> Any:
        """An ISO 8601 date-time, as documented (pydantic alone reads "250" as a Unix time)."""
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value)
            except ValueError:
                raise ValueError(
                    "timestamp must be an ISO 8601 date-time, e.g. 2026-01-31T12:00:00+00:00"
                ) from None
        return value

    @field_validator("timestamp__gte", "timestamp__lt")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("timestamp needs a UTC offset, e.g. 2026-01-31T12:00:00+00:00")
        return value


class EventPage(BaseModel):
    items: list[dict[str, Any]]
    next_page_id: str | None = None


#: Text that becomes a path or a program's argument: a NUL would cut it short.
NO_NUL = r"^[^\x00]*$"
#: A path as the document states it: no NUL, no component over NAME_MAX characters (the coverage
#: phase of schemathesis sent 4096 zeros as a valid `path`, and was refused). JSON Schema counts
#: characters; the server counts bytes (`workspace.resolve`): a component past NAME_MAX bytes, or
#: a path past PATH_MAX once resolved, is one no file system here holds, a 400 on every route.
PATH_SCHEMA: dict[str, Any] = {
    "pattern": rf"^(?:[^/\x00]{{0,{NAME_MAX}}}/)*[^/\x00]{{0,{NAME_MAX}}}$"
}
PathText = Annotated[
    str, Field(min_length=1, max_length=4096, pattern=NO_NUL, json_schema_extra=PATH_SCHEMA)
]


class FileQuery(Lenient):
    """?path= of GET and POST .../file: relative to the working directory, or absolute in it."""

    path: PathText


class ListQuery(Lenient):
    """?path= of GET .../files: a directory in the working directory (absent: the directory
    itself)."""

    path: PathText | None = None


class FileEntry(BaseModel):
    name: str
    path: str
    """Relative to the working directory."""
    is_dir: bool
    size: int | None
    """Bytes of a regular file; null for directories and links."""


class FileListing(BaseModel):
    path: str
    """The directory, relative to the working directory ("." for itself)."""
    entries: list[FileEntry]
    """Directories first, then files, each by name."""
    truncated: bool


class FileWritten(BaseModel):
    path: str
    """Relative to the working directory."""
    size: int


class FileUploaded(BaseModel):
    """POST .../file/upload (the OpenHands FileUploadResult)."""

    success: bool = True
    path: str
    """Where the file is, absolute."""
    file_size: int


class ChangesQuery(Lenient):
    path: PathText | None = None
    """A directory (relative, or absolute inside a working directory): the repositories at or
    below it, or, inside a repository, that one's changes under it; paths relative to it.
    Default: the working directory."""


class DiffQuery(Lenient):
    path: PathText | None = None
    """One file; without it the whole unified diff comes back as text/plain."""


class RunCommand(Lenient):
    """POST .../commands: a shell command in the workspace, outside the agent's terminal."""

    command: str = Field(min_length=1, max_length=100_000, pattern=NO_NUL)
    """Run by `bash -c`; it may not hold NUL (a C string would end there)."""
    cwd: PathText | None = None
    """Relative to the working directory (or absolute inside it)."""
    timeout: float = Field(default=60, gt=0, le=600)
    """Seconds; then the command's whole process group is killed."""
    env: dict[EnvName, Annotated[str, StringConstraints(max_length=65536, pattern=NO_NUL)]] = Field(
        default_factory=dict, max_length=100
    )


class CommandResult(BaseModel):
    exit_code: int
    """The command's status; -N when signal N ended it (a timeout sends SIGTERM, then SIGKILL)."""
    stdout: str
    stderr: str
    timed_out: bool


class UpdateConversation(Lenient):
    """PATCH /api/conversations/{id}: fields left out stay; tags given replace all tags."""

    title: str | None = Field(default=None, min_length=1, max_length=200, pattern=r"[^ \t\n\r\f\v]")
    """null clears the title; a title is not blank (it holds more than ASCII whitespace)."""
    tags: Tags | None = None
    """Given, they replace all the tags."""
