"""RemoteWorkspace calls: execute_command, file_upload, file_download, git_changes, git_diff
(host scope /api/..., and the conversation scope /api/conversations/{id}/...)."""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import ARGS, RESULT, check, finish, step, workspace  # noqa: E402


def calls(ws, label: str) -> None:
    root = ARGS["workspace"]
    r = step(
        f"{label}: execute_command",
        lambda: ws.execute_command(
            "echo out-$((40+2)); echo err-1 >&2; exit 3", cwd=root, timeout=20
        ),
    )
    RESULT[f"{label}_command"] = r.model_dump()
    check(f"{label}: exit code 3", r.exit_code == 3, r.model_dump())
    check(f"{label}: stdout", "out-42" in r.stdout, r.stdout)
    check(f"{label}: stderr", "err-1" in r.stderr, r.stderr)
    dest = os.path.join(root, "uploaded", f"{label}.txt")
    up = step(f"{label}: file_upload", lambda: ws.file_upload(b"uploaded bytes\n", dest))
    RESULT[f"{label}_upload"] = up.model_dump()
    check(f"{label}: upload succeeded", up.success, up.model_dump())
    check(
        f"{label}: the file is there",
        os.path.exists(dest) and open(dest, "rb").read() == b"uploaded bytes\n",
    )
    local = os.path.join(tempfile.mkdtemp(), "down.txt")
    down = step(
        f"{label}: file_download",
        lambda: ws.file_download(os.path.join(root, "repo", "tracked.txt"), local),
    )
    RESULT[f"{label}_download"] = down.model_dump()
    check(f"{label}: download succeeded", down.success, down.model_dump())
    check(f"{label}: downloaded bytes", os.path.exists(local) and open(local).read() == "changed\n")
    changes = step(f"{label}: git_changes", lambda: ws.git_changes(os.path.join(root, "repo")))
    RESULT[f"{label}_changes"] = [c.model_dump(mode="json") for c in changes]
    got = {(c.status.value, str(c.path)) for c in changes}
    check(f"{label}: changes", {("UPDATED", "tracked.txt"), ("ADDED", "new.txt")} <= got, got)
    diff = step(
        f"{label}: git_diff", lambda: ws.git_diff(os.path.join(root, "repo", "tracked.txt"))
    )
    RESULT[f"{label}_diff"] = diff.model_dump(mode="json")
    check(
        f"{label}: diff sides",
        (diff.original or "").rstrip("\n") == "original"
        and (diff.modified or "").rstrip("\n") == "changed",
        diff.model_dump(),
    )
    rel = step(f"{label}: git_changes (relative path)", lambda: ws.git_changes("repo"))
    check(f"{label}: relative path resolved against working_dir", len(rel) == len(changes), rel)


def main() -> None:
    with workspace() as ws:
        check("server alive", ws.alive)
        calls(ws, "host")
    if ARGS.get("conversation_id"):
        with workspace(runtime_conversation_id=ARGS["conversation_id"]) as scoped:
            calls(scoped, "conversation")


finish(main)
