"""The CLI process: SIGTERM mid-stream exits 0 within its shutdown deadline; a restart
restores subscriptions from disk and every record is delivered."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.kafka.broker import free_port
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import Receiver, committed, produce, subscription
from tests.integration.processes import (
    admin,
    kill,
    paced,
    process_log,
    start_process,
    stopped_gracefully,
    terminate,
    write_config,
)

pytestmark = pytest.mark.integration


async def test_sigterm_mid_stream_then_restart_delivers_everything(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=2)
    await produce(kafka_bootstrap, topic, 400, partitions=2)

    receiver = await Receiver(paced(0.003)).start()
    port = free_port()
    config = write_config(tmp_path, kafka_bootstrap, port)
    process = await start_process(config, port)
    try:
        sub = subscription("proc", [{"name": topic, "config": {"concurrencyFactor": 4}}],
                           receiver.url, fast_group=fast_group_kwargs)
        status, reply = await admin(port, "POST", "/broker/subscription", sub)
        assert status == 200, reply
        await receiver.wait_for(lambda: len(receiver.delivered()) >= 100)
        assert await terminate(process) == 0
        log = process_log(config).read_text()
        assert stopped_gracefully(log), log[-4000:]
        await produce(kafka_bootstrap, topic, 200, partitions=2, start=400)
        process = await start_process(config, port)
        status, listed = await admin(port, "GET", "/broker/subscription")
        assert status == 200 and [s["id"] for s in listed["data"]] == ["proc"]
        await receiver.wait_for(lambda: len(receiver.delivered()) == 600, timeout_s=60)
        assert await terminate(process) == 0
    finally:
        await kill(process)
        await receiver.stop()
    assert await committed(kafka_bootstrap, "g-proc", topic, 2) == {0: 300, 1: 300}
