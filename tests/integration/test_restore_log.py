"""A restart with many subscriptions logs one summary of the restore (issue 36): counts
per outcome with the first few names at INFO, each subscription's own line at DEBUG (304
subscriptions made 304 INFO lines)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from actors.delivery.control.restore import restore_summary
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import Admin, Receiver, make_runtime, subscription

pytestmark = pytest.mark.integration
LOGGER = "actors.delivery.control"  # the control actor and its restore


def test_the_summary_counts_each_outcome_and_names_the_first_few() -> None:
    line = restore_summary({"started": ["e", "d", "c", "b", "a"], "paused": ["p"],
                            "failed to start": ["x", "y"]})
    assert line == ("restore: 8 subscription(s): 5 started (a, b, c and 2 more); "
                    "2 failed to start (x, y); 1 paused (p)")


async def test_a_restart_logs_one_info_line_for_the_restore_and_the_names_at_debug(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int], caplog: pytest.LogCaptureFixture) -> None:
    topic = await topic_factory(partitions=1)
    receiver = await Receiver().start()
    names = [f"r{n}" for n in range(5)]
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            admin = Admin(runtime)
            for name in names:
                await admin.subscribe(subscription(name, [{"name": topic}], receiver.url,
                                                   fast_group=fast_group_kwargs))
            status, _ = await admin.call("POST", "/broker/subscription/r4/g-r4/pause")
            assert status == 200
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger=LOGGER):
            async with make_runtime(kafka_bootstrap, tmp_path):
                pass
    finally:
        await receiver.stop()
    mine = [r for r in caplog.records if r.name.startswith(LOGGER)]
    info = [r.getMessage() for r in mine if r.levelno == logging.INFO]
    restore = [line for line in info if line.startswith("restore: ")]
    assert restore == ["restore: 5 subscription(s): 4 started (r0_g-r0, r1_g-r1, r2_g-r2 "
                       "and 1 more); 1 paused (r4_g-r4)"]
    assert not [line for line in info if " restored" in line]
    debug = {r.getMessage() for r in mine if r.levelno == logging.DEBUG}
    assert {f"subscription {n}_g-{n} restored" for n in names[:4]} <= debug
    assert "subscription r4_g-r4 restored paused" in debug


async def test_the_member_names_a_few_missing_topics_at_info_and_all_at_debug(
        kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """#36: one line named every missing topic (10,000 at the default `max_topics`)."""
    from tests.waits import until

    missing = [{"name": f"absent-{n}"} for n in range(8)]
    with caplog.at_level(logging.DEBUG, logger="actors.delivery.path.member"):
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            await Admin(runtime).subscribe(subscription("m", missing, "http://127.0.0.1:9/"))

            def waiting() -> list[str]:
                return [r.getMessage() for r in caplog.records
                        if "that do not exist yet" in r.getMessage()]

            lines = await until(waiting, timeout_s=15, what="the member's waiting line")
    assert lines == ["/hookstream/groups/instance:Kafka: waiting for 8 topics that do not "
                     "exist yet: absent-0, absent-1, absent-2, absent-3, absent-4 and 3 more"]
    assert any(r.levelno == logging.DEBUG and "absent-7" in r.getMessage()
               for r in caplog.records)
