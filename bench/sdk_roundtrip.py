"""The OpenHands SDK client's round trip for a 3-step run (create to run() returning), against
this server and, where `openhands-agent-server` 1.58.0 installs, the reference server, in one
run, with the same scripted LLM. Prints JSON.

    PYTHONPATH=. .venv/bin/python bench/sdk_roundtrip.py [--rounds N] [--probe]

`--probe` (also used automatically when the plain client fails at create on this server) lets
the client past the known create failure (drops `condenser: null`) and the missing ready frame,
so the run itself can be timed; the figures then say so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.compat import sdk_env  # noqa: E402
from tests.support.llm import ScriptedLLM, call  # noqa: E402
from tests.support.server import KEY, ServerProcess  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[1] / "tests" / "compat" / "scripts" / "roundtrip.py"


def one(python: Path, url: str, llm: ScriptedLLM, tmp: Path, probe: bool) -> dict[str, Any]:
    key = uuid.uuid4().hex[:12]
    ws = tmp / key
    ws.mkdir()
    llm.script(
        key,
        call("terminal", command="echo one", security_risk="LOW"),
        call("terminal", command="echo two", security_risk="LOW"),
        call("finish", message="done"),
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        {
            "COMPAT_ARGS": json.dumps(
                {
                    "host": url,
                    "api_key": KEY,
                    "llm_base_url": llm.base_url(key),
                    "workspace": str(ws),
                }
            ),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "OPENHANDS_SUPPRESS_BANNER": "1",
        }
    )
    if probe:
        env["COMPAT_PROBE"] = "1"
    out = subprocess.run(
        [str(python), str(SCRIPT)], env=env, capture_output=True, text=True, timeout=300
    )
    line = next((ln for ln in reversed(out.stdout.splitlines()) if ln.startswith("RESULT ")), None)
    if line is None:
        return {"error": out.stderr[-500:]}
    result = json.loads(line[7:])
    bad = next((s for s in result["steps"] if not s["ok"]), None)
    figures = {k: result.get(k) for k in ("create_s", "run_s", "roundtrip_s", "status")}
    if bad:
        figures["failed_at"] = f"{bad['name']}: {bad['error'][:200]}"
    return figures


def series(
    python: Path, url: str, llm: ScriptedLLM, tmp: Path, rounds: int, probe: bool
) -> dict[str, Any]:
    runs = [one(python, url, llm, tmp, probe) for _ in range(rounds)]
    times = [r["roundtrip_s"] for r in runs if r.get("roundtrip_s") is not None]
    return {
        "probe_workarounds": probe,
        "runs": runs,
        "median_roundtrip_s": sorted(times)[len(times) // 2] if times else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--no-reference", action="store_true")
    args = parser.parse_args()
    python = sdk_env.sdk_python()
    llm = ScriptedLLM().start()
    report: dict[str, Any] = {"sdk": sdk_env.SDK_VERSION}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        ours = ServerProcess(tmp / "ours").start()
        try:
            report["ours"] = series(python, ours.url, llm, tmp, args.rounds, args.probe)
            if not args.probe and any(
                "create" in r.get("failed_at", "")[:6] for r in report["ours"]["runs"]
            ):
                report["ours_with_probe_workarounds"] = series(
                    python, ours.url, llm, tmp, args.rounds, True
                )
        finally:
            ours.stop()
        if not args.no_reference:
            try:
                from tests.compat.reference import ReferenceServer

                ref = ReferenceServer(sdk_env.reference_python(), tmp / "reference").start()
            except Exception as exc:  # noqa: BLE001
                report["reference"] = {"unavailable": f"{type(exc).__name__}: {exc}"[:500]}
            else:
                try:
                    report["reference"] = series(python, ref.url, llm, tmp, args.rounds, False)
                finally:
                    ref.stop()
    llm.stop()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
