"""The Kafka-style consumer client: assign or subscribe, poll with read_committed, commit offsets."""
from consumer.config import ConsumerConfig
from consumer.consumer import Consumer

__all__ = ["Consumer", "ConsumerConfig"]
