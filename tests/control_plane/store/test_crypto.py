"""Secrets at rest and API keys (control_plane.crypto), in-process."""

from __future__ import annotations

from pathlib import Path

import pytest

from control_plane.crypto import Cipher, hash_key, new_key


def test_cipher_and_keys(tmp_path: Path) -> None:
    cipher = Cipher.for_config(None, tmp_path)
    token = cipher.encrypt("sk-secret")
    assert "sk-secret" not in token and cipher.decrypt(token) == "sk-secret"
    assert Cipher.for_config(None, tmp_path).decrypt(token) == "sk-secret"  # the same key file
    with pytest.raises(ValueError, match="SECRET_KEY"):
        Cipher("another passphrase").decrypt(token)
    assert Cipher("a passphrase").decrypt(Cipher("a passphrase").encrypt("x")) == "x"
    key = new_key("cp")
    assert key.startswith("cp_") and len(key) > 40 and hash_key(key) != key
