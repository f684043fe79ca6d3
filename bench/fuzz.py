"""The fuzz of tests/agent_server/api/test_fuzz.py, longer: every operation of the served
/openapi.json with many more generated requests, valid and invalid, and every case of
schemathesis' coverage phase (the suite takes FUZZ_COVERAGE of them).

    .venv/bin/python bench/fuzz.py [--examples 500]

Prints one JSON object: cases sent, failures (each with its operation and schemathesis'
report), seconds. The app is build_app with a ScriptedModel, served in-process on a loopback
port, as in the suite. A failure here is a defect: add its request to the suite.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import schemathesis
from schemathesis import GenerationMode

from tests.agent_server.api.test_fuzz import OPERATIONS, configure, coverage_cases, fuzz, send
from tests.support.inprocess import served


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--examples", type=int, default=500, help="generated requests per operation and mode"
    )
    args = parser.parse_args()
    started = time.monotonic()
    sent = 0
    failures = []
    with tempfile.TemporaryDirectory() as tmp, served(Path(tmp)) as url:
        schema = configure(schemathesis.openapi.from_url(url + "/openapi.json"))
        for method, path in OPERATIONS:
            for mode in GenerationMode:
                try:
                    sent += fuzz(
                        schema,
                        url,
                        Path(tmp) / "workspace",
                        method,
                        path,
                        mode,
                        args.examples,
                        derandomize=False,
                    )
                    for case in coverage_cases(schema, method, path, mode, 0):  # all of them
                        send(case, url, Path(tmp) / "workspace", method, path, mode)
                        sent += 1
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:  # noqa: BLE001 (a failure group: report, go on)
                    failures.append(
                        {
                            "operation": f"{method} {path}",
                            "mode": mode.value,
                            "report": str(exc)[:4000],
                        }
                    )
    print(
        json.dumps(
            {"cases": sent, "failures": failures, "seconds": round(time.monotonic() - started, 1)},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
