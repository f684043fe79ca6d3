"""Stuck detection: the agent repeating itself instead of making progress."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    action: str  # tool name and arguments
    outcome: str  # what came back
    failed: bool  # an AgentErrorEvent rather than an observation


class StuckDetector:
    """Stuck when: the same action and outcome 4 times running; the same failing action 3 times
    running; or two steps alternating A/B/A/B/A/B."""

    def __init__(self) -> None:
        self._steps: deque[Step] = deque(maxlen=6)

    def add(self, step: Step) -> None:
        self._steps.append(step)

    def reason(self) -> str | None:
        steps = list(self._steps)
        last4 = steps[-4:]
        if len(last4) == 4 and len(set(last4)) == 1:
            return "the same action gave the same result 4 times running"
        last3 = steps[-3:]
        if len(last3) == 3 and all(s.failed for s in last3) and len({s.action for s in last3}) == 1:
            return "the same action failed 3 times running"
        if len(steps) == 6:
            a, b = steps[0], steps[1]
            if a != b and all(s == (a if i % 2 == 0 else b) for i, s in enumerate(steps)):
                return "the agent alternates between two actions (A/B/A/B/A/B)"
        return None
