"""Secrets at rest (Fernet) and credentials by hash.

LLM keys, stored and per-conversation secrets and sandbox session keys are encrypted with one
Fernet key: `CONTROL_PLANE_SECRET_KEY`, or a key generated once into the state directory (mode
0600). API keys and session keys are also stored as SHA-256 hashes for lookup: they are 256-bit
random strings, so a fast hash is enough and an indexed lookup by hash leaks no timing of value.
"""

from __future__ import annotations

import base64
import hashlib
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
        self._fernet = Fernet(_fernet_key(key) if isinstance(key, str) else key)

    @classmethod
    def for_config(cls, secret_key: str | None, state_dir: Path) -> Cipher:
        return cls(secret_key) if secret_key else cls(load_or_create_key(state_dir))

    def encrypt(self, text: str) -> str:
        return self._fernet.encrypt(text.encode()).decode()

    def decrypt(self, token: str) -> str:
        try:
            return self._fernet.decrypt(token.encode()).decode()
        except InvalidToken:
            raise ValueError("stored secret cannot be decrypted: CONTROL_PLANE_SECRET_KEY changed?") from None

    def encrypt_json(self, value: Any) -> str:
        return self.encrypt(json.dumps(value))

    def decrypt_json(self, token: str) -> Any:
        return json.loads(self.decrypt(token))
