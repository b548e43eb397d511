"""Catch-up reads: a cursor that fell behind its partition's shared buffer reads on its own
(issue 24) until it is back inside it.

The instance member (actors/delivery/path/member/) starts one `CatchUpRead` task per
cursor that `Fanout` found behind, a bounded number at a time (`CATCH_UP_READERS`; the
others wait their turn). Each has its own consumer without a group, assigned the one
partition and placed at the cursor's position. It hands batches to the cursor with `ask`
(the answer says whether the cursor's buffer is full; then it waits until the member says
the cursor resumed) and, after each batch, asks the member whether the shared buffer
reaches back to where it got: then the member feeds the cursor from there and the read
ends. The member owns every decision; the task only reads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiokafka import TopicPartition

from actors.shared.group_consumer import records_of
from actors.shared.messages import Batch
from runtime.kafka import make_consumer
from runtime.kernel import Ref

log = logging.getLogger(__name__)
CATCH_UP_READERS = 4
"""Catch-up reads at once per instance member: each holds a consumer and its buffers."""
CATCH_UP_POLL_MS = 200
CATCH_UP_BATCH = 500


@dataclass(slots=True)
class CatchUpRead:
    """One cursor's catch-up read; `resumed` is set by the member when the cursor has room
    again, `cancelled` when the cursor went away (revoked, unsubscribed, restarted)."""

    tp: TopicPartition
    key: str
    position: int
    cursor: Ref
    resumed: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: bool = False


Handover = Callable[[CatchUpRead, int], Awaitable[bool]]
"""Asks the member whether the read may end at this offset (the buffer reaches back)."""


async def catch_up(read: CatchUpRead, bootstrap: str, settings: dict[str, object],
                   handover: Handover, now_ms: Callable[[], int]) -> None:
    """Read `read.tp` from `read.position` for its cursor until `handover` says it is back
    inside the shared buffer (or the read was cancelled)."""
    consumer = make_consumer(bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", **settings)
    await consumer.start()
    try:
        consumer.assign([read.tp])
        consumer.seek(read.tp, read.position)
        log.info("%s: catch-up read from %d", read.key, read.position)
        next_offset = read.position
        while not read.cancelled:
            batches = await consumer.getmany(read.tp, timeout_ms=CATCH_UP_POLL_MS,
                                             max_records=CATCH_UP_BATCH)
            fetched = batches.get(read.tp, [])
            if fetched:
                records = records_of(fetched, now_ms())
                next_offset = records[-1].offset + 1
                read.resumed.clear()
                paused = await read.cursor.ask(Batch(records, consumer.highwater(read.tp)))
                if paused is True:
                    await read.resumed.wait()
            if read.cancelled or await handover(read, next_offset):
                return
    finally:
        await consumer.stop()
