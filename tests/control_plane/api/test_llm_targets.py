"""The console's model calls are the control plane's own requests to a URL a user chose: tried
as a tenant probing the control plane's network would, they never reach a link-local address
(a cloud's metadata service), nor this machine's loopback where the user's sandboxes could not
reach it either (containers); where they could (process sandboxes), loopback is the user's."""

from __future__ import annotations

import asyncio

from control_plane import llm as model_calls
from control_plane.settings import UserSettings
from tests.control_plane.support import ControlPlane
from tests.support.llm import ScriptedLLM, text


def test_a_link_local_target_is_refused_before_any_request(control_plane: ControlPlane) -> None:
    client = control_plane.client(control_plane.new_user("prober"))
    r = client.post(
        "/api/v1/settings/llm-check",
        json={"llm_model": "openai/x", "llm_base_url": "http://169.254.169.254/latest/meta-data/"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["ok"] is False and "link-local" in r.json()["detail"], r.json()


def test_loopback_is_a_target_only_where_sandboxes_reach_it(llm: ScriptedLLM) -> None:
    settings = UserSettings(
        llm_model="openai/test-model", llm_api_key="sk-probe", llm_base_url=llm.base_url("probe")
    )
    llm.script("probe", text("OK"))
    refused = asyncio.run(llm_ask(settings, loopback=False))
    assert not refused.ok and "loopback" in refused.text
    assert not llm.timings.get("probe")  # nothing reached the listener
    allowed = asyncio.run(llm_ask(settings, loopback=True))
    assert allowed.ok and allowed.text == "OK" and len(llm.timings["probe"]) == 1


async def llm_ask(settings: UserSettings, *, loopback: bool) -> model_calls.Answer:
    return await model_calls.ask(
        settings, "Reply with the word OK.", max_tokens=5, loopback=loopback
    )
