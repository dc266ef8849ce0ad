"""Thin gRPC adapter over the TransactionCoordinator."""
from __future__ import annotations

from typing import Any

from coordinator.rpc import answers_with
from coordinator.txn.coordinator import TransactionCoordinator
from proto import txnsim_pb2 as pb
from proto import txnsim_pb2_grpc as rpc


class TransactionServicer(rpc.TransactionCoordinatorServicer):
    def __init__(self, coordinator: TransactionCoordinator, node_id: int) -> None:
        self._coordinator = coordinator
        self._node_id = node_id

    @answers_with(pb.InitProducerIdResponse)
    def InitProducerId(self, request: pb.InitProducerIdRequest, context: Any) -> pb.InitProducerIdResponse:
        return self._coordinator.init_producer_id(request)

    @answers_with(pb.AddPartitionsToTxnResponse)
    def AddPartitionsToTxn(self, request: pb.AddPartitionsToTxnRequest, context: Any) -> pb.AddPartitionsToTxnResponse:
        return self._coordinator.add_partitions(request)

    @answers_with(pb.AddOffsetsToTxnResponse)
    def AddOffsetsToTxn(self, request: pb.AddOffsetsToTxnRequest, context: Any) -> pb.AddOffsetsToTxnResponse:
        return self._coordinator.add_offsets(request)

    @answers_with(pb.EndTxnResponse)
    def EndTxn(self, request: pb.EndTxnRequest, context: Any) -> pb.EndTxnResponse:
        return self._coordinator.end_txn(request)

    @answers_with(pb.ListTransactionsResponse)
    def ListTransactions(self, request: pb.ListTransactionsRequest, context: Any) -> pb.ListTransactionsResponse:
        return self._coordinator.list_transactions(request)

    @answers_with(pb.DescribeTransactionsResponse)
    def DescribeTransactions(self, request: pb.DescribeTransactionsRequest,
                             context: Any) -> pb.DescribeTransactionsResponse:
        return self._coordinator.describe_transactions(request, self._node_id)

    @answers_with(pb.JoinBatchTxnResponse)
    def JoinBatchTxn(self, request: pb.JoinBatchTxnRequest, context: Any) -> pb.JoinBatchTxnResponse:
        return self._coordinator.join_batch(request)

    @answers_with(pb.EndBatchTxnResponse)
    def EndBatchTxn(self, request: pb.EndBatchTxnRequest, context: Any) -> pb.EndBatchTxnResponse:
        return self._coordinator.end_batch(request)
