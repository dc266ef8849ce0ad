"""The points service: `python -m txnsim.demo_orders.points_service --db points.sqlite ...`.

Consumes 'points' (txnsim's read_committed Consumer in a group, or RocketMQ 5's SimpleConsumer)
and deducts each order's points in one SQLite transaction with its processed-order row; only
then does it commit the offset (or ack). A redelivered message finds its row and deducts nothing.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any

from consumer import Consumer
from proto.errors import KafkaError
from proto.structs import OffsetAndMetadata, TopicPartition
from txnsim.demo_orders.channel import EventWriter, read_commands
from txnsim.demo_orders.service_args import parse_service_args
from txnsim.demo_orders.store import Order, PointsDb

TOPIC = "points"
#: how long a received but unacked RocketMQ message stays invisible before it is delivered again
INVISIBLE_DURATION_S = 4

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Delivery:
    order: Order
    message_id: str
    partition: int
    offset: int
    handle: Any  # what the client needs to acknowledge it


class NativeDeliveries:
    """txnsim's Consumer: a static member of the group (a restart takes its partitions back at once),
    read_committed, offsets committed by hand."""

    #: what a failed offset commit raises
    errors: tuple[type[Exception], ...] = (KafkaError,)

    def __init__(self, bootstrap_servers: str, group: str) -> None:
        self.consumer = Consumer(TOPIC, bootstrap_servers=bootstrap_servers, group_id=group,
                                 group_instance_id=f"{group}-1", isolation_level="read_committed",
                                 enable_auto_commit=False, auto_offset_reset="earliest",
                                 session_timeout_ms=6_000, heartbeat_interval_ms=500)

    def ready(self) -> bool:
        return bool(self.consumer.assignment())

    def poll(self) -> list[Delivery]:
        out = []
        for records in self.consumer.poll(timeout_ms=200).values():
            for r in records:
                message_id = (dict(r.headers).get("UNIQ_KEY") or b"").decode()
                out.append(Delivery(Order.from_json(r.value or b"{}"), message_id, r.partition, r.offset,
                                    TopicPartition(r.topic, r.partition)))
        return out

    def ack(self, delivery: Delivery) -> str:
        self.consumer.commit({delivery.handle: OffsetAndMetadata(delivery.offset + 1)})
        return f"offset {delivery.offset + 1} of points-{delivery.partition} committed"

    def close(self) -> None:
        self.consumer.close(autocommit=False)


class RocketMQDeliveries:
    """RocketMQ 5's SimpleConsumer: receive, then ack each message after its SQLite commit.

    Each receive long-polls the one node of a queue the client picks at random (for up to 1 s), so
    a message can wait a few receives before the node that holds it is asked."""

    def __init__(self, endpoints: str, group: str) -> None:
        import grpc
        from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
        from rocketmq.v5.exception import ClientException
        self.errors = (ClientException, grpc.RpcError, TimeoutError)
        self.consumer = SimpleConsumer(ClientConfiguration(endpoints, Credentials()), group,
                                       {TOPIC: FilterExpression()}, await_duration=1)
        self.consumer.startup()

    def ready(self) -> bool:
        return True

    def poll(self) -> list[Delivery]:
        try:
            messages = self.consumer.receive(16, INVISIBLE_DURATION_S)
        except self.errors as exc:  # the queue it picked is on a dead node: the next receive picks another
            log.info("receive failed: %s", exc)
            return []
        return [Delivery(Order.from_json(m.body or b"{}"), m.message_id, -1, -1, m) for m in messages]

    def ack(self, delivery: Delivery) -> str:
        self.consumer.ack(delivery.handle)
        return "acked (after the SQLite commit)"

    def close(self) -> None:
        self.consumer.shutdown()


def main(argv: list[str] | None = None) -> int:
    args = parse_service_args(argv, name="points-service", description=__doc__, default_group="points-service",
                              group_help="consumer group")
    events = EventWriter("points")
    stopping = threading.Event()
    kill_after_next_deduction = threading.Event()

    def handle(command: dict[str, Any]) -> None:
        if command["cmd"] == "kill-after-next-deduction":
            kill_after_next_deduction.set()

    read_commands(handle, stopping.set)
    db = PointsDb(args.db)
    deliveries = (NativeDeliveries(args.bootstrap_servers, args.group) if args.client == "native"
                  else RocketMQDeliveries(args.endpoints, args.group))
    announced = False
    while not stopping.is_set():
        batch = deliveries.poll()
        if not announced and deliveries.ready():
            events.emit("ready", client=args.client, group=args.group)
            announced = True
        for d in batch:
            balance = db.deduct(d.order.order_id, d.order.user, d.order.points, d.message_id, d.partition, d.offset)
            where = {"order_id": d.order.order_id, "partition": d.partition, "offset": d.offset,
                     "message_id": d.message_id}
            if balance is None:
                events.emit("duplicate", **where)
            else:
                events.emit("deducted", user=d.order.user, points=d.order.points, balance=balance, **where)
                if kill_after_next_deduction.is_set():
                    events.emit("killing", **where)
                    os.kill(os.getpid(), signal.SIGKILL)
            try:
                events.emit("acked", what=deliveries.ack(d), **where)
            except deliveries.errors as exc:  # delivered again later: the processed-order table absorbs it
                log.warning("ack of %s failed: %s", d.order.order_id, exc)
                events.emit("ack-failed", why=f"{type(exc).__name__}: {exc}", **where)
    deliveries.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
