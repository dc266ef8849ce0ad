"""The Kafka-style consumer client: assign or subscribe, poll with read_committed, commit offsets."""
from consumer.config import ConsumerConfig
from consumer.consumer import Consumer
from consumer.read_whole import read_to_end

__all__ = ["Consumer", "ConsumerConfig", "read_to_end"]
