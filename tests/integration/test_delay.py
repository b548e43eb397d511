"""The delay queue against a real broker: forwards on time and never early, cascades,
dead letters, bounded memory, restarts and a killed instance lose nothing, and the
exactly-once path commits forwards and offsets in one transaction."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest
from aiokafka import ConsumerRecord, TopicPartition

from actors.delay.book import DELAY_DUE_MS, DELAY_ERROR, DELAY_TARGET
from actors.delay.producer import DelayProducer
from actors.delay.service import DelayService
from runtime.errors import UsageError
from runtime.host.app import Runtime
from runtime.host.config import Config, parse_config
from runtime.kafka import create_topics, make_consumer, make_producer
from tests.conftest import TopicFactory
from tests.waits import until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

REPO = Path(__file__).resolve().parents[2]
POLL_S = 0.02


# -- helpers -------------------------------------------------------------------------------


def _ids() -> str:
    return uuid.uuid4().hex[:10]


def _config(bootstrap: str, levels: list[dict[str, Any]], *, partitions: int = 1,
            journal_dir: Path | None = None, **delay: Any) -> Config:
    suffix = _ids()
    return parse_config({
        "brokers": [{"name": "kafka", "bootstrap_servers": bootstrap}],
        "admin": {"listen": "127.0.0.1:0"},
        "journal": {"enabled": journal_dir is not None, "dir": str(journal_dir or "journal"),
                    "flush_interval_ms": 20},
        "delay": {"group_id": f"delay-{suffix}", "partitions": partitions,
                  "dead_letter_topic": f"dlt-{suffix}", "levels": levels, **delay},
    })


def _levels(*delays: int, exactly_once: bool = False) -> list[dict[str, Any]]:
    suffix = _ids()
    return [{"name": f"{d}ms", "delay_ms": d, "topics": [f"delay-{d}-{suffix}"],
             "exactly_once": exactly_once} for d in delays]


def _runtime(config: Config, group: dict[str, int], drain_ms: int = 2000) -> Runtime:
    return Runtime(config, services=[
        lambda: DelayService(drain_ms=drain_ms, consumer_settings=group)])  # type: ignore[list-item]


def _delay(runtime: Runtime) -> DelayService:
    service = runtime.delay
    assert isinstance(service, DelayService)
    return service


async def _until(condition: Callable[[], bool], timeout_s: float = 15) -> None:
    """Poll a condition (bounded): the state lives in actors, which have no events."""
    await until(condition, timeout_s=timeout_s, poll_s=POLL_S)


def _metric(runtime: Runtime, name: str, **labels: str) -> float:
    family = runtime.metrics.gauge(name, "") if name.endswith("waiting") else \
        runtime.metrics.counter(name, "")
    return sum(child.value for key, child in family.children.items()
               if set(labels.items()) <= set(key))


async def _read(bootstrap: str, topic: str, count: int, timeout_s: float = 15,
                **kwargs: Any) -> list[ConsumerRecord[bytes, bytes]]:
    """`count` records of `topic` (all partitions), from the beginning, read_committed."""
    reader = make_consumer(bootstrap, topic, auto_offset_reset="earliest",
                           isolation_level="read_committed", **kwargs)
    await reader.start()
    out: list[ConsumerRecord[bytes, bytes]] = []
    try:
        async with asyncio.timeout(timeout_s):
            while len(out) < count:
                batches = await reader.getmany(timeout_ms=200)
                out += [r for records in batches.values() for r in records]
    finally:
        await reader.stop()
    return out


def _due_of(record: ConsumerRecord[bytes, bytes]) -> int:
    return int(json.loads(record.value)["due"])


def _assert_never_early(records: Iterable[ConsumerRecord[bytes, bytes]]) -> None:
    # the forward's timestamp is set by our producer when it sends, after the due check
    early = [(r.value, r.timestamp - _due_of(r)) for r in records if r.timestamp < _due_of(r)]
    assert not early, f"forwarded early: {early}"


def _payload(i: int, due_ms: int) -> bytes:
    return json.dumps({"i": i, "due": due_ms}).encode()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _levels_of(config: Config) -> list[Any]:
    return list(config.delay.levels)


# -- forwarding ----------------------------------------------------------------------------


async def test_records_are_forwarded_when_due_never_early_with_lateness_recorded(
    kafka_bootstrap: str, topic_factory: TopicFactory, fast_group_kwargs: dict[str, int],
    tmp_path: Path,
) -> None:
    target = await topic_factory(prefix="target")
    config = _config(kafka_bootstrap, _levels(300, 1000), partitions=2,
                     journal_dir=tmp_path / "journal")
    delays = [0, 300, 700, 1200, 1800]
    async with _runtime(config, fast_group_kwargs) as runtime:
        await _until(lambda: len(_delay(runtime).assignment()) == 4)
        for i in range(25):
            delay = delays[i % len(delays)]
            await runtime.delay.send(target, _payload(i, _now_ms() + delay), key=b"k%d" % i,
                                     headers=[("trace", b"t%d" % i)], delay_ms=delay)
        records = await _read(kafka_bootstrap, target, 25)
        await _until(lambda: _metric(runtime, "hookstream_delay_forwarded_total") == 25)
        lateness = runtime.metrics.histogram("hookstream_delay_lateness_ms", "")
        assert sum(child.count for child in lateness.children.values()) == 25

    assert sorted(json.loads(r.value)["i"] for r in records) == list(range(25))
    _assert_never_early(records)
    for r in records:
        i = json.loads(r.value)["i"]
        assert r.key == b"k%d" % i
        assert list(r.headers) == [("trace", b"t%d" % i)]  # routing headers dropped
    events = _journal(tmp_path / "journal", "delay_forwarded")
    assert len(events) == 25
    assert all(e["lateness_ms"] >= 0 and e["reason"] == target for e in events)
    assert {e["topic"] for e in events} == {t for lv in config.delay.levels for t in lv.topics}


def _journal(directory: Path, kind: str) -> list[dict[str, Any]]:
    lines = [line for seg in sorted(directory.glob("*.jsonl"))
             for line in seg.read_bytes().splitlines() if line]
    events: list[dict[str, Any]] = [msgspec.json.decode(line) for line in lines]
    return [e for e in events if e["type"] == kind]


async def test_due_time_beyond_the_level_cascades_to_the_fitting_level(
    kafka_bootstrap: str, topic_factory: TopicFactory, fast_group_kwargs: dict[str, int],
) -> None:
    target = await topic_factory(prefix="target")
    config = _config(kafka_bootstrap, _levels(300, 1000))
    short_topic = config.delay.levels[0].topics[0]
    async with _runtime(config, fast_group_kwargs) as runtime:
        await _until(lambda: len(_delay(runtime).assignment()) == 2)
        producer = make_producer(kafka_bootstrap, acks="all")
        await producer.start()
        try:
            far, near = _now_ms() + 1600, _now_ms()
            # raw records, as any Kafka client writes them: one due far beyond the 300 ms
            # level, one without delay-due-ms (record timestamp + 300 ms)
            await producer.send_and_wait(short_topic, _payload(0, far), headers=[
                (DELAY_TARGET, target.encode()), (DELAY_DUE_MS, str(far).encode())])
            await producer.send_and_wait(short_topic, _payload(1, near + 300), timestamp_ms=near,
                                         headers=[(DELAY_TARGET, target.encode())])
        finally:
            await producer.stop()
        records = await _read(kafka_bootstrap, target, 2)
        assert _metric(runtime, "hookstream_delay_cascaded_total", level="300ms") == 1
        assert _metric(runtime, "hookstream_delay_forwarded_total", level="1000ms") == 1
        assert _metric(runtime, "hookstream_delay_forwarded_total", level="300ms") == 1

    _assert_never_early(records)
    assert [json.loads(r.value)["i"] for r in records] == [1, 0]


async def test_bad_headers_go_to_the_dead_letter_topic_and_the_partition_keeps_going(
    kafka_bootstrap: str, topic_factory: TopicFactory, fast_group_kwargs: dict[str, int],
) -> None:
    target = await topic_factory(prefix="target")
    config = _config(kafka_bootstrap, _levels(300))
    level_topic = config.delay.levels[0].topics[0]
    async with _runtime(config, fast_group_kwargs) as runtime:
        await _until(lambda: len(_delay(runtime).assignment()) == 1)
        producer = make_producer(kafka_bootstrap, acks="all")
        await producer.start()
        try:
            await producer.send_and_wait(level_topic, b"no target", key=b"a")
            await producer.send_and_wait(level_topic, b"bad due", headers=[
                (DELAY_TARGET, target.encode()), (DELAY_DUE_MS, b"tomorrow")])
            await producer.send_and_wait(level_topic, _payload(2, _now_ms() + 300),
                                         headers=[(DELAY_TARGET, target.encode())])
        finally:
            await producer.stop()
        (good,) = await _read(kafka_bootstrap, target, 1)
        dead = await _read(kafka_bootstrap, config.delay.dead_letter_topic, 2)

    assert json.loads(good.value)["i"] == 2
    reasons = {r.value: dict(r.headers)[DELAY_ERROR] for r in dead}
    assert reasons == {b"no target": b"missing delay-target header",
                       b"bad due": b"invalid delay-due-ms header (expected epoch ms, ASCII "
                                   b"decimal)"}
    assert dict(dead[0].headers)["delay-source-topic"] == level_topic.encode()


async def test_a_full_partition_pauses_and_still_forwards_everything(
    kafka_bootstrap: str, topic_factory: TopicFactory, fast_group_kwargs: dict[str, int],
) -> None:
    target = await topic_factory(prefix="target")
    config = _config(kafka_bootstrap, _levels(300), max_waiting_records=4)
    peak = 0
    async with _runtime(config, fast_group_kwargs) as runtime:
        await _until(lambda: len(_delay(runtime).assignment()) == 1)
        async with DelayProducer(kafka_bootstrap, _levels_of(config)) as delay:
            for i in range(30):
                await delay.send(target, _payload(i, _now_ms() + 400), delay_ms=400)

        def watch() -> bool:
            nonlocal peak
            peak = max(peak, int(_metric(runtime, "hookstream_delay_waiting")))
            return _metric(runtime, "hookstream_delay_forwarded_total") == 30

        await _until(watch)
        assert _metric(runtime, "hookstream_delay_pauses_total") >= 1
    records = await _read(kafka_bootstrap, target, 30)
    _assert_never_early(records)
    assert len({r.value for r in records}) == 30
    assert peak < 2 * 4


# -- restarts and failures -----------------------------------------------------------------


async def test_graceful_stop_forwards_what_falls_due_and_a_restart_loses_nothing(
    kafka_bootstrap: str, topic_factory: TopicFactory, fast_group_kwargs: dict[str, int],
) -> None:
    target = await topic_factory(prefix="target")
    config = _config(kafka_bootstrap, _levels(300))
    first = _runtime(config, fast_group_kwargs, drain_ms=1500)
    async with first:
        await _until(lambda: len(_delay(first).assignment()) == 1)
        # the standalone producer: no runtime needed to enqueue
        async with DelayProducer(kafka_bootstrap, _levels_of(config)) as delay:
            now = _now_ms()
            for i in range(10):  # due within the drain deadline: forwarded while stopping
                await delay.send(target, _payload(i, now + 600), due_ms=now + 600)
            for i in range(10, 20):  # due after it: left for the next instance
                await delay.send(target, _payload(i, now + 2500), due_ms=now + 2500)
        await _until(lambda: _metric(first, "hookstream_delay_waiting") == 20)
    assert _metric(first, "hookstream_delay_forwarded_total") == 10

    second = _runtime(config, fast_group_kwargs)
    async with second:
        records = await _read(kafka_bootstrap, target, 20)
        await _until(lambda: _metric(second, "hookstream_delay_waiting") == 0)
        forwarded_again = _metric(second, "hookstream_delay_forwarded_total")

    _assert_never_early(records)
    assert sorted(json.loads(r.value)["i"] for r in records) == list(range(20))
    # the stop committed past the ten it forwarded: the next instance forwards the rest only
    assert forwarded_again == 10


_INSTANCE = """
import asyncio, json, sys
sys.path.insert(0, {repo!r})
from actors.delay.service import DelayService
from runtime.host.app import Runtime
from runtime.host.config import parse_config

