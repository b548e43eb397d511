"""The instance member's fetcher: a task of the member's that only reads Kafka and tells
the member what it fetched (aiokafka's own fetcher/consumer split, issue 32 item 10).

It asks the member `Fetched` after every fetch and waits for the answer, the next
`FetchPlan`: the member's mailbox sets the pace (what it has not handled is not fetched
again), and every decision (pause, resume, seek, subscribe) is the member's.
"""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, TopicPartition

from actors.delivery.path.member.messages import Fetched, FetchPlan
from actors.shared.group_consumer import records_of
from actors.shared.messages import Record
from runtime.kafka import compat
from runtime.kernel import Clock, Ref

IDLE_MS = 100
"""How long the fetcher waits between turns while the member is subscribed to nothing."""


async def fetch_forever(kafka: AIOKafkaConsumer, member: Ref, clock: Clock) -> None:
    plan: FetchPlan = await member.ask(Fetched({}, {}))
    while True:
        if not plan.listening:
            await clock.sleep_ms(IDLE_MS)
            plan = await member.ask(Fetched({}, {}))
            continue
        fetched = await kafka.getmany(timeout_ms=plan.timeout_ms,
                                      max_records=plan.max_records)
        now = clock.monotonic_ms()
        batches: dict[TopicPartition, list[Record]] = {
            tp: records_of(messages, now) for tp, messages in fetched.items() if messages}
        highwaters = {tp: compat.highwater(kafka, tp) for tp in batches}
        plan = await member.ask(Fetched(batches, highwaters))
