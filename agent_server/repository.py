"""The conversation's repository (SPEC 2.5): what a creation request names (RepositorySpec),
cloned into the working directory before the agent's first step, once.

The credential (a secret named by `credential_secret`) reaches Git only through GIT_ASKPASS:
a helper script that prints an environment variable of the git process. It is never on a
command line, in `.git/config` (which keeps the URL as given), in an event or in a log.
Stored credential helpers are switched off for the clone, so none of them saves it either.

A failed clone ends the run in `error` with a ConversationErrorEvent (code
RepositoryCloneFailed, secrets masked) rather than letting the agent work in an empty
directory; the conversation stays usable, and the next run tries the clone again (after, say,
POST .../secrets supplied the missing credential).
"""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from agent_server.agent.spec import Lenient
from core.ids import ENV_NAME
from core.masking import MASK, Masker
from core.processes import child_env, run_process
from web.errors import UpstreamError

#: A branch name Git accepts (and none that git would read as an option).
BRANCH = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/-]{1,255}(?<![./])(?<!\.lock)$")
#: The URLs a repository may be cloned from: a scheme Git speaks with a host (file:// without
#: one), an optional user but never a password; or scp-like user@host:path. Nothing starts
#: with "-" (an option to git) and nothing holds spaces or control characters.
REPOSITORY_URL = re.compile(
    r"^(?!-)(?:"
    r"(?:https?|ssh|git)://(?:[A-Za-z0-9._~%!$&'()*+,;=-]+@)?[A-Za-z0-9.-]+(?::[0-9]{1,5})?"
    r"(?:[/?#][^\x00-\x20\x7f]*)?"
    r"|file://[^\x00-\x20\x7f]*"
    r"|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:(?!//)[^\x00-\x20\x7f]+"
    r")$"
)

RepositoryStatus = Literal["cloned", "failed"]


class RepositorySpec(Lenient):
    """`repository` at creation: what to clone into the working directory."""

    url: str = Field(
        min_length=1, max_length=2000, json_schema_extra={"pattern": REPOSITORY_URL.pattern}
    )
    """https://, http://, ssh://, git://, file:// or user@host:path; never with a password in it."""
    branch: str | None = Field(
        default=None, max_length=255, json_schema_extra={"pattern": BRANCH.pattern}
    )
    credential_secret: str | None = Field(
        default=None, max_length=128, json_schema_extra={"pattern": ENV_NAME.pattern}
    )
    """Name of the conversation's secret holding an HTTPS token; sent through GIT_ASKPASS only."""

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not REPOSITORY_URL.match(value):
            raise ValueError(
                "url must be https://, http://, ssh://, git:// or file:// (or "
                "user@host:path), without spaces, control characters or a password "
                "(put the credential in `secrets` and name it in `credential_secret`)"
            )
        return value

    @field_validator("branch")
    @classmethod
    def _branch(cls, value: str | None) -> str | None:
        if value is not None and not BRANCH.match(value):
            raise ValueError("branch is not a valid Git branch name")
        return value

    @field_validator("credential_secret")
    @classmethod
    def _secret_name(cls, value: str | None) -> str | None:
        if value is not None and not ENV_NAME.match(value):
            raise ValueError("credential_secret is a secret name: letters, digits and _")
        return value


CLONE_TIMEOUT = 600.0
#: The user name sent with a token; GitHub and GitLab accept a token with any user name
#: (a user name in the URL takes precedence).
TOKEN_USER = "x-access-token"
PASSWORD_VARIABLE = "AGENT_SERVER_GIT_PASSWORD"
USER_VARIABLE = "AGENT_SERVER_GIT_USERNAME"
#: Git calls it with the prompt ("Username for ...", "Password for ...") as its argument.
ASKPASS = f"""#!/bin/sh
case "$1" in
  Username*) printf '%s\\n' "${USER_VARIABLE}" ;;
  *) printf '%s\\n' "${PASSWORD_VARIABLE}" ;;
esac
"""


class CloneFailed(UpstreamError):
    """Why the repository could not be cloned (the detail may still hold secrets: mask it)."""

    def __init__(self, detail: str) -> None:
        super().__init__("RepositoryCloneFailed", detail)


async def clone(
    spec: RepositorySpec,
    target: Path,
    secrets: Mapping[str, str],
    masker: Masker,
    author: Mapping[str, str],
) -> None:
    """A shallow clone of spec into the (empty) working directory `target`.

    Raises CloneFailed, whose detail is masked with `masker` (it may quote git's output).
    """
    try:
        await _clone(spec, target, secrets, masker, author)
    except CloneFailed as failure:
        raise CloneFailed(masker.text(failure.detail)) from None


async def _clone(
    spec: RepositorySpec,
    target: Path,
    secrets: Mapping[str, str],
    masker: Masker,
    author: Mapping[str, str],
) -> None:
    if masker.text(spec.url) != spec.url:
        raise CloneFailed(
            "the repository url holds a secret value; name the secret in "
            "credential_secret instead, so it stays out of .git/config"
        )
    if await _already_cloned(target, spec.url):
        return
    try:
        entries = await asyncio.to_thread(os.listdir, target)
    except OSError as exc:
        raise CloneFailed(
            f"the working directory {target} cannot be read: {exc.strerror}"
        ) from None
    if entries:
        raise CloneFailed(
            f"the working directory {target} is not empty ({len(entries)} "
            "entries); a repository is cloned into an empty one"
        )
    argv = [
        "git",
        "-c",
        "credential.helper=",
        "clone",
        "--depth",
        "1",
        "--single-branch",
        "--config",
        f"user.name={author['GIT_AUTHOR_NAME']}",
        "--config",
        f"user.email={author['GIT_AUTHOR_EMAIL']}",
    ]
    if spec.branch:
        argv += ["--branch", spec.branch]
    argv += ["--", spec.url, str(target)]
    env = child_env(author)
    credential = None
    if spec.credential_secret is not None:
        credential = secrets.get(spec.credential_secret)
        if credential is None:
            raise CloneFailed(
                f"credential_secret {spec.credential_secret!r} is not among the "
                "conversation's secrets (POST .../secrets adds it)"
            )
    with tempfile.TemporaryDirectory(prefix="agent-server-askpass-") as helper_dir:
        if credential is not None:
            helper = Path(helper_dir) / "askpass"
            await asyncio.to_thread(_write_helper, helper)
            env.update(
                {
                    "GIT_ASKPASS": str(helper),
                    USER_VARIABLE: TOKEN_USER,
                    PASSWORD_VARIABLE: credential,
                }
            )
        done = await run_process(argv, target.parent, env, CLONE_TIMEOUT)
    if done.timed_out or done.exit_code != 0:
        why = "timed out" if done.timed_out else f"exited with {done.exit_code}"
        message = done.stderr.head.decode(errors="replace").strip()
        if credential:
            message = message.replace(credential, MASK)
        branch = f" (branch {spec.branch})" if spec.branch else ""
        raise CloneFailed(f"git clone of {spec.url}{branch} {why}: {message[-1500:]}")


def _write_helper(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
    with os.fdopen(fd, "w") as f:
        f.write(ASKPASS)


async def _already_cloned(target: Path, url: str) -> bool:
    """The working directory already holds a clone of url (a run cut short, or done by hand)."""
    if not await asyncio.to_thread(os.path.exists, target / ".git"):
        return False
    done = await run_process(
        ["git", "-c", "safe.directory=*", "config", "--get", "remote.origin.url"],
        target,
        child_env(),
        30,
    )
    return done.exit_code == 0 and done.stdout.head.decode(errors="replace").strip() == url
