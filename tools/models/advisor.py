"""consult_advisor: a second, stronger model reads the conversation so far and advises.

No public tool fixes this shape; it is in events.tools.models and docs/agent-server.md. The
advisor is the saved LLM profile named by the tool's `profile` param ("advisor" unless set). It
gets a read-only transcript of the conversation (secrets masked, the middle cut to
`max_history_chars`) and the agent's question, and no tools: it can only answer.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from events.tools.models import ConsultAdvisorAction, ConsultAdvisorObservation
from tools.base import TextContent, Tool, ToolError, params_as
from tools.conversation import ProfileNotFound, bounded
from tools.models.common import history_of, models_of, profile_list

DEFAULT_PROFILE = "advisor"
PROMPT = (
    "You advise a coding agent. Below is its conversation so far (read-only; secrets are "
    "shown as <secret-hidden>) and its question. Give specific, practical advice: what it "
    "is missing, mistakes or risks you see, and the next steps you would take. Be concise; "
    "you cannot run anything yourself."
)
DEFAULT_QUESTION = "Review my progress: what am I missing, and what should I do next?"


class AdvisorParams(BaseModel):
    """`params` of consult_advisor in `agent.tools`."""

    model_config = ConfigDict(extra="forbid")

    profile: str = Field(default=DEFAULT_PROFILE, min_length=1, max_length=100)
    """The saved LLM profile that advises."""
    max_history_chars: int = Field(default=60_000, ge=1_000, le=1_000_000)
    """Characters of transcript the advisor reads at most (the middle is cut)."""


class ConsultAdvisorTool(Tool):
    name = "consult_advisor"
    description = (
        "Ask a second, stronger model for advice on this conversation so far: it reads what "
        "happened (read-only) and your question, and answers. Use it when you are stuck, "
        "before a risky or large change, or to review a plan. It cannot run anything."
    )
    action_type = ConsultAdvisorAction
    observation_type = ConsultAdvisorObservation
    acts = False
    read_only = True

    async def run(self, action: ConsultAdvisorAction) -> ConsultAdvisorObservation:
        params = params_as(AdvisorParams, self.params)
        models, history = models_of(self.ctx), history_of(self.ctx)
        question = action.question.strip() or DEFAULT_QUESTION
        transcript = history.transcript(params.max_history_chars)
        try:
            answer = await models.ask(
                params.profile,
                [
                    {"role": "system", "content": PROMPT},
                    {
                        "role": "user",
                        "content": f"<conversation>\n{transcript}\n</conversation>\n\n"
                        f"Question: {question}",
                    },
                ],
            )
        except ProfileNotFound:
            raise ToolError(
                f"The advisor profile {params.profile!r} is not saved. "
                + profile_list(models.profiles())
            ) from None
        except RuntimeError as exc:
            raise ToolError(f"The advisor failed: {exc}") from None
        advice = bounded(answer.text.strip())
        if not advice:
            raise ToolError("The advisor returned no advice.")
        return ConsultAdvisorObservation(
            content=[TextContent(text=f"Advice from {params.profile} ({answer.model}):\n{advice}")],
            advice=advice,
            profile_name=params.profile,
            model=answer.model,
        )
