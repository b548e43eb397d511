"""What the delivery path and the delay queue share: the group consumer that owns a Kafka
consumer and its partition actors, the messages between them, the offset tracker, and
the small decision pieces both partition books use."""
