"""`webhook-id` never repeats for a different record (issue 27): the demo's restart (an
embedded broker keeps nothing: every topic starts again at offset 0, while the
subscriptions in persist/ are restored) gives the new record at offset 0 another id than
the old one, and the restart says what it kept and what it did not."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from runtime.kafka import create_topics
from tests.integration.delivery_harness import (
    Admin,
    Receiver,
    make_runtime,
    produce,
    subscription,
)

pytestmark = pytest.mark.integration


async def test_after_a_restart_with_a_new_embedded_broker_offset_0_gets_a_new_webhook_id(
        tmp_path: Path, unused_port: int, caplog: pytest.LogCaptureFixture,
        fast_group_kwargs: dict[str, int]) -> None:
    bootstrap = f"127.0.0.1:{unused_port}"
    brokers = [{"name": "Kafka", "bootstrap_servers": "embedded", "embedded_port": unused_port}]
    receiver = await Receiver().start()
    sub = subscription("ids", [{"name": "orders"}], receiver.url, fast_group=fast_group_kwargs)
    try:
        for run in range(2):
            with caplog.at_level(logging.INFO):
                async with make_runtime(bootstrap, tmp_path, brokers=brokers) as runtime:
                    if run == 0:
                        await Admin(runtime).subscribe(sub)
                    await create_topics(bootstrap, {"orders": 1})
                    await produce(bootstrap, "orders", 1)
                    await receiver.wait_for(lambda n=run + 1: len(receiver.ok) == n)
    finally:
        await receiver.stop()
    first, second = receiver.ok
    assert first.offset == second.offset == 0
    assert first.headers["webhook-id"] != second.headers["webhook-id"]
    notes = [r.getMessage() for r in caplog.records if r.getMessage().startswith("restored ")]
    assert len(notes) == 1
    assert notes[0].startswith(f"restored 1 subscription(s) from {tmp_path / 'persist'}; "
                               "the embedded broker 'Kafka' started empty")