async def main() -> None:
    config = parse_config(json.loads(sys.argv[1]))
    group = json.loads(sys.argv[2])
    runtime = Runtime(config, services=[lambda: DelayService(consumer_settings=group)])
    await runtime.start()
    print("started", flush=True)
    while True:
        owned = sorted(runtime.delay.assignment())
        print("owned", json.dumps(owned), flush=True)
        await asyncio.sleep(0.1)

asyncio.run(main())
"""


async def test_a_killed_instance_hands_its_partitions_over_and_nothing_is_lost(
    kafka_bootstrap: str, topic_factory: TopicFactory, fast_group_kwargs: dict[str, int],
) -> None:
    target = await topic_factory(prefix="target")
    levels = _levels(1000)
    raw = {
        "brokers": [{"name": "kafka", "bootstrap_servers": kafka_bootstrap}],
        "admin": {"listen": "127.0.0.1:0"}, "journal": {"enabled": False},
        "delay": {"group_id": f"delay-{_ids()}", "partitions": 2,
                  "dead_letter_topic": f"dlt-{_ids()}", "levels": levels},
    }
    config = parse_config(raw)
    level_topic = levels[0]["topics"][0]
    await create_topics(kafka_bootstrap, {level_topic: 2})
    other = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _INSTANCE.format(repo=str(REPO)), json.dumps(raw),
        json.dumps(fast_group_kwargs), stdout=asyncio.subprocess.PIPE)
    try:
        async with _runtime(config, fast_group_kwargs) as runtime:
            service = _delay(runtime)
            await _until(lambda: len(service.assignment()) == 1, timeout_s=20)
            assert other.stdout is not None
            await _wait_owned(other.stdout, 1)
            async with DelayProducer(kafka_bootstrap, _levels_of(config)) as delay:
                sent = [await delay.send(target, _payload(i, _now_ms() + 1500),
                                         key=b"k%d" % i, delay_ms=1500) for i in range(20)]
            mine = sum(1 for md in sent if (level_topic, md.partition) in service.assignment())
            assert 0 < mine < 20, "the two instances share the partitions"
            await _until(lambda: _metric(runtime, "hookstream_delay_waiting") == mine)
            other.send_signal(signal.SIGKILL)  # no drain, no commit, no leave-group
            await other.wait()
            records = await _read(kafka_bootstrap, target, 20, timeout_s=25)
            assert len(service.assignment()) == 2
    finally:
        if other.returncode is None:
            other.kill()
            await other.wait()

    _assert_never_early(records)
    assert {json.loads(r.value)["i"] for r in records} == set(range(20))


async def _wait_owned(stdout: asyncio.StreamReader, count: int) -> None:
    async with asyncio.timeout(20):
        while True:
            line = (await stdout.readline()).decode()
            if not line:
                raise AssertionError("the other instance exited")
            if line.startswith("owned ") and len(json.loads(line[6:])) == count:
                return


# -- exactly-once ------------------------------------------------------------------------------


async def test_exactly_once_level_commits_forwards_and_offsets_together(
    kafka_bootstrap: str, topic_factory: TopicFactory, fast_group_kwargs: dict[str, int],
) -> None:
    target = await topic_factory(prefix="target")
    config = _config(kafka_bootstrap, _levels(300, exactly_once=True))
    level_topic = config.delay.levels[0].topics[0]
    async with _runtime(config, fast_group_kwargs) as runtime:
        await _until(lambda: len(_delay(runtime).assignment()) == 1)
        for i in range(12):
            delay = 300 + 50 * i
            await runtime.delay.send(target, _payload(i, _now_ms() + delay), delay_ms=delay)
        records = await _read(kafka_bootstrap, target, 12)
        await _until(lambda: _metric(runtime, "hookstream_delay_forwarded_total") == 12)

    _assert_never_early(records)
    assert sorted(json.loads(r.value)["i"] for r in records) == list(range(12))
    assert await _committed(kafka_bootstrap, config.delay.group_id,
                            TopicPartition(level_topic, 0), fast_group_kwargs) == 12


async def test_exactly_once_restart_never_forwards_a_record_twice(
    kafka_bootstrap: str, broker_is_embedded: bool, topic_factory: TopicFactory,
    fast_group_kwargs: dict[str, int],
) -> None:
    """Records fall due out of offset order: the committed position stops at the oldest
    one still waiting, and what was forwarded above it must not be forwarded again."""
    if broker_is_embedded:
        pytest.skip("needs a real Kafka (KAFKA_BOOTSTRAP): the embedded broker drops "
                    "offset commit metadata, where exactly-once levels keep what they "
                    "forwarded above the position (runtime/kafka/compat.py, quirk 5)")
    target = await topic_factory(prefix="target")
    config = _config(kafka_bootstrap, _levels(300, exactly_once=True))
    async with _runtime(config, fast_group_kwargs, drain_ms=200) as runtime:
        await _until(lambda: len(_delay(runtime).assignment()) == 1)
        later = _now_ms() + 3000
        await runtime.delay.send(target, _payload(0, later), due_ms=later)  # offset 0
        for i in range(1, 4):
            await runtime.delay.send(target, _payload(i, _now_ms() + 300), delay_ms=300)
        await _read(kafka_bootstrap, target, 3)  # 1..3 forwarded, 0 still waits
    async with _runtime(config, fast_group_kwargs) as runtime:
        await _until(lambda: len(_delay(runtime).assignment()) == 1)
        # record 0 falls due last: once nothing waits, any duplicate of 1..3 went out too
        await _until(lambda: _metric(runtime, "hookstream_delay_forwarded_total") >= 1
                     and _metric(runtime, "hookstream_delay_waiting") == 0)
    records = await _read(kafka_bootstrap, target, 4)
    assert sorted(json.loads(r.value)["i"] for r in records) == [0, 1, 2, 3]
    _assert_never_early(records)


async def _committed(bootstrap: str, group: str, tp: TopicPartition,
                     group_kwargs: dict[str, int]) -> int | None:
    member = make_consumer(bootstrap, group_id=group, **group_kwargs)
    await member.start()
    try:
        committed: int | None = await member.committed(tp)
        return committed
    finally:
        await member.stop()


async def test_a_fenced_zombie_transaction_never_reaches_read_committed_readers(
    kafka_bootstrap: str, broker_is_embedded: bool, topic_factory: TopicFactory,
    fast_group_kwargs: dict[str, int],
) -> None:
    if broker_is_embedded:
        pytest.skip("needs a real Kafka (KAFKA_BOOTSTRAP=host:port): the embedded broker "
                    "does not hide aborted transactions from read_committed readers")
    target = await topic_factory(prefix="target")
    config = _config(kafka_bootstrap, _levels(300, exactly_once=True))
    level_topic = config.delay.levels[0].topics[0]
    await create_topics(kafka_bootstrap, {level_topic: 1})
    # A previous owner of the partition that forwarded inside a transaction, then hung.
    zombie = make_producer(kafka_bootstrap, transactional_id=f"{config.delay.group_id}-"
                           f"{level_topic}-0", enable_idempotence=True, acks="all")
    await zombie.start()
    try:
        await zombie.begin_transaction()
        await zombie.send_and_wait(target, b"zombie")
        async with _runtime(config, fast_group_kwargs) as runtime:
            await _until(lambda: len(_delay(runtime).assignment()) == 1)
            await runtime.delay.send(target, _payload(0, _now_ms() + 300), delay_ms=300)
            records = await _read(kafka_bootstrap, target, 1)
            with pytest.raises(TimeoutError):
                records += await _read(kafka_bootstrap, target, 2, timeout_s=2)
    finally:
        await zombie.stop()
    assert [json.loads(r.value)["i"] for r in records] == [0]


# -- without levels --------------------------------------------------------------------------


async def test_without_levels_the_service_starts_nothing_and_send_says_what_to_configure(
) -> None:
    config = parse_config({"brokers": [{"name": "kafka", "bootstrap_servers": "127.0.0.1:9"}],
                           "admin": {"listen": "127.0.0.1:0"}, "journal": {"enabled": False}})
    async with Runtime(config, services=[DelayService]) as runtime:
        assert runtime.system.root.children() == ["probe", "sampler"]  # the host's only
        with pytest.raises(UsageError, match=r"\[\[delay.levels\]\]"):
            await runtime.delay.send("orders", b"v", delay_ms=10)


async def _levels_api(runtime: Runtime) -> dict[str, dict[str, Any]]:
    async with aiohttp.ClientSession() as session, session.get(
            runtime.admin.url + "/delay/levels") as response:
        assert response.status == 200
        return {level["name"]: level for level in (await response.json())["data"]}


async def test_the_levels_endpoint_shows_what_waits_and_what_was_forwarded(
    kafka_bootstrap: str, topic_factory: TopicFactory, fast_group_kwargs: dict[str, int],
) -> None:
    target = await topic_factory(prefix="target")
    config = _config(kafka_bootstrap, _levels(300, 3000))  # 2.5 s waits in the 300 ms level
    async with _runtime(config, fast_group_kwargs) as runtime:
        await _until(lambda: len(_delay(runtime).assignment()) == 2)
        for i in range(4):
            await runtime.delay.send(target, _payload(i, _now_ms() + 2500), delay_ms=2500)
        async def four_waiting() -> dict[str, Any] | None:
            levels = await _levels_api(runtime)
            return levels if levels["300ms"]["waiting"] == 4 else None

        waiting = await until(four_waiting, timeout_s=10,
                              what="4 records waiting in the 300ms level")
        assert (waiting["300ms"]["waiting"], waiting["300ms"]["forwarded"]) == (4, 0)
        assert waiting["3000ms"]["waiting"] == 0 and waiting["300ms"]["lateness_p99_ms"] is None
        await _read(kafka_bootstrap, target, 4)
        await _until(lambda: _metric(runtime, "hookstream_delay_forwarded_total") == 4)
        done = (await _levels_api(runtime))["300ms"]
    assert (done["waiting"], done["forwarded"], done["dead_lettered"]) == (0, 4, 0)
    assert done["delay_ms"] == 300 and done["topics"] == list(config.delay.levels[0].topics)
    assert isinstance(done["lateness_p99_ms"], int | float)
