"""Standard Webhooks signatures and the webhook-id."""

from __future__ import annotations

import base64
import hashlib

import pytest

from actors.delivery.document.signing import sign, signing_key, verify, webhook_id

# The Standard Webhooks specification's published test vector: matching it means any of
# that specification's receiver libraries verifies our pushes.
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SPEC_TIMESTAMP = 1614265330
SPEC_PAYLOAD = b'{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_signature_matches_the_standard_webhooks_test_vector() -> None:
    key = signing_key(SPEC_SECRET)
    assert sign(key, SPEC_ID, SPEC_TIMESTAMP, SPEC_PAYLOAD) == SPEC_SIGNATURE


def test_whsec_secret_is_base64_decoded_and_a_plain_secret_is_used_as_utf8() -> None:
    assert signing_key("whsec_" + base64.b64encode(b"\x00\xffkey").decode()) == b"\x00\xffkey"
    assert signing_key("pässword") == "pässword".encode()


@pytest.mark.parametrize("secret", ["", "whsec_", "whsec_not base64!"])
def test_unusable_secrets_are_rejected(secret: str) -> None:
    with pytest.raises(ValueError, match="signingSecret"):
        signing_key(secret)


def test_verify_accepts_the_vector_within_tolerance_and_rejects_tampering() -> None:
    key = signing_key(SPEC_SECRET)
    now = SPEC_TIMESTAMP + 299
    assert verify(key, SPEC_ID, SPEC_TIMESTAMP, SPEC_PAYLOAD, SPEC_SIGNATURE, now_s=now)
    assert not verify(key, SPEC_ID, SPEC_TIMESTAMP, SPEC_PAYLOAD + b" ", SPEC_SIGNATURE, now_s=now)
    assert not verify(key, "msg_other", SPEC_TIMESTAMP, SPEC_PAYLOAD, SPEC_SIGNATURE, now_s=now)
    assert not verify(b"other", SPEC_ID, SPEC_TIMESTAMP, SPEC_PAYLOAD, SPEC_SIGNATURE, now_s=now)


def test_verify_rejects_a_stale_or_future_timestamp() -> None:
    key = signing_key(SPEC_SECRET)
    for now in (SPEC_TIMESTAMP + 301, SPEC_TIMESTAMP - 301):
        assert not verify(key, SPEC_ID, SPEC_TIMESTAMP, SPEC_PAYLOAD, SPEC_SIGNATURE, now_s=now)


def test_verify_accepts_any_of_several_space_separated_signatures() -> None:
    key = signing_key(SPEC_SECRET)
    header = f"v1,c29tZXRoaW5nIGVsc2U= {SPEC_SIGNATURE}"
    assert verify(key, SPEC_ID, SPEC_TIMESTAMP, SPEC_PAYLOAD, header, now_s=SPEC_TIMESTAMP)


def test_webhook_id_is_a_function_of_coordinates_and_timestamp_only() -> None:
    expected = "msg_" + hashlib.sha256(b"orders/3/1042/1700000000123").hexdigest()[:32]
    assert webhook_id("orders", 3, 1042, 1_700_000_000_123) == expected
    assert webhook_id("orders", 3, 1042, 5) == webhook_id("orders", 3, 1042, 5)


def test_a_recreated_topic_s_record_at_the_same_offset_gets_another_id() -> None:
    before = webhook_id("orders", 0, 0, 1_700_000_000_000)
    assert webhook_id("orders", 0, 0, 1_700_000_000_001) != before


def test_a_record_without_a_timestamp_gets_the_coordinates_only_id() -> None:
    assert webhook_id("orders", 3, 1042, -1) == \
        "msg_" + hashlib.sha256(b"orders/3/1042").hexdigest()[:32]


def test_webhook_ids_differ_across_offsets_partitions_and_topics() -> None:
    ids = {
        webhook_id("orders", 3, 1042),
        webhook_id("orders", 3, 1043),
        webhook_id("orders", 4, 1042),
        webhook_id("payments", 3, 1042),
    }
    assert len(ids) == 4
    assert all(len(i) == 36 and i.startswith("msg_") for i in ids)
