"""RocketMQ 5's front door: `apache.rocketmq.v2.MessagingService`, served by every node on its txnsim
port, so the official RocketMQ 5 clients work against txnsim unchanged. A thin adapter: normal
messages go to the partition's owner through PartitionServer.produce (Produce for another node),
transactional ones to HalfMessageCoordinator on the owner of the group's shard, check-backs leave
through the ProducerRegistry, pops through PopService.

Invariant: every call answers with a RocketMQ Status (rmq_wire.code_for), never a gRPC error.
"""
from __future__ import annotations

import functools
import ipaddress
import itertools
import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from client.transport import Stubs, call
from coordinator.membership import ClusterOwnership
from coordinator.partition_service import PartitionServer
from coordinator.rocketmq import rmq_messages
from coordinator.rocketmq.coordinator import HalfMessageCoordinator
from coordinator.rocketmq.log_format import parse_transaction_id
from coordinator.rocketmq.pop_service import PopService
from coordinator.rocketmq.producers import ProducerRegistry
from coordinator.rocketmq.rmq_wire import rmq, rmq_grpc, rmq_service, status, status_for
from coordinator.rocketmq.routing import OwnerRouter
from coordinator.rocketmq.telemetry import TelemetrySession
from coordinator.topics import TopicCatalog
from proto import txnsim_pb2 as pb
from proto.errors import (
    IllegalInvisibleTimeError,
    IllegalMessageIdError,
    InvalidRequestError,
    InvalidTopicError,
    InvalidTransactionIdError,
    KafkaError,
    MessagePropertyConflictWithTypeError,
    RecordTooLargeError,
    TopicNotFoundError,
    UnsupportedError,
    raise_for,
)
from proto.hashing import partition_for, partition_for_key
from proto.structs import HALF_TOPIC, TopicPartition

log = logging.getLogger(__name__)

CLIENT_ID = "x-mq-client-id"
_DEFAULT_LONG_POLL_S = 20.0
_MAX_LONG_POLL_S = 30.0
#: a receive answers this long before the client's deadline
_ANSWER_MARGIN_S = 0.5
_MAX_BATCH = 1024
_RESOLUTIONS = {rmq.COMMIT: pb.RESOLUTION_COMMIT, rmq.ROLLBACK: pb.RESOLUTION_ROLLBACK,
                rmq.TRANSACTION_RESOLUTION_UNSPECIFIED: pb.RESOLUTION_UNKNOWN}
_SOURCES = {rmq.SOURCE_CLIENT: pb.SOURCE_CLIENT, rmq.SOURCE_SERVER_CHECK: pb.SOURCE_SERVER_CHECK,
            rmq.SOURCE_UNSPECIFIED: pb.SOURCE_CLIENT}


