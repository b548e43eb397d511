"""A subscription's own secrets leave what a receiver answered before anyone reads it
(#34): the values it sends, as sent and as a reflection may encode them."""

from __future__ import annotations

import base64
import json

from actors.delivery.egress.http import describe
from actors.delivery.egress.redaction import Redactor, sent_secrets

URI = "http://alice:pa%24%24word@127.0.0.1:9/hook?key=k3y-value&page=1"
HEADERS = {"Authorization": "Bearer s3cret-token", "X-Api-Key": "k-9f8e7d"}
SIGNING = "whsec_c2VjcmV0"


def reflection() -> str:
    """What an echo service answers: the request as it got it, and as JSON."""
    basic = base64.b64encode(b"alice:pa$$word").decode()
    text = (f"POST /hook?key=k3y-value&page=1\nAuthorization: Basic {basic}\n"
            f"Authorization: {HEADERS['Authorization']}\nX-Api-Key: {HEADERS['X-Api-Key']}\n")
    return text + json.dumps({"args": {"key": "k3y-value"}, "token": "s3cret-token",
                              "password": "pa$$word", "auth": HEADERS["Authorization"]})


def test_every_secret_a_push_sends_is_replaced_in_a_reflected_answer() -> None:
    redactor = Redactor(sent_secrets(URI, HEADERS, SIGNING))
    shown = redactor.body(reflection().encode()).decode()
    for secret in ("s3cret", "k-9f8e7d", "k3y-value", "pa$$word", "pa%24%24word",
                   base64.b64encode(b"alice:pa$$word").decode()):
        assert secret not in shown, secret
    assert "Authorization: ***" in shown and "page=1" in shown  # short values stay
    assert redactor.text(reflection()) == shown


def test_an_error_text_loses_the_secrets_before_it_is_cut() -> None:
    redactor = Redactor(sent_secrets(URI, HEADERS, None))
    error = ValueError("x" * 170 + HEADERS["Authorization"])  # cut at 200 characters
    assert describe(error, 1000, redactor) == "ValueError: " + "x" * 170 + "***"


def test_without_secrets_the_answer_is_as_it_came() -> None:
    redactor = Redactor(sent_secrets("http://127.0.0.1:9/hook", {}, None))
    assert redactor.body(b"upstream says no") == b"upstream says no"
    assert redactor.text("HTTP 500") == "HTTP 500"
