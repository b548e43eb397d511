"""The egress actor against a real loopback server: the destination guard refuses at
connect time, and framing headers from a subscription never reach the wire."""

from __future__ import annotations

import pytest

from actors.delivery.document.settings import egress_settings
from actors.delivery.egress.guard import DestinationGuard
from actors.delivery.egress.http import EgressActor
from actors.shared.messages import Delivered, Failed
from runtime.kernel.supervisor import ChildSpec
from tests.integration.test_egress import Harness, harness, make_consumer, make_record

pytestmark = pytest.mark.integration

__all__ = ["harness"]  # the fixture, imported for pytest


async def _egress(harness: Harness, guard: DestinationGuard | None = None,
                  **method: object) -> EgressActor:
    consumer = make_consumer(harness.endpoint.url + "/hook", **method)
    actor = EgressActor("egress", egress_settings(consumer), harness.metrics, guard,
                        transport=harness.transport)
    await harness.system.spawn(ChildSpec("egress", lambda: actor, restart="temporary"))
    return actor


async def test_a_denied_destination_fails_at_connect_time_and_nothing_is_sent(
        harness: Harness) -> None:
    egress = await _egress(harness, DestinationGuard(deny=["127.0.0.0/8"]))
    [outcome] = await harness.push(egress, make_record())
    assert isinstance(outcome, Failed)
    assert "destination guard" in outcome.failure.error and "127.0.0.1" in outcome.failure.error
    assert harness.endpoint.seen == []


async def test_the_default_guard_lets_loopback_receivers_through(harness: Harness) -> None:
    egress = await _egress(harness)
    [outcome] = await harness.push(egress, make_record())
    assert isinstance(outcome, Delivered)


async def test_framing_and_hop_by_hop_headers_from_a_subscription_are_not_sent(
        harness: Harness) -> None:
    egress = await _egress(harness, additionalHeaders={
        "Content-Length": "0", "Transfer-Encoding": "chunked", "Host": "evil.example",
        "Connection": "close", "Proxy-Authorization": "x", "X-Kept": "yes"})
    [outcome] = await harness.push(egress, make_record(value=b"the payload"))
    assert isinstance(outcome, Delivered)
    [seen] = harness.endpoint.seen
    assert seen.body == b"the payload"
    assert seen.headers["Content-Length"] == str(len(b"the payload"))
    assert "Transfer-Encoding" not in seen.headers and "Proxy-Authorization" not in seen.headers
    assert seen.headers["Host"] != "evil.example" and seen.headers["X-Kept"] == "yes"
