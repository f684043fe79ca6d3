"""Standard Webhooks signatures (standardwebhooks.com): how a webhook proves its sender.

The sender signs `<webhook-id>.<webhook-timestamp>.<body>` with HMAC-SHA256 under a secret it
shares with the receiver (`whsec_<base64>`), and sends the signature (`v1,<base64>`) with the
id and the time in headers. The secret itself never travels: a receiver that is not the one
meant (a port taken over while the control plane was down) gets a signature it can do nothing
with. The receiver refuses a signature made too long ago (a replay) or by another secret.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping

#: How far a signature's time may be from the receiver's clock (the standard's default).
TOLERANCE = 300
MAX_ID = 256


def signing_key(secret: str) -> bytes:
    """The HMAC key of a webhook secret: `whsec_<base64>` is decoded, anything else is used as
    given (its UTF-8 bytes)."""
    if secret.startswith("whsec_"):
        return base64.b64decode(secret[len("whsec_") :])
    return secret.encode()


def sign(key: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` header's value: `v1,<base64 HMAC-SHA256 of id.timestamp.body>`."""
    signed = message_id.encode() + b"." + str(timestamp).encode() + b"." + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def verify(key: bytes, headers: Mapping[str, str], body: bytes, now: float) -> str | None:
    """None when `headers` carry a valid signature of `body` under `key`, made within
    TOLERANCE seconds of `now`; otherwise what is wrong, in words (for a 401)."""
    message_id = headers.get("webhook-id", "")
    stamp = headers.get("webhook-timestamp", "")
    given = headers.get("webhook-signature", "")
    if not message_id or len(message_id) > MAX_ID or not stamp.isdigit() or not given:
        return "webhook-id, webhook-timestamp and webhook-signature are required"
    if abs(now - int(stamp)) > TOLERANCE:
        return "the signature's timestamp is too far from now (a replay, or a clock off)"
    expected = sign(key, message_id, int(stamp), body).encode()
    for candidate in given.split():
        try:
            if candidate.startswith("v1,"):
                base64.b64decode(candidate[3:], validate=True)
        except (binascii.Error, ValueError):
            continue
        if hmac.compare_digest(candidate.encode(), expected):
            return None
    return "the signature does not match"
