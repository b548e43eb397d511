"""Kafka plumbing: client construction, the embedded broker, and broker quirks.

`client` builds consumers, producers and admin calls with the quirk workarounds of
`compat` applied; `broker` runs the embedded Kafka-protocol broker (Tansu) as a child
process. Nothing here knows about actors.
"""

from runtime.kafka.client import (
    committed_offset,
    create_topics,
    make_consumer,
    make_producer,
    valid_topic,
)

__all__ = ["committed_offset", "create_topics", "make_consumer", "make_producer", "valid_topic"]
