"""Error codes a client of an older API version does not know, answered as Kafka answers them instead.

txnsim's logic raises one error for one condition (PRODUCER_FENCED for a fenced epoch, say); a code only
means something to a client whose request version came after it was added, so Kafka's KafkaApis answers
older versions with the code they knew. Every response on the Kafka port passes through `downgrade()`,
which rewrites each error code field it finds (`error_code`, `partition_error_code`, ...) at any depth, by this table (the versions are those of
Kafka's own message definitions, "Version N adds ..." in clients/src/main/resources/common/message, and the
downgrades those of KafkaApis and AddPartitionsToTxnManager).
"""
from __future__ import annotations

from typing import Any

from coordinator.kafka.apis import ApiKey
from proto import errors as e

#: a code that no version of the API carries
NEVER = 1 << 30

#: api -> error code -> (the first version that may carry it, the code older versions get)
DOWNGRADES: dict[ApiKey, dict[int, tuple[int, int]]] = {
    ApiKey.INIT_PRODUCER_ID: {
        e.ProducerFencedError.errno: (4, e.InvalidProducerEpochError.errno),
        e.TransactionAbortableError.errno: (5, e.InvalidTxnStateError.errno),
    },
    ApiKey.ADD_PARTITIONS_TO_TXN: {
        e.ProducerFencedError.errno: (2, e.InvalidProducerEpochError.errno),
        e.TransactionAbortableError.errno: (5, e.InvalidTxnStateError.errno),
    },
    ApiKey.ADD_OFFSETS_TO_TXN: {
        e.ProducerFencedError.errno: (2, e.InvalidProducerEpochError.errno),
        e.TransactionAbortableError.errno: (4, e.InvalidTxnStateError.errno),
    },
    ApiKey.END_TXN: {
        e.ProducerFencedError.errno: (2, e.InvalidProducerEpochError.errno),
        e.TransactionAbortableError.errno: (4, e.InvalidTxnStateError.errno),
    },
    # "Producers expect to handle INVALID_PRODUCER_EPOCH in this scenario" (AddPartitionsToTxnManager)
    ApiKey.PRODUCE: {
        e.ProducerFencedError.errno: (NEVER, e.InvalidProducerEpochError.errno),
        e.TransactionAbortableError.errno: (11, e.InvalidTxnStateError.errno),
    },
    ApiKey.TXN_OFFSET_COMMIT: {
        e.ProducerFencedError.errno: (NEVER, e.InvalidProducerEpochError.errno),
        e.TransactionAbortableError.errno: (4, e.InvalidTxnStateError.errno),
        # "older producer clients from 0.11 to prior 2.0 could potentially crash" (KafkaApis)
        e.CoordinatorLoadInProgressError.errno: (2, e.CoordinatorNotAvailableError.errno),
    },
    ApiKey.OFFSET_COMMIT: {e.GroupIdNotFoundError.errno: (9, e.IllegalGenerationError.errno)},
    ApiKey.FETCH: {e.KafkaStorageError.errno: (6, e.NotLeaderOrFollowerError.errno)},
}


def older_code(api: ApiKey, version: int, code: int) -> int:
    """The code a client of `api` at `version` is answered for `code`."""
    rule = DOWNGRADES.get(api, {}).get(code)
    if rule is None or version >= rule[0]:
        return code
    return rule[1]


def downgrade(response: Any, api: ApiKey, version: int) -> None:
    """Rewrite, in place, every error code of `response` its version does not know."""
    table = DOWNGRADES.get(api)
    if table:
        _walk(response, table, version)


def _walk(message: Any, table: dict[int, tuple[int, int]], version: int) -> None:
    for name in type(message).fields:
        value = getattr(message, name, None)
        if name == "error_code" or name.endswith("_error_code"):  # partition_error_code, ...
            rule = table.get(value) if isinstance(value, int) else None
            if rule is not None and version < rule[0]:
                setattr(message, name, rule[1])
        elif isinstance(value, list):
            for item in value:
                if hasattr(type(item), "fields"):
                    _walk(item, table, version)
        elif value is not None and hasattr(type(value), "fields"):
            _walk(value, table, version)
