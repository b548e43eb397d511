"""What a receiver answered, without the subscription's own secrets (#34).

A receiver that reflects its request (an echo service, a verbose error page) would put
the subscription's `Authorization` header, its URI's user-info (sent as Basic auth) and
its query values into the response snippets of the attempts API and into error texts the
status shows. The egress actor builds a `Redactor` from the values it sends when it
starts, and passes every kept answer body and error text through it: each such value,
as sent and as JSON or percent-encoding would show it, becomes `***`.

Values shorter than `MIN_SECRET_CHARS` are left alone: replacing every `1` of a body
because a query says `?page=1` would hide the answer, and such a value guards nothing.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from collections.abc import Iterable
from typing import Final

from actors.delivery.document.signing import secrets_of

MIN_SECRET_CHARS: Final = 4
MARK: Final = "***"


def sent_secrets(uri: str, headers: dict[str, str], signing_secret: str | None) -> list[str]:
    """The values a push sends (or signs with) that `GET` hides: `additionalHeaders`
    values (references resolved), the URI's user-info and the Basic credentials made of
    it, its query values, the signing secrets."""
    found = list(headers.values()) + secrets_of(signing_secret or "")
    # `Bearer <token>`: a receiver may show the token alone
    found += [v.split(None, 1)[1] for v in headers.values() if len(v.split(None, 1)) == 2]
    try:
        parts = urllib.parse.urlsplit(uri)
    except ValueError:
        return found
    user, at, _ = parts.netloc.rpartition("@")
    if at:
        name, _, password = user.partition(":")
        plain = f"{urllib.parse.unquote(name)}:{urllib.parse.unquote(password)}"
        found += [user, name, password, urllib.parse.unquote(password), plain,
                  base64.b64encode(plain.encode("latin-1", "replace")).decode()]
    for pair in parts.query.split("&") if parts.query else []:
        value = pair.partition("=")[2]
        found += [value, urllib.parse.unquote_plus(value)]
    return found


class Redactor:
    """Replaces each of `secrets` (in the forms a reflection shows) by `***`."""

    __slots__ = ("_bytes", "_texts")

    def __init__(self, secrets: Iterable[str]) -> None:
        forms: set[str] = set()
        for secret in secrets:
            if len(secret) >= MIN_SECRET_CHARS:
                forms |= {secret, json.dumps(secret)[1:-1], urllib.parse.quote(secret, safe=""),
                          urllib.parse.quote_plus(secret, safe="")}
        # longest first: a secret that contains another is replaced whole
        self._texts = sorted(forms, key=lambda s: (-len(s), s))
        self._bytes = [(s.encode("utf-8", "replace"), MARK.encode()) for s in self._texts]

    def text(self, text: str | None) -> str | None:
        if not text or not self._texts:
            return text
        for secret in self._texts:
            text = text.replace(secret, MARK)
        return text

    def body(self, body: bytes) -> bytes:
        for secret, mark in self._bytes:
            body = body.replace(secret, mark)
        return body

    def __repr__(self) -> str:
        return f"<Redactor {len(self._texts)} forms>"
