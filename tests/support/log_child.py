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

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent_server.log import EventLog  # noqa: E402
from tests.support.conversation_events import Source, system_prompt  # noqa: E402

#: Share of events 64 KiB long, so kills also land inside long writes.
LARGE = 0.02


async def main(path: Path, seed: int) -> None:
    rng = random.Random(seed)
    source = Source(seed + 1, large=LARGE)
    log = await asyncio.to_thread(EventLog.open, path)
    if len(log) == 0:
        [first] = await log.append(system_prompt())
        print(first.id, flush=True)
    while True:
        if rng.random() < 0.5:
            [event] = await log.append(*source.take(1))
            print(event.id, flush=True)
        else:
            groups = [source.take(rng.randint(1, 3)) for _ in range(rng.randint(2, 8))]
            results = await asyncio.gather(*(log.append(*group) for group in groups))
            print("\n".join(e.id for r in results for e in r if e.id), flush=True)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2])))
