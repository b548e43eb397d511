"""Secret references in a subscription (`${env:NAME}`, `${file:/path}`): resolved by the
instance that starts it, kept as written everywhere else, errors naming field and
reference."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
import pytest

from actors.delivery.document.secrets import kept_secrets, resolved
from actors.delivery.document.subscription import Consumer, decode_consumer, document
from actors.delivery.errors import InvalidSubscription
from runtime.errors import ConfigError
from runtime.host.config import parse_config
from runtime.host.references import MAX_FILE_BYTES

ENV = "HOOKSTREAM_TEST_REF_TOKEN"


def consumer(**method: Any) -> Consumer:
    return decode_consumer({
        "id": "s", "group": {"id": "g"}, "broker": "Kafka", "topics": [{"name": "t"}],
        "subscriptionMethod": {"uri": "http://127.0.0.1:9/hook", **method}})


def test_env_and_file_references_resolve_and_the_consumer_keeps_the_reference(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "t0ken")
    secret_file = tmp_path / "secret"
    secret_file.write_text("whsec_c2VjcmV0 whsec_b2xk\n")
    sub = consumer(additionalHeaders={"X-Token": f"${{env:{ENV}}}", "X-Plain": "as-is"},
                   signingSecret=f"${{file:{secret_file}}} plain-old")

    method = resolved(sub.subscriptionMethod)

    assert method.additionalHeaders == {"X-Token": "t0ken", "X-Plain": "as-is"}
    assert method.signingSecret == "whsec_c2VjcmV0 whsec_b2xk plain-old"
    assert sub.subscriptionMethod.additionalHeaders["X-Token"] == f"${{env:{ENV}}}"
    stored = msgspec.json.encode(document(sub, redact=False)).decode()
    assert f"${{env:{ENV}}}" in stored and "t0ken" not in stored
    assert "c2VjcmV0" not in stored


def test_get_shows_references_and_masks_plain_values(tmp_path: Path) -> None:
    sub = consumer(additionalHeaders={"X-Token": f"${{env:{ENV}}}", "X-Plain": "hu5h"},
                   signingSecret=f"${{file:{tmp_path}/s}} whsec_c2VjcmV0")
    method = document(sub, redact=True)["subscriptionMethod"]
    assert method["additionalHeaders"] == {"X-Token": f"${{env:{ENV}}}", "X-Plain": "***"}
    assert method["signingSecret"] == f"${{file:{tmp_path}/s}} ***"


def test_a_missing_variable_names_the_field_and_the_reference(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    sub = consumer(additionalHeaders={"X-Token": f"${{env:{ENV}}}"})
    with pytest.raises(InvalidSubscription) as raised:
        resolved(sub.subscriptionMethod)
    assert raised.value.reason == "invalid subscriptionMethod.additionalHeaders.X-Token"
    assert raised.value.details == f"${{env:{ENV}}}: the environment variable {ENV} is not set"


def test_an_unreadable_file_names_the_signing_secret(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    sub = consumer(signingSecret=f"${{file:{missing}}}")
    with pytest.raises(InvalidSubscription) as raised:
        resolved(sub.subscriptionMethod)
    assert raised.value.reason == "invalid subscriptionMethod.signingSecret"
    assert raised.value.details.startswith(f"${{file:{missing}}}: cannot read {missing}")


def test_a_file_that_is_no_secret_or_no_header_value_is_refused_without_its_content(
        tmp_path: Path) -> None:
    bad_secret, bad_header = tmp_path / "secret", tmp_path / "header"
    bad_secret.write_text("whsec_%%%not-base64")
    bad_header.write_text("line one\nline two")
    with pytest.raises(InvalidSubscription, match="signingSecret") as raised:
        resolved(consumer(signingSecret=f"${{file:{bad_secret}}}").subscriptionMethod)
    assert "not-base64" not in str(raised.value)
    with pytest.raises(InvalidSubscription, match=r"additionalHeaders\.X-A") as raised:
        resolved(consumer(additionalHeaders={"X-A": f"${{file:{bad_header}}}"}
                          ).subscriptionMethod)
    assert "line" not in str(raised.value)


@pytest.mark.parametrize("value", ["${env:}", "${vault:x}", "${file:relative/path}"])
def test_a_malformed_reference_is_refused_when_decoded(value: str) -> None:
    with pytest.raises(InvalidSubscription) as raised:
        consumer(additionalHeaders={"X-A": value})
    assert raised.value.reason == "invalid subscriptionMethod.additionalHeaders.X-A"
    with pytest.raises(InvalidSubscription) as raised:
        consumer(signingSecret=value)
    assert raised.value.reason == "invalid subscriptionMethod.signingSecret"


def test_a_method_without_references_is_returned_as_is() -> None:
    method = consumer(additionalHeaders={"X-A": "b"}, signingSecret="pw").subscriptionMethod
    assert resolved(method) is method


@pytest.mark.parametrize("target", ["/dev/zero", "fifo", "big"])
def test_a_reference_to_a_device_a_fifo_or_a_huge_file_is_refused_without_reading_it(
        tmp_path: Path, target: str) -> None:
    path = {"/dev/zero": Path("/dev/zero"), "fifo": tmp_path / "fifo",
            "big": tmp_path / "big"}[target]
    if target == "fifo":
        os.mkfifo(path)  # opening it would block until a writer comes
    if target == "big":
        path.write_bytes(b"x" * (MAX_FILE_BYTES + 1))
    with pytest.raises(InvalidSubscription) as raised:
        resolved(consumer(signingSecret=f"${{file:{path}}}").subscriptionMethod)
    assert raised.value.reason == "invalid subscriptionMethod.signingSecret"
    assert ("not a regular file" if target != "big" else "larger than") in raised.value.details


def test_allowed_patterns_refuse_other_references_without_reading_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir()
    (secrets_dir / "hook").write_text("pw")
    (tmp_path / "outside").write_text("private")
    monkeypatch.setenv("HOOK_TOKEN", "t")
    monkeypatch.setenv(ENV, "kafka-password")
    allowed = ["env:HOOK_*", f"file:{secrets_dir}/*"]
    ok = consumer(additionalHeaders={"X-A": "${env:HOOK_TOKEN}"},
                  signingSecret=f"${{file:{secrets_dir}/hook}}").subscriptionMethod
    method = resolved(ok, allowed)
    assert (method.additionalHeaders["X-A"], method.signingSecret) == ("t", "pw")
    for header, secret in ((f"${{env:{ENV}}}", None),
                           (None, f"${{file:{secrets_dir}/../outside}}")):
        refused = consumer(**({"additionalHeaders": {"X-A": header}} if header else {}),
                           **({"signingSecret": secret} if secret else {}))
        with pytest.raises(InvalidSubscription) as raised:
            resolved(refused.subscriptionMethod, allowed)
        assert raised.value.details.endswith("not allowed by [egress] allow_references")
        assert "private" not in str(raised.value) and "kafka-password" not in str(raised.value)
    with pytest.raises(InvalidSubscription, match="not allowed"):
        resolved(ok, [])


def test_the_config_refuses_a_pattern_that_is_no_reference_kind() -> None:
    base = {"brokers": [{"name": "Kafka", "bootstrap_servers": "127.0.0.1:9092"}]}
    config = parse_config({**base, "egress": {"allow_references": ["env:HOOK_*"]}})
    assert config.egress.allow_references == ["env:HOOK_*"]
    assert parse_config(base).egress.allow_references is None
    with pytest.raises(ConfigError, match=r"egress\.allow_references\[1\]"):
        parse_config({**base, "egress": {"allow_references": ["env:A", "HOOK_*"]}})


def test_a_put_of_the_redacted_document_keeps_every_stored_secret() -> None:
    stored = consumer(uri="http://u:pw@127.0.0.1:9/hook?a=1&flag&b=2#frag",
                      additionalHeaders={"X-Token": "t0k", "X-Ref": f"${{env:{ENV}}}"},
                      signingSecret=f"whsec_c2VjcmV0 ${{env:{ENV}}}")
    shown = decode_consumer(document(stored, redact=True))
    assert shown.subscriptionMethod.uri == "http://***@127.0.0.1:9/hook?a=***&***&b=***#***"

    assert kept_secrets(shown, stored) == stored


def test_a_redaction_mark_with_no_stored_secret_behind_it_is_refused() -> None:
    stored = consumer(uri="http://127.0.0.1:9/hook?a=1", signingSecret="whsec_c2VjcmV0")
    for method, field in (({"additionalHeaders": {"X-Token": "***"}},
                           "subscriptionMethod.additionalHeaders.X-Token"),
                          ({"signingSecret": "*** ***"}, "subscriptionMethod.signingSecret"),
                          ({"uri": "http://***@127.0.0.1:9/hook"}, "subscriptionMethod.uri"),
                          ({"uri": "http://127.0.0.1:9/hook?z=***"}, "subscriptionMethod.uri")):
        with pytest.raises(InvalidSubscription) as caught:
            kept_secrets(consumer(**method), stored)
        assert caught.value.reason == f"invalid {field}", method


def test_a_redaction_mark_is_refused_when_the_origin_changes() -> None:
    stored = consumer(uri="http://u:pw@127.0.0.1:9/hook?key=k3y",
                      additionalHeaders={"Authorization": "Bearer t0k"},
                      signingSecret="whsec_c2VjcmV0")
    shown = document(stored, redact=True)
    for uri in ("http://***@attacker.example:9/hook?key=***",  # another host
                "https://***@127.0.0.1:9/hook?key=***",  # another scheme
                "http://***@127.0.0.1:10/hook?key=***"):  # another port
        for method, field in (
                ({"uri": uri}, "subscriptionMethod.additionalHeaders.Authorization"),
                ({"uri": uri, "additionalHeaders": {}}, "subscriptionMethod.signingSecret"),
                ({"uri": uri, "additionalHeaders": {}, "signingSecret": None},
                 "subscriptionMethod.uri")):
            body = {**shown, "subscriptionMethod": {**shown["subscriptionMethod"], **method}}
            with pytest.raises(InvalidSubscription) as caught:
                kept_secrets(decode_consumer(body), stored)
            assert caught.value.reason == f"invalid {field}", (uri, method)
    moved = {**shown, "subscriptionMethod": {
        **shown["subscriptionMethod"], "uri": "http://elsewhere:9/hook?key=new",
        "additionalHeaders": {"Authorization": "Bearer new"}, "signingSecret": "whsec_bmV3"}}
    assert kept_secrets(decode_consumer(moved), stored) == decode_consumer(moved)
    same = {**shown, "subscriptionMethod": {**shown["subscriptionMethod"],
                                            "uri": "HTTP://***@127.0.0.1:9/other?key=***"}}
    assert kept_secrets(decode_consumer(same), stored).subscriptionMethod.uri == \
        "http://u:pw@127.0.0.1:9/other?key=k3y"
