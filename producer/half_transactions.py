"""RocketMQ's transactional send, client side: half message, local transaction, one-way end, and
answers to check-backs (ROCKETMQ-REFERENCE §2).

The half message goes to the coordinator of the producer group's half-message shard; only once
it is stored does the local transaction run. The end is sent once and never retried past a short
deadline: if it is lost, the node checks back. A thread keeps a CheckBack stream open to the
group's coordinator and answers each check from the listener, on a small pool so a slow answer
does not hold up the others.
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc

from client.cluster import HALF_MESSAGES, ClusterClient
from client.transport import Deadline, call, map_rpc_error, retrying
from producer.local_transaction import (
    LocalTransactionState,
    SendStatus,
    TransactionListener,
    TransactionMessage,
    TransactionSendResult,
)
from proto import txnsim_pb2 as pb
from proto.errors import IllegalStateError, KafkaError, KafkaTimeoutError, needs_rediscovery
from proto.hashing import partition_for_key

log = logging.getLogger(__name__)

#: how long a one-way end may try (rediscovery included) before it is given up to the check-back
_END_DEADLINE_S = 3.0
_RESOLUTION = {LocalTransactionState.COMMIT_MESSAGE: pb.RESOLUTION_COMMIT,
               LocalTransactionState.ROLLBACK_MESSAGE: pb.RESOLUTION_ROLLBACK,
               LocalTransactionState.UNKNOW: pb.RESOLUTION_UNKNOWN}


@dataclass
class ClientFaults:
    """Faults a producer injects into its own calls on purpose, to show what the protocol does about them (the
    demos, tests); a new producer has none, and nothing but its owner's code sets one."""

    #: drop the end that follows each local transaction, as if the one-way call were lost; answers to
    #: check-backs still go out, so the check-back decides the message
    lose_ends: bool = False


