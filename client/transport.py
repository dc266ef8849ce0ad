"""gRPC channels to nodes, with txnsim's deadlines, backoff and error mapping, for clients and nodes alike.

Invariant: no grpc.RpcError leaves this module. UNAVAILABLE becomes KafkaConnectionError
(retriable, refresh metadata), DEADLINE_EXCEEDED KafkaTimeoutError, anything else a
BrokerResponseError. Retries are tenacity's, configured here once.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_before_delay, wait_exponential, wait_random

from client import call_workers
from proto import txnsim_pb2_grpc as rpc
from proto.errors import (
    InvalidRequestError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    RecordTooLargeError,
    UnknownServerError,
    raise_for,
)

T = TypeVar("T")

MAX_MESSAGE_BYTES = 64 * 1024 * 1024

#: gRPC waits up to minutes between reconnects by default; a failed-over node must be
#: found again in well under a second, and keepalives notice a paused (SIGSTOPped) peer.
CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.keepalive_time_ms", 2000),
    ("grpc.keepalive_timeout_ms", 2000),
    # grpc-core 1.6x times an unanswered ping with this, not keepalive_timeout_ms (default: a
    # minute); without it a call to a SIGSTOPped node waits out its whole deadline
    ("grpc.http2.ping_timeout_ms", 2000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.enable_retries", 0),
    ("grpc.use_local_subchannel_pool", 1),
]

#: the matching server side: accept the clients' keepalive pings
SERVER_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 1000),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.so_reuseport", 0),
]


@dataclass(frozen=True, slots=True)
class Stubs:
    """The services of one node."""

    address: str
    cluster: rpc.ClusterStub
    partitions: rpc.PartitionsStub
    transactions: rpc.TransactionCoordinatorStub
    groups: rpc.GroupCoordinatorStub
    half: rpc.HalfMessagesStub


class NodeChannels:
    """One channel per node address, opened lazily and shared by every caller in the process."""

    def __init__(self, user_agent: str | None = None) -> None:
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, Stubs] = {}
        #: how the channels' calls introduce themselves (a node's calls to its peers say so: served apart)
        self._options = CHANNEL_OPTIONS + ([("grpc.primary_user_agent", user_agent)] if user_agent else [])

    def stubs(self, address: str) -> Stubs:
        with self._lock:
            stubs = self._stubs.get(address)
            if stubs is None:
                channel = grpc.insecure_channel(address, options=self._options)
                self._channels[address] = channel
                stubs = Stubs(address, rpc.ClusterStub(channel), rpc.PartitionsStub(channel),
                              rpc.TransactionCoordinatorStub(channel), rpc.GroupCoordinatorStub(channel),
                              rpc.HalfMessagesStub(channel))
                self._stubs[address] = stubs
            return stubs

    def close(self) -> None:
        with self._lock:
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()
            self._stubs.clear()


def call(method: Callable[..., T], request: Any, timeout_s: float, *, check: bool = True) -> T:
    """Invoke one unary RPC with a deadline; map transport failures and (if `check`) the response's error_code."""
    try:
        response = method(request, timeout=max(timeout_s, 0.001))
    except grpc.RpcError as exc:
        raise map_rpc_error(exc) from None
    if check:
        raise_for(getattr(response, "error_code", 0), getattr(response, "error_message", ""))
    return response


def call_future(method: Any, request: Any, timeout_s: float) -> grpc.Future:
    """Start one unary RPC without waiting; resolve it with `result_of`. Calls started one after another on a
    channel reach the node in that order and their answers are handled in the order they arrive (one gRPC
    thread per busy channel): the producer's pipelined Produce requests rely on both."""
    return method.future(request, timeout=max(timeout_s, 0.001))


def call_in_worker(method: Any, request: Any, timeout_s: float) -> grpc.Future:
    """call_future for a call that keeps no order with other calls on its channel (the only one of its kind
    in flight: a fetch per node, a group's join, AddPartitionsToTxn): made as a blocking call by a pooled
    worker thread, without the thread gRPC's future() starts on an idle channel (client.call_workers).
    Two such calls may reach the node, and be answered, in either order."""
    return call_workers.submit(method, request, max(timeout_s, 0.001))


def result_of(future: grpc.Future, *, check: bool = True) -> Any:
    try:
        response = future.result()
    except grpc.RpcError as exc:
        raise map_rpc_error(exc) from None
    if check:
        raise_for(getattr(response, "error_code", 0), getattr(response, "error_message", ""))
    return response


def map_rpc_error(exc: grpc.RpcError) -> KafkaError:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    if code == grpc.StatusCode.UNAVAILABLE or code == grpc.StatusCode.CANCELLED:
        return KafkaConnectionError(f"node unreachable: {details}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return KafkaTimeoutError(f"request timed out: {details}")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return RecordTooLargeError(f"[MESSAGE_TOO_LARGE] request exceeds {MAX_MESSAGE_BYTES} bytes: {details}")
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidRequestError(f"[INVALID_REQUEST] {details}")
    return UnknownServerError(f"[UNKNOWN_SERVER_ERROR] {code}: {details}")


def _is_retriable(exc: BaseException) -> bool:
    return isinstance(exc, KafkaError) and exc.retriable


def retrying(deadline_s: float, *, initial_backoff_s: float = 0.05, max_backoff_s: float = 1.0,
             before_retry: Callable[[BaseException], None] | None = None) -> Retrying:
    """Retry retriable KafkaErrors with exponential backoff until `deadline_s` from now.

    `before_retry` sees each failure first (e.g. to drop a cached coordinator).
    """
    def _before_sleep(state: RetryCallState) -> None:
        if before_retry is not None and state.outcome is not None:
            exc = state.outcome.exception()
            if exc is not None:
                before_retry(exc)

    return Retrying(
        retry=retry_if_exception(_is_retriable),
        wait=wait_exponential(multiplier=initial_backoff_s, max=max_backoff_s) + wait_random(0, initial_backoff_s),
        stop=stop_before_delay(max(deadline_s, 0.0)),
        before_sleep=_before_sleep,
        reraise=True,
    )


class Deadline:
    """A point in time that every step of an operation shares."""

    def __init__(self, seconds: float) -> None:
        self.expires_at = time.monotonic() + seconds

    def remaining(self) -> float:
        return max(0.0, self.expires_at - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.expires_at
