"""Connection security (runtime/kafka/security.py, oauth.py): what each setting becomes in
aiokafka's arguments, what `check()` refuses, the per-address table, and the token
providers. End to end against a broker: tests/integration/test_kafka_security.py."""

from __future__ import annotations

import asyncio
import ssl
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from runtime.errors import ConfigError
from runtime.kafka import make_admin, make_consumer, make_producer, security
from runtime.kafka.oauth import CommandTokenProvider, FileTokenProvider, TokenError
from runtime.kafka.security import PLAINTEXT, Security

ADDRESS = "kafka-1.test:9093,kafka-2.test:9093"


@pytest.fixture
def ca_file(tmp_path: Path) -> Path:
    path = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(path))
    return path


@pytest.fixture
def client_pair(tmp_path: Path) -> tuple[Path, Path]:
    issued = trustme.CA().issue_cert("client@test")
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
    issued.private_key_pem.write_to_path(str(key))
    return cert, key


@pytest.fixture
def registered() -> Iterator[None]:
    yield
    security.unregister(ADDRESS)


def _python(code: str) -> str:
    return f"{sys.executable} -c \"{code}\""


# -- what each setting becomes ---------------------------------------------------------------


def test_plaintext_adds_only_the_protocol() -> None:
    assert PLAINTEXT.client_kwargs() == {"security_protocol": "PLAINTEXT"}


def test_ssl_builds_one_verifying_context_from_the_ca_file(ca_file: Path) -> None:
    settings = Security(security_protocol="SSL", ssl_cafile=str(ca_file))

    kwargs = settings.client_kwargs()

    context = kwargs["ssl_context"]
    assert kwargs["security_protocol"] == "SSL"
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()] != []
    assert settings.client_kwargs()["ssl_context"] is context  # built once, shared


def test_the_hostname_check_can_be_turned_off(ca_file: Path) -> None:
    settings = Security(security_protocol="SSL", ssl_cafile=str(ca_file),
                        ssl_check_hostname=False)

    context = settings.client_kwargs()["ssl_context"]

    assert not context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED


def test_scram_over_tls_passes_mechanism_user_and_password(ca_file: Path) -> None:
    kwargs = Security(security_protocol="SASL_SSL", ssl_cafile=str(ca_file),
                      sasl_mechanism="SCRAM-SHA-512", sasl_username="alice",
                      sasl_password="pw").client_kwargs()

    assert {k: v for k, v in kwargs.items() if k != "ssl_context"} == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice", "sasl_plain_password": "pw"}
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)


def test_sasl_without_tls_has_no_ssl_context() -> None:
    kwargs = Security(security_protocol="SASL_PLAINTEXT", sasl_username="a",
                      sasl_password="b").client_kwargs()

    assert "ssl_context" not in kwargs and kwargs["sasl_mechanism"] == "PLAIN"


def test_oauthbearer_gets_a_file_or_command_token_provider(tmp_path: Path) -> None:
    by_file = Security(security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER",
                       sasl_oauthbearer_token_file=str(tmp_path / "t")).client_kwargs()
    by_command = Security(security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
                          sasl_oauthbearer_token_command="print-token --for 'kafka prod'"
                          ).client_kwargs()

    assert isinstance(by_file["sasl_oauth_token_provider"], FileTokenProvider)
    provider = by_command["sasl_oauth_token_provider"]
    assert isinstance(provider, CommandTokenProvider)
    assert provider.argv == ("print-token", "--for", "kafka prod")
    assert "sasl_plain_password" not in by_command


def test_the_password_stays_out_of_repr() -> None:
    settings = Security(security_protocol="SASL_SSL", sasl_username="alice",
                        sasl_password="hunter2")

    assert "hunter2" not in repr(settings) and "alice" in repr(settings)


# -- what check() refuses --------------------------------------------------------------------


