"""Secrets the agent server would refuse are refused where they enter (issue 25.5): a settings
patch or a start request with a value under 4 or over 65,536 characters is a 422 that does not
echo it, and nothing is stored; what a sandbox answers a start is put in its task's detail with
the start's secrets masked, even where the answer quotes one cut short."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import Field, TypeAdapter, ValidationError

from control_plane.start_secrets import masked
from tests.control_plane.support import ControlPlane, configure_llm
from tests.support.llm import ScriptedLLM

LONG = "L0ng-secret-" + "x" * 65_530


@pytest.mark.e2e
def test_a_secret_the_agent_server_refuses_is_refused_on_entry(
    control_plane: ControlPlane, llm: ScriptedLLM, key: str
) -> None:
    client = control_plane.client(control_plane.new_user("sam"))
    configure_llm(client, llm.base_url(key))
    for value in ("abc", LONG):
        r = client.patch("/api/v1/settings", json={"secrets": {"TOKEN": value}})
        assert r.status_code == 422 and value not in r.text, r.text
        r = client.post("/api/v1/app-conversations", json={"secrets": {"TOKEN": value}})
        assert r.status_code == 422 and value not in r.text, r.text
    assert client.get("/api/v1/settings").json()["secret_names"] == []
    assert client.get("/api/v1/app-conversations/count").json() == 0


def test_a_detail_never_quotes_a_secret_even_cut_short() -> None:
    """pydantic quotes a long input cut in the middle: neither end of it is left."""
    secret = "s3cr3t-" + "z" * 200 + "-end"
    try:
        TypeAdapter(Annotated[str, Field(max_length=10)]).validate_python(secret)
    except ValidationError as exc:
        text = f"the agent server answered 422: {exc}"
    assert secret[:12] in text and secret[-12:] in text  # quoted, cut short
    shown = masked(text, ["x", secret])
    assert not [i for i in range(len(secret) - 8) if secret[i : i + 8] in shown], shown
    assert "the agent server answered 422" in shown
