"""The calls a node makes of itself, answered by its own drivers instead of over the network: markers to
its own partitions, a first write's verification with its own coordinator or half shard, a half shard's
copy or in-place write to a partition it leads, and what it asks to find out which copies landed. One
dispatch for the node process (coordinator/node.py) and the simulated node.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coordinator.partition_service import PartitionServer
from coordinator.rocketmq.coordinator import HalfMessageCoordinator
from coordinator.runtime.io import Outcome
from coordinator.txn.coordinator import TransactionCoordinator
from proto import txnsim_pb2 as pb
from proto.errors import KafkaError, UnknownServerError


def serve_locally(request: Any, done: Callable[[Outcome], None], *, node_id: int, partitions: PartitionServer,
                  txn: TransactionCoordinator, half: HalfMessageCoordinator) -> None:
    """Answer `request` through `done`, in the caller's thread or once decided."""
    if isinstance(request, pb.WriteTxnMarkersRequest):
        partitions.write_txn_markers_async(request, done)
    elif isinstance(request, pb.AddPartitionsToTxnRequest):
        txn.request(request, done)
    elif isinstance(request, pb.ProduceRequest):
        partitions.produce_async(request, done)
    elif isinstance(request, (pb.VerifyHalfWriteRequest, pb.DeliverCheckRequest, pb.DescribeProducersRequest)):
        try:
            outcome: Outcome = (half.verify_write(request) if isinstance(request, pb.VerifyHalfWriteRequest)
                                else half.deliver_check(request) if isinstance(request, pb.DeliverCheckRequest)
                                else partitions.describe_producers(request))
        except KafkaError as exc:
            outcome = exc
        done(outcome)
    else:
        done(UnknownServerError(f"[UNKNOWN_SERVER_ERROR] node {node_id} cannot call itself with "
                                f"{type(request).__name__}"))
