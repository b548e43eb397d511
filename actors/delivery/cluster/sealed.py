"""A subscription's secrets in the cluster's subscriptions topic: sealed (issue 25).

Everyone who can read the topic reads its records, so the secret fields of a document,
what `GET` hides (`document(consumer, redact=True)`: header values and signing secrets
written as they are, the URI's user-info, query values and fragment), are written
sealed with `[cluster] secrets_key` (runtime/host/sealing.py, AES-256-GCM):

    {"id": ..., "group": ..., ..., "subscriptionMethod": {"uri": "https://h/p?k=***",
     "additionalHeaders": {"Authorization": "***"}, ...},
     "sealed": {"enc": "aes-256-gcm", "kid": ..., "nonce": ..., "data": ...}}

The document shows what `GET` shows; `sealed` holds the method's `uri`,
`additionalHeaders` and `signingSecret` as they are, bound to the subscription's identity
(`id`, `group.id`): moved to another subscription's record it does not open. A document
without secrets (references are not secrets) is written as it is, sealed by no key.

Reading gives back the plain document. A record without `sealed` (written by an earlier
version, or without secrets) is read as it is, and sealed when next written (a PUT). A
sealed one that cannot be opened (no key here, another key, altered) raises `Unsealable`:
the caller does not run that subscription and says why (actors/delivery/control/
source.py: the log and `/readyz`), rather than run it without its secrets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import msgspec

from actors.delivery.document.signing import secrets_of
from actors.delivery.document.store import encode
from actors.delivery.document.subscription import (
    Consumer,
    decode_consumer,
    document,
    redact_uri,
)
from actors.delivery.errors import InvalidSubscription
from runtime.host.references import is_reference
from runtime.host.sealing import Envelope, Unsealable, seal, unseal

SEALED: Final = "sealed"
SECRET_FIELDS: Final = ("uri", "additionalHeaders", "signingSecret")
"""The fields of `subscriptionMethod` sealed together."""
METHOD: Final = "subscriptionMethod"


def clear_secrets(consumer: Consumer) -> list[str]:
    """The fields of `consumer` that hold a secret as it is (not a reference)."""
    method = consumer.http
    if method is None:  # an in-process subscription's (never written to the topic)
        return []
    fields = [f"{METHOD}.additionalHeaders.{name}"
              for name, value in method.additionalHeaders.items() if not is_reference(value)]
    if method.signingSecret and not all(map(is_reference, secrets_of(method.signingSecret))):
        fields.append(f"{METHOD}.signingSecret")
    if redact_uri(method.uri) != method.uri:
        fields.append(f"{METHOD}.uri")
    return fields


def refuse_clear(consumer: Consumer, keys: tuple[bytes, ...]) -> None:
    """`InvalidSubscription` (a 400) for secrets that no key would seal."""
    fields = clear_secrets(consumer)
    if fields and not keys:
        raise InvalidSubscription(
            "secrets would be stored in clear in the subscriptions topic",
            f"{', '.join(fields)}: set [cluster] secrets_key (docs/cluster.md), or give "
            "header values and signing secrets as ${env:NAME} or ${file:/path} references")


def sealed_value(consumer: Consumer, keys: tuple[bytes, ...]) -> bytes:
    """The record value for `consumer`: its secrets sealed with the first of `keys`."""
    if not keys or not clear_secrets(consumer):
        return encode(consumer)
    plain = document(consumer, redact=False)[METHOD]
    secrets = {name: plain[name] for name in SECRET_FIELDS
               if isinstance(plain, dict) and plain.get(name) is not None}
    shown: dict[str, object] = {**document(consumer, redact=True)}
    shown[SEALED] = seal(keys, msgspec.json.encode(secrets), _identity(shown))
    return msgspec.json.encode(shown)


def opened_value(value: bytes, keys: tuple[bytes, ...]) -> bytes:
    """The plain document of record `value` (as it is when nothing is sealed); raises
    `Unsealable` saying why it cannot be opened."""
    try:
        shown = msgspec.json.decode(value)
    except msgspec.DecodeError:
        return value  # not JSON: decoding the document says what is wrong
    if not isinstance(shown, dict) or SEALED not in shown:
        return value
    envelope = _envelope(shown.pop(SEALED))
    if not keys:
        raise Unsealable(f"sealed with key {envelope.kid}, and [cluster] secrets_key is "
                         "not set")
    secrets = msgspec.json.decode(unseal(keys, envelope, _identity(shown)))
    method = shown.get(METHOD)
    if not isinstance(method, dict) or not isinstance(secrets, dict):
        raise Unsealable("not a sealed subscription document")
    method.update(secrets)
    return msgspec.json.encode(shown)


def clear_in(value: bytes) -> list[str]:
    """The fields of record `value` that hold a secret in clear (a record of an earlier
    version, or written without a key); none when it is sealed or not a document."""
    try:
        return [] if _sealed(value) else clear_secrets(decode_consumer(value))
    except (InvalidSubscription, msgspec.DecodeError):
        return []


def _sealed(value: bytes) -> bool:
    shown = msgspec.json.decode(value)
    return isinstance(shown, dict) and SEALED in shown


def _envelope(raw: object) -> Envelope:
    try:
        return msgspec.convert(raw, Envelope)
    except msgspec.ValidationError as exc:
        raise Unsealable(f"malformed {SEALED!r} field: {exc}") from None


def _identity(shown: Mapping[str, object]) -> bytes:
    """What a sealed set belongs to: the subscription's (`id`, `group.id`) pair."""
    group = shown.get("group")
    group_id = group.get("id") if isinstance(group, dict) else None
    return msgspec.json.encode(["hookstream subscription", shown.get("id"), group_id])
