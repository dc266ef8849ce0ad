"""AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit on the Kafka port (transactions V1, as
Kafka clients speak them), answered by the transaction and group coordinators behind the gRPC services."""
from __future__ import annotations

from coordinator.group import GroupCoordinator
from coordinator.kafka.apis import ApiKey
from coordinator.kafka.dispatch import Handler
from coordinator.txn.coordinator import TransactionCoordinator


class TxnApis:
    def __init__(self, *, txn: TransactionCoordinator, groups: GroupCoordinator) -> None:
        self._txn = txn
        self._groups = groups

    def handlers(self) -> dict[ApiKey, Handler]:
        return {}
