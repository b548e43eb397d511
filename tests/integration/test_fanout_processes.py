"""Cursors across process deaths (issue 24): a kill -9 loses nothing and duplicates only
what was not committed; a SIGTERM lets every cursor finish and commit first."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from runtime.kafka.broker import free_port
from tests import waits
from tests.conftest import TopicFactory
from tests.integration import processes
from tests.integration.delivery_harness import Receiver, committed, produce, subscription
from tests.integration.processes import admin, paced, start_process, terminate, write_config

pytestmark = pytest.mark.integration
IDS = [f"k{n}" for n in range(5)]


slow = paced(0.002)


async def subscribe(port: int, topic: str, url: str) -> None:
    for sub_id in IDS:
        status, reply = await admin(port, "POST", "/broker/subscription", subscription(
            sub_id, [{"name": topic, "config": {"concurrencyFactor": 10}}], url))
        assert status == 200, reply


def pushes_of(receiver: Receiver) -> Counter[tuple[str, int, int]]:
    return Counter((p.consumer, p.partition, p.offset) for p in receiver.ok)


async def until_committed(bootstrap: str, topic: str, timeout_s: float = 60) -> None:
    """Until every subscriber's group committed the end of each partition (500)."""
    async def reached() -> bool:
        positions = [await committed(bootstrap, f"g-{i}", topic, 4) for i in IDS]
        return all(p == {n: 500 for n in range(4)} for p in positions)

    await waits.until(reached, timeout_s=timeout_s, poll_s=0.5,
                      what="every group committed the end")


async def stop_mid_stream_then_restart(
        kafka_bootstrap: str, topic: str, tmp_path: Path, kill: bool,
) -> tuple[Receiver, dict[str, dict[int, int]]]:
    """Five cursors on a 4-partition backlog of 2,000; mid-stream the process is killed
    (SIGKILL) or stopped (SIGTERM), then restarted until every subscriber has every
    record. Returns the receiver and each group's commits read just before the stop."""
    await produce(kafka_bootstrap, topic, 2000, partitions=4)
    receiver = await Receiver(slow).start()
    port = free_port()
    config = write_config(tmp_path, kafka_bootstrap, port)
    process = await start_process(config, port)
    try:
        await subscribe(port, topic, receiver.url)
        await receiver.wait_for(lambda: len(receiver.delivered()) >= 3000, timeout_s=60)
        before = {i: await committed(kafka_bootstrap, f"g-{i}", topic, 4) for i in IDS}
        if kill:
            await processes.kill(process)
        else:
            assert await terminate(process) == 0
        process = await start_process(config, port)
        await receiver.wait_for(lambda: len(receiver.delivered()) == 10_000, timeout_s=90)
        # every record reached the receiver, some from before the stop: the restarted
        # process may still be delivering again what was not committed; its stop now
        # would commit only what it finished
        await until_committed(kafka_bootstrap, topic)
        assert await terminate(process) == 0
    finally:
        await processes.kill(process)
        await receiver.stop()
    return receiver, before


async def test_kill_9_mid_stream_loses_nothing_and_duplicates_only_uncommitted_records(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path) -> None:
    topic = await topic_factory(partitions=4)
    receiver, before = await stop_mid_stream_then_restart(kafka_bootstrap, topic, tmp_path,
                                                          kill=True)
    for sub_id in IDS:
        assert await committed(kafka_bootstrap, f"g-{sub_id}", topic, 4) == {
            p: 500 for p in range(4)}
    for (consumer, partition, offset), count in pushes_of(receiver).items():
        if count > 1:  # delivered again: it was not committed before the kill
            sub_id = consumer.split("_", 1)[0]
            assert offset >= before[sub_id][partition], (consumer, partition, offset)


async def test_sigterm_with_several_cursors_mid_stream_then_restart_duplicates_nothing(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path) -> None:
    topic = await topic_factory(partitions=4)
    receiver, _ = await stop_mid_stream_then_restart(kafka_bootstrap, topic, tmp_path,
                                                     kill=False)
    duplicates = [k for k, n in pushes_of(receiver).items() if n > 1]
    assert duplicates == []
