"""RocketMQ-style names (planned feature: a message bound to a local transaction, with check-back).

Only the vocabulary exists yet, so user code can be written against API.md's names.
"""
from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from typing import Any


class LocalTransactionState(enum.Enum):
    """RocketMQ's three answers, spelling included."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"


class TransactionListener(ABC):
    @abstractmethod
    def execute_local_transaction(self, msg: Any, arg: Any) -> LocalTransactionState: ...

    @abstractmethod
    def check_local_transaction(self, msg: Any) -> LocalTransactionState: ...
