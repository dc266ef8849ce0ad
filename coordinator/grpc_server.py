"""The node's gRPC server: calls that run take a worker slot, calls that wait give theirs up.

grpc's threaded server runs every call on a thread of its executor, so a bounded pool is held by whatever
waits in it: 320 long-polling fetches, or a RocketMQ client's Telemetry stream each for its whole life,
would hold every thread and stall every other call. Here the executor's threads only carry calls; what
bounds the node's work is a set of slots. A unary call runs in a slot (clients' calls in the clients'
slots, other nodes' calls, marked by their user agent, in slots of their own, so node-to-node work never
queues behind clients); a long-polling Fetch or a held JoinGroup/SyncGroup reads in a slot and then gives
it up while it waits on the node's future; a stream that lasts takes no slot at all. A waiting call still
parks the thread that carries it (an idle thread, not a worker); grpc's maximum_concurrent_rpcs bounds
how many there can be (past it a call is refused RESOURCE_EXHAUSTED).

An asyncio server would park nothing, but its hop from the event loop to the blocking logic and back
made a commit 25-40% slower here (docs/benchmarks.md); the threaded server with slots keeps the hot
paths as they were.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message import DecodeError

from proto.errors import InvalidRequestError

log = logging.getLogger(__name__)

#: RocketMQ's Code for a request it cannot read
_ROCKETMQ_BAD_REQUEST = 40000
#: the user agent of a node's calls to other nodes (grpc.primary_user_agent of their channels)
PEER_USER_AGENT = "txnsim-peer"

T = TypeVar("T")


class Malformed:
    """A request that did not parse, standing in for it so that its method answers the error."""

    def __init__(self, type_name: str, error: Exception) -> None:
        self.text = f"the request does not parse as {type_name}: {error}"


def _method_handler(method: MethodDescriptor, handler: Callable[..., Any]) -> grpc.RpcMethodHandler:
    request_class = message_factory.GetMessageClass(method.input_type)
    response_class = message_factory.GetMessageClass(method.output_type)

    def parse(raw: bytes) -> Any:
        try:
            return request_class.FromString(raw)
        except DecodeError as error:
            return Malformed(method.input_type.full_name, error)

    def answer_malformed(request: Any, context: Any, call: Callable[[Any, Any], Any]) -> Any:
        if not isinstance(request, Malformed):
            return call(request, context)
        fields = response_class.DESCRIPTOR.fields_by_name
        # the fields are the concrete message's; the stubs' Message takes no keywords
        make: Callable[..., Any] = response_class
        if "status" in fields:  # RocketMQ's services
            return make(status={"code": _ROCKETMQ_BAD_REQUEST, "message": request.text})
        if "error_code" in fields:
            return make(error_code=InvalidRequestError.errno, error_message=request.text)
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.text)

    serialize = response_class.SerializeToString
    if method.client_streaming:
        def each_parsed(requests: Any) -> Any:  # a malformed message of a stream is skipped, the stream goes on
            return (r for r in requests if not isinstance(r, Malformed))
        if method.server_streaming:
            return grpc.stream_stream_rpc_method_handler(
                lambda requests, context: handler(each_parsed(requests), context), parse, serialize)
        return grpc.stream_unary_rpc_method_handler(
            lambda requests, context: handler(each_parsed(requests), context), parse, serialize)
    if method.server_streaming:
        def stream(request: Any, context: Any) -> Any:
            if isinstance(request, Malformed):
                yield answer_malformed(request, context, handler)
                return
            yield from handler(request, context)
        return grpc.unary_stream_rpc_method_handler(stream, parse, serialize)
    return grpc.unary_unary_rpc_method_handler(
        lambda request, context: answer_malformed(request, context, handler), parse, serialize)


def is_peer(context: Any) -> bool:
    """Whether the call comes from another node of the cluster."""
    for key, value in context.invocation_metadata() or ():
        if key == "user-agent" and value.startswith(PEER_USER_AGENT):
            return True
    return False


class WorkerSlots:
    """How many calls of each kind run at once: clients' and other nodes' apart."""

    def __init__(self, client_slots: int, peer_slots: int) -> None:
        self._clients = threading.BoundedSemaphore(client_slots)
        self._peers = threading.BoundedSemaphore(peer_slots)

    @contextmanager
    def held(self, context: Any) -> Iterator[None]:
        slots = self._peers if is_peer(context) else self._clients
        with slots:
            yield

    def wait_outside(self, context: Any, start: Callable[[], Future[T]]) -> T:
        """`start()` in a slot, then its future's result with the slot given back meanwhile."""
        with self.held(context):
            pending = start()
        return pending.result()


class NodeGrpcServer:
    """grpc's threaded server, its calls bounded by WorkerSlots instead of by its executor."""

    def __init__(self, name: str, *, client_slots: int, peer_slots: int, max_calls: int,
                 options: list[tuple[str, Any]]) -> None:
        self.slots = WorkerSlots(client_slots, peer_slots)
        self._server = grpc.server(ThreadPoolExecutor(max_workers=max_calls, thread_name_prefix=f"rpc-{name}"),
                                   options=options, maximum_concurrent_rpcs=max_calls)

    def add(self, service: ServiceDescriptor, servicer: Any, *,
            waiting: dict[str, Callable[[Any, Any], Any]] | None = None, streams: frozenset[str] = frozenset()
            ) -> None:
        """Serve `servicer` (a generated ...Servicer subclass) as `service`. Each unary method runs in a slot;
        `waiting` methods are given instead, to take slots themselves (WorkerSlots.wait_outside); the methods
        named in `streams` take no slot (they last, and do little at a time). A request that does not parse is
        answered with the service's own error (INVALID_REQUEST, or RocketMQ's BAD_REQUEST) by its handler's
        stand-in, never with a gRPC error and a traceback in the log."""
        waiting = waiting or {}
        handlers: dict[str, grpc.RpcMethodHandler] = {}
        for method in service.methods:
            name = method.name
            handler = getattr(servicer, name)
            if name in waiting:
                handler = waiting[name]
            elif name not in streams:
                handler = (self._in_slot_stream(handler) if method.client_streaming or method.server_streaming
                           else self._in_slot(handler))
            handlers[name] = _method_handler(method, handler)
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))

    def _in_slot(self, handler: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        slots = self.slots

        def unary(request: Any, context: Any) -> Any:
            with slots.held(context):
                return handler(request, context)
        return unary

    def _in_slot_stream(self, handler: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        slots = self.slots

        def stream(request: Any, context: Any) -> Any:
            with slots.held(context):
                yield from handler(request, context)
        return stream

    def start(self, address: str) -> int:
        """Bind and start; the port bound (0 if it could not)."""
        port: int = self._server.add_insecure_port(address)
        if port:
            self._server.start()
        return port

    def stop(self, grace_s: float) -> None:
        self._server.stop(grace=grace_s).wait(grace_s + 1.5)
