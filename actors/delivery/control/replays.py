"""The replay desk: the control actor's record of replays (issue 27), started in a
subscription's tree and followed by `GET .../replay/{id}`, with bounds on how many run."""

from __future__ import annotations

import logging
import uuid

from actors.delivery.control.messages import Replay
from actors.delivery.control.registry import SubscriptionRegistry
from actors.delivery.control.trees import Plant, check_replay_topic
from actors.delivery.errors import InvalidSubscription, LimitReached, SubscriptionStartFailed
from actors.delivery.path.replay import ReplayProgress

log = logging.getLogger(__name__)
MAX_REPLAYS_PER_SUBSCRIPTION = 4
MAX_REPLAYS = 32
"""Replays running at once, per subscription and per instance (each has its own Kafka
consumer: 300 at once took 700 open files, #34); past them a replay is refused (429)."""
FINISHED_REPLAYS_KEPT = 100
"""Ended replays whose progress `GET .../replay/{id}` still shows (the oldest go)."""


class ReplayDesk:
    def __init__(self, registry: SubscriptionRegistry, trees: Plant) -> None:
        self.registry, self.trees = registry, trees
        self.replays: dict[str, ReplayProgress] = {}

    async def start(self, message: Replay) -> ReplayProgress:
        """Deliver records again through the subscription's egress (actors/delivery/path/
        replay.py); answers at once with the progress object the replay updates."""
        key, request = message.key, message.request
        consumer = self.registry.known(key).consumer
        dead_letters = consumer.subscriptionMethod.deadLetterTopic
        if request.source == "deadLetter" and not dead_letters:
            raise InvalidSubscription("nothing to replay", f"{key} has no deadLetterTopic")
        if request.source == "deadLetter":  # an earlier version let it be an own topic
            check_replay_topic(consumer, dead_letters or "", self.trees.own_topics())
        if request.source == "topic" and (request.topic is None or request.partition is None):
            raise InvalidSubscription("invalid replay", "source 'topic' needs topic and partition")
        if request.source == "topic":
            check_replay_topic(consumer, request.topic or "", self.trees.own_topics())
        state = self.registry.state(key)
        if state != "running" or not self.trees.has_tree(key):
            raise SubscriptionStartFailed("subscription is not running",
                                          f"{key} is {state}: resume it first")
        self._refuse(key)
        rid = uuid.uuid4().hex[:12]
        progress = self.replays[rid] = ReplayProgress(rid, key, request.source)
        await self.trees.start_replay(consumer, request, progress)
        log.info("subscription %s: replay %s of %s started", key, rid, request.source)
        return progress

    def forget(self, key: str) -> None:
        """`key` was unsubscribed: its replays' actors stopped with its tree."""
        for rid in [rid for rid, p in self.replays.items() if p.subscription == key]:
            del self.replays[rid]

    def _refuse(self, key: str) -> None:
        """Past the bounds on running replays: `LimitReached` (429). Ended replays past
        `FINISHED_REPLAYS_KEPT` are forgotten first."""
        running = {k: self.trees.replaying(k) for k in {p.subscription
                                                        for p in self.replays.values()}}
        ended = [rid for rid, p in self.replays.items()
                 if rid not in running.get(p.subscription, set())]
        for rid in ended[:max(len(ended) - FINISHED_REPLAYS_KEPT + 1, 0)]:
            del self.replays[rid]  # the oldest first: the dict keeps their order
        if len(running.get(key, ())) >= MAX_REPLAYS_PER_SUBSCRIPTION:
            raise LimitReached("too many replays", f"{key} runs {MAX_REPLAYS_PER_SUBSCRIPTION}"
                               " replays, the most a subscription may: wait for one to end")
        if sum(map(len, running.values())) >= MAX_REPLAYS:
            raise LimitReached("too many replays", f"this instance runs {MAX_REPLAYS} "
                               "replays, the most it may: wait for one to end")
