"""`QOH-Action` on a response decides a record's fate, whatever the status (a real
loopback receiver, a real egress actor)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from actors.delivery.document.settings import egress_settings
from actors.delivery.egress.http import EgressActor
from actors.shared.messages import Delivered, Failed
from runtime.kernel.supervisor import ChildSpec
from tests.integration.test_egress import Harness, harness, make_consumer, make_record

pytestmark = pytest.mark.integration

__all__ = ["harness"]


@pytest.fixture
async def receiver() -> AsyncIterator[str]:
    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=int(request.match_info["status"]),
                            headers={"QOH-Action": request.query["action"]})

    app = web.Application()
    app.router.add_post("/{status}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


async def _answer(harness: Harness, url: str) -> Delivered | Failed:
    actor = EgressActor("egress", egress_settings(make_consumer(url)), harness.metrics,
                        transport=harness.transport)
    await harness.system.spawn(ChildSpec("egress", lambda: actor, restart="temporary"))
    [outcome] = await harness.push(actor, make_record())
    return outcome


async def test_skip_finishes_the_record_even_on_a_500(harness: Harness, receiver: str) -> None:
    outcome = await _answer(harness, f"{receiver}/500?action=skip")
    assert isinstance(outcome, Delivered)
    [event] = [e for e in harness.events if e.type == "delivered"]
    assert event.reason is not None and "skip" in event.reason


async def test_dead_letter_gives_up_now_even_on_a_200(harness: Harness, receiver: str) -> None:
    outcome = await _answer(harness, f"{receiver}/200?action=dead-letter")
    assert isinstance(outcome, Failed) and outcome.failure.give_up


async def test_retry_after_sets_the_delay(harness: Harness, receiver: str) -> None:
    outcome = await _answer(harness, f"{receiver}/503?action=retry-after%3D1500")
    assert isinstance(outcome, Failed) and outcome.failure.retry_after_ms == 1500
    assert not outcome.failure.give_up


async def test_an_unknown_action_leaves_the_status_to_decide(harness: Harness,
                                                             receiver: str) -> None:
    failed = await _answer(harness, f"{receiver}/500?action=explode")
    assert isinstance(failed, Failed)
    assert not failed.failure.give_up and failed.failure.error == "HTTP 500"
