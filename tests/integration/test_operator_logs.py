"""What an operator reads in the log (issue 27): a subscription that waits for a topic
that does not exist yet says so once, aiokafka's repeated "not found in cluster metadata"
ERROR does not reach the log, and the start ends with where to look and what to try."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from runtime.kafka import create_topics
from runtime.kafka.topic_creation import QUIET
from tests import waits
from tests.integration.delivery_harness import (
    Admin,
    Receiver,
    make_runtime,
    produce,
    subscription,
)

pytestmark = pytest.mark.integration


async def until(predicate: Callable[[], bool], timeout_s: float = 30) -> None:
    # polled: the aiokafka metadata task has no event to wait on
    await waits.until(predicate, timeout_s=timeout_s)


async def test_a_missing_topic_is_announced_once_and_aiokafka_errors_stay_out(
        kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = f"later-{uuid.uuid4().hex[:8]}"
    receiver = await Receiver().start()
    try:
        with caplog.at_level(logging.INFO):
            async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
                await Admin(runtime).subscribe(subscription(
                    "late", [{"name": topic}], receiver.url, fast_group=fast_group_kwargs))
                await until(lambda: any(  # the member looked, and said so
                    "waiting for" in r.getMessage() and topic in r.getMessage()
                    for r in caplog.records))
                await create_topics(kafka_bootstrap, {topic: 1})
                await produce(kafka_bootstrap, topic, 1)
                await receiver.wait_for(lambda: len(receiver.delivered()) == 1)
                ready = runtime.next_steps()
    finally:
        await receiver.stop()
    about_topic = [r for r in caplog.records if topic in r.getMessage()]
    assert [r.levelno for r in about_topic if "waiting for" in r.getMessage()] \
        in ([logging.INFO], [logging.WARNING])
    assert not [r for r in about_topic if r.levelno >= logging.ERROR]
    assert not [r for r in caplog.records if "not found in cluster metadata" in r.getMessage()]
    assert ready in [r.getMessage() for r in caplog.records]
    assert ready.startswith(f"ready: status page {runtime.admin.url}/ ; next: subscribe")


def test_a_producer_naming_a_missing_topic_still_gets_aiokafka_s_error() -> None:
    """The filter drops the line only for topics a consumer of ours watches."""
    record = logging.LogRecord("aiokafka.cluster", logging.ERROR, __file__, 1,
                               "Topic %s not found in cluster metadata", ("nobody-asked",),
                               None)
    assert QUIET.filter(record)
