"""The demo's input: a deterministic stream of orders, written in transactions, and its true totals.

Amounts are whole cents so that totals compare exactly. Event times are spread evenly over
`minutes` minutes from a fixed minute boundary, so every minute has orders and the expected
income per minute is known before Spark sees a single record.
"""
from __future__ import annotations

import json
import random
import threading
import time
from collections import defaultdict
from dataclasses import dataclass

from producer import Producer
from proto.errors import KafkaError

#: 2026-01-01T09:00:00Z, a minute boundary
BASE_TIME_MS = 1_767_258_000_000
#: the closing event's order id (spark.jobs.CLOSING_ORDER_ID): an hour later, it closes every minute
CLOSING_ORDER_ID = -1
CLOSING_AFTER_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class Order:
    order_id: int
    amount_cents: int
    event_time_ms: int

    def to_json(self) -> bytes:
        return json.dumps({"order_id": self.order_id, "amount_cents": self.amount_cents,
                           "event_time_ms": self.event_time_ms}).encode()

    @property
    def minute_ms(self) -> int:
        return self.event_time_ms // 60_000 * 60_000


def make_orders(count: int, minutes: int, seed: int) -> list[Order]:
    rng = random.Random(seed)
    span_ms = minutes * 60_000
    return [Order(i, rng.randrange(100, 10_000), BASE_TIME_MS + i * span_ms // count) for i in range(count)]


def closing_event(orders: list[Order]) -> Order:
    return Order(CLOSING_ORDER_ID, 0, max(o.event_time_ms for o in orders) + CLOSING_AFTER_MS)


def income_per_minute(orders: list[Order]) -> dict[int, tuple[int, int]]:
    """minute start (ms) -> (income in cents, number of orders), computed directly from the orders."""
    totals: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for order in orders:
        totals[order.minute_ms][0] += order.amount_cents
        totals[order.minute_ms][1] += 1
    return {minute: (income, n) for minute, (income, n) in sorted(totals.items())}


class OrderWriter(threading.Thread):
    """Writes the orders `per_txn` at a time at about `rate` orders/s, then the closing event.

    It writes only as far as `allow()` lets it, so the demo can keep orders flowing exactly
    while it crashes things. A transaction that fails (a node killed under it) is aborted and
    written again, so every order ends up committed once; `committed` counts them.
    """

    def __init__(self, bootstrap_servers: str, topic: str, orders: list[Order], *, rate: float,
                 per_txn: int = 20) -> None:
        super().__init__(daemon=True, name="order-writer")
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.orders = orders
        self.rate = rate
        self.per_txn = per_txn
        self.committed = 0
        self.retries = 0
        #: (time.monotonic(), "committed" or "aborted and retried", orders) per transaction, for the report
        self.transactions: list[tuple[float, str, int]] = []
        self.error: BaseException | None = None
        self._allowed = 0
        self._changed = threading.Condition()
        self._halt = threading.Event()

    @property
    def allowed(self) -> int:
        return self._allowed

    def allow(self, orders: int) -> None:
        """Let the writer go on up to `orders` orders; more than all of them also releases the closing event."""
        with self._changed:
            self._allowed = max(self._allowed, orders)
            self._changed.notify_all()

    def allow_all(self) -> None:
        self.allow(len(self.orders) + 1)

    def run(self) -> None:
        try:
            chunks = [self.orders[i:i + self.per_txn] for i in range(0, len(self.orders), self.per_txn)]
            chunks.append([closing_event(self.orders)])
            producer = self._producer()
            try:
                written = 0
                for chunk in chunks:
                    written += len(chunk)
                    with self._changed:
                        while written > self._allowed and not self._halt.is_set():
                            self._changed.wait(0.2)
                    producer = self._write(producer, chunk)
                    if self._halt.wait(len(chunk) / self.rate):
                        return
            finally:
                producer.close()
        except BaseException as exc:  # shown by the runner, not lost in a thread
            self.error = exc

    def stop(self) -> None:
        self._halt.set()
        self.allow_all()
    def _producer(self) -> Producer:
        producer = Producer(bootstrap_servers=self.bootstrap_servers, transactional_id="pipeline-orders",
                            max_block_ms=30_000)
        producer.init_transactions()
        return producer

    def _write(self, producer: Producer, chunk: list[Order]) -> Producer:
        while not self._halt.is_set():
            try:
                producer.begin_transaction()
                for order in chunk:
                    producer.send(self.topic, value=order.to_json(), key=str(order.order_id).encode())
                producer.commit_transaction()
                self.committed += sum(1 for o in chunk if o.order_id != CLOSING_ORDER_ID)
                self.transactions.append((time.monotonic(), "committed", len(chunk)))
                return producer
            except KafkaError:
                self.retries += 1
                self.transactions.append((time.monotonic(), "aborted and retried", len(chunk)))
                producer = self._recover(producer)
        return producer

    def _recover(self, producer: Producer) -> Producer:
        try:
            producer.abort_transaction()
            return producer
        except KafkaError:
            producer.close(timeout=0)
            return self._producer()
