"""`[admin]`: the token, public health probes and TLS are checked when the config loads,
naming the key, so `python -m runtime check` catches them before anything starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime.errors import ConfigError
from runtime.host.config import parse_config
from tests.certs import self_signed

BROKERS = [{"name": "Kafka", "bootstrap_servers": "embedded"}]


def admin(**keys: Any) -> dict[str, Any]:
    return {"brokers": BROKERS, "admin": keys}


def test_public_health_and_tls_are_off_by_default() -> None:
    config = parse_config({"brokers": BROKERS}).admin
    assert (config.public_health, config.tls_certfile, config.tls_keyfile) == (False, "", "")


def test_a_usable_certificate_and_key_pass(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    config = parse_config(admin(tls_certfile=str(cert), tls_keyfile=str(key))).admin
    assert config.tls_certfile == str(cert)


@pytest.mark.parametrize(("keys", "named"), [
    ({"tls_certfile": "c.pem"}, "admin.tls_keyfile"),
    ({"tls_keyfile": "k.pem"}, "admin.tls_certfile"),
    ({"tls_certfile": "/no/such.pem", "tls_keyfile": "/no/such.key"}, "admin.tls_certfile"),
    ({"token": "a\nb"}, "admin.token"),
    ({"public_health": "yes"}, "admin.public_health"),
    ({"allowed_hosts": ["ok.example", "no spaces"]}, r"admin.allowed_hosts\[1\]"),
    ({"allowed_hosts": ["*example.com"]}, r"admin.allowed_hosts\[0\]"),
])
def test_bad_admin_keys_are_named(keys: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.") if "[" not in named
                       else named):
        parse_config(admin(**keys))


def test_a_key_that_is_not_the_certificates_is_refused(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    cert, _ = self_signed(tmp_path / "one")
    _, other_key = self_signed(tmp_path / "two")
    with pytest.raises(ConfigError, match=r"admin\.tls_certfile"):
        parse_config(admin(tls_certfile=str(cert), tls_keyfile=str(other_key)))
