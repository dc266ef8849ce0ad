"""The Kafka-style producer client: idempotent by default, transactional with a transactional_id.

Only the client packages' shared contract (proto/) is imported here, never server code.
"""
from producer.config import ProducerConfig
from producer.producer import Producer

__all__ = ["Producer", "ProducerConfig"]
