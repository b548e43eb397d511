"""Sealing secrets (runtime/host/sealing.py) and a subscription's sealed record
(actors/delivery/cluster/sealed.py), and `[cluster] secrets_key` at load (issue 25)."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest

from actors.delivery.cluster.sealed import clear_in, opened_value, refuse_clear, sealed_value
from actors.delivery.document.store import encode
from actors.delivery.document.subscription import Consumer, decode_consumer, document
from actors.delivery.errors import InvalidSubscription
from runtime.errors import ConfigError
from runtime.host.config import parse_config
from runtime.host.sealing import Envelope, Unsealable, key_id, parse_keys, seal, unseal

KEY = os.urandom(32)
OTHER = os.urandom(32)
BROKERS = [{"name": "Kafka", "bootstrap_servers": "127.0.0.1:9092"}]
SECRETS = ("Bearer top-secret-token", "whsec_" + base64.b64encode(b"k" * 24).decode(),
           "user:pa55word", "apikey=qu3ry")


def consumer(sub_id: str = "s", **method: Any) -> Consumer:
    return decode_consumer({
        "id": sub_id, "group": {"id": "g"}, "broker": "Kafka", "topics": [{"name": "t"}],
        "subscriptionMethod": {"uri": "http://127.0.0.1:9/hook", **method}})


def secret_consumer(sub_id: str = "s") -> Consumer:
    return consumer(sub_id, uri="http://user:pa55word@127.0.0.1:9/hook?apikey=qu3ry",
                    additionalHeaders={"Authorization": SECRETS[0], "X-Ref": "${env:X}"},
                    signingSecret=SECRETS[1])


# -- the cipher ----------------------------------------------------------------------------
def test_a_sealed_value_opens_with_its_key_and_associated_data_only() -> None:
    envelope = seal((KEY,), b"secret", b"a")
    assert b"secret" not in msgspec.json.encode(envelope)
    assert envelope.enc == "aes-256-gcm" and envelope.kid == key_id(KEY)
    assert unseal((OTHER, KEY), envelope, b"a") == b"secret"
    with pytest.raises(Unsealable, match="moved"):
        unseal((KEY,), envelope, b"b")
    with pytest.raises(Unsealable, match=f"sealed with key {key_id(KEY)}"):
        unseal((OTHER,), envelope, b"a")


def test_an_altered_ciphertext_does_not_open() -> None:
    envelope = seal((KEY,), b"secret", b"a")
    data = bytearray(base64.b64decode(envelope.data))
    data[0] ^= 1
    altered = msgspec.structs.replace(envelope, data=base64.b64encode(bytes(data)).decode())
    with pytest.raises(Unsealable, match="altered"):
        unseal((KEY,), altered, b"a")


def test_each_seal_takes_a_new_nonce() -> None:
    assert seal((KEY,), b"x", b"a").nonce != seal((KEY,), b"x", b"a").nonce


def test_keys_are_read_in_base64_or_hex_and_several_rotate() -> None:
    text = f"{base64.b64encode(KEY).decode()}\n{OTHER.hex()}\n"
    assert parse_keys(text) == (KEY, OTHER)


# ids: the keys are random, and parallel workers must collect the same test names
@pytest.mark.parametrize("text", ["", "  ", "c2hvcnQ=", "zz" * 32, KEY.hex()[:-2],
                                  base64.b64encode(os.urandom(31)).decode()],
                         ids=["empty", "blank", "short", "not-hex", "hex-31-bytes",
                              "base64-31-bytes"])
def test_a_bad_key_says_how_to_make_one_without_showing_it(text: str) -> None:
    with pytest.raises(ValueError, match=r"os\.urandom") as caught:
        parse_keys(text)
    assert not text.strip() or text not in str(caught.value)


def test_an_unknown_algorithm_is_refused() -> None:
    envelope = msgspec.structs.replace(seal((KEY,), b"x", b"a"), enc="rot13")
    with pytest.raises(Unsealable, match="rot13"):
        unseal((KEY,), envelope, b"a")


# -- a subscription's record ---------------------------------------------------------------
def test_the_record_holds_no_secret_and_opens_to_the_document() -> None:
    subscription = secret_consumer()
    value = sealed_value(subscription, (KEY,))
    for secret in SECRETS:
        assert secret.encode() not in value
    shown = msgspec.json.decode(value)
    assert shown["subscriptionMethod"]["additionalHeaders"] == {
        "Authorization": "***", "X-Ref": "${env:X}"}
    assert msgspec.convert(shown["sealed"], Envelope).kid == key_id(KEY)
    assert decode_consumer(opened_value(value, (KEY,))) == subscription


def test_a_document_without_secrets_is_written_as_it_is() -> None:
    plain = consumer(additionalHeaders={"Authorization": "${file:/run/token}"})
    assert sealed_value(plain, (KEY,)) == encode(plain)
    assert opened_value(encode(plain), ()) == encode(plain)


def test_a_record_of_the_previous_version_is_read_as_it_is() -> None:
    old = encode(secret_consumer())
    assert decode_consumer(opened_value(old, (KEY,))) == secret_consumer()


def test_a_sealed_record_without_a_key_or_with_another_says_so() -> None:
    value = sealed_value(secret_consumer(), (KEY,))
    with pytest.raises(Unsealable, match=r"\[cluster\] secrets_key is not set"):
        opened_value(value, ())
    with pytest.raises(Unsealable, match=f"sealed with key {key_id(KEY)}"):
        opened_value(value, (OTHER,))


def test_sealed_secrets_moved_to_another_subscription_do_not_open() -> None:
    theirs = msgspec.json.decode(sealed_value(secret_consumer("a"), (KEY,)))
    mine = msgspec.json.decode(sealed_value(secret_consumer("b"), (KEY,)))
    mine["sealed"] = theirs["sealed"]
    with pytest.raises(Unsealable, match="moved"):
        opened_value(msgspec.json.encode(mine), (KEY,))


def test_secrets_in_clear_are_refused_without_a_key_naming_the_setting() -> None:
    with pytest.raises(InvalidSubscription) as caught:
        refuse_clear(secret_consumer(), ())
    details = caught.value.details
    assert "[cluster] secrets_key" in details
    for field in ("additionalHeaders.Authorization", "signingSecret", "uri"):
        assert field in details
    assert "X-Ref" not in details
    refuse_clear(secret_consumer(), (KEY,))
    refuse_clear(consumer(additionalHeaders={"A": "${env:A}"}), ())


def test_document_redaction_and_sealing_agree_on_what_is_secret() -> None:
    shown = document(secret_consumer(), redact=True)["subscriptionMethod"]
    sealed = msgspec.json.decode(sealed_value(secret_consumer(), (KEY,)))
    assert sealed["subscriptionMethod"] == shown


# -- the setting ---------------------------------------------------------------------------
def test_the_key_is_resolved_at_load_and_never_shown(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text(base64.b64encode(KEY).decode() + "\n")
    cluster = parse_config({"brokers": BROKERS, "cluster": {
        "subscriptions_topic": "subs", "secrets_key": f"${{file:{path}}}"}}).cluster
    assert cluster.sealing_keys() == (KEY,)
    assert base64.b64encode(KEY).decode() not in repr(cluster)
    assert parse_config({"brokers": BROKERS}).cluster.sealing_keys() == ()


@pytest.mark.parametrize(("content", "match"), [
    (None, "cannot read"), ("c2hvcnQ=", "not 32 bytes")])
def test_a_bad_key_file_is_named(tmp_path: Path, content: str | None, match: str) -> None:
    path = tmp_path / "key"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=match) as caught:
        parse_config({"brokers": BROKERS, "cluster": {"secrets_key": f"${{file:{path}}}"}})
    assert "cluster.secrets_key" in str(caught.value)


def test_a_key_written_in_the_config_file_is_refused() -> None:
    with pytest.raises(ConfigError, match="by reference"):
        parse_config({"brokers": BROKERS, "cluster": {
            "secrets_key": base64.b64encode(KEY).decode()}})


def test_a_record_in_clear_names_its_secret_fields() -> None:
    assert clear_in(encode(secret_consumer("sealed"))) == [
        "subscriptionMethod.additionalHeaders.Authorization", "subscriptionMethod.signingSecret",
        "subscriptionMethod.uri"]
    assert clear_in(sealed_value(secret_consumer("sealed"), (KEY,))) == []
    assert clear_in(b"not json") == []
