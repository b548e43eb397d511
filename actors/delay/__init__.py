"""The Kafka-native delay queue: level topics, delay actors on timer wheels, forwarding
when due (at-least-once or exactly-once), and the producer behind `runtime.delay.send`.

    from actors.delay import DelayProducer, DelayService
"""

from actors.delay.producer import DelayProducer
from actors.delay.service import DelayService

__all__ = ["DelayProducer", "DelayService"]
