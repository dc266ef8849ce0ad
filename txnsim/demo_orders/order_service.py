"""The order service: `python -m txnsim.demo_orders.order_service --db orders.sqlite ...`.

For each order read on stdin it sends a points message bound to its local SQLite transaction
(order row + status row, one COMMIT), through txnsim's Producer or the official RocketMQ 5
client, and answers check-backs from the status table. Faults are per order: lose the end,
SIGKILL itself after the local commit, or hold the local transaction open until released.
"""
from __future__ import annotations

import logging
import os
import queue
import signal
import sys
import threading
from typing import Any

from producer import Producer
from producer.local_transaction import LocalTransactionState as State
from producer.local_transaction import TransactionListener, TransactionMessage
from txnsim.demo_orders.channel import EventWriter, read_commands
from txnsim.demo_orders.service_args import parse_service_args
from txnsim.demo_orders.store import LOCAL_TXN_TIMEOUT_MS, Decision, Order, OrdersDb, now_ms

TOPIC = "points"
ORDER_ID = "orderId"  # the message property that carries the order id, as in the articles
FAULTS = ("lose-end", "kill-after-commit", "hold")


class OrderService:
    """What both clients share: the local transaction with its fault, and the check-back's answer."""

    def __init__(self, db: OrdersDb, events: EventWriter, stopping: threading.Event) -> None:
        self.db = db
        self.events = events
        self.stopping = stopping
        self._releases: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def _release_event(self, order_id: str) -> threading.Event:
        with self._lock:
            return self._releases.setdefault(order_id, threading.Event())

    def release(self, order_id: str) -> None:
        self._release_event(order_id).set()

    def release_all(self) -> None:
        with self._lock:
            for event in self._releases.values():
                event.set()

    def local_transaction(self, order: Order, fault: str | None, transaction_id: str, message_id: str) -> Decision:
        """Runs only once the half message is stored."""
        self.events.emit("half-stored", order_id=order.order_id, transaction_id=transaction_id, message_id=message_id)

        def hold() -> None:
            self.events.emit("holding", order_id=order.order_id)
            released = self._release_event(order.order_id)
            released.wait(max(0.0, (order.started_ms + LOCAL_TXN_TIMEOUT_MS - now_ms()) / 1000))

        committed, why = self.db.place(order, transaction_id, message_id,
                                       before_commit=hold if fault == "hold" else lambda: None)
        self.events.emit("local-commit" if committed else "local-rollback", order_id=order.order_id, why=why)
        if committed and fault == "kill-after-commit":
            self.events.emit("killing", order_id=order.order_id)
            os.kill(os.getpid(), signal.SIGKILL)
        return Decision.COMMIT if committed else Decision.ROLLBACK

    def check(self, order_id: str, started_ms: int, transaction_id: str, check_times: int | None,
              spelling: dict[Decision, str]) -> Decision:
        """The check-back's answer from the status table; `spelling` names it in the client's terms."""
        decision, why = self.db.decision(order_id, started_ms)
        self.events.emit("check", order_id=order_id, transaction_id=transaction_id, check_times=check_times,
                         decision=decision.value, answer=spelling[decision], why=why)
        return decision


class NativeClient:
    """txnsim's Producer(producer_group=..., transaction_listener=...)."""

    def __init__(self, service: OrderService, bootstrap_servers: str, group: str) -> None:
        states = {Decision.COMMIT: State.COMMIT_MESSAGE, Decision.ROLLBACK: State.ROLLBACK_MESSAGE,
                  Decision.UNKNOWN: State.UNKNOW}
        spelling = {decision: state.value for decision, state in states.items()}

        class Listener(TransactionListener):
            def execute_local_transaction(self, msg: TransactionMessage, arg: Any) -> State:
                order, fault = arg
                return states[service.local_transaction(order, fault, msg.transaction_id, msg.message_id)]

            def check_local_transaction(self, msg: TransactionMessage) -> State:
                order = Order.from_json(msg.value or b"{}")
                order_id = (msg.header(ORDER_ID) or b"").decode()
                return states[service.check(order_id, order.started_ms, msg.transaction_id, msg.check_times,
                                            spelling)]

        self.service = service
        self.group = group
        self.producer = Producer(bootstrap_servers=bootstrap_servers, producer_group=group,
                                 transaction_listener=Listener())

    def start(self) -> None:
        if not self.producer.wait_for_check_backs(30):
            raise SystemExit(f"the producer of {self.group!r} could not register for check-backs within 30 s")

    def place(self, order: Order, fault: str | None) -> None:
        self.producer.faults.lose_ends = fault == "lose-end"  # orders are placed one at a time here
        try:
            result = self.producer.send_message_in_transaction(
                TOPIC, value=order.to_json().encode(), key=order.order_id.encode(), arg=(order, fault),
                headers=[(ORDER_ID, order.order_id.encode())], keys=order.order_id)
        finally:
            self.producer.faults.lose_ends = False
        if result.send_status != "SEND_OK":
            self.service.events.emit("send-failed", order_id=order.order_id, why=result.send_status)
            return
        self.service.events.emit("end", order_id=order.order_id, state=result.local_transaction_state.value,
                                 lost=fault == "lose-end", transaction_id=result.transaction_id)

    def close(self) -> None:
        self.producer.close()


