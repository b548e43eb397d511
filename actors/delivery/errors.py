"""Errors of webhook delivery's library API (`DeliveryService.subscribe`, `unsubscribe`,
`decode_consumer`).

Hierarchy::

    DeliveryError                   base: `reason` (short, stable) and `details` (the specifics)
    ├── InvalidSubscription         a Consumer JSON that does not decode or validate, or an
    │                               unsafe subscription name; also a ValueError, as before
    ├── SubscriptionExists          subscribe: (`id`, `group.id`) is already subscribed
    ├── SubscriptionNotFound        unsubscribe: no such subscription
    ├── UnknownBroker               the Consumer's `broker` is not a configured broker
    ├── LimitReached                a limit of the instance (subscriptions, topics,
    │                               patterns, replays) would be passed. Retriable: once
    │                               something ends or is removed
    └── SubscriptionStartFailed     its actors did not start (a missing pinned topic, an
                                    unreachable broker); `__cause__` is the ActorStartError.
                                    Retriable: the same request may work once the cause
                                    is fixed

`reason` and `details` are what the admin API answers as `{"success": false, "reason",
"details"}`; the HTTP status of each class is chosen in one place,
actors/delivery/api/subscriptions.py.
Decisions read the class or `retriable`, never `str(exc)`.
"""

from __future__ import annotations


class DeliveryError(Exception):
    retriable: bool = False

    def __init__(self, reason: str, details: str = "") -> None:
        super().__init__(f"{reason}: {details}" if details else reason)
        self.reason = reason
        self.details = details


class InvalidSubscription(DeliveryError, ValueError):
    pass


class SubscriptionExists(DeliveryError):
    pass


class SubscriptionNotFound(DeliveryError):
    pass


class UnknownBroker(DeliveryError):
    pass


class LimitReached(DeliveryError):
    retriable = True


class SubscriptionStartFailed(DeliveryError):
    retriable = True
