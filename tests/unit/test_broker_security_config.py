"""`[[brokers]]` security keys: defaults, secret references, the checks that name the bad
key, and the commented example in config/production.toml."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trustme

from runtime.errors import ConfigError
from runtime.host.config import Config, load_config, parse_config
from runtime.host.references import resolve

ROOT = Path(__file__).resolve().parents[2]
ADDRESS = "kafka.test:9093"


def _config(**broker: Any) -> Config:
    return parse_config({"brokers": [{"name": "Kafka", "bootstrap_servers": ADDRESS,
                                      **broker}]})


def _error(**broker: Any) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        _config(**broker)
    return caught.value


@pytest.fixture
def ca_file(tmp_path: Path) -> Path:
    path = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(path))
    return path


SCRAM = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256",
         "sasl_username": "alice"}


def test_a_broker_is_plaintext_by_default() -> None:
    broker = _config().brokers[0]

    assert broker.security_protocol == "PLAINTEXT"
    assert broker.security().client_kwargs() == {"security_protocol": "PLAINTEXT"}


def test_security_settings_reach_the_clients_settings(ca_file: Path) -> None:
    broker = _config(**SCRAM, ssl_cafile=str(ca_file), sasl_password="pw",
                     ssl_check_hostname=False).brokers[0]

    kwargs = broker.security().client_kwargs()

    assert (kwargs["security_protocol"], kwargs["sasl_mechanism"],
            kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == (
        "SASL_SSL", "SCRAM-SHA-256", "alice", "pw")
    assert kwargs["ssl_context"].check_hostname is False


def test_an_env_reference_is_resolved_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HS_TEST_KAFKA_PASSWORD", "from-env")

    broker = _config(**SCRAM, sasl_password="${env:HS_TEST_KAFKA_PASSWORD}").brokers[0]

    assert broker.sasl_password == "from-env"


def test_a_file_reference_is_resolved_without_its_trailing_newline(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("from-file\n")

    broker = _config(**{**SCRAM, "sasl_username": f"${{file:{secret}}}"},
                     sasl_password=f"${{file:{secret}}}").brokers[0]

    assert (broker.sasl_username, broker.sasl_password) == ("from-file", "from-file")


def test_a_missing_env_variable_is_an_error_naming_the_key(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HS_TEST_UNSET", raising=False)

    error = _error(**SCRAM, sasl_password="${env:HS_TEST_UNSET}")

    assert error.path == "brokers[0].sasl_password"
    assert "HS_TEST_UNSET is not set" in str(error)


def test_a_missing_file_is_an_error_naming_the_key(tmp_path: Path) -> None:
    error = _error(**{**SCRAM, "sasl_username": f"${{file:{tmp_path}/nope}}"},
                   sasl_password="pw")

    assert error.path == "brokers[0].sasl_username"
    assert "nope" in str(error)


def test_only_a_whole_value_is_a_reference() -> None:
    assert resolve("pa${env:HOME}ss", "k") == "pa${env:HOME}ss"
    assert resolve("${vault:x}", "k") == "${vault:x}"


@pytest.mark.parametrize(("broker", "key"), [
    ({"security_protocol": "TLS"}, "brokers[0].security_protocol"),
    ({"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI"},
     "brokers[0].sasl_mechanism"),
    ({"security_protocol": "SASL_SSL", "sasl_password": "pw"}, "brokers[0].sasl_username"),
    ({"ssl_cafile": "/etc/ca.pem"}, "brokers[0].ssl_cafile"),
    ({"security_protocol": "SSL", "ssl_cafile": "/no/such/ca.pem"}, "brokers[0].ssl_cafile"),
    ({"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"},
     "brokers[0].sasl_mechanism"),
    ({"security_protocol": "SSL", "ssl_cert_file": "/c.pem"}, "brokers[0].ssl_cert_file"),
])
def test_a_bad_security_setting_names_its_key(broker: dict[str, Any], key: str) -> None:
    assert _error(**broker).path == key


def test_the_embedded_broker_cannot_be_secured() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"brokers": [{"name": "Kafka", "bootstrap_servers": "embedded",
                                   "security_protocol": "SSL"}]})

    assert caught.value.path == "brokers[0].security_protocol"


def test_one_address_cannot_have_two_security_settings() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"brokers": [
            {"name": "a", "bootstrap_servers": ADDRESS},
            {"name": "b", "bootstrap_servers": ADDRESS, **SCRAM, "sasl_password": "pw"}]})

    assert caught.value.path == "brokers[1]"


def test_the_resolved_password_never_shows_in_a_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HS_TEST_KAFKA_PASSWORD", "s3cr3t-value")

    config = _config(**SCRAM, sasl_password="${env:HS_TEST_KAFKA_PASSWORD}")

    assert "s3cr3t-value" not in repr(config) and "s3cr3t-value" not in str(config.brokers)
    assert "alice" in repr(config.brokers[0])


def test_the_commented_secured_example_in_production_toml_is_valid(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ca_file: Path) -> None:
    text = (ROOT / "config" / "production.toml").read_text()
    block = re.search(r"^# \[\[brokers\]\]\n(?:#.+\n)+", text, re.MULTILINE)  # to a bare "#"
    assert block is not None, "the secured [[brokers]] example is gone from production.toml"
    example = "\n".join(line.removeprefix("#") for line in block.group(0).splitlines())
    password = tmp_path / "password"
    password.write_text("pw\n")
    example = (example.replace("/etc/hookstream/kafka-ca.pem", str(ca_file))
               .replace("/run/secrets/kafka-password", str(password)))
    monkeypatch.setenv("KAFKA_USERNAME", "hookstream")

    config = load_config(_write(tmp_path, example))

    broker = config.brokers[0]
    assert (broker.security_protocol, broker.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
    assert (broker.sasl_username, broker.sasl_password) == ("hookstream", "pw")


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "secured.toml"
    path.write_text(text)
    return path


def test_check_names_an_unresolvable_reference_without_a_traceback(tmp_path: Path) -> None:
    path = _write(tmp_path, f'[[brokers]]\nname = "Kafka"\nbootstrap_servers = "{ADDRESS}"\n'
                            'security_protocol = "SASL_SSL"\nsasl_username = "u"\n'
                            'sasl_password = "${file:/no/such/secret}"\n')

    result = subprocess.run([sys.executable, "-m", "runtime", "check", str(path)],
                            capture_output=True, text=True, cwd=ROOT, timeout=60)

    assert result.returncode != 0
    assert "brokers[0].sasl_password" in result.stderr and "/no/such/secret" in result.stderr
    assert "Traceback" not in result.stderr