class RocketMQClient:
    """The official RocketMQ 5 client: Producer(..., checker=...), begin_transaction, send, commit."""

    def __init__(self, service: OrderService, endpoints: str) -> None:
        import grpc
        from rocketmq import ClientConfiguration, Credentials, Producer, TransactionChecker, TransactionResolution
        from rocketmq.v5.exception import ClientException
        #: what a failed send or end raises in this client
        self.errors = (ClientException, grpc.RpcError, TimeoutError)

        resolutions = {Decision.COMMIT: TransactionResolution.COMMIT,
                       Decision.ROLLBACK: TransactionResolution.ROLLBACK,
                       Decision.UNKNOWN: TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED}
        spelling = {decision: TransactionResolution.Name(resolution) for decision, resolution in resolutions.items()}

        class Checker(TransactionChecker):  # type: ignore[misc]  # rocketmq ships no type hints: it is Any here
            def check(self, message: Any) -> Any:
                order = Order.from_json(message.body or b"{}")
                order_id = message.properties.get(ORDER_ID, order.order_id)
                return resolutions[service.check(order_id, order.started_ms, "", None, spelling)]

        self.service = service
        self.producer = Producer(ClientConfiguration(endpoints, Credentials()), (TOPIC,), checker=Checker())

    def start(self) -> None:
        self.producer.startup()

    def place(self, order: Order, fault: str | None) -> None:
        from rocketmq import Message
        msg = Message()
        msg.topic = TOPIC
        msg.body = order.to_json().encode()
        msg.keys = order.order_id
        msg.add_property(ORDER_ID, order.order_id)
        tx = self.producer.begin_transaction()
        try:
            receipt = self.producer.send(msg, tx)
        except self.errors as exc:  # not stored: the local transaction must not run
            self.service.events.emit("send-failed", order_id=order.order_id, why=f"{type(exc).__name__}: {exc}")
            return
        decision = self.service.local_transaction(order, fault, receipt.transaction_id, receipt.message_id)
        if fault != "lose-end":  # with this client the lost end is simply not sent
            try:
                if decision is Decision.COMMIT:
                    tx.commit()
                elif decision is Decision.ROLLBACK:
                    tx.rollback()
            except self.errors as exc:  # an end that failed is left to check-back, as a lost one
                logging.getLogger(__name__).warning("end of %s failed: %s", receipt.transaction_id, exc)
        state = {Decision.COMMIT: "COMMIT", Decision.ROLLBACK: "ROLLBACK"}[decision]
        self.service.events.emit("end", order_id=order.order_id, state=state, lost=fault == "lose-end",
                                 transaction_id=receipt.transaction_id)

    def close(self) -> None:
        self.producer.shutdown()


def main(argv: list[str] | None = None) -> int:
    args = parse_service_args(argv, name="order-service", description=__doc__, default_group="order-service",
                              group_help="producer group (native client)")
    events = EventWriter("order")
    stopping = threading.Event()
    service = OrderService(OrdersDb(args.db), events, stopping)
    client: NativeClient | RocketMQClient = (NativeClient(service, args.bootstrap_servers, args.group)
                                             if args.client == "native" else RocketMQClient(service, args.endpoints))
    client.start()
    events.emit("ready", client=args.client)
    orders: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def handle(command: dict[str, Any]) -> None:
        if command["cmd"] == "release":  # handled on the reader thread: the worker may be holding
            service.release(command["order_id"])
        else:
            orders.put(command)

    def on_eof() -> None:
        stopping.set()
        service.release_all()
        orders.put(None)

    read_commands(handle, on_eof)
    while (command := orders.get()) is not None:
        order = Order(**{**command["order"], "started_ms": now_ms()})
        client.place(order, command.get("fault"))
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
