"""One RocketMQ 5 client's Telemetry stream on this node: its settings, and, for a producer, the
check channel registered in the ProducerRegistry under every topic it publishes (RocketMQ 5's proxy
uses the topic as the producer group).

Invariant: a stream is registered under exactly the topics of the client's latest settings, once
each, and under none once the stream has ended.
"""
from __future__ import annotations

import logging
import queue
import threading

from coordinator.rocketmq.producers import ProducerRegistry
from coordinator.rocketmq.rmq_messages import check_command
from coordinator.rocketmq.rmq_wire import rmq, rmq_service, status
from proto import txnsim_pb2 as pb

log = logging.getLogger(__name__)


#: the proxy's consumer retry policy: RocketMQ's delay levels from 1 s to 2 h (its customized backoff)
_REDELIVERY_DELAYS_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
_CONSUMERS = frozenset({rmq.PUSH_CONSUMER, rmq.SIMPLE_CONSUMER, rmq.PULL_CONSUMER})


class TelemetrySession:
    """A CheckChannel (producers.py) over one Telemetry stream: offer() queues a command, the
    stream's handler writes it."""

    def __init__(self, client_id: str, registry: ProducerRegistry, max_body_bytes: int) -> None:
        self.client_id = client_id
        self._registry = registry
        self._max_body_bytes = max_body_bytes
        self._outbox: queue.SimpleQueue[rmq_service.TelemetryCommand | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._topics: frozenset[str] = frozenset()
        self._closed = False
        self._retired = False

    # ------------------------------------------------------------ CheckChannel

    @property
    def closed(self) -> bool:
        return self._closed

    def offer(self, check: pb.TransactionCheck) -> bool:
        """Hand a check-back to the client (RecoverOrphanedTransactionCommand); False once the stream is gone."""
        with self._lock:
            if self._closed:
                return False
            self._outbox.put(check_command(check))
            return True

    # ------------------------------------------------------------ the stream

    def received(self, command: rmq_service.TelemetryCommand) -> None:
        """A command from the client: settings are answered (and a producer's topics registered)."""
        if not command.HasField("settings"):
            return  # thread stack traces, verify-message results: nothing asked them here
        settings = command.settings
        if settings.client_type == rmq.PRODUCER:
            self._publish_on({topic.name for topic in settings.publishing.topics if topic.name})
        self._send(self._reply(settings))

    def _reply(self, settings: rmq.Settings) -> rmq_service.TelemetryCommand:
        """The client's own settings echoed with status OK (settings without it are ignored), with what RocketMQ
        5's proxy fills in (GrpcClientSettingsManager): a producer's retry policy (3 attempts, backoff from 10 ms
        doubling to 1 s; the Node.js client cannot start without one) and the node's body limit (unset, the
        client would refuse every send) with type validation on; a consumer's redelivery backoff, batch size and
        long-polling timeout; metrics off."""
        reply = rmq_service.TelemetryCommand(status=status())
        reply.settings.CopyFrom(settings)
        if settings.HasField("publishing") or settings.client_type == rmq.PRODUCER:
            policy = reply.settings.backoff_policy
            policy.Clear()
            policy.max_attempts = 3
            policy.exponential_backoff.initial.FromMilliseconds(10)
            policy.exponential_backoff.max.FromMilliseconds(1000)
            policy.exponential_backoff.multiplier = 2.0
            reply.settings.publishing.max_body_size = self._max_body_bytes
            reply.settings.publishing.validate_message_type = True
        elif settings.HasField("subscription") or settings.client_type in _CONSUMERS:
            policy = reply.settings.backoff_policy
            policy.Clear()
            policy.max_attempts = len(_REDELIVERY_DELAYS_S) - 1
            for delay_s in _REDELIVERY_DELAYS_S:
                policy.customized_backoff.next.add().FromSeconds(delay_s)
            reply.settings.subscription.receive_batch_size = 32
            reply.settings.subscription.long_polling_timeout.FromSeconds(20)
        reply.settings.metric.on = False
        return reply

    def _publish_on(self, topics: set[str]) -> None:
        with self._lock:
            if self._closed or self._retired:
                return
            added, removed = topics - self._topics, self._topics - topics
            self._topics = frozenset(topics)
        for topic in sorted(added):
            self._registry.register(topic, self)
        for topic in sorted(removed):
            self._registry.unregister(topic, self)
        if added or removed:
            log.info("RocketMQ producer %s answers check-backs for %s", self.client_id, sorted(topics) or "nothing")

    def _send(self, command: rmq_service.TelemetryCommand) -> None:
        with self._lock:
            if not self._closed:
                self._outbox.put(command)

    def next(self, timeout_s: float) -> rmq_service.TelemetryCommand | None:
        """The next command to write to the client, or None after `timeout_s` (or once closed)."""
        try:
            return self._outbox.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def retire(self) -> None:
        """The client said goodbye (NotifyClientTermination): no longer a producer of anything here, but the stream
        stays open until the client closes it, as RocketMQ's proxy leaves it (a stream ended by the server is
        reopened by the Node.js client, even after its shutdown)."""
        with self._lock:
            self._retired = True
            topics, self._topics = self._topics, frozenset()
        for topic in topics:
            self._registry.unregister(topic, self)

    def close(self) -> None:
        """The stream ended: no longer a producer of anything here."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            topics, self._topics = self._topics, frozenset()
        self._outbox.put(None)
        for topic in topics:
            self._registry.unregister(topic, self)
