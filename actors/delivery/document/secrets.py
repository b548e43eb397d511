"""Secret references in a subscription: `additionalHeaders` values and `signingSecret`.

A header value that is exactly `${env:NAME}` or `${file:/path}`, and each space-separated
part of a `signingSecret` that is one, is resolved by the instance that starts the
subscription, with the config file's resolver (runtime/host/references.py: one trailing
newline of a file is dropped). A file may hold several space-separated secrets (rotation,
actors/delivery/document/signing.py). The Consumer keeps the reference text: the stored document,
the cluster's subscriptions topic and `GET` show the reference, never what it resolves to.
Only the egress actor holds resolved values, in memory.

`resolved(method)` raises `InvalidSubscription` naming the field and the reference, e.g.
`invalid subscriptionMethod.signingSecret: ${env:HOOK_SECRET}: the environment variable
HOOK_SECRET is not set`: at subscribe time the admin API answers it as a 400; when a
subscription starts later (a restart, another cluster instance) it fails that start, and
the subscription's state becomes `failed` with it as the reason (retried).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

import msgspec

from actors.delivery.document.signing import secrets_of, signing_keys
from actors.delivery.document.subscription import MAX_HEADER_VALUE, SubscriptionMethod
from actors.delivery.errors import InvalidSubscription
from runtime.host.references import UnresolvedReference, is_reference, resolve

_CONTROL_BUT_TAB: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
"""What a header value may not hold (as subscription.py checks written values)."""
HEADERS_FIELD: Final = "subscriptionMethod.additionalHeaders"
SECRET_FIELD: Final = "subscriptionMethod.signingSecret"


def has_references(method: SubscriptionMethod) -> bool:
    secret = method.signingSecret or ""
    return (any(is_reference(v) for v in method.additionalHeaders.values())
            or any(is_reference(part) for part in secrets_of(secret)))


def resolved(method: SubscriptionMethod, allowed: Sequence[str] | None = None
             ) -> SubscriptionMethod:
    """`method` with its references replaced by their values; raises `InvalidSubscription`
    naming the field and the reference (never a resolved value). `allowed`: the
    `[egress] allow_references` patterns (None: any reference)."""
    if not has_references(method):
        return method
    headers = {name: _header(name, value, allowed)
               for name, value in method.additionalHeaders.items()}
    secret = _secret(method.signingSecret, allowed) if method.signingSecret else None
    return msgspec.structs.replace(method, additionalHeaders=headers, signingSecret=secret)


def _resolve(value: str, field: str, allowed: Sequence[str] | None) -> str:
    try:
        return resolve(value, field, allowed=allowed)
    except UnresolvedReference as exc:
        raise InvalidSubscription(f"invalid {field}", f"{exc.reference}: {exc.reason}"
                                  ) from None


def _header(name: str, value: str, allowed: Sequence[str] | None) -> str:
    if not is_reference(value):
        return value
    field = f"{HEADERS_FIELD}.{name}"
    text = _resolve(value, field, allowed)
    if len(text) > MAX_HEADER_VALUE:
        raise InvalidSubscription(f"invalid {field}", f"{value}: resolves to more than "
                                  f"{MAX_HEADER_VALUE} characters")
    if _CONTROL_BUT_TAB.search(text) or text != text.strip(" \t"):
        raise InvalidSubscription(f"invalid {field}", f"{value}: resolves to a value with "
                                  "control characters or surrounding spaces, not a header "
                                  "value")
    return text


def _secret(secret: str, allowed: Sequence[str] | None) -> str:
    parts = [_resolve(part, SECRET_FIELD, allowed) for part in secrets_of(secret)]
    text = " ".join(parts)
    try:
        signing_keys(text)
    except ValueError as exc:
        refs = " ".join(p for p in secrets_of(secret) if is_reference(p))
        raise InvalidSubscription(f"invalid {SECRET_FIELD}", f"{refs}: resolves to a bad "
                                  f"secret: {exc}") from None
    return text

