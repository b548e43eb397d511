"""TLS for the admin API (`[admin] tls_certfile`, `tls_keyfile`): one server context,
built the same way by the config check (`python -m runtime check` loads the files) and by
the admin server."""

from __future__ import annotations

import ssl


def server_context(certfile: str, keyfile: str) -> ssl.SSLContext:
    """A TLS 1.2+ server context with the certificate chain in `certfile` and its private
    key in `keyfile` (PEM). Raises `OSError` or `ssl.SSLError` when they cannot be used."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    return context
