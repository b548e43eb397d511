"""Admission: what the control actor refuses before anything starts (a subscribe, an
update, a stored document restored or adopted). It reads the registry, the trees' view of
the cluster and the source; it changes nothing."""

from __future__ import annotations

import logging

from actors.delivery.control.messages import Check
from actors.delivery.control.registry import SubscriptionRegistry
from actors.delivery.control.source import SubscriptionSource
from actors.delivery.control.trees import Plant, refuse_own_topics
from actors.delivery.document.secrets import kept_secrets
from actors.delivery.document.subscription import Consumer
from actors.delivery.errors import InvalidSubscription

log = logging.getLogger(__name__)


class Admission:
    def __init__(self, registry: SubscriptionRegistry, trees: Plant,
                 source: SubscriptionSource) -> None:
        self.registry, self.trees, self.source = registry, trees, source

    def refuse_new(self, consumer: Consumer, persist: bool) -> None:
        """What would fail later, checked before anything starts."""
        self.registry.refuse_new(consumer)
        if persist:
            self.source.check_name(consumer.key)
        self._refuse(consumer)

    def refuse_update(self, key: str, consumer: Consumer) -> None:
        self.registry.refuse_update(key, consumer)
        self._refuse(consumer)

    def _refuse(self, consumer: Consumer) -> None:
        self.trees.bootstrap(consumer)
        refuse_own_topics(consumer, self.trees.own_topics())
        self.trees.check_retry_topics(consumer)

    def refusal(self, consumer: Consumer) -> str:
        """Why a stored document (the files, the subscriptions topic) may not run: it
        fails a check a subscribe makes now. An earlier version, or another instance of
        one, accepted it (#34: a dead-letter topic of `hookstream.subscriptions`)."""
        if self.registry.in_process(consumer.key) or consumer.http is None:
            return ""  # the embedding program's own: checked when it subscribed
        # the own topics only: a delay that no longer fits the config's levels fails the
        # start instead (retried: a config change and a restart may fix it)
        try:
            refuse_own_topics(consumer, self.trees.own_topics())
        except InvalidSubscription as exc:
            log.error("subscription %s refused: %s: %s; PUT a document that passes, or "
                      "unsubscribe it", consumer.key, exc.reason, exc.details)
            return f"{exc.reason}: {exc.details}"
        return ""

    def kept(self, key: str, consumer: Consumer) -> Consumer:
        """A PUT's document with the stored secrets where GET showed `***` (#25)."""
        return kept_secrets(consumer, self.registry.known(key).consumer)

    def check(self, check: Check) -> Consumer:
        """The document to write (an update's keeps the stored secrets), once checked."""
        if check.update is None:
            self.refuse_new(check.consumer, persist=False)
            return check.consumer
        consumer = self.kept(check.update, check.consumer)
        self.refuse_update(check.update, consumer)
        return consumer