def answers_with_status(response_type: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Turn a KafkaError (or a node bug) into `response_type(status=...)`: the client reads only the status."""
    def decorate(handler: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(handler)
        def wrapper(self: Any, request: Any, context: Any) -> Any:
            try:
                return handler(self, request, context)
            except KafkaError as exc:
                return response_type(status=status_for(exc))
            except Exception as exc:  # a node bug: answer, log, keep serving
                log.exception("RocketMQ %s failed", handler.__name__)
                return response_type(status=status(rmq.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"))
        return wrapper
    return decorate


def client_id_of(context: Any) -> str:
    return next((value for key, value in context.invocation_metadata() if key == CLIENT_ID), "")


class MessagingFrontDoor(rmq_grpc.MessagingServiceServicer):  # type: ignore[misc]  # rocketmq ships no hints: Any
    def __init__(self, *, node_id: int, address_of: Callable[[int], str], membership: ClusterOwnership,
                 topics: TopicCatalog, partitions: PartitionServer, half: HalfMessageCoordinator,
                 producers: ProducerRegistry, router: OwnerRouter, half_shards: int, message_max_bytes: int,
                 stopped: threading.Event, now_ms: Callable[[], int], pop: PopService | None = None,
                 request_timeout_s: float = 5.0) -> None:
        self._node_id = node_id
        self._address_of = address_of
        self._membership = membership
        self._topics = topics
        self._partitions = partitions
        self._half = half
        self._producers = producers
        self._half_shards = half_shards
        self._max_bytes = message_max_bytes
        self._stopped = stopped
        self._now_ms = now_ms
        self._pop = pop
        self._timeout_s = request_timeout_s
        self._router = router
        self._turns: dict[str, itertools.count[int]] = defaultdict(itertools.count)
        self._lock = threading.Lock()
        self._sessions: dict[str, set[TelemetrySession]] = defaultdict(set)

    # ------------------------------------------------------------ routes

    @answers_with_status(rmq_service.QueryRouteResponse)
    def QueryRoute(self, request: rmq_service.QueryRouteRequest, context: Any) -> rmq_service.QueryRouteResponse:
        """One queue per partition, on its owner (on its preferred node while no node owns it, so the
        queue list never changes shape; a send there fails and the client tries its next queue). Queue ids
        count per broker, 0 up, as a RocketMQ broker numbers its own queues (the Node.js client uses only
        queue 0 of each broker: with ids per partition it would reach one node only)."""
        topic = request.topic.name
        count = self._partition_count(topic)
        accepted = rmq_messages.accepted_types(self._topics.configs(topic))
        queues = []
        for owner, partitions in sorted(self._queues_by_broker(topic, count).items()):
            for queue_id, _partition in enumerate(partitions):
                queues.append(rmq.MessageQueue(
                    topic=rmq.Resource(name=topic, resource_namespace=request.topic.resource_namespace), id=queue_id,
                    permission=rmq.READ_WRITE, accept_message_types=accepted,
                    broker=rmq.Broker(name=f"node-{owner}", id=0, endpoints=_endpoints(self._address_of(owner)))))
        return rmq_service.QueryRouteResponse(status=status(), message_queues=queues)

    def _queues_by_broker(self, topic: str, count: int) -> dict[int, list[int]]:
        """node -> the partitions its queues stand for, in queue-id order."""
        by_broker: dict[int, list[int]] = defaultdict(list)
        for partition in range(count):
            owner = self._membership.owner(topic, partition)
            if owner < 0:
                owner = self._membership.placement.owner(topic, partition)
            by_broker[owner].append(partition)
        return by_broker

    def _partition_count(self, topic: str) -> int:
        if not topic:
            raise InvalidRequestError("[INVALID_REQUEST] the request names no topic")
        count = self._topics.partitions(topic)
        if count is None:
            raise TopicNotFoundError(f"[TOPIC_NOT_FOUND] topic {topic!r} does not exist; create it first "
                                     "(txnsim topics create, or Admin.create_topic)")
        return count

    # ------------------------------------------------------------ clients

    @answers_with_status(rmq_service.HeartbeatResponse)
    def Heartbeat(self, request: rmq_service.HeartbeatRequest, context: Any) -> rmq_service.HeartbeatResponse:
        return rmq_service.HeartbeatResponse(status=status())

    @answers_with_status(rmq_service.NotifyClientTerminationResponse)
    def NotifyClientTermination(self, request: rmq_service.NotifyClientTerminationRequest,
                                context: Any) -> rmq_service.NotifyClientTerminationResponse:
        with self._lock:
            sessions = set(self._sessions.get(client_id_of(context), ()))
        for session in sessions:
            session.retire()  # its streams stay open until the client closes them, as the proxy leaves them
        return rmq_service.NotifyClientTerminationResponse(status=status())

    def Telemetry(self, request_iterator: Iterator[rmq_service.TelemetryCommand],
                  context: Any) -> Iterator[rmq_service.TelemetryCommand]:
        """Answers settings, carries check-backs to a producer; open until the client cancels it."""
        session = TelemetrySession(client_id_of(context), self._producers, self._max_bytes)
        with self._lock:
            self._sessions[session.client_id].add(session)
        threading.Thread(target=self._read_telemetry, args=(request_iterator, session),
                         name=f"telemetry-{session.client_id}", daemon=True).start()
        try:
            while not session.closed and not self._stopped.is_set() and context.is_active():
                command = session.next(0.5)
                if command is not None:
                    yield command
        finally:
            session.close()
            with self._lock:
                self._sessions[session.client_id].discard(session)
                if not self._sessions[session.client_id]:
                    del self._sessions[session.client_id]

    @staticmethod
    def _read_telemetry(request_iterator: Iterator[rmq_service.TelemetryCommand], session: TelemetrySession) -> None:
        try:
            for command in request_iterator:
                session.received(command)
        except Exception as exc:  # the client went away mid-read: grpc raises whatever it raises
            log.debug("telemetry stream of %s ended: %s", session.client_id, exc)
        finally:
            session.close()

    # ------------------------------------------------------------ sending

    def SendMessage(self, request: rmq_service.SendMessageRequest, context: Any) -> rmq_service.SendMessageResponse:
        """One entry per message; the response's status is the first failure's (the client reads only it)."""
        if not request.messages:
            return rmq_service.SendMessageResponse(status=status(rmq.BAD_REQUEST, "the request carries no message"))
        entries = [self._send_one(message) for message in request.messages]
        failed = next((e.status for e in entries if e.status.code != rmq.OK), None)
        return rmq_service.SendMessageResponse(status=failed or status(), entries=entries)

    def _send_one(self, message: rmq.Message) -> rmq_service.SendResultEntry:
        message_id = message.system_properties.message_id
        try:
            rmq_messages.validate(message)
            topic = message.topic.name
            count = self._partition_count(topic)
            kind = message.system_properties.message_type or rmq.NORMAL
            accepted = rmq_messages.accepted_types(self._topics.configs(topic))
            if kind not in accepted:
                raise MessagePropertyConflictWithTypeError(
                    f"[MESSAGE_PROPERTY_CONFLICT_WITH_TYPE] topic {topic!r} accepts "
                    f"{', '.join(map(rmq_messages.type_name, accepted))} messages, not {rmq_messages.type_name(kind)}")
            if len(message.body) > self._max_bytes:
                raise RecordTooLargeError(f"[MESSAGE_TOO_LARGE] the body is {len(message.body)} bytes; at most "
                                          f"{self._max_bytes} are accepted")
            if kind == rmq.TRANSACTION:
                return self._send_half(message, self._choose_partition(topic, count))
            if kind == rmq.FIFO:  # one message group, one partition: its order is kept
                partition = partition_for_key(message.system_properties.message_group.encode(), count)
            elif kind == rmq.NORMAL:
                partition = self._choose_partition(topic, count)
            else:
                raise UnsupportedError(f"[UNSUPPORTED] {rmq_messages.type_name(kind)} messages are not served by "
                                       "txnsim; send NORMAL, FIFO or TRANSACTION")
            offset = self._append(TopicPartition(topic, partition),
                                  rmq_messages.encode_normal(message, self._now_ms(), self._max_bytes))
            return rmq_service.SendResultEntry(status=status(), message_id=message_id, offset=offset)
        except KafkaError as exc:
            return rmq_service.SendResultEntry(status=status_for(exc), message_id=message_id)
        except Exception as exc:  # a node bug: answer, log, keep serving
            log.exception("RocketMQ send of %s failed", message_id)
            return rmq_service.SendResultEntry(status=status(rmq.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"),
                                               message_id=message_id)

    def _choose_partition(self, topic: str, count: int) -> int:
        """Round-robin over the topic's partitions this node owns (a local append, as a RocketMQ broker
        writes its own queues); over all of them, forwarded, when it owns none."""
        owned = [p for p in range(count) if self._membership.owner(topic, p) == self._node_id]
        candidates = owned or list(range(count))
        return candidates[next(self._turns[topic]) % len(candidates)]

    def _append(self, tp: TopicPartition, batch: bytes) -> int:
        """Append durably on the partition's owner; the offset of the message."""
        request = pb.ProduceRequest(acks=-1, timeout_ms=int(self._timeout_s * 1000), partitions=[
            pb.PartitionRecords(topic=tp.topic, partition=tp.partition, records=batch)])

        def produce(stubs: Stubs | None, timeout_s: float) -> pb.PartitionProduceResult:
            response = (self._partitions.produce(request) if stubs is None
                        else call(stubs.partitions.Produce, request, timeout_s))
            result = response.partitions[0]
            raise_for(result.error_code, result.error_message)
            return result

        return self._router.call(tp.topic, tp.partition, produce).base_offset

    def _send_half(self, message: rmq.Message, partition: int) -> rmq_service.SendResultEntry:
        topic = message.topic.name
        request = pb.SendHalfMessageRequest(producer_group=topic,
                                            message=rmq_messages.half_message_of(message, partition, self._max_bytes))

        def send(stubs: Stubs | None, timeout_s: float) -> pb.SendHalfMessageResponse:
            return self._half.send(request) if stubs is None else call(stubs.half.SendHalfMessage, request, timeout_s)

        shard = partition_for(topic, self._half_shards)
        response = self._router.call(HALF_TOPIC, shard, send)
        return rmq_service.SendResultEntry(status=status(), message_id=message.system_properties.message_id,
                                           transaction_id=response.transaction_id, offset=response.half_offset)

    @answers_with_status(rmq_service.EndTransactionResponse)
    def EndTransaction(self, request: rmq_service.EndTransactionRequest,
                       context: Any) -> rmq_service.EndTransactionResponse:
        """COMMIT / ROLLBACK (UNSPECIFIED: still unknown, nothing is done) on the owner of the shard
        the transaction id names; the producer group is the topic, as RocketMQ 5's proxy has it."""
        if not request.topic.name:  # the producer group is the topic (below)
            raise InvalidTopicError("[ILLEGAL_TOPIC] EndTransaction needs the topic of the message it ends")
        if not request.transaction_id:
            raise InvalidTransactionIdError("[INVALID_TRANSACTION_ID] transaction id cannot be empty")
        if not request.message_id:
            raise IllegalMessageIdError("[ILLEGAL_MESSAGE_ID] EndTransaction needs the id of the message it ends")
        parsed = parse_transaction_id(request.transaction_id)
        if parsed is None or parsed[0] >= self._half_shards:
            raise InvalidTransactionIdError(f"[INVALID_TRANSACTION_ID] {request.transaction_id!r} is not a "
                                            "transaction id this cluster gave out")
        if request.resolution not in _RESOLUTIONS:
            raise InvalidRequestError(f"[INVALID_REQUEST] unknown transaction resolution {request.resolution}")
        end = pb.EndHalfTransactionRequest(
            transaction_id=request.transaction_id, producer_group=request.topic.name, message_id=request.message_id,
            resolution=_RESOLUTIONS[request.resolution], source=_SOURCES.get(request.source, pb.SOURCE_CLIENT))

        def decide(stubs: Stubs | None, timeout_s: float) -> pb.EndHalfTransactionResponse:
            return self._half.end(end) if stubs is None else call(stubs.half.EndHalfTransaction, end, timeout_s)

        self._router.call(HALF_TOPIC, parsed[0], decide)
        return rmq_service.EndTransactionResponse(status=status())

    # ------------------------------------------------------------ SimpleConsumer (pop)

    def ReceiveMessage(self, request: rmq_service.ReceiveMessageRequest,
                       context: Any) -> Iterator[rmq_service.ReceiveMessageResponse]:
        """Messages, then a status (MESSAGE_NOT_FOUND when the long poll ended empty), then the
        delivery time; the stream ends within the long-polling timeout (the client reads to its end)."""
        try:
            deliveries, invisible_ms = self._receive(request, context)
        except KafkaError as exc:
            yield rmq_service.ReceiveMessageResponse(status=status_for(exc))
            return
        except Exception as exc:  # a node bug: answer, log, keep serving
            log.exception("RocketMQ receive failed")
            yield rmq_service.ReceiveMessageResponse(status=status(rmq.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"))
            return
        if not deliveries:
            yield rmq_service.ReceiveMessageResponse(status=status(rmq.MESSAGE_NOT_FOUND, "no new message"))
            return
        for delivery in deliveries:
            message = rmq_messages.message_of_record(delivery.handle.topic, delivery.handle.partition, delivery.message)
            message.system_properties.receipt_handle = delivery.handle.encode()
            message.system_properties.delivery_attempt = delivery.attempt
            message.system_properties.invisible_duration.FromMilliseconds(invisible_ms)
            yield rmq_service.ReceiveMessageResponse(message=message)
        yield rmq_service.ReceiveMessageResponse(status=status())
        now = rmq_service.ReceiveMessageResponse()
        now.delivery_timestamp.FromMilliseconds(self._now_ms())
        yield now

    def _receive(self, request: rmq_service.ReceiveMessageRequest, context: Any) -> tuple[list[Any], int]:
        if self._pop is None:
            raise UnsupportedError("[UNSUPPORTED] this node serves no SimpleConsumer")
        group, topic = request.group.name, request.message_queue.topic.name
        if not group:
            raise InvalidRequestError("[INVALID_REQUEST] a receive needs its consumer group")
        self._partition_count(topic)
        invisible_ms = request.invisible_duration.ToMilliseconds() if request.HasField("invisible_duration") else 0
        if invisible_ms <= 0:
            raise IllegalInvisibleTimeError(f"[ILLEGAL_INVISIBLE_TIME] invisible duration must be positive, not "
                                            f"{invisible_ms} ms")
        wait_s = (request.long_polling_timeout.ToMilliseconds() / 1000
                  if request.HasField("long_polling_timeout") else _DEFAULT_LONG_POLL_S)
        remaining = context.time_remaining()
        if remaining is not None:  # end before the client's deadline, or the batch is lost
            wait_s = min(wait_s, max(remaining - _ANSWER_MARGIN_S, 0.0))
        batch_size = min(max(request.batch_size, 1), _MAX_BATCH)
        matches = rmq_messages.tag_filter(request.filter_expression)
        mine = self._queues_by_broker(topic, self._partition_count(topic)).get(self._node_id, [])
        queue_id = request.message_queue.id
        first = mine[queue_id] if 0 <= queue_id < len(mine) else 0  # where this node's pops start
        deliveries = self._pop.receive(group, topic, first, batch_size, invisible_ms, min(wait_s, _MAX_LONG_POLL_S),
                                       matches)
        return deliveries, invisible_ms

    @answers_with_status(rmq_service.AckMessageResponse)
    def AckMessage(self, request: rmq_service.AckMessageRequest, context: Any) -> rmq_service.AckMessageResponse:
        """Per-entry statuses; the response's is the first failure's. An ack answers once durable."""
        if self._pop is None:
            raise UnsupportedError("[UNSUPPORTED] this node serves no SimpleConsumer")
        if not request.group.name or not request.entries:
            raise InvalidRequestError("[INVALID_REQUEST] an ack needs its consumer group and at least one entry")
        errors = self._pop.ack(request.group.name, request.topic.name, [e.receipt_handle for e in request.entries])
        entries = [rmq_service.AckMessageResultEntry(
            message_id=entry.message_id, receipt_handle=entry.receipt_handle,
            status=status() if error is None else status_for(error)) for entry, error in zip(request.entries, errors)]
        failed = next((e.status for e in entries if e.status.code != rmq.OK), None)
        return rmq_service.AckMessageResponse(status=failed or status(), entries=entries)

    @answers_with_status(rmq_service.ChangeInvisibleDurationResponse)
    def ChangeInvisibleDuration(self, request: rmq_service.ChangeInvisibleDurationRequest,
                                context: Any) -> rmq_service.ChangeInvisibleDurationResponse:
        """A new receipt handle (the client stores it before it looks at the status); the old one is void."""
        if self._pop is None:
            raise UnsupportedError("[UNSUPPORTED] this node serves no SimpleConsumer")
        invisible_ms = request.invisible_duration.ToMilliseconds()
        if invisible_ms <= 0:
            raise IllegalInvisibleTimeError(f"[ILLEGAL_INVISIBLE_TIME] invisible duration must be positive, not "
                                            f"{invisible_ms} ms")
        handle = self._pop.change_invisible(request.group.name, request.topic.name, request.receipt_handle,
                                            invisible_ms)
        return rmq_service.ChangeInvisibleDurationResponse(status=status(), receipt_handle=handle.encode())

    # ------------------------------------------------------------ what txnsim does not serve

    def _unsupported(self, response_type: type, what: str) -> Any:
        return response_type(status=status(rmq.UNSUPPORTED, f"{what} is not served by txnsim; use a "
                                                            "SimpleConsumer or txnsim's own consumer"))

    def QueryAssignment(self, request: Any, context: Any) -> Any:
        return self._unsupported(rmq_service.QueryAssignmentResponse, "QueryAssignment (PushConsumer)")

    def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:
        return self._unsupported(rmq_service.ForwardMessageToDeadLetterQueueResponse, "the dead-letter queue")

    def PullMessage(self, request: Any, context: Any) -> Iterator[Any]:
        yield self._unsupported(rmq_service.PullMessageResponse, "PullMessage (PullConsumer)")

    def UpdateOffset(self, request: Any, context: Any) -> Any:
        return self._unsupported(rmq_service.UpdateOffsetResponse, "UpdateOffset (PullConsumer)")

    def GetOffset(self, request: Any, context: Any) -> Any:
        return self._unsupported(rmq_service.GetOffsetResponse, "GetOffset (PullConsumer)")

    def QueryOffset(self, request: Any, context: Any) -> Any:
        return self._unsupported(rmq_service.QueryOffsetResponse, "QueryOffset (PullConsumer)")

    def RecallMessage(self, request: Any, context: Any) -> Any:
        return self._unsupported(rmq_service.RecallMessageResponse, "RecallMessage (delay messages)")

    def SyncLiteSubscription(self, request: Any, context: Any) -> Any:
        return self._unsupported(rmq_service.SyncLiteSubscriptionResponse, "lite topics")


def _endpoints(address: str) -> rmq.Endpoints:
    host, port = address.rsplit(":", 1)
    try:
        scheme = rmq.IPv4 if ipaddress.ip_address(host).version == 4 else rmq.IPv6
    except ValueError:
        scheme = rmq.DOMAIN_NAME
    return rmq.Endpoints(scheme=scheme, addresses=[rmq.Address(host=host, port=int(port))])
