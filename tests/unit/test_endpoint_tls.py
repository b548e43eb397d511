"""`subscriptionMethod.tls`: the shape checked when decoded, the files when the context is
built (errors naming the field), one cached context per distinct setting."""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import Any

import pytest

from actors.delivery.document.subscription import SubscriptionMethod, decode_consumer, document
from actors.delivery.document.tls import client_context
from actors.delivery.errors import InvalidSubscription

trustme = pytest.importorskip("trustme", reason="trustme (a dev extra) makes the certificates")


def method(uri: str = "https://127.0.0.1:9/hook", **tls: Any) -> SubscriptionMethod:
    return decode_consumer({
        "id": "s", "group": {"id": "g"}, "broker": "Kafka", "topics": [{"name": "t"}],
        "subscriptionMethod": {"uri": uri, **({"tls": tls} if tls else {})},
    }).subscriptionMethod


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    ca, other = trustme.CA(), trustme.CA()
    client, stranger = ca.issue_cert("client.example"), other.issue_cert("other.example")
    paths = {"ca": tmp_path / "ca.pem", "cert": tmp_path / "cert.pem",
             "key": tmp_path / "key.pem", "other_key": tmp_path / "other-key.pem",
             "junk": tmp_path / "junk.pem", "both": tmp_path / "both.pem"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    client.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    client.private_key_pem.write_to_path(str(paths["key"]))
    client.private_key_and_cert_chain_pem.write_to_path(str(paths["both"]))
    stranger.private_key_pem.write_to_path(str(paths["other_key"]))
    paths["junk"].write_text("not a certificate\n")
    return {name: str(path) for name, path in paths.items()}


def refused(m: SubscriptionMethod) -> InvalidSubscription:
    with pytest.raises(InvalidSubscription) as raised:
        client_context(m)
    return raised.value


def test_without_tls_the_default_verified_context_is_used() -> None:
    assert client_context(method()) is True


def test_a_setting_builds_one_verifying_context_shared_until_a_file_changes(
        files: dict[str, str]) -> None:
    first = client_context(method(caFile=files["ca"], certFile=files["cert"],
                                  keyFile=files["key"]))
    assert isinstance(first, ssl.SSLContext)
    assert first.verify_mode == ssl.CERT_REQUIRED and first.check_hostname
    again = client_context(method(caFile=files["ca"], certFile=files["cert"],
                                  keyFile=files["key"]))
    assert again is first
    stat = os.stat(files["ca"])
    os.utime(files["ca"], ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    renewed = client_context(method(caFile=files["ca"], certFile=files["cert"],
                                    keyFile=files["key"]))
    assert renewed is not first


def test_a_cert_file_holding_the_key_too_needs_no_key_file(files: dict[str, str]) -> None:
    assert isinstance(client_context(method(certFile=files["both"])), ssl.SSLContext)


def test_a_key_that_does_not_match_the_certificate_names_key_file(
        files: dict[str, str]) -> None:
    error = refused(method(certFile=files["cert"], keyFile=files["other_key"]))
    assert error.reason == "invalid subscriptionMethod.tls.keyFile"
    assert "does not match" in error.details


@pytest.mark.parametrize(("field", "given"), [
    ("caFile", {"caFile": "junk"}), ("certFile", {"certFile": "junk", "keyFile": "key"}),
    ("keyFile", {"certFile": "cert", "keyFile": "junk"}), ("certFile", {"certFile": "cert"}),
])
def test_files_that_hold_the_wrong_thing_name_their_field(
        files: dict[str, str], field: str, given: dict[str, str]) -> None:
    error = refused(method(**{k: files[v] for k, v in given.items()}))
    assert error.reason == f"invalid subscriptionMethod.tls.{field}"


def test_a_missing_file_names_its_field_and_says_no_more_than_for_a_present_one(
        files: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "garbage.pem").write_text("not PEM")
    details = set()
    for name in ("absent.pem", "garbage.pem"):
        error = refused(method(caFile=str(tmp_path / name)))
        assert error.reason == "invalid subscriptionMethod.tls.caFile"
        details.add(error.details.replace(name, "FILE"))
    assert len(details) == 1, details  # an answer does not tell which files exist


def test_tls_files_are_covered_by_allow_references(files: dict[str, str]) -> None:
    chosen = method(caFile=files["ca"])
    with pytest.raises(InvalidSubscription) as raised:
        client_context(chosen, ["file:/run/secrets/*"])
    assert raised.value.reason == "invalid subscriptionMethod.tls.caFile"
    assert "allow_references" in raised.value.details
    parent = os.path.dirname(os.path.realpath(files["ca"]))
    assert client_context(chosen, [f"file:{parent}/*"]) is not True


@pytest.mark.parametrize(("uri", "tls", "field"), [
    ("http://127.0.0.1:9/hook", {"caFile": "/ca.pem"}, "tls"),
    ("https://127.0.0.1:9/hook", {"keyFile": "/key.pem"}, "tls.keyFile"),
    ("https://127.0.0.1:9/hook", {"caFile": "ca.pem"}, "tls.caFile"),
    ("https://127.0.0.1:9/hook", {"caFile": "/ca.pem", "verify": False}, "tls"),
])
def test_the_shape_is_checked_when_decoded(uri: str, tls: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidSubscription) as raised:
        method(uri, **tls)
    assert raised.value.reason.startswith(f"invalid subscriptionMethod.{field}")


def test_the_setting_survives_the_stored_document() -> None:
    sub = decode_consumer({
        "id": "s", "group": {"id": "g"}, "broker": "Kafka", "topics": [{"name": "t"}],
        "subscriptionMethod": {"uri": "https://127.0.0.1:9/hook",
                               "tls": {"caFile": "/ca.pem", "certFile": "/c.pem"}}})
    stored = document(sub, redact=False)
    assert stored["subscriptionMethod"]["tls"] == {"caFile": "/ca.pem", "certFile": "/c.pem",
                                                   "keyFile": None}
    assert decode_consumer(stored) == sub
    plain = decode_consumer({**stored, "subscriptionMethod": {"uri": "https://h/"}})
    assert "tls" not in document(plain, redact=True)["subscriptionMethod"]


def test_a_device_or_a_fifo_as_a_tls_file_is_refused_without_reading_it(
        tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo)):
        error = refused(method(caFile=path))
        assert error.reason == "invalid subscriptionMethod.tls.caFile"
        assert "not a readable regular PEM file" in error.details
