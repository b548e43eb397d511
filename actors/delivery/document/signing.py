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
it), so it depends on nothing but facts of the record: topic, partition, offset, and its
timestamp (issue 27). Coordinates alone repeat once a topic, or the embedded broker, is
recreated and offsets start again at 0: a receiver that deduplicates would then drop new
records. The timestamp is the record's own (CreateTime, or LogAppendTime on topics so
configured) and travels with it to retry topics (`retry-timestamp-ms`) and dead letters
(`dlt-timestamp-ms`), so every push of one record carries one id. A record without a
timestamp (-1, the pre-0.10 message format) gets the coordinates-only id.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from actors.shared.messages import Record

SECRET_PREFIX: Final = "whsec_"
SIGNATURE_VERSION: Final = "v1"
MAX_SECRETS: Final = 10
DEFAULT_TOLERANCE_S: Final = 300


def webhook_id(topic: str, partition: int, offset: int, timestamp_ms: int = -1) -> str:
    """`msg_` + 32 hex digits of SHA-256("topic/partition/offset/timestamp_ms"), or of
    "topic/partition/offset" for a record without a timestamp (negative)."""
    fact = f"{topic}/{partition}/{offset}"
    if timestamp_ms >= 0:
        fact += f"/{timestamp_ms}"
    return "msg_" + hashlib.sha256(fact.encode()).hexdigest()[:32]


def webhook_id_of(record: Record) -> str:
    """A record's `webhook-id`: of its original coordinates and timestamp when it was read
    back from a retry topic."""
    return webhook_id(*record.coordinates(), record.original_timestamp_ms())


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
