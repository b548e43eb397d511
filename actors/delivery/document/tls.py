"""TLS toward https endpoints: the system trust store by default, per subscription an extra
CA file and a client certificate (`subscriptionMethod.tls`).

Without `tls` the egress uses aiohttp's default verified context (`ssl=True`:
`ssl.create_default_context()`, the system trust store, hostname checked), as it always
did. With `tls`, `client_context` builds a context that trusts the system store *and*
`caFile`, and presents `certFile`/`keyFile` when the server asks for a client
certificate. Verification is never switched off: there is no such option.

One context per distinct setting: contexts are cached by the files' paths, sizes and
modification times, so every subscription with the same files shares one, a request never
builds one, and a certificate replaced on disk is picked up when the subscription next
starts (an update, a restart). Equal settings give the same context object, so code that
pools connections across subscriptions can key its pools by it: two subscriptions of one
origin with different client certificates must never share a connection.

Errors name the field: `InvalidSubscription("invalid subscriptionMethod.tls.keyFile",
"does not match certFile ...")`. The admin API checks at subscribe time (400); an
instance that cannot read the files later fails that subscription's start (state
`failed` with the reason, retried).

The paths are files on the instance, as `${file:...}` references are, so `[egress]
allow_references` covers them too (`file:<path>` must match a pattern, checked before the
file is touched). A file that is missing, unreadable, not a regular file, too large or
holds no usable PEM gets one and the same answer, so the API tells a caller nothing about
which files exist (#25).
"""

from __future__ import annotations

import functools
import os
import ssl
from collections.abc import Sequence
from typing import Final

from actors.delivery.document.settings import TlsFiles, tls_files
from actors.delivery.document.subscription import SubscriptionMethod
from actors.delivery.errors import InvalidSubscription
from runtime.host.references import permitted, read_small_file

FIELD: Final = "subscriptionMethod.tls"
CACHED_CONTEXTS: Final = 64
FileStamp = tuple[str, int, int] | None
"""(path, size, mtime_ns) of a file, None when the setting is absent."""


WHAT: Final = {"caFile": "CA certificate", "certFile": "certificate",
               "keyFile": "unencrypted private key"}


def unusable(path: str, name: str) -> InvalidSubscription:
    """The one error for a file that cannot serve as `name`, whatever the reason."""
    return InvalidSubscription(f"invalid {FIELD}.{name}", f"{path}: not a readable regular "
                               f"PEM file of at most 1 MiB holding a {WHAT[name]}")


def client_context(method: SubscriptionMethod, allowed: Sequence[str] | None = None
                   ) -> ssl.SSLContext | bool:
    """The `ssl` argument for the endpoint's connector: a cached context for a `tls`
    setting, else True (aiohttp's default verified context). `allowed`: the `[egress]
    allow_references` patterns (None: any file). Raises `InvalidSubscription` naming the
    field."""
    return files_context(tls_files(method.tls), allowed)


def files_context(tls: TlsFiles | None, allowed: Sequence[str] | None = None
                  ) -> ssl.SSLContext | bool:
    """`client_context` of the egress's settings (the same context for the same files)."""
    if tls is None or (tls.ca_file is None and tls.cert_file is None):
        return True
    files = (("caFile", tls.ca_file), ("certFile", tls.cert_file), ("keyFile", tls.key_file))
    for name, path in files:
        if path is not None and allowed is not None and not permitted("file", path, allowed):
            raise InvalidSubscription(f"invalid {FIELD}.{name}", f"{path}: not allowed by "
                                      "[egress] allow_references")
    return _context(*(_stamp(path, name) for name, path in files))


def _stamp(path: str | None, name: str) -> FileStamp:
    if path is None:
        return None
    try:
        read_small_file(path)  # readable, regular (no FIFO, no device), at most 1 MiB
        info = os.stat(path)
    except OSError:
        raise unusable(path, name) from None
    return path, info.st_size, info.st_mtime_ns


@functools.lru_cache(maxsize=CACHED_CONTEXTS)
def _context(ca: FileStamp, cert: FileStamp, key: FileStamp) -> ssl.SSLContext:
    """Built once per distinct (files, sizes, times); errors are not cached."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)  # system store, hostnames
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca is not None:
        try:
            context.load_verify_locations(cafile=ca[0])
        except (ssl.SSLError, OSError, ValueError):
            raise unusable(ca[0], "caFile") from None
    if cert is not None:
        _load_client_cert(context, cert[0], key[0] if key is not None else None)
    return context


def _load_client_cert(context: ssl.SSLContext, cert: str, key: str | None) -> None:
    try:
        context.load_cert_chain(cert, key, password=_no_password)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise _blame(cert, key, exc) from None


def _no_password() -> str:
    """Asked only for an encrypted key: refuse it instead of prompting on a terminal."""
    raise ValueError("the private key is encrypted; give an unencrypted PEM key")


def _blame(cert: str, key: str | None, exc: BaseException) -> InvalidSubscription:
    """Which field a failed `load_cert_chain` is about."""
    text = str(exc)
    if "KEY_VALUES_MISMATCH" in text or "key values mismatch" in text:
        return InvalidSubscription(f"invalid {FIELD}.keyFile",
                                   f"{key or cert}: the key does not match certFile")
    probe = ssl.create_default_context()
    try:
        probe.load_verify_locations(cafile=cert)  # does certFile hold a certificate at all?
    except (ssl.SSLError, OSError, ValueError):
        return unusable(cert, "certFile")
    return unusable(key or cert, "keyFile" if key is not None else "certFile")

