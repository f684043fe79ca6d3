"""Keeping secrets out of what is shown: by value (`Masker`) and by key (`redact`).

Two literals, because they answer two different readers. `MASK` replaces a secret's value
found inside text (an event, command output): the reader should see that something was
hidden there. `REDACTED` replaces the whole value of a field whose key says it is secret (an
API key in settings): clients send it back unchanged to mean "keep what you have", so it
must be one fixed string.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, quote_plus

from pydantic import BaseModel, SecretStr

from core.ids import ENV_NAME, PLACEHOLDER

#: What a secret's value becomes wherever it appears in text.
MASK = "<secret-hidden>"
#: What the value of a secret field (see SECRET_KEYS) becomes in a response or a log.
REDACTED = "**********"
#: Keys whose values never go back to a client or into a log, wherever they appear.
SECRET_KEYS = frozenset({"api_key", "session_api_key", "secrets", "password", "token"})
#: Shorter values would mask ordinary words and numbers all over the transcript.
MIN_LENGTH = 4


def check_secrets(values: Mapping[str, str]) -> list[tuple[str, str]]:
    """Problems with a secrets map, as (name, message) pairs (empty when all is well)."""
    problems = []
    for name, value in values.items():
        if not ENV_NAME.match(name):
            problems.append((name, "secret names are letters, digits and _ (an environment name)"))
        elif len(value) < MIN_LENGTH:
            problems.append((name, f"secret values need at least {MIN_LENGTH} characters"))
    return problems


def credentials(value: Any) -> list[str]:
    """Every key held in `value` (SecretStr fields, however deep: an agent's LLM, its
    condensers' and its critic's; the settings' LLM profiles): masked as secrets are."""
    if isinstance(value, SecretStr):
        return [value.get_secret_value()]
    if isinstance(value, BaseModel):
        return [k for name in type(value).model_fields for k in credentials(getattr(value, name))]
    if isinstance(value, dict):
        return [k for v in value.values() for k in credentials(v)]
    if isinstance(value, list | tuple):
        return [k for v in value for k in credentials(v)]
    return []


def redact(value: Any) -> Any:
    """A copy of JSON-like `value` with the values of secret keys replaced by REDACTED.

    A `secrets` mapping keeps its names (a client needs to know which are set) and loses its
    values; empty values stay as they are, so "not set" still reads as not set.
    """
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            if k == "secrets" and isinstance(v, dict):
                out[k] = {name: REDACTED for name in v}
            elif k in SECRET_KEYS and v not in (None, "", {}):
                out[k] = REDACTED
            else:
                out[k] = redact(v)
        return out
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def is_placeholder(value: Any) -> bool:
    """`${NAME}` alone (a reference to a secret) is safe to show; a literal value may not be."""
    return isinstance(value, str) and PLACEHOLDER.fullmatch(value) is not None


def redact_literals(values: Mapping[str, Any]) -> dict[str, Any]:
    """Environment or header values: each literal one REDACTED, `${NAME}` references shown."""
    return {k: v if is_placeholder(v) else REDACTED for k, v in values.items()}


def literal_values(values: Mapping[str, Any]) -> list[str]:
    """The values `redact_literals` hides: what was given as it is, not as `${NAME}`."""
    return [v for v in values.values() if isinstance(v, str) and not is_placeholder(v)]


def redact_llm(llm: dict[str, Any]) -> dict[str, Any]:
    """An LLM configuration (as JSON data) with its key REDACTED, when it has one."""
    return {**llm, "api_key": REDACTED} if llm.get("api_key") else llm


def _mcp_servers(config: Any) -> list[dict[str, Any]]:
    servers = config.get("mcpServers") if isinstance(config, dict) else None
    if not isinstance(servers, dict):
        return []
    return [server for server in servers.values() if isinstance(server, dict)]


def mcp_literal_values(config: Any) -> list[str]:
    """The literal env and header values of an mcp_config's servers (`redact_mcp_config`'s)."""
    found: list[str] = []
    for server in _mcp_servers(config):
        for field in ("env", "headers"):
            values = server.get(field)
            if isinstance(values, dict):
                found += literal_values(values)
    return found


def redact_mcp_config(config: Any) -> None:
    """Redact, in place, the literal env and header values of an mcp_config's servers."""
    for server in _mcp_servers(config):
        for field in ("env", "headers"):
            values = server.get(field)
            if isinstance(values, dict):
                server[field] = redact_literals(values)


#: Encoded forms shorter than this are not masked: they would match by chance in other
#: encoded text (a 4-character secret's base64 is 5 characters).
MIN_ENCODED_LENGTH = 8


def _base64_cores(raw: bytes) -> set[str]:
    """The base64 characters that depend on `raw` alone, at each of the three alignments it
    can have inside a longer encoded stream (`echo $S | base64` adds a newline after it; a
    prefix shifts it). A few bits at each end stay visible: the rest is masked."""
    cores = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode()
        start = -(-8 * offset // 6)  # the first character made of raw's bits only
        end = 8 * (offset + len(raw)) // 6  # one past the last such character
        core = encoded[start:end]
        cores |= {core, core.translate(_URLSAFE)}
    return cores


_URLSAFE = str.maketrans("+/", "-_")


def encoded_forms(value: str) -> set[str]:
    """What `value` looks like in the encodings a command or a model most often prints it in,
    besides itself and its JSON string form: base64 and base64url (unpadded, at any alignment),
    hexadecimal (lower and upper case) and URL-encoding (%20 and + for spaces, / kept or
    encoded).

    Not caught: a value split in pieces, reversed, compressed, encrypted or hashed; base64
    wrapped in lines inside the value (`base64` wraps at 76 characters, so values of 57 bytes
    and more are caught only when printed with `base64 -w0`); hex with separators (`xxd`);
    other encodings (base32, rot13, UTF-16); forms shorter than MIN_ENCODED_LENGTH."""
    raw = value.encode("utf-8", "surrogatepass")
    forms = _base64_cores(raw) | {
        raw.hex(),
        raw.hex().upper(),
        quote(value),
        quote(value, safe=""),
        quote_plus(value, safe=""),
    }
    return {f for f in forms if len(f) >= MIN_ENCODED_LENGTH and f != value}


def _alternation(forms: set[str]) -> str:
    """One pattern matching any of `forms`, longest first, as a trie: shared prefixes are
    tested once, so the cost grows with the text rather than with forms x text. A run with no
    branch is one piece of text, so the nesting (and the recursion here) grows with the
    branches, not with the length of a value (a 64 KiB secret is one piece)."""

    def pattern(suffixes: list[str]) -> str:
        ends = "" in suffixes
        groups: dict[str, list[str]] = {}
        for suffix in suffixes:
            if suffix:
                groups.setdefault(suffix[0], []).append(suffix)
        branches = []
        for _, group in sorted(groups.items()):
            shared = os.path.commonprefix(group)
            branches.append(re.escape(shared) + pattern([g[len(shared) :] for g in group]))
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if ends else body

    return pattern(sorted(forms))


class Masker:
    """Replaces every known secret value in text (longest first, so overlaps mask whole).

    It reads a mapping that may change (the conversation's live secrets): a value added later
    is masked from then on, wherever this masker is used. A value is also masked in its JSON
    string form (quotes and backslashes escaped), as it appears inside tool-call arguments, and
    in its common encodings (`encoded_forms`: base64, base64url, hex, URL-encoding).
    """

    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        self._source: Mapping[str, str] = values if values is not None else {}
        self._seen: frozenset[str] | None = None
        self._pattern: re.Pattern[str] | None = None
        self._forms: list[str] = []

    def _current(self) -> re.Pattern[str] | None:
        values = frozenset(v for v in self._source.values() if len(v) >= MIN_LENGTH)
        if values != self._seen:
            forms = set(values) | {json.dumps(v)[1:-1] for v in values}
            for value in values:
                forms |= encoded_forms(value)
            self._forms = sorted(forms, key=len, reverse=True)
            # The trie is greedy at each branch, so a longer form sharing a prefix with a
            # shorter one wins, as "longest first" wants.
            self._pattern = re.compile(_alternation(forms)) if forms else None
            self._seen = values
        return self._pattern

    def __bool__(self) -> bool:
        return self._current() is not None

    def text(self, value: str) -> str:
        pattern = self._current()
        return value if pattern is None else pattern.sub(MASK, value)

    def without_partial_tail(self, text: str) -> str:
        """`text` less any ending that is the start of a secret (text cut mid-secret)."""
        self._current()
        cut = 0
        for form in self._forms:
            for k in range(min(len(form) - 1, len(text)), cut, -1):
                if text.endswith(form[:k]):
                    cut = k
                    break
        return text[: len(text) - cut] if cut else text

    def stream(self) -> StreamMasker:
        """A masker for text that arrives in pieces (a secret may be split between two)."""
        return StreamMasker(self)

    def data(self, value: Any) -> Any:
        """A copy of JSON-like data with secrets masked in every string (keys kept)."""
        pattern = self._current()
        return value if pattern is None else self._walk(value, pattern)

    def _walk(self, value: Any, pattern: re.Pattern[str]) -> Any:
        if isinstance(value, str):
            return pattern.sub(MASK, value)
        if isinstance(value, dict):
            return {k: self._walk(v, pattern) for k, v in value.items()}
        if isinstance(value, list):
            return [self._walk(v, pattern) for v in value]
        return value


class StreamMasker:
    """Masks a text stream piece by piece, holding back an ending that may begin a secret
    until the next piece shows whether it does."""

    def __init__(self, masker: Masker) -> None:
        self.masker = masker
        self._held = ""

    def feed(self, piece: str) -> str:
        text = self.masker.text(self._held + piece)
        safe = self.masker.without_partial_tail(text)
        self._held = text[len(safe) :]
        return safe

    def flush(self) -> str:
        text, self._held = self._held, ""
        return self.masker.text(text)


__all__ = [
    "MASK",
    "MIN_ENCODED_LENGTH",
    "MIN_LENGTH",
    "REDACTED",
    "SECRET_KEYS",
    "Masker",
    "StreamMasker",
    "check_secrets",
    "encoded_forms",
    "is_placeholder",
    "literal_values",
    "mcp_literal_values",
    "redact",
    "redact_literals",
    "redact_llm",
    "redact_mcp_config",
]
