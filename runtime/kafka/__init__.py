"""Kafka plumbing: client construction, connection security, the embedded broker, and
broker quirks.

`client` builds consumers, producers and admin clients with the quirk workarounds of
`compat` applied and the TLS/SASL settings `security` keeps per bootstrap address; `broker`
runs the embedded Kafka-protocol broker (Tansu) as a child process. Nothing here knows
about actors.
"""

from runtime.kafka.client import (
    committed_offset,
    committed_offsets,
    create_topics,
    make_admin,
    make_client,
    make_consumer,
    make_producer,
    valid_topic,
)

__all__ = ["committed_offset", "committed_offsets", "create_topics", "make_admin", "make_client",
           "make_consumer", "make_producer", "valid_topic"]