class HalfTransactions:
    def __init__(self, cluster: ClusterClient, *, producer_group: str, listener: TransactionListener | None,
                 client_id: str, request_timeout_s: float, check_threads: int = 1) -> None:
        self._cluster = cluster
        self.producer_group = producer_group
        self._listener = listener
        self._client_id = client_id
        self._timeout_s = request_timeout_s
        self.faults = ClientFaults()
        self._turn = itertools.count()
        self._closed = threading.Event()
        self._registered = threading.Event()
        self._call: Any = None
        self._pool = ThreadPoolExecutor(max_workers=check_threads, thread_name_prefix="check-back")
        self._listener_thread: threading.Thread | None = None
        if listener is not None:
            self._listener_thread = threading.Thread(target=self._listen, name=f"check-back-{producer_group}",
                                                     daemon=True)
            self._listener_thread.start()

    # ------------------------------------------------------------ sending

    def send(self, topic: str, value: bytes | None, key: bytes | None, arg: Any,
             headers: Iterable[tuple[str, bytes | None]] | None, partition: int | None, tag: str, keys: str,
             check_immunity_ms: int, num_partitions: int) -> TransactionSendResult:
        if self._listener is None:
            raise IllegalStateError("send_message_in_transaction needs a transaction_listener (RocketMQ: "
                                    "'TransactionListener is null')")
        if partition is None:
            partition = (partition_for_key(key, num_partitions) if key is not None
                         else next(self._turn) % num_partitions)
        message_id = uuid.uuid4().hex.upper()
        user_headers = [(str(k), v or b"") for k, v in (headers or ())]
        half = pb.HalfMessage(topic=topic, partition=partition, key=key, value=value or b"", message_id=message_id,
                              headers=[pb.MessageHeader(key=k, value=v) for k, v in user_headers], tag=tag, keys=keys,
                              check_immunity_ms=check_immunity_ms, born_timestamp_ms=int(time.time() * 1000))
        request = pb.SendHalfMessageRequest(producer_group=self.producer_group, message=half)
        try:
            response = self._to_coordinator(lambda stubs, t: call(stubs.half.SendHalfMessage, request, t),
                                            Deadline(self._timeout_s))
        except KafkaError as exc:
            if exc.retriable:  # not stored (or not known to be): the local transaction must not run
                log.warning("half message %s to %s not stored: %s; the local transaction does not run",
                            message_id, topic, exc)
                status = (SendStatus.FLUSH_DISK_TIMEOUT if isinstance(exc, KafkaTimeoutError)
                          else SendStatus.SERVICE_NOT_AVAILABLE)
                return TransactionSendResult(status.value, LocalTransactionState.ROLLBACK_MESSAGE, message_id, "",
                                             topic, partition)
            raise
        msg = TransactionMessage(topic, partition, key, value, tuple(user_headers), response.message_id,
                                 response.transaction_id, self.producer_group, 0, tag, keys)
        state = self._run_local(msg, arg)
        self.end(response.transaction_id, msg.message_id, state, pb.SOURCE_CLIENT)
        return TransactionSendResult(SendStatus.SEND_OK.value, state, response.message_id, response.transaction_id,
                                     topic, partition, response.half_offset)

    def _run_local(self, msg: TransactionMessage, arg: Any) -> LocalTransactionState:
        """The application's local transaction: an exception or a non-answer means UNKNOW (check later)."""
        assert self._listener is not None
        try:
            state = self._listener.execute_local_transaction(msg, arg)
        except Exception:
            log.exception("execute_local_transaction failed for %s; the message will be checked back",
                          msg.transaction_id)
            return LocalTransactionState.UNKNOW
        if not isinstance(state, LocalTransactionState):
            log.warning("execute_local_transaction returned %r for %s, not a LocalTransactionState; treated as UNKNOW",
                        state, msg.transaction_id)
            return LocalTransactionState.UNKNOW
        return state

    def end(self, transaction_id: str, message_id: str, state: LocalTransactionState,
            source: pb.TransactionSource) -> None:
        """One-way: tried briefly, never raised; a lost end is what check-back is for."""
        if source == pb.SOURCE_CLIENT and self.faults.lose_ends:
            log.warning("fault injected: the end of %s (%s) is lost", transaction_id, state.value)
            return
        request = pb.EndHalfTransactionRequest(
            transaction_id=transaction_id, producer_group=self.producer_group, message_id=message_id,
            resolution=_RESOLUTION[state], source=source)
        try:
            self._to_coordinator(lambda stubs, t: call(stubs.half.EndHalfTransaction, request, t),
                                 Deadline(_END_DEADLINE_S))
        except KafkaError as exc:
            log.warning("end of %s (%s) not delivered: %s; the node will check back", transaction_id, state.value, exc)

    def _to_coordinator(self, fn: Any, deadline: Deadline) -> Any:
        for attempt in retrying(deadline.remaining(),
                                before_retry=lambda exc: self._cluster.invalidate_coordinator(
                                    HALF_MESSAGES, self.producer_group) if needs_rediscovery(exc) else None):
            with attempt:
                address = self._cluster.coordinator_address(HALF_MESSAGES, self.producer_group, deadline)
                return fn(self._cluster.stubs(address), min(self._timeout_s, max(deadline.remaining(), 0.05)))
        raise AssertionError("unreachable")

    # ------------------------------------------------------------ check-backs

    def wait_registered(self, timeout_s: float) -> bool:
        """True once the group's coordinator knows this producer can answer check-backs."""
        return self._registered.wait(timeout_s)

    def _listen(self) -> None:
        request = pb.CheckBackRequest(producer_group=self.producer_group, client_id=self._client_id)
        while not self._closed.is_set():
            try:
                address = self._cluster.coordinator_address(HALF_MESSAGES, self.producer_group,
                                                            Deadline(self._timeout_s))
                self._call = self._cluster.stubs(address).half.CheckBack(request)
                for check in self._call:
                    if not check.transaction_id:
                        self._registered.set()
                        continue
                    self._pool.submit(self._answer, check)
            except grpc.RpcError as exc:
                if not self._closed.is_set():
                    log.info("check-back stream of %r ended (%s); reconnecting", self.producer_group,
                             map_rpc_error(exc))
            except KafkaError as exc:
                log.info("no coordinator for %r's check-backs yet (%s)", self.producer_group, exc)
            self._registered.clear()
            self._cluster.invalidate_coordinator(HALF_MESSAGES, self.producer_group)
            self._closed.wait(0.2)

    def _answer(self, check: pb.TransactionCheck) -> None:
        assert self._listener is not None
        m = check.message
        msg = TransactionMessage(m.topic, m.partition, m.key if m.HasField("key") else None, m.value,
                                 tuple((h.key, h.value) for h in m.headers), m.message_id, check.transaction_id,
                                 check.producer_group, check.check_times, m.tag, m.keys)
        try:
            state = self._listener.check_local_transaction(msg)
        except Exception:
            log.exception("check_local_transaction failed for %s; answering UNKNOW", check.transaction_id)
            state = LocalTransactionState.UNKNOW
        if not isinstance(state, LocalTransactionState):
            state = LocalTransactionState.UNKNOW
        log.info("check-back %d of %s answered %s", check.check_times, check.transaction_id, state.value)
        self.end(check.transaction_id, m.message_id, state, pb.SOURCE_SERVER_CHECK)

    def close(self) -> None:
        self._closed.set()
        if self._call is not None:
            self._call.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)
