"""Secrets at rest (Fernet) and credentials by hash.

LLM keys, stored and per-conversation secrets and sandbox session keys are encrypted with one
Fernet key: `CONTROL_PLANE_SECRET_KEY`, or a key generated once into the state directory (mode
0600). API keys and session keys are also stored as SHA-256 hashes for lookup: they are 256-bit
random strings, so a fast hash is enough and an indexed lookup by hash leaks no timing of value.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, InvalidToken

KEY_FILE = "secret.key"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key(prefix: str) -> str:
    """A fresh credential: a readable prefix (what it is for) and 256 random bits."""
    return f"{prefix}_{secrets.token_urlsafe(32)}"


def _fernet_key(text: str) -> bytes:
    """A Fernet key as given, or one derived from any other text (a passphrase-like variable)."""
    raw = text.strip().encode()
    try:
        if len(base64.urlsafe_b64decode(raw)) == 32:
            return raw
    except ValueError:
        pass
    return base64.urlsafe_b64encode(hashlib.sha256(raw).digest())


def load_or_create_key(state_dir: Path) -> bytes:
    """The generated key of this state directory, created (0600, exclusively) on first use."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = state_dir / KEY_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes().strip()
    key = Fernet.generate_key()
    with os.fdopen(fd, "wb") as handle:
        handle.write(key)
        handle.flush()
        os.fsync(handle.fileno())
    return key


class Cipher:
    """Encrypts strings and JSON values; a wrong key is an error, never garbage."""

    def __init__(self, key: str | bytes) -> None:
        raw = _fernet_key(key) if isinstance(key, str) else key
        self._fernet = Fernet(raw)
        self._raw = raw

    @classmethod
    def for_config(cls, secret_key: str | None, state_dir: Path) -> Cipher:
        return cls(secret_key) if secret_key else cls(load_or_create_key(state_dir))

    def encrypt(self, text: str) -> str:
        return self._fernet.encrypt(text.encode()).decode()

    def decrypt(self, token: str) -> str:
        try:
            return self._fernet.decrypt(token.encode()).decode()
        except InvalidToken:
            raise ValueError(
                "stored secret cannot be decrypted: CONTROL_PLANE_SECRET_KEY changed?"
            ) from None

    def derive(self, label: str) -> bytes:
        """A key of its own for `label`'s use, derived from this one (HMAC-SHA256): one secret to
        keep, and no derived key tells anything of another or of the Fernet key."""
        return hmac.new(self._raw, b"agent-server/" + label.encode(), hashlib.sha256).digest()

    def encrypt_json(self, value: Any) -> str:
        return self.encrypt(json.dumps(value))

    def decrypt_json(self, token: str) -> Any:
        return json.loads(self.decrypt(token))


# -- a sandbox's own credentials towards this control plane ---------------------------------
#
# Derived, not stored: from the sandbox's id and its session key's hash under a key of this
# control plane's (`Cipher.derive`). So they need no column, every control plane of the
# deployment (one secret key) computes the same, and a sandbox whose session key changes gets
# new ones. Neither is the session key, and neither opens the sandbox's agent server.

TOKEN_PREFIX = "sbt_"


def sandbox_token(cipher: Cipher, sandbox_id: str, session_key_hash: str) -> str:
    """What the sandbox presents to the control plane's sandbox-side routes (the LLM gateway,
    its network's refusals): `sbt_<sandbox id>_<MAC>`, a bearer scoped to that sandbox alone."""
    mac = hmac.new(
        cipher.derive("sandbox-token"), f"{sandbox_id}:{session_key_hash}".encode(), hashlib.sha256
    ).digest()
    return f"{TOKEN_PREFIX}{sandbox_id}_{base64.urlsafe_b64encode(mac).decode().rstrip('=')}"


def token_sandbox(token: str) -> str | None:
    """The sandbox id a token names (not yet checked: `sandbox_token` again, compared)."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    sandbox_id, sep, _ = token[len(TOKEN_PREFIX) :].partition("_")
    return sandbox_id if sep and 0 < len(sandbox_id) <= 64 and sandbox_id.isalnum() else None


def token_matches(cipher: Cipher, token: str, sandbox_id: str, session_key_hash: str) -> bool:
    return hmac.compare_digest(
        sandbox_token(cipher, sandbox_id, session_key_hash).encode(), token.encode()
    )


def webhook_secret(cipher: Cipher, sandbox_id: str, session_key_hash: str) -> str:
    """The key the sandbox's agent server signs its webhook deliveries with (Standard Webhooks:
    `whsec_<base64>`); it never leaves the sandbox in a request, so a receiver that is not this
    control plane learns nothing it could use."""
    key = hmac.new(
        cipher.derive("webhook-secret"), f"{sandbox_id}:{session_key_hash}".encode(), hashlib.sha256
    ).digest()
    return "whsec_" + base64.b64encode(key).decode()
