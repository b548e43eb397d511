"""Sealing secrets with AES-256-GCM (the `cryptography` package's `AESGCM`), for values
the runtime writes where others can read them: the secret fields of a subscription in the
cluster's subscriptions topic (actors/delivery/cluster/sealed.py, issue 25).

A key is 32 random bytes written in base64 or hex; `[cluster] secrets_key` refers to it
(`${file:/path}` or `${env:NAME}`). Make one with

    python -c "import os,base64;print(base64.b64encode(os.urandom(32)).decode())"

The text may hold several keys separated by whitespace (rotation): the first seals, every
one opens. A sealed value is an envelope
`{"enc": "aes-256-gcm", "kid": ..., "nonce": ..., "data": ...}`: `kid` names the key (a
digest of it, not the key), `nonce` is 12 random bytes and `data` the ciphertext with its
tag, both base64. The associated data binds the envelope to what it belongs to (a
subscription's identity): moved elsewhere, it does not open.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from typing import Final

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

ALGORITHM: Final = "aes-256-gcm"
KEY_BYTES: Final = 32
NONCE_BYTES: Final = 12
GENERATE: Final = ('python -c "import os,base64;'
                   'print(base64.b64encode(os.urandom(32)).decode())"')
"""How to make a key (named in errors and docs)."""


class Envelope(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    enc: str
    kid: str
    nonce: str
    data: str


class Unsealable(Exception):
    """An envelope that cannot be opened: no key, another key, or not what was sealed."""


def parse_keys(text: str) -> tuple[bytes, ...]:
    """The keys in `text` (whitespace-separated, each base64 or hex of 32 bytes); raises
    ValueError saying what is wrong (never the key)."""
    parts = text.split()
    if not parts:
        raise ValueError(f"no key: expected 32 random bytes in base64 or hex ({GENERATE})")
    return tuple(_key(i, part, len(parts)) for i, part in enumerate(parts))


def _key(i: int, part: str, count: int) -> bytes:
    where = f"key {i + 1} of {count}: " if count > 1 else ""
    raw = _hex(part) if len(part) == 2 * KEY_BYTES else None
    raw = _base64(part) if raw is None else raw
    if raw is None or len(raw) != KEY_BYTES:
        raise ValueError(f"{where}not {KEY_BYTES} bytes in base64 or hex ({GENERATE})")
    return raw


def _hex(part: str) -> bytes | None:
    try:
        return bytes.fromhex(part)
    except ValueError:
        return None


def _base64(part: str) -> bytes | None:
    try:
        return base64.b64decode(part, validate=True)
    except (binascii.Error, ValueError):
        return None


def key_id(key: bytes) -> str:
    """A name for `key` that tells keys apart without revealing them."""
    return hashlib.sha256(b"hookstream secrets key\0" + key).hexdigest()[:16]


def seal(keys: tuple[bytes, ...], plaintext: bytes, associated: bytes) -> Envelope:
    """`plaintext` sealed with the first key, bound to `associated`."""
    nonce = os.urandom(NONCE_BYTES)
    data = AESGCM(keys[0]).encrypt(nonce, plaintext, associated)
    return Envelope(ALGORITHM, key_id(keys[0]), _b64(nonce), _b64(data))


def unseal(keys: tuple[bytes, ...], envelope: Envelope, associated: bytes) -> bytes:
    """What `envelope` holds; raises `Unsealable` saying why (never a secret)."""
    if envelope.enc != ALGORITHM:
        raise Unsealable(f"sealed with {envelope.enc!r}, not {ALGORITHM}")
    key = next((k for k in keys if key_id(k) == envelope.kid), None)
    if key is None:
        have = ", ".join(key_id(k) for k in keys) or "none"
        raise Unsealable(f"sealed with key {envelope.kid}; the keys given are: {have}")
    try:
        nonce, data = base64.b64decode(envelope.nonce), base64.b64decode(envelope.data)
        return AESGCM(key).decrypt(nonce, data, associated)
    except (InvalidTag, binascii.Error, ValueError):
        raise Unsealable(f"does not open with key {envelope.kid}: altered, or moved "
                         "from what it was sealed for") from None


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")
