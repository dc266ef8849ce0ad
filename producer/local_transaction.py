"""RocketMQ's vocabulary for a message bound to a local transaction (ROCKETMQ-REFERENCE §2): the
listener the application implements, its three answers, the message it is shown and the result
of send_message_in_transaction. Plain values; the protocol lives in half_transactions.py.
"""
from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from proto.records import Header


class LocalTransactionState(enum.Enum):
    """RocketMQ's three answers, spelling included."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"


@dataclass(frozen=True, slots=True)
class TransactionMessage:
    """The half message as the listener sees it (RocketMQ's Message / MessageExt)."""

    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    message_id: str
    transaction_id: str = ""
    producer_group: str = ""
    #: check-backs sent for this message so far, this one included (0 in execute_local_transaction)
    check_times: int = 0
    tag: str = ""
    keys: str = ""

    @property
    def body(self) -> bytes | None:
        """RocketMQ's name for the value."""
        return self.value

    def header(self, name: str) -> bytes | None:
        """The value of the user property `name` (None if absent)."""
        for key, value in self.headers:
            if key == name:
                return value
        return None


class TransactionListener(ABC):
    """Runs the local transaction, and answers check-backs from local state."""

    @abstractmethod
    def execute_local_transaction(self, msg: TransactionMessage, arg: Any) -> LocalTransactionState: ...

    @abstractmethod
    def check_local_transaction(self, msg: TransactionMessage) -> LocalTransactionState: ...


class SendStatus(enum.StrEnum):
    """RocketMQ's SendStatus. txnsim fsyncs every half message before it answers, so a stored message
    is always SEND_OK; a message that could not be stored is reported by the error's name."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"


@dataclass(frozen=True, slots=True)
class TransactionSendResult:
    """What send_message_in_transaction returns (RocketMQ's TransactionSendResult)."""

    send_status: str
    local_transaction_state: LocalTransactionState
    message_id: str
    transaction_id: str
    topic: str
    partition: int
    #: the half message's offset in its shard of RMQ_SYS_TRANS_HALF_TOPIC (-1 if it was not stored)
    queue_offset: int = -1
