"""Idle group consumers fetch less often (actors/shared/idle_pace.py), and a paced one
still delivers every record, also after its member was killed (real broker, receiver)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.kafka import compat
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import (
    Admin,
    Receiver,
    committed,
    make_runtime,
    produce,
    subscription,
)
from tests.integration.test_shared_group import members

pytestmark = pytest.mark.integration
PACED_MS = 1_200


async def test_an_idle_member_is_paced_and_still_delivers_everything_after_a_kill(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    topic = await topic_factory(partitions=2)
    receiver = await Receiver().start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            status, _ = await Admin(runtime).call(
                "POST", "/broker/subscription",
                subscription("quiet", [{"name": topic}], receiver.url,
                             fast_group=fast_group_kwargs))
            assert status == 200
            [member] = members(runtime)
            # paced with one member (the runtime's own pace: no other runtime shares it)
            monkeypatch.setattr(member.wiring.pace, "per_consumer_ms", PACED_MS)
            configured = member.configured_wait_ms
            assert configured < PACED_MS

            def waits() -> int | None:
                return compat.fetch_wait_ms(member.kafka) if member.kafka else None

            await receiver.wait_for(lambda: waits() is not None and waits() >= PACED_MS,
                                    timeout_s=30)  # assigned, nothing to read: idle
            await produce(kafka_bootstrap, topic, 100, partitions=2)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 100, timeout_s=30)
            member.kill("chaos test")
            await produce(kafka_bootstrap, topic, 100, partitions=2, start=100)
            await receiver.wait_for(lambda: len(receiver.delivered()) >= 200, timeout_s=60)
            [replacement] = members(runtime)
            assert replacement is not member
    finally:
        await receiver.stop()
    assert len({(p, o) for _, _, p, o in receiver.delivered()}) == 200
    assert await committed(kafka_bootstrap, "g-quiet", topic, 2) == {0: 100, 1: 100}
