"""The workflow file format: named steps, each a shell command or a sub-agent's prompt.

    # .agents/workflows/check.yaml   (or .yml, or .json with the same fields)
    description: Run the tests and explain any failure
    steps:
      - name: tests
        command: pytest -q
        timeout: 600
        continue_on_error: true
      - name: explain
        prompt: "Explain these test failures: {{steps.tests.output}}"
        subagent_type: code-explorer

Each step has exactly one of `command` or `prompt`. `{{steps.NAME.output}}` and
`{{steps.NAME.status}}` in a prompt are replaced by an earlier step's output and status
(never in a command: it would run text nobody chose). Consecutive steps marked
`parallel: true` run together (at most the action's max_concurrency at once) and may not
refer to each other.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

STEP_NAME = re.compile(r"^[A-Za-z0-9_-]{1,50}$")
WORKFLOW_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
PLACEHOLDER = re.compile(r"\{\{\s*steps\.([A-Za-z0-9_-]+)\.(output|status)\s*\}\}")
MAX_STEPS = 50
#: Where a workflow named N is looked for, relative to the working directory, in this order.
LOCATIONS = (".agents/workflows/{}.yaml", ".agents/workflows/{}.yml", ".agents/workflows/{}.json")


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = ""
    """Referred to by later steps; step-N when left out."""
    command: str | None = Field(default=None, min_length=1, max_length=100_000)
    """A bash command run in the working directory."""
    prompt: str | None = Field(default=None, min_length=1, max_length=100_000)
    """A task for a sub-agent."""
    subagent_type: str = "general-purpose"
    timeout: float = Field(default=300, gt=0, le=3600)
    """Seconds a command may take (then its process group is killed and the step fails)."""
    continue_on_error: bool = False
    """Go on with the next steps when this one fails."""
    parallel: bool = False

    @model_validator(mode="after")
    def _one_kind(self) -> Step:
        if (self.command is None) == (self.prompt is None):
            raise ValueError("a step has exactly one of `command` or `prompt`")
        return self

    @property
    def kind(self) -> str:
        return "command" if self.command is not None else "sub-agent"

    @property
    def text(self) -> str:
        return self.command if self.command is not None else self.prompt or ""


class Workflow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: str = Field(default="", max_length=2000)
    steps: list[Step] = Field(min_length=1, max_length=MAX_STEPS)

    @field_validator("steps")
    @classmethod
    def _names(cls, steps: list[Step]) -> list[Step]:
        seen: set[str] = set()
        for i, step in enumerate(steps, 1):
            step.name = step.name or f"step-{i}"
            if not STEP_NAME.match(step.name):
                raise ValueError(
                    f"step {i}: name {step.name!r} is 1 to 50 letters, digits, '_' or '-'"
                )
            if step.name in seen:
                raise ValueError(f"step {i}: the name {step.name!r} is used twice")
            if step.command is not None and PLACEHOLDER.search(step.command):
                raise ValueError(
                    f"step {i} ({step.name}): placeholders belong in prompts only "
                    "(a command would run text nobody chose)"
                )
            for ref, _ in PLACEHOLDER.findall(step.text):
                if ref not in seen:
                    raise ValueError(
                        f"step {i} ({step.name}) refers to {ref!r}, which is not an earlier step"
                    )
            seen.add(step.name)
        for group in groups(steps):
            names = {s.name for s in group}
            for step in group:
                mates = {r for r, _ in PLACEHOLDER.findall(step.text)} & names
                if len(group) > 1 and mates:
                    raise ValueError(
                        f"step {step.name!r} refers to {sorted(mates)[0]!r}, which "
                        "runs in parallel with it"
                    )
        return steps


def groups(steps: list[Step]) -> list[list[Step]]:
    """The steps in running order: consecutive parallel steps together, the rest alone."""
    out: list[list[Step]] = []
    for step in steps:
        if step.parallel and out and out[-1][0].parallel:
            out[-1].append(step)
        else:
            out.append([step])
    return out


class BadWorkflow(ValueError):
    """The text is not a workflow; the message says where and why."""


def parse(text: str, source: str) -> Workflow:
    """A workflow from YAML or JSON text (JSON is YAML too, but is read without PyYAML)."""
    data: Any
    try:
        data = json.loads(text)
    except ValueError:
        try:
            import yaml
        except ImportError:  # pragma: no cover - PyYAML ships with uvicorn[standard]
            raise BadWorkflow(f"{source}: not JSON, and YAML cannot be read here") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise BadWorkflow(f"{source}: not valid YAML or JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadWorkflow(f"{source}: a workflow is a mapping with `steps`")
    try:
        return Workflow.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'workflow'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        raise BadWorkflow(f"{source}: {problems}") from None


def fill(text: str, results: dict[str, tuple[str, str]]) -> str:
    """Placeholders replaced by the (status, output) of earlier steps."""

    def one(match: re.Match[str]) -> str:
        status, output = results.get(match.group(1), ("skipped", ""))
        return output if match.group(2) == "output" else status

    return PLACEHOLDER.sub(one, text)
