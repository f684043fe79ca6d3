"""The sandbox image as deployed, with Chromium: its size, and its tools working (prints JSON).

    .venv/bin/python bench/image.py [IMAGE]

Builds sandbox.Dockerfile with its defaults (Debian's chromium-headless-shell) on the tests'
base (tests/support/docker.py: Debian packages only), then in a container run as the Docker
provider runs one (uid 1000, read-only root, tmpfs /tmp and home, every capability dropped,
no-new-privileges; no network here) checks what an agent uses: the browser tool (Playwright
driving the image's AGENT_SERVER_CHROMIUM) loads a data: page, reads it, saves a screenshot
(a PNG of the viewport's size), types into a field and clicks a button (whose script reports
the text and whether WebGL works), and saves a recording (a trace zip); git init, commit, diff,
clone and rebase; ripgrep; Perl with its common modules; the AWS clients litellm makes for
Bedrock and SageMaker and for their credentials (botocore keeps only the models it names). The
suite builds the image without Chromium to stay fast, so this is where the browser in the image
is checked. Exits 1 when a check fails. Sizes: `docker image inspect` (the image), `docker
history` (its layers). With IMAGE, checks that image instead of building one.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from control_plane.providers.containers import USER  # noqa: E402
from control_plane.providers.docker.container import tmpfs  # noqa: E402
from control_plane.sandboxes.provider import DEFAULT_LIMITS  # noqa: E402
from tests.support import docker as docker_support  # noqa: E402

#: Run inside the container: the browser tool set against the image's Chromium.
BROWSER_PROBE = """
import asyncio, json, os, re, struct
from pathlib import Path
from tools.base import ToolContext
from tools.browser import TOOL_SET, BrowserManager
from tools.browser.manager import BrowserSettings

PAGE = ("data:text/html,<title>Probe</title><h1>Hello from the image</h1><a href='/x'>a link</a>"
        "<input name=q><button onclick='send()'>Send</button><script>function send() {"
        " document.title = 'Sent ' + document.querySelector('input').value + ', webgl '"
        " + !!document.createElement('canvas').getContext('webgl') }</script>")

async def main():
    manager = BrowserManager(BrowserSettings(executable=os.environ["AGENT_SERVER_CHROMIUM"]))
    root = Path("/tmp/probe")
    ctx = ToolContext(conversation_id="c0", working_dir=root / "w", state_dir=root / "s",
                      browser=lambda: manager)
    tools = {t.name: t for t in TOOL_SET.make(ctx, {})}
    async def call(name, **arguments):
        tool = tools[name]
        observation = await tool.run(tool.parse(arguments))
        if observation.is_error:
            raise SystemExit(f"{name}: {observation.text}")
        return observation.text
    try:
        await call("browser_start_recording")
        await call("browser_navigate", url=PAGE)
        state = await call("browser_get_state", include_screenshot=True)
        content = await call("browser_get_content")
        field = re.search(r"\\[(\\d+)\\] <input", state).group(1)
        button = re.search(r"\\[(\\d+)\\] <button", state).group(1)
        await call("browser_type", index=int(field), text="typed")
        clicked = await call("browser_click", index=int(button))
        saved = await call("browser_stop_recording")
        trace = Path(re.search(r"Recording saved to (\\S+) ", saved).group(1)).read_bytes()
        png = Path(re.search(r"Screenshot saved to (\\S+)\\.$", state, re.M).group(1)).read_bytes()
        width, height = struct.unpack(">II", png[16:24])
        return {"chromium": os.environ["AGENT_SERVER_CHROMIUM"],
                "version": manager._browser.version,
                "png": png[:8] == b"\\x89PNG\\r\\n\\x1a\\n",
                "screenshot": [width, height, len(png)],
                "title_seen": "Title: Probe" in state,
                "text_seen": "Hello from the image" in content,
                "typed_and_clicked": "Sent typed" in clicked,
                "webgl": "webgl true" in clicked,
                "trace_zip": trace[:2] == b"PK" and len(trace)}
    finally:
        for tool in tools.values():
            await tool.close()
        await manager.close()

print(json.dumps(asyncio.run(main())))
"""

#: Run inside the container: what an agent does with git and ripgrep.
TOOLS_PROBE = """set -e
cd /tmp && git config --global user.email a@example.com && git config --global user.name A
git init -q src && cd src && printf 'hello\\nworld\\n' > f.txt
git add f.txt && git commit -qm one
sed -i s/world/there/ f.txt && git diff --stat | tail -1 && git commit -qam two
cd /tmp && git clone -q src dst && cd dst && git rebase -q HEAD~1 && git log --oneline | wc -l
rg -c there /tmp/dst/f.txt
perl -MFile::Find -MData::Dumper -MJSON::PP -MDigest::MD5 -MEncode \\
    -e 'print encode_json([1]), "\\n"'
"""

#: Run inside the container: the clients litellm's Bedrock and SageMaker providers make (no
#: request is sent), and those of botocore's credential providers.
AWS_PROBE = """
import boto3
for name in ("bedrock", "bedrock-runtime", "bedrock-agent-runtime", "sagemaker-runtime", "s3",
             "sts", "sso", "sso-oidc"):
    boto3.client(name, region_name="us-east-1")
print("ok")
"""


def run(c: Any, image: str, command: list[str]) -> str:
    """`command` in a container of `image` hardened as the Docker provider's sandboxes."""
    out = c.containers.run(
        image,
        command,
        entrypoint=[],
        remove=True,
        user=USER,
        read_only=True,
        tmpfs=tmpfs(DEFAULT_LIMITS),
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        network_disabled=True,
    )
    return str(out.decode())


def main(image: str | None = None) -> dict[str, Any]:
    """`image`: check that image instead of building one."""
    docker_support.Daemon.ensure(docker_support.CACHE / "dockerd.log")
    timings: dict[str, float] = {}
    began = time.monotonic()
    image = image or docker_support.sandbox_image(timings, chromium=True)
    build_s = time.monotonic() - began
    with contextlib.closing(docker_support.client()) as c:
        size = c.images.get(image).attrs["Size"]
        layers = [
            {
                "mb": round(layer["Size"] / 1e6, 1),
                "by": layer["CreatedBy"].replace("/bin/sh -c ", "")[:90],
            }
            for layer in c.api.history(image)
            if layer["Size"] > 100_000
        ]
        browser = json.loads(run(c, image, ["python", "-c", BROWSER_PROBE]).splitlines()[-1])
        tools = run(c, image, ["bash", "-c", TOOLS_PROBE]).split()
        aws = run(c, image, ["python", "-c", AWS_PROBE]).split()[-1:]
    ok = (
        browser["png"]
        and browser["title_seen"]
        and browser["text_seen"]
        and bool(browser["trace_zip"])
        and browser["typed_and_clicked"]
        and browser["webgl"]
        and tools[-3:] == ["2", "1", "[1]"]
        and aws == ["ok"]
    )
    return {
        "image": image,
        "size_mb": round(size / 1e6, 1),
        "layers": layers,
        "browser": browser,
        "git_and_ripgrep": " ".join(tools),
        "aws_clients": " ".join(aws),
        "all_working": ok,
        "build_s": round(build_s, 1),
    }


if __name__ == "__main__":
    result = main(sys.argv[1] if len(sys.argv) > 1 else None)
    print(json.dumps(result, indent=2))
    sys.exit(0 if result["all_working"] else 1)