@pytest.mark.parametrize(("settings", "key"), [
    (Security(ssl_cafile="/ca.pem"), "ssl_cafile"),
    (Security(security_protocol="SASL_PLAINTEXT", sasl_username="a", sasl_password="b",
              ssl_certfile="/c.pem"), "ssl_certfile"),
    (Security(sasl_username="alice"), "sasl_username"),
    (Security(security_protocol="SSL", sasl_password="pw"), "sasl_password"),
    (Security(security_protocol="SSL", ssl_cafile="/no/such/ca.pem"), "ssl_cafile"),
    (Security(security_protocol="SSL", ssl_keyfile="/k.pem"), "ssl_keyfile"),
    (Security(security_protocol="SASL_SSL", sasl_password="pw"), "sasl_username"),
    (Security(security_protocol="SASL_SSL", sasl_username="alice"), "sasl_password"),
    (Security(security_protocol="SASL_SSL", sasl_username="a", sasl_password="b",
              sasl_oauthbearer_token_file="/t"), "sasl_oauthbearer_token_file"),
    (Security(security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER"), "sasl_mechanism"),
    (Security(security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER",
              sasl_oauthbearer_token_file="/t", sasl_oauthbearer_token_command="x"),
     "sasl_mechanism"),
    (Security(security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER",
              sasl_oauthbearer_token_file="/no/such/token"), "sasl_oauthbearer_token_file"),
    (Security(security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER",
              sasl_oauthbearer_token_command="no-such-program-here --x"),
     "sasl_oauthbearer_token_command"),
    (Security(security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER",
              sasl_oauthbearer_token_command="unbalanced 'quote"),
     "sasl_oauthbearer_token_command"),
    (Security(security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER",
              sasl_username="alice", sasl_oauthbearer_token_command="true"), "sasl_username"),
])
def test_check_names_the_setting_at_fault(settings: Security, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings.check()

    assert caught.value.path == key


def test_check_loads_the_files_and_names_one_that_is_not_a_certificate(
        tmp_path: Path) -> None:
    junk = tmp_path / "ca.pem"
    junk.write_text("not a certificate")

    with pytest.raises(ConfigError) as caught:
        Security(security_protocol="SSL", ssl_cafile=str(junk)).check()

    assert caught.value.path == "ssl_cafile"


def test_check_accepts_a_complete_mutual_tls_and_scram_setting(
        ca_file: Path, client_pair: tuple[Path, Path]) -> None:
    cert, key = client_pair
    Security(security_protocol="SASL_SSL", ssl_cafile=str(ca_file), ssl_certfile=str(cert),
             ssl_keyfile=str(key), sasl_mechanism="SCRAM-SHA-256", sasl_username="alice",
             sasl_password="pw").check()


def test_check_refuses_a_key_that_does_not_match_the_certificate(
        ca_file: Path, client_pair: tuple[Path, Path], tmp_path: Path) -> None:
    cert, _ = client_pair
    other = tmp_path / "other.key"
    trustme.CA().issue_cert("x").private_key_pem.write_to_path(str(other))

    with pytest.raises(ConfigError) as caught:
        Security(security_protocol="SSL", ssl_certfile=str(cert), ssl_keyfile=str(other)
                 ).check()

    assert caught.value.path == "ssl_certfile"


# -- the table, and the clients built from it ---------------------------------------------------


def test_an_unregistered_address_is_plaintext() -> None:
    assert security.lookup("nobody.test:9092") is PLAINTEXT


def test_registration_is_found_whatever_the_spacing_and_can_be_undone(
        registered: None) -> None:
    settings = Security(security_protocol="SASL_PLAINTEXT", sasl_username="a",
                        sasl_password="b")
    security.register(ADDRESS, settings)

    assert security.lookup("kafka-1.test:9093, kafka-2.test:9093") is settings
    security.unregister(ADDRESS)
    assert security.lookup(ADDRESS) is PLAINTEXT


def test_registering_again_replaces(registered: None) -> None:
    security.register(ADDRESS, Security(security_protocol="SASL_PLAINTEXT",
                                        sasl_username="a", sasl_password="b"))
    security.register(ADDRESS, PLAINTEXT)

    assert security.lookup(ADDRESS) is PLAINTEXT


async def test_every_client_built_for_a_registered_address_carries_its_settings(
        registered: None, ca_file: Path) -> None:
    settings = Security(security_protocol="SASL_SSL", ssl_cafile=str(ca_file),
                        sasl_mechanism="SCRAM-SHA-256", sasl_username="alice",
                        sasl_password="pw")
    security.register(ADDRESS, settings)

    consumer, producer, admin = (make_consumer(ADDRESS, "t"), make_producer(ADDRESS),
                                 make_admin(ADDRESS))
    try:
        # aiokafka keeps the settings on each one's (not started) AIOKafkaClient
        for client in (consumer._client, producer.client, admin._client):
            assert client._security_protocol == "SASL_SSL"
            assert client._ssl_context is settings.ssl_context
            assert (client._sasl_mechanism, client._sasl_plain_username,
                    client._sasl_plain_password) == ("SCRAM-SHA-256", "alice", "pw")
    finally:
        await consumer.stop()
        await producer.stop()
        await admin.close()


async def test_what_the_caller_passes_wins_over_the_registration(registered: None) -> None:
    security.register(ADDRESS, Security(security_protocol="SASL_PLAINTEXT",
                                        sasl_username="a", sasl_password="b"))

    producer = make_producer(ADDRESS, security_protocol="PLAINTEXT")
    try:
        assert producer.client._security_protocol == "PLAINTEXT"
    finally:
        await producer.stop()


# -- OAUTHBEARER tokens --------------------------------------------------------------------------


async def test_the_file_token_is_read_at_every_call(tmp_path: Path) -> None:
    path = tmp_path / "token"
    provider = FileTokenProvider(path)
    path.write_text("first\n")
    assert await provider.token() == "first"

    path.write_text("  second  \n")

    assert await provider.token() == "second"


@pytest.mark.parametrize("content", [None, "", " \n"])
async def test_a_missing_or_empty_token_file_is_a_token_error(tmp_path: Path,
                                                              content: str | None) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)

    with pytest.raises(TokenError, match=str(path)):
        await FileTokenProvider(path).token()


async def test_the_command_token_is_what_it_prints_and_is_reused_for_a_while(
        tmp_path: Path) -> None:
    now = [100.0]
    provider = CommandTokenProvider(
        [sys.executable, "-c", "import time; print(f'tok-{time.time_ns()}')"],
        reuse_s=60, clock=lambda: now[0])

    first = await provider.token()
    now[0] += 59
    again = await provider.token()
    now[0] += 1
    fresh = await provider.token()

    assert first.startswith("tok-") and again == first and fresh != first
    assert provider.runs == 2


async def test_concurrent_callers_share_one_run_of_the_command() -> None:
    provider = CommandTokenProvider(
        [sys.executable, "-c", "import time; time.sleep(0.2); print('shared')"])

    tokens = await asyncio.gather(*(provider.token() for _ in range(5)))

    assert tokens == ["shared"] * 5 and provider.runs == 1


@pytest.mark.parametrize(("code", "message"), [
    ("import sys; sys.stderr.write('no credentials'); sys.exit(3)", "exited with 3: no cred"),
    ("print()", "printed nothing"),
])
async def test_a_failing_command_is_a_token_error_with_its_reason(code: str,
                                                                  message: str) -> None:
    provider = CommandTokenProvider([sys.executable, "-c", code])

    with pytest.raises(TokenError, match=message):
        await provider.token()


async def test_a_command_that_hangs_is_killed_after_its_timeout() -> None:
    provider = CommandTokenProvider([sys.executable, "-c", "import time; time.sleep(30)"],
                                    timeout_s=0.3)

    with pytest.raises(TokenError, match="did not finish"):
        async with asyncio.timeout(5):
            await provider.token()


async def test_a_command_that_cannot_run_is_a_token_error() -> None:
    with pytest.raises(TokenError, match="cannot run"):
        await CommandTokenProvider(["/no/such/token-helper"]).token()


def test_a_token_error_is_a_kafka_error_so_aiokafka_retries_the_connection() -> None:
    from aiokafka.errors import KafkaError

    assert issubclass(TokenError, KafkaError) and TokenError.retriable
