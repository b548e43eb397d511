"""A Standard Webhooks receiver's check, written for the tests from the specification's
text (https://www.standardwebhooks.com, "Verifying signatures"), independently of
actors/delivery/document/signing.py:

- the secret is `whsec_` followed by the base64 of the key (a secret without the prefix is
  used as UTF-8 bytes, as hookstream documents);
- the signed content is `{webhook-id}.{webhook-timestamp}.{body}`;
- the signature is the base64 of HMAC-SHA256 over it, sent as `v1,<signature>`;
- `webhook-signature` is a space-delimited list of such entries, and a receiver accepts
  the message when any entry of version `v1` matches (constant-time comparison).
"""

from __future__ import annotations

import base64
import hashlib
import hmac


def key_of(secret: str) -> bytes:
    if secret.startswith("whsec_"):
        return base64.b64decode(secret.split("_", 1)[1])
    return secret.encode("utf-8")


def expected(secret: str, msg_id: str, timestamp: str, body: bytes) -> str:
    content = msg_id.encode() + b"." + timestamp.encode() + b"." + body
    digest = hmac.new(key_of(secret), content, hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def accepts(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """What a receiver holding `secret` concludes from a push's headers and body."""
    wanted = expected(secret, headers["webhook-id"], headers["webhook-timestamp"], body)
    for entry in headers["webhook-signature"].split(" "):
        version, _, signature = entry.partition(",")
        if version == "v1" and hmac.compare_digest(signature, wanted):
            return True
    return False
