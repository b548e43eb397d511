"""The attempts desk: every subscription's `AttemptRing` (written by its outlets; the
trees hand them over, and they outlive restarts of the trees and of the control actor),
the give-ups the partition path journals, and the attempts API's and status page's reads
of them and of the journal (actors/delivery/control/attempts.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from actors.delivery.control import attempts
from actors.delivery.egress.attempts import AttemptRing, Coordinates, GiveUp, GiveUpKind
from runtime.host.journal import Event
from runtime.kernel.clock import Clock

RECENT_ATTEMPTS = 10  # per subscription in its status (the status page's table)


class AttemptsDesk:
    def __init__(self) -> None:
        self.rings: dict[str, AttemptRing] = {}  # by subscription key
        self.journal: Path | None = None  # the journal's folder, when it is on

    def note_give_up(self, event: Event) -> None:
        """The partition path's give-ups, into the subscription's ring (it owns no other
        way to tell us: actors/delivery/path is not ours to change)."""
        ring = self.rings.get(event.subscription or "")
        if ring is None or event.topic is None or event.partition is None \
                or event.offset is None:
            return
        kind: GiveUpKind = ("dead_lettered" if event.type == "dead_lettered"
                            else "retry_scheduled")
        ring.give_up((event.topic, event.partition, event.offset),
                     GiveUp(event.ts_ms, kind, event.reason))

    async def of_record(self, key: str, coordinates: Coordinates | None = None,
                        webhook_id: str | None = None) -> dict[str, object]:
        """What happened to one record, named by coordinates or `webhook-id`."""
        ring, scan = self.rings.get(key), attempts.Scan(self.journal, key)
        stamp: int | None = None
        if coordinates is None:
            assert webhook_id is not None
            coordinates = ring.find(webhook_id) if ring is not None else None
            if coordinates is None:
                found = await asyncio.to_thread(attempts.find_webhook_id, scan, webhook_id)
                if found is None:
                    return {"record": {"webhookId": webhook_id}, "state": "unknown",
                            "attempts": [], "reason": "no record with this webhook-id in "
                            "memory nor in the journal scanned"}
                coordinates, stamp = found
        # the ring is read here, on the loop its outlets write it from; the thread only
        # reads files (#34: a thread reading the ring could mix two attempts)
        memory = attempts.of_record(self.rings.get(key), coordinates)
        return await asyncio.to_thread(attempts.lookup_record, memory, scan, coordinates, stamp)

    async def failures(self, key: str, limit: int) -> dict[str, object]:
        """The latest `limit` failed attempts across the subscription's records."""
        memory = attempts.of_failures(self.rings.get(key), limit)  # on the loop (#34)
        return await asyncio.to_thread(attempts.lookup_failures, memory,
                                       attempts.Scan(self.journal, key), limit)

    def activity(self, key: str, clock: Clock) -> dict[str, object] | None:
        """The status page's charts and attempts table (actors/delivery/egress/attempts.py)."""
        ring = self.rings.get(key)
        if ring is None:
            return None
        recent = [{"record": {"topic": a.topic, "partition": a.partition, "offset": a.offset},
                   **a.as_dict()} for a in ring.recent(RECENT_ATTEMPTS)]
        return {"recent_attempts": recent, "series": ring.series.as_dict(clock.wall_ms())}
