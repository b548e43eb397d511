"""Webhook delivery: subscriptions (Queue-Over-Http's Consumer JSON) as actor trees that
push every record to an HTTP endpoint, at least once.

    from actors.delivery import Consumer, DeliveryService, decode_consumer
"""

from actors.delivery.document.subscription import Consumer, decode_consumer
from actors.delivery.errors import (
    DeliveryError,
    InvalidSubscription,
    SubscriptionExists,
    SubscriptionNotFound,
    SubscriptionStartFailed,
    UnknownBroker,
)
from actors.delivery.service import DeliveryService

__all__ = [
    "Consumer", "DeliveryError", "DeliveryService", "InvalidSubscription", "SubscriptionExists",
    "SubscriptionNotFound", "SubscriptionStartFailed", "UnknownBroker", "decode_consumer",
]
