"""Masking cost per event: the exact value and its JSON form only (before issue 16), against
every encoded form as well (core.masking.encoded_forms), in one trie-shaped pattern.

    .venv/bin/python bench/masking.py [--events 2000]

Prints one JSON object: microseconds per event for 1, 10 and 50 secrets, each way. The
event is an ObservationEvent-shaped dict with 4 KB of command output, masked with
Masker.data as the log does before each write.
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.masking import MASK, Masker  # noqa: E402


def event() -> dict[str, Any]:
    lines = [
        f"line {i}: compiled module_{i}.py in {i * 3} ms, cache hit ratio 0.{i:02d}"
        for i in range(64)
    ]
    return {
        "kind": "ObservationEvent",
        "source": "environment",
        "tool_name": "terminal",
        "observation": {
            "content": [{"type": "text", "text": "\n".join(lines)}],
            "command": "make build",
            "exit_code": 0,
        },
    }


def exact_only(values: list[str]) -> re.Pattern[str]:
    """The masker of before: the values and their JSON forms, as a plain alternation."""
    forms = set(values) | {json.dumps(v)[1:-1] for v in values}
    return re.compile("|".join(map(re.escape, sorted(forms, key=len, reverse=True))))


def walk(value: Any, pattern: re.Pattern[str]) -> Any:
    if isinstance(value, str):
        return pattern.sub(MASK, value)
    if isinstance(value, dict):
        return {k: walk(v, pattern) for k, v in value.items()}
    if isinstance(value, list):
        return [walk(v, pattern) for v in value]
    return value


def per_event(fn: Any, sample: dict[str, Any], n: int) -> float:
    fn(sample)  # warm: the pattern is compiled on first use
    started = time.perf_counter()
    for _ in range(n):
        fn(sample)
    return (time.perf_counter() - started) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=2000)
    args = parser.parse_args()
    sample = event()
    figures: dict[str, Any] = {"event_bytes": len(json.dumps(sample))}
    for count in (1, 10, 50):
        values = {f"S{i}": secrets.token_urlsafe(24) for i in range(count)}
        old = exact_only(list(values.values()))
        new = Masker(values)
        figures[f"{count}_secrets"] = {
            "exact_only_us": round(
                per_event(lambda e, old=old: walk(e, old), sample, args.events), 1
            ),
            "with_encodings_us": round(per_event(new.data, sample, args.events), 1),
        }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
