"""task: hand one piece of work to a sub-agent and wait for its report (OpenHands' TaskTool).

The sub-agent is a child conversation on this server: its own id and log, visible by the
usual routes, linked to its parent by `parent_conversation_id`. `task_id` in the observation
is that id; `resume` with it continues the same child with a new prompt.
"""

from __future__ import annotations

from events.tools.subagents import TaskAction, TaskObservation
from tools.base import TextContent, Tool
from tools.conversation import SubagentTask
from tools.subagents.common import (
    agent_type,
    check_limits,
    child_tools,
    params_of,
    run_child,
    seam,
    types_text,
)


class TaskTool(Tool):
    name = "task"
    description = (
        "Launch a sub-agent to handle a complex, multi-step task on its own and wait for its "
        "report. It works in the same workspace with a subset of your tools and sees only the "
        "prompt you write: say exactly what to do and what to report back (paths, line "
        "numbers, results). Do simple lookups yourself.\n"
        "Sub-agent types:\n" + types_text() + "\n"
        "The observation's task_id continues the same sub-agent with `resume`."
    )
    action_type = TaskAction
    observation_type = TaskObservation

    async def run(self, action: TaskAction) -> TaskObservation:
        subagents = seam(self.ctx)
        params = params_of(self.params)
        type_name, kind = agent_type(action.subagent_type)
        if action.resume is None:
            check_limits(subagents, params, 1)
        tools = child_tools(subagents, kind, params)
        prompt = action.prompt if action.resume else f"{kind.brief}\n\n{action.prompt}"
        result = await run_child(
            subagents,
            SubagentTask(
                prompt=prompt,
                tools=tools,
                title=action.description,
                resume=action.resume,
                max_iterations=params.max_iterations,
            ),
        )
        if result.ok:
            text = result.text or "The sub-agent finished without a report."
        else:
            text = (
                f"The sub-agent stopped without finishing (status: {result.status}).\n{result.text}"
            ).rstrip()
        return TaskObservation(
            content=[
                TextContent(
                    text=f"Task ID: {result.conversation_id}\nSubagent: {type_name}\n\n{text}"
                )
            ],
            is_error=not result.ok,
            task_id=result.conversation_id,
            subagent=type_name,
            status="completed" if result.ok else "error",
        )
