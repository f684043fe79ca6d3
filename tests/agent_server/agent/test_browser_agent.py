"""browser_tool_set through the agent loop: the real server, Chromium and the scripted LLM."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import create
from tests.support.api import events, wait_status
from tests.support.llm import ScriptedLLM, call

# A server subprocess (or another process, a restart, SIGKILL, Chromium, Docker tools).
pytestmark = pytest.mark.e2e

PAGE = b"""<html><head><title>Release notes</title></head><body>
<h1>Version 2.4</h1><p>The frobnicator now supports widgets.</p>
<a href="/next">Next page</a></body></html>"""


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.end_headers()
            self.wfile.write(PAGE)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()  # the listening socket too (a ResourceWarning otherwise)


def test_the_agent_reads_a_page(
    client: httpx.Client, llm: ScriptedLLM, key: str, tmp_path: Path, site: str
) -> None:
    llm.script(
        key,
        call("browser_navigate", url=site + "/"),
        call("browser_get_content"),
        call("browser_get_state"),
        call("finish", message="read it"),
    )
    conv = create(client, llm, key, tmp_path, tools=["browser_tool_set"], message="read", run=True)
    assert wait_status(client, conv["id"], timeout=120) == "finished"

    prompt = events(client, conv["id"], "SystemPromptEvent")[0]
    titles = {t["title"] for t in prompt["tools"]}
    assert {
        "browser_navigate",
        "browser_click",
        "browser_type",
        "browser_get_content",
        "browser_start_recording",
    } <= titles
    observations = events(client, conv["id"], "ObservationEvent")
    assert [o["observation"]["kind"] for o in observations[:3]] == ["BrowserObservation"] * 3
    content = observations[1]["observation"]["content"][0]["text"]
    assert "Version 2.4" in content and "frobnicator" in content
    assert "Next page" in observations[2]["observation"]["content"][0]["text"]
    actions = events(client, conv["id"], "ActionEvent")
    assert actions[0]["action"] == {
        "kind": "BrowserNavigateAction",
        "url": site + "/",
        "new_tab": False,
    }
    # The model got the page text as the result of its call.
    assert "frobnicator" in llm.requests_for(key)[2]["messages"][-1]["content"]
