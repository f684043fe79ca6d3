"""Small helpers over the HTTP interface, so tests read as what a client does."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.wait import wait_for

DONE = ("finished", "error", "stuck", "paused", "idle", "waiting_for_confirmation")


def status(client: httpx.Client, cid: str) -> str:
    r = client.get(f"/api/conversations/{cid}")
    assert r.status_code == 200, r.text
    return r.json()["execution_status"]


def wait_status(client: httpx.Client, cid: str, *wanted: str, timeout: float = 60) -> str:
    """Wait until the conversation reaches one of `wanted` (default: any resting status)."""
    targets = wanted or DONE
    return wait_for(
        lambda: (s := status(client, cid)) in targets and s,
        timeout=timeout,
        what=f"status in {targets} (last: {status(client, cid)})",
    )


def events(
    client: httpx.Client, cid: str, kind: str | None = None, **params: Any
) -> list[dict[str, Any]]:
    """Every event of the conversation (following pages), optionally of one kind."""
    out: list[dict[str, Any]] = []
    query: dict[str, Any] = {"limit": 1000, **params}
    if kind:
        query["kind__eq"] = kind
    while True:
        r = client.get(f"/api/conversations/{cid}/events/search", params=query)
        assert r.status_code == 200, r.text
        page = r.json()
        out.extend(page["items"])
        if not page["next_page_id"]:
            return out
        query["page_id"] = page["next_page_id"]


def send(client: httpx.Client, cid: str, text: str, run: bool = True) -> dict[str, Any]:
    r = client.post(
        f"/api/conversations/{cid}/events",
        json={"role": "user", "content": [{"type": "text", "text": text}], "run": run},
    )
    assert r.status_code == 200, r.text
    return r.json()


def tool_names(request: dict[str, Any]) -> list[str]:
    """Names of the tools an LLM request offered."""
    return [t["function"]["name"] for t in request.get("tools", [])]
