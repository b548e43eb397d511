"""Standard Webhooks signing (https://www.standardwebhooks.com) and the `webhook-id`.

A push carries `webhook-id`, `webhook-timestamp` (unix seconds) and, when the subscription
has a `signingSecret`, `webhook-signature: v1,<base64 HMAC-SHA256>` over
`"{id}.{timestamp}.".encode() + payload`, where the payload is the request body.

The HMAC key is the base64-decoded part after `whsec_` when the secret has that prefix
(the format the Standard Webhooks libraries generate and verify), else the secret's UTF-8
bytes, so a plain shared password works too.

`webhook-id` must be stable across retries and redeliveries (a receiver deduplicates on
it), so it depends on nothing but the record's coordinates: topic, partition, offset.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Final

SECRET_PREFIX: Final = "whsec_"
SIGNATURE_VERSION: Final = "v1"
DEFAULT_TOLERANCE_S: Final = 300


def webhook_id(topic: str, partition: int, offset: int) -> str:
    """`msg_` + 32 hex digits of SHA-256("topic/partition/offset")."""
    digest = hashlib.sha256(f"{topic}/{partition}/{offset}".encode()).hexdigest()
    return "msg_" + digest[:32]


def signing_key(secret: str) -> bytes:
    """The HMAC key of a `signingSecret`; raises `ValueError` for a bad `whsec_` secret."""
    if not secret.startswith(SECRET_PREFIX):
        if not secret:
            raise ValueError("signingSecret is empty")
        return secret.encode()
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except binascii.Error as exc:
        raise ValueError(f"signingSecret after '{SECRET_PREFIX}' is not base64: {exc}") from None
    if not key:
        raise ValueError(f"signingSecret has no key after '{SECRET_PREFIX}'")
    return key


def sign(key: bytes, msg_id: str, timestamp_s: int, payload: bytes) -> str:
    """The `webhook-signature` header value: `v1,<base64 HMAC-SHA256>`."""
    mac = hmac.new(key, f"{msg_id}.{timestamp_s}.".encode() + payload, hashlib.sha256)
    return f"{SIGNATURE_VERSION},{base64.b64encode(mac.digest()).decode()}"


def verify(
    key: bytes,
    msg_id: str,
    timestamp_s: int,
    payload: bytes,
    signature_header: str,
    *,
    now_s: int,
    tolerance_s: int = DEFAULT_TOLERANCE_S,
) -> bool:
    """What a receiver does: the timestamp is within `tolerance_s` of `now_s` and one of the
    space-separated `v1,...` signatures matches (compared in constant time)."""
    if abs(now_s - timestamp_s) > tolerance_s:
        return False
    expected = sign(key, msg_id, timestamp_s, payload)
    return any(
        hmac.compare_digest(candidate, expected) for candidate in signature_header.split(" ")
    )
