"""The HalfMessages gRPC service: a thin adapter over HalfMessageCoordinator and the producer registry."""
from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

from coordinator.rocketmq.coordinator import HalfMessageCoordinator
from coordinator.rocketmq.producers import ProducerRegistry, QueueChannel
from coordinator.rpc import answers_with
from proto import txnsim_pb2 as pb
from proto import txnsim_pb2_grpc as rpc

log = logging.getLogger(__name__)


class HalfMessagesServicer(rpc.HalfMessagesServicer):
    def __init__(self, coordinator: HalfMessageCoordinator, registry: ProducerRegistry,
                 stopped: threading.Event) -> None:
        self._coordinator = coordinator
        self._registry = registry
        self._stopped = stopped

    @answers_with(pb.SendHalfMessageResponse)
    def SendHalfMessage(self, request: pb.SendHalfMessageRequest, context: Any) -> pb.SendHalfMessageResponse:
        return self._coordinator.send(request)

    @answers_with(pb.EndHalfTransactionResponse)
    def EndHalfTransaction(self, request: pb.EndHalfTransactionRequest, context: Any) -> pb.EndHalfTransactionResponse:
        return self._coordinator.end(request)

    def CheckBack(self, request: pb.CheckBackRequest, context: Any) -> Iterator[pb.TransactionCheck]:
        """Registers the caller as a live producer of its group until the stream ends. The first item
        is an empty check: the producer knows from it that it is registered."""
        channel = QueueChannel(request.client_id)
        self._registry.register(request.producer_group, channel)
        context.add_callback(channel.close)
        log.info("producer %s of group %r listens for check-backs", request.client_id, request.producer_group)
        try:
            yield pb.TransactionCheck(producer_group=request.producer_group)
            while context.is_active() and not self._stopped.is_set() and not channel.closed:
                check = channel.next(0.5)
                if check is not None:
                    yield check
        finally:
            channel.close()
            self._registry.unregister(request.producer_group, channel)
            log.info("producer %s of group %r left", request.client_id, request.producer_group)

    @answers_with(pb.DeliverCheckResponse)
    def DeliverCheck(self, request: pb.DeliverCheckRequest, context: Any) -> pb.DeliverCheckResponse:
        return self._coordinator.deliver_check(request)

    @answers_with(pb.ListHalfMessagesResponse)
    def ListHalfMessages(self, request: pb.ListHalfMessagesRequest, context: Any) -> pb.ListHalfMessagesResponse:
        return self._coordinator.list(request)

    @answers_with(pb.VerifyHalfWriteResponse)
    def VerifyHalfWrite(self, request: pb.VerifyHalfWriteRequest, context: Any) -> pb.VerifyHalfWriteResponse:
        return self._coordinator.verify_write(request)
