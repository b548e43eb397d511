"""Standard Webhooks signing (https://www.standardwebhooks.com) and the `webhook-id`.

A push carries `webhook-id`, `webhook-timestamp` (unix seconds) and, when the subscription
has a `signingSecret`, `webhook-signature: v1,<base64 HMAC-SHA256>` over
`"{id}.{timestamp}.".encode() + payload`, where the payload is the request body.

The HMAC key is the base64-decoded part after `whsec_` when the secret has that prefix
(the format the Standard Webhooks libraries generate and verify), else the secret's UTF-8
bytes, so a plain shared password works too.

Rotation: a `signingSecret` may hold several secrets separated by spaces (the new one and
the old one while receivers move over). Each yields one `v1,<base64>` entry and the
entries are joined by single spaces, the header's own syntax, so a receiver that knows any
one of the secrets verifies the push. A plain password therefore cannot contain spaces.

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
MAX_SECRETS: Final = 10
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


def secrets_of(secret: str) -> list[str]:
    """The space-separated secrets of a `signingSecret` (tabs and newlines count as spaces)."""
    return secret.split()


def signing_keys(secret: str) -> list[bytes]:
    """The HMAC keys of a `signingSecret` holding one or more secrets; raises `ValueError`
    naming the secret by position (never by value)."""
    parts = secrets_of(secret)
    if not parts:
        raise ValueError("signingSecret is empty")
    if len(parts) > MAX_SECRETS:
        raise ValueError(f"at most {MAX_SECRETS} secrets (space-separated), got {len(parts)}")
    keys: list[bytes] = []
    for i, part in enumerate(parts):
        try:
            keys.append(signing_key(part))
        except ValueError as exc:
            raise ValueError(f"secret {i + 1} of {len(parts)}: {exc}" if len(parts) > 1
                             else str(exc)) from None
    return keys


def sign_all(keys: list[bytes], msg_id: str, timestamp_s: int, payload: bytes) -> str:
    """The `webhook-signature` value for several keys: one `v1,...` entry per key, joined
    by spaces (Standard Webhooks' list syntax)."""
    signed = f"{msg_id}.{timestamp_s}.".encode() + payload
    return " ".join(
        f"{SIGNATURE_VERSION},"
        f"{base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()}"
        for key in keys)


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
