"""Signing-secret rotation: several space-separated secrets, one `v1,` entry each, checked
with a receiver written from the Standard Webhooks text (tests/standard_webhooks.py)."""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest

from actors.delivery.document.signing import MAX_SECRETS, sign_all, signing_keys
from actors.delivery.document.subscription import decode_consumer
from actors.delivery.errors import InvalidSubscription
from tests.standard_webhooks import accepts

NEW = "whsec_" + base64.b64encode(b"the-new-key-0123456789").decode()
OLD = "whsec_" + base64.b64encode(b"the-old-key-9876543210").decode()
PLAIN = "shared-password"
BODY = b'{"order": 7}'


def headers_for(secret: str, body: bytes = BODY) -> dict[str, str]:
    signature = sign_all(signing_keys(secret), "msg_1", 1_700_000_000, body)
    return {"webhook-id": "msg_1", "webhook-timestamp": "1700000000",
            "webhook-signature": signature}


def test_each_secret_yields_one_entry_in_the_order_given() -> None:
    headers = headers_for(f"{NEW} {OLD}")
    entries = headers["webhook-signature"].split(" ")
    assert len(entries) == 2 and all(e.startswith("v1,") for e in entries)
    assert entries[0] == headers_for(NEW)["webhook-signature"]
    assert entries[1] == headers_for(OLD)["webhook-signature"]


@pytest.mark.parametrize("receiver_secret", [NEW, OLD, PLAIN])
def test_a_receiver_holding_any_one_of_the_secrets_accepts(receiver_secret: str) -> None:
    assert accepts(receiver_secret, headers_for(f"{NEW}  {OLD}\t{PLAIN}"), BODY)


def test_a_receiver_with_another_secret_or_a_changed_body_refuses() -> None:
    other = "whsec_" + base64.b64encode(b"someone-else").decode()
    headers = headers_for(f"{NEW} {OLD}")
    assert not accepts(other, headers, BODY)
    assert not accepts(NEW, headers, BODY + b" ")


def test_a_bad_secret_is_named_by_position_never_by_value() -> None:
    with pytest.raises(ValueError, match="secret 2 of 2") as raised:
        signing_keys(f"{NEW} whsec_not-base64!")
    assert "not-base64" not in str(raised.value)
    with pytest.raises(ValueError, match=f"at most {MAX_SECRETS}"):
        signing_keys(" ".join([PLAIN] * (MAX_SECRETS + 1)))


def _document(secret: str) -> dict[str, Any]:
    return {"id": "s", "group": {"id": "g"}, "broker": "Kafka", "topics": [{"name": "t"}],
            "subscriptionMethod": {"uri": "http://127.0.0.1:9/hook", "signingSecret": secret}}


def test_the_admin_document_refuses_a_bad_secret_among_several() -> None:
    with pytest.raises(InvalidSubscription) as raised:
        decode_consumer(_document(f"{NEW} whsec_!!"))
    assert raised.value.reason == "invalid subscriptionMethod.signingSecret"
    assert "secret 2 of 2" in raised.value.details
    assert decode_consumer(_document(f"{NEW} {OLD}")).subscriptionMethod.signingSecret == \
        f"{NEW} {OLD}"


def test_the_reference_library_verifies_each_secret_of_a_rotation() -> None:
    standardwebhooks = pytest.importorskip(
        "standardwebhooks", reason="the specification's reference library (a dev extra)")
    now = int(time.time())
    signature = sign_all(signing_keys(f"{NEW} {OLD}"), "msg_1", now, BODY)
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(now),
               "webhook-signature": signature}
    for secret in (NEW, OLD):
        standardwebhooks.Webhook(secret).verify(BODY, headers, json_parse=False)
    other = "whsec_" + base64.b64encode(b"someone-else").decode()
    with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
        standardwebhooks.Webhook(other).verify(BODY, headers, json_parse=False)
