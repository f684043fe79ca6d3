"""workflow: run a named multi-step workflow of the workspace and report every step.

The action keeps the public WorkflowAction's fields (`name`, `script`, `max_concurrency`), but
`script` is not Python here: running model-written code in the server's process is not
something a sandboxed agent should be able to ask for. It is a workflow in the documented
YAML/JSON format (tools.workflow.definition); without it, `name` is looked up in the
workspace's `.agents/workflows/`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from core.processes import child_env, run_process
from events.tools.workflow import WorkflowAction, WorkflowObservation
from tools import files
from tools.base import TextContent, Tool, ToolError, run_in_thread
from tools.conversation import SubagentTask, bounded
from tools.subagents.common import agent_type, check_limits, child_tools, params_of, run_child, seam
from tools.workflow.definition import (
    LOCATIONS,
    WORKFLOW_NAME,
    BadWorkflow,
    Step,
    Workflow,
    fill,
    groups,
    parse,
)

#: Bytes of each command's stdout and stderr kept, and characters of each step's output
#: passed on to later steps and shown in the report.
COMMAND_BYTES = 100_000
STEP_OUTPUT_CHARS = 20_000
REPORT_CHARS = 2_000


@dataclass
class StepResult:
    step: Step
    status: str  # ok, failed, skipped
    detail: str
    output: str
    seconds: float = 0.0


class WorkflowTool(Tool):
    name = "workflow"
    description = (
        "Run a named multi-step workflow of this workspace (.agents/workflows/<name>.yaml, "
        ".yml or .json) and get a report of every step. A workflow is `steps:`, each with a "
        "`command` (bash, in the working directory, `timeout` seconds) or a `prompt` for a "
        "sub-agent (`subagent_type`); `{{steps.NAME.output}}` in a prompt is an earlier step's "
        "output; a failing step stops the rest unless `continue_on_error: true`; consecutive "
        "`parallel: true` steps run together. `script` may hold a workflow in that format "
        "instead of a file."
    )
    action_type = WorkflowAction
    observation_type = WorkflowObservation

    async def run(self, action: WorkflowAction) -> WorkflowObservation:
        workflow = await self._load(action)
        prompts = sum(1 for s in workflow.steps if s.prompt is not None)
        if prompts:
            check_limits(seam(self.ctx), params_of(self.params), prompts)
        results: dict[str, StepResult] = {}
        stopped = False
        gate = asyncio.Semaphore(action.max_concurrency)
        for group in groups(workflow.steps):
            if stopped:
                for step in group:
                    results[step.name] = StepResult(step, "skipped", "not run", "")
                continue
            done = await asyncio.gather(*(self._step(step, results, gate) for step in group))
            for result in done:
                results[result.step.name] = result
                if result.status == "failed" and not result.step.continue_on_error:
                    stopped = True
        failed = [r for r in results.values() if r.status == "failed"]
        ok = not stopped
        head = (
            f"Workflow {action.name!r}: {'completed' if ok else 'error'} "
            f"({len(workflow.steps)} steps, {len(failed)} failed)."
        )
        lines = [head]
        for i, step in enumerate(workflow.steps, 1):
            r = results[step.name]
            lines.append(
                f"{i}. {step.name} ({step.kind}): {r.status}, {r.detail}"
                + (f", {r.seconds:.1f} s" if r.status != "skipped" else "")
            )
            if r.output:
                lines.append("   " + bounded(r.output, REPORT_CHARS).replace("\n", "\n   "))
        return WorkflowObservation(
            name=action.name,
            status="completed" if ok else "error",
            is_error=not ok,
            content=[TextContent(text="\n".join(lines))],
        )

    async def _load(self, action: WorkflowAction) -> Workflow:
        if not WORKFLOW_NAME.match(action.name):
            raise ToolError(
                f"{action.name!r} is not a workflow name: 1 to 100 letters, digits, "
                "'.', '_' or '-'."
            )
        try:
            if action.script.strip():
                return parse(action.script, "script")
            for pattern in LOCATIONS:
                relative = pattern.format(action.name)
                path = files.confined(self.ctx.working_dir, relative)
                if await run_in_thread(path.is_file):
                    text = await run_in_thread(
                        lambda path=path: files.read_text(
                            path, root=self.ctx.working_dir, tool="workflow"
                        )
                    )
                    return parse(text, relative)
        except BadWorkflow as exc:
            raise ToolError(f"The workflow cannot be run: {exc}") from None
        except files.Refusal as exc:
            raise ToolError(str(exc)) from None
        raise ToolError(
            f"No workflow named {action.name!r}: looked for "
            + ", ".join(p.format(action.name) for p in LOCATIONS)
            + "."
        )

    async def _step(
        self, step: Step, results: dict[str, StepResult], gate: asyncio.Semaphore
    ) -> StepResult:
        async with gate:
            started = time.monotonic()
            try:
                if step.command is not None:
                    result = await self._command(step)
                else:
                    result = await self._prompt(step, results)
            except ToolError as exc:
                result = StepResult(step, "failed", str(exc), "")
            result.seconds = time.monotonic() - started
            return result

    async def _command(self, step: Step) -> StepResult:
        env = child_env(self.ctx.env, self.ctx.secrets)
        try:
            done = await run_process(
                ["bash", "-c", step.command or ""],
                self.ctx.working_dir,
                env,
                step.timeout,
                keep=COMMAND_BYTES,
            )
        except OSError as exc:
            raise ToolError(f"cannot start bash: {exc.strerror}") from None
        text = done.stdout.head.decode("utf-8", "replace")
        err = done.stderr.head.decode("utf-8", "replace")
        if err.strip():
            text = f"{text}\n[stderr]\n{err}" if text.strip() else err
        output = bounded(text.strip(), STEP_OUTPUT_CHARS)
        if done.timed_out:
            return StepResult(step, "failed", f"timed out after {step.timeout:g} s", output)
        status = "ok" if done.exit_code == 0 else "failed"
        return StepResult(step, status, f"exit {done.exit_code}", output)

    async def _prompt(self, step: Step, results: dict[str, StepResult]) -> StepResult:
        subagents, params = seam(self.ctx), params_of(self.params)
        _, kind = agent_type(step.subagent_type)
        earlier = {name: (r.status, r.output) for name, r in results.items()}
        prompt = f"{kind.brief}\n\n{fill(step.prompt or '', earlier)}"
        result = await run_child(
            subagents,
            SubagentTask(
                prompt=prompt,
                tools=child_tools(subagents, kind, params),
                title=f"workflow step {step.name}",
                max_iterations=params.max_iterations,
            ),
        )
        detail = f"conversation {result.conversation_id}, {result.status}"
        return StepResult(
            step, "ok" if result.ok else "failed", detail, bounded(result.text, STEP_OUTPUT_CHARS)
        )
