"""The crash test's child: append to an event log until killed, printing each acknowledged id.

    python log_child.py LOG_PATH SEED

An id is printed (and stdout flushed) only after `append` has returned it, i.e. once the event
is durable; the parent SIGKILLs this process at a random moment and then checks that every
printed id survived. Appends mix single calls and gathered groups, and some events are large
so that a kill can land in the middle of a write.
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path

from agent_server.log import EventLog
from events import (
    ActionEvent,
    Event,
    Message,
    MessageEvent,
    MessageToolCall,
    ObservationEvent,
    SystemPromptEvent,
    TextContent,
)
from tools.always import ThinkAction, ThinkObservation, ThinkTool


def make_event(rng: random.Random, n: int) -> Event:
    # Mostly small events, sometimes 64 KB, so kills also land inside long writes.
    words = "x" * (65_536 if rng.random() < 0.02 else rng.randint(0, 300))
    pick = rng.random()
    if pick < 0.4:
        call = f"call_{n}"
        return ActionEvent(
            thought=[TextContent(text=f"step {n}")],
            action=ThinkAction(thought=words),
            tool_name="think",
            tool_call_id=call,
            tool_call=MessageToolCall(
                id=call, name="think", arguments='{"thought": "..."}', origin="completion"
            ),
            llm_response_id=f"resp_{n}",
        )
    if pick < 0.7:
        return ObservationEvent(
            tool_name="think",
            tool_call_id=f"call_{n}",
            observation=ThinkObservation(content=[TextContent(text=words)]),
            action_id=f"action_{n}",
        )
    return MessageEvent(
        source=rng.choice(["user", "agent"]),
        llm_message=Message(role="user", content=[TextContent(text=f"message {n} {words}")]),
    )


async def main(path: Path, seed: int) -> None:
    rng = random.Random(seed)
    log = await asyncio.to_thread(EventLog.open, path)
    if len(log) == 0:
        [first] = await log.append(
            SystemPromptEvent(
                system_prompt=TextContent(text="You are a careful agent."),
                tools=[ThinkTool.definition()],
            )
        )
        print(first.id, flush=True)
    n = 0
    while True:
        if rng.random() < 0.5:
            [event] = await log.append(make_event(rng, n))
            n += 1
            print(event.id, flush=True)
        else:
            groups = []
            for _ in range(rng.randint(2, 8)):
                groups.append([make_event(rng, n + i) for i in range(rng.randint(1, 3))])
                n += len(groups[-1])
            results = await asyncio.gather(*(log.append(*group) for group in groups))
            print("\n".join(e.id for r in results for e in r if e.id), flush=True)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2])))
