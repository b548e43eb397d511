"""What the delivery path and the delay queue share: the group consumer that owns a Kafka
consumer and its partition actors (group_consumer.py), the messages between them, the
offset tracker, the small decision pieces both partition books use (flow.py: pausing,
the commit point, drain waiters), the one dead-letter header scheme (deadletter.py) and
the domain errors (errors.py)."""
