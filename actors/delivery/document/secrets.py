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
import urllib.parse
from collections.abc import Sequence
from typing import Final

import msgspec

from actors.delivery.document.signing import secrets_of, signing_keys
from actors.delivery.document.subscription import (
    MAX_HEADER_VALUE,
    REDACTED,
    Consumer,
    SubscriptionMethod,
    redact_pair,
)
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
    return msgspec.structs.replace(
        method, additionalHeaders=resolved_headers(method.additionalHeaders, allowed),
        signingSecret=resolved_secret(method.signingSecret, allowed))


def resolved_headers(headers: dict[str, str], allowed: Sequence[str] | None = None
                     ) -> dict[str, str]:
    """`additionalHeaders` with their references resolved (the egress's, when it starts)."""
    return {name: _header(name, value, allowed) for name, value in headers.items()}


def resolved_secret(secret: str | None, allowed: Sequence[str] | None = None) -> str | None:
    """`signingSecret` with its references resolved; without any, as it is."""
    if not secret or not any(is_reference(part) for part in secrets_of(secret)):
        return secret
    return _secret(secret, allowed)


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


# -- a PUT of what GET showed ----------------------------------------------------------------
def kept_secrets(new: Consumer, old: Consumer) -> Consumer:
    """`new` (a PUT body) with every redaction mark `***` that `GET` put in place of a
    secret replaced by the stored secret it hides: a header value of the same name, the
    signing secret part at the same place, the URI's user-info, a query value of the same
    name and place, its fragment. A mark with no stored secret behind it raises
    `InvalidSubscription` naming the field (it would be sent, or sign, as `***`: #25)."""
    method, before = new.http, old.http
    if method is None or before is None:  # a handler's method holds no secret
        return new
    _refuse_elsewhere(method, before)
    headers = {name: _kept_header(name, value, before.additionalHeaders)
               for name, value in method.additionalHeaders.items()}
    secret = method.signingSecret
    if secret is not None and REDACTED in secrets_of(secret):
        secret = _kept_secret(secret, before.signingSecret)
    uri = _kept_uri(method.uri, before.uri) if REDACTED in method.uri else method.uri
    if (headers, secret, uri) == (method.additionalHeaders, method.signingSecret, method.uri):
        return new
    return msgspec.structs.replace(new, subscriptionMethod=msgspec.structs.replace(
        method, additionalHeaders=headers, signingSecret=secret, uri=uri))


def _refuse_elsewhere(method: SubscriptionMethod, before: SubscriptionMethod) -> None:
    """A mark keeps a stored secret for the origin it was given for only: a PUT of the
    redacted document with another scheme, host or port would send the stored
    `Authorization`, user-info and query secrets there (#34)."""
    marked = _marked_fields(method)
    was, now = _origin(before.uri), _origin(method.uri)
    if marked and was != now:
        raise InvalidSubscription(f"invalid {marked[0]}", f"*** keeps a stored secret for "
                                  f"its origin only, and the origin changes ({was} -> "
                                  f"{now}): send the secret itself")


def _marked_fields(method: SubscriptionMethod) -> list[str]:
    """The fields of a PUT's method that hold a redaction mark."""
    fields = [f"{HEADERS_FIELD}.{name}" for name, value in method.additionalHeaders.items()
              if value == REDACTED]
    if REDACTED in secrets_of(method.signingSecret or ""):
        fields.append(SECRET_FIELD)
    if REDACTED in method.uri:
        fields.append("subscriptionMethod.uri")
    return fields


def _origin(uri: str) -> str:
    """`scheme://host:port` (as the egress's `origin_of`; the document layer may not
    import it); a URL that cannot be parsed is its own origin."""
    try:
        parts = urllib.parse.urlsplit(uri)
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError:
        return uri
    return f"{parts.scheme.lower()}://{(parts.hostname or '').lower()}:{port}"


def _kept_header(name: str, value: str, stored: dict[str, str]) -> str:
    if value != REDACTED:
        return value
    found = next((v for k, v in stored.items() if k.lower() == name.lower()), None)
    if found is None or found == REDACTED:
        raise InvalidSubscription(f"invalid {HEADERS_FIELD}.{name}", "*** is what GET shows "
                                  "in place of a secret, and no header of this name is stored")
    return found


def _kept_secret(secret: str, stored: str | None) -> str:
    old = secrets_of(stored or "")
    parts = secrets_of(secret)
    for i, part in enumerate(parts):
        if part == REDACTED and (i >= len(old) or old[i] == REDACTED):
            raise InvalidSubscription(f"invalid {SECRET_FIELD}", f"secret {i + 1} is ***, "
                                      "what GET shows in place of a secret, and no secret is "
                                      "stored at that place")
    return " ".join(old[i] if part == REDACTED else part for i, part in enumerate(parts))


def _kept_uri(uri: str, stored: str) -> str:
    """The URI's marks (`redact_uri`) filled in from the stored URI."""
    field = "invalid subscriptionMethod.uri"
    try:
        new, old = urllib.parse.urlsplit(uri), urllib.parse.urlsplit(stored)
    except ValueError:
        raise InvalidSubscription(field, "not a URL") from None
    user, at, host = new.netloc.rpartition("@")
    if at and user == REDACTED:
        old_user, old_at, _ = old.netloc.rpartition("@")
        if not old_at:
            raise InvalidSubscription(field, "*** in place of user-info, and none is stored")
        user = old_user
    old_pairs = old.query.split("&") if old.query else []
    pairs = [_kept_pair(i, pair, old_pairs) for i, pair in
             enumerate(new.query.split("&") if new.query else [])]
    fragment = new.fragment
    if fragment == REDACTED:
        if not old.fragment:
            raise InvalidSubscription(field, "*** in place of the fragment, and none is stored")
        fragment = old.fragment
    netloc = f"{user}@{host}" if at else host
    return urllib.parse.urlunsplit((new.scheme, netloc, new.path, "&".join(pairs), fragment))


def _kept_pair(i: int, pair: str, old_pairs: list[str]) -> str:
    """Query pair `i` of a PUT URI: a mark takes the stored pair at its place when that is
    what it hides, else `name=***` the first stored pair of that name."""
    if REDACTED not in pair:
        return pair
    if i < len(old_pairs) and redact_pair(old_pairs[i]) == pair:
        return old_pairs[i]
    name, sep, value = pair.partition("=")
    if sep and value == REDACTED:
        for old in old_pairs:
            if old.partition("=")[0] == name and old.partition("=")[1]:
                return old
    if pair == REDACTED or (sep and value == REDACTED):
        raise InvalidSubscription("invalid subscriptionMethod.uri", "*** in place of a query "
                                  f"value ({pair!r}), and no such value is stored")
    return pair
