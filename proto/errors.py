"""Every error txnsim raises, with Kafka's names and codes, in one hierarchy.

KafkaError
 ├── IllegalStateError, KafkaConfigurationError      (client misuse, never on the wire)
 ├── KafkaTimeoutError, KafkaConnectionError          (client side, retriable)
 ├── TransactionAbortedError                          (client side: a record discarded by abort)
 └── BrokerResponseError                              (one class per wire code; for_code() maps back)

Nodes and clients share this module, so a code means the same thing on both sides of
the wire. `retriable` says whether retrying the same request can succeed; for the
transactional producer, `abortable`/`fatal` follow Kafka's rules (KAFKA-REFERENCE §3).
"""
from __future__ import annotations

from typing import ClassVar


class KafkaError(RuntimeError):
    """Root of every txnsim error."""

    retriable: ClassVar[bool] = False
    #: the producer can still abort_transaction() after this error
    abortable: ClassVar[bool] = False
    #: the producer instance is unusable after this error; only close() remains
    fatal: ClassVar[bool] = False
    #: the client should refresh metadata (leaders, coordinators) before retrying
    invalid_metadata: ClassVar[bool] = False

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.__class__.__doc__ or self.__class__.__name__)

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class IllegalStateError(KafkaError):
    """A call made in a state that does not allow it (e.g. commit before begin)."""


class KafkaConfigurationError(KafkaError):
    """A client or node setting is invalid."""


class KafkaTimeoutError(KafkaError):
    """The operation did not finish before its deadline."""

    retriable = True


class KafkaConnectionError(KafkaError):
    """A node could not be reached."""

    retriable = True
    invalid_metadata = True


class TransactionAbortedError(KafkaError):
    """The transaction was aborted before this record was sent; it was not written (Kafka's
    TransactionAbortedException: client side, no wire code)."""


class BrokerResponseError(KafkaError):
    """An error code returned by a node."""

    errno: ClassVar[int] = -1
    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"


def _code(class_name: str, errno: int, name: str, *, retriable: bool = False, abortable: bool = False,
          fatal: bool = False, invalid_metadata: bool = False, doc: str = "") -> type[BrokerResponseError]:
    """Build one BrokerResponseError subclass; the tables below read better than 40 classes."""
    attrs = {"errno": errno, "name": name, "retriable": retriable, "abortable": abortable,
             "fatal": fatal, "invalid_metadata": invalid_metadata, "__doc__": doc}
    return type(class_name, (BrokerResponseError,), attrs)


UnknownServerError = _code("UnknownServerError", -1, "UNKNOWN_SERVER_ERROR", doc="An unexpected error on the node.")
CorruptMessageError = _code("CorruptMessageError", 2, "CORRUPT_MESSAGE", retriable=True,
                            doc="A record batch failed its checksum or could not be parsed.")
UnknownTopicOrPartitionError = _code("UnknownTopicOrPartitionError", 3, "UNKNOWN_TOPIC_OR_PARTITION", retriable=True, invalid_metadata=True,
                                     doc="The topic or partition does not exist.")
InvalidFetchSizeError = _code("InvalidFetchSizeError", 4, "INVALID_FETCH_SIZE", doc="The requested fetch size is invalid.")
NotLeaderOrFollowerError = _code("NotLeaderOrFollowerError", 6, "NOT_LEADER_OR_FOLLOWER", retriable=True, invalid_metadata=True,
                                 doc="This node does not own that partition.")
RequestTimedOutError = _code("RequestTimedOutError", 7, "REQUEST_TIMED_OUT", retriable=True, doc="The request timed out on the node.")
RecordTooLargeError = _code("RecordTooLargeError", 10, "MESSAGE_TOO_LARGE", abortable=True,
                            doc="A record or batch is larger than the node accepts (message_max_bytes).")
MessageTooLargeError = RecordTooLargeError
OffsetOutOfRangeError = _code("OffsetOutOfRangeError", 1, "OFFSET_OUT_OF_RANGE", doc="The offset is outside the log's range.")
CoordinatorLoadInProgressError = _code("CoordinatorLoadInProgressError", 14, "COORDINATOR_LOAD_IN_PROGRESS", retriable=True,
                                       doc="The coordinator is still loading its shard.")
CoordinatorNotAvailableError = _code("CoordinatorNotAvailableError", 15, "COORDINATOR_NOT_AVAILABLE", retriable=True, invalid_metadata=True,
                                     doc="The coordinator is not available.")
NotCoordinatorError = _code("NotCoordinatorError", 16, "NOT_COORDINATOR", retriable=True, invalid_metadata=True,
                            doc="This node is not the coordinator for that key.")
InvalidTopicError = _code("InvalidTopicError", 17, "INVALID_TOPIC_EXCEPTION", doc="The topic name is invalid.")
RecordListTooLargeError = _code("RecordListTooLargeError", 18, "RECORD_LIST_TOO_LARGE", abortable=True, doc="The batch is too large.")
NotEnoughReplicasError = _code("NotEnoughReplicasError", 19, "NOT_ENOUGH_REPLICAS", retriable=True, doc="Not enough replicas.")
IllegalGenerationError = _code("IllegalGenerationError", 22, "ILLEGAL_GENERATION", abortable=True,
                               doc="The group generation is not current.")
UnknownMemberIdError = _code("UnknownMemberIdError", 25, "UNKNOWN_MEMBER_ID", abortable=True, doc="The group member is unknown.")
InvalidSessionTimeoutError = _code("InvalidSessionTimeoutError", 26, "INVALID_SESSION_TIMEOUT", doc="The session timeout is out of range.")
RebalanceInProgressError = _code("RebalanceInProgressError", 27, "REBALANCE_IN_PROGRESS", doc="The group is rebalancing; rejoin.")
InvalidCommitOffsetSizeError = _code("InvalidCommitOffsetSizeError", 28, "INVALID_COMMIT_OFFSET_SIZE", doc="The offset metadata is too large.")
TopicAlreadyExistsError = _code("TopicAlreadyExistsError", 36, "TOPIC_ALREADY_EXISTS", doc="The topic already exists.")
InvalidPartitionsError = _code("InvalidPartitionsError", 37, "INVALID_PARTITIONS", doc="The partition count is invalid.")
InvalidConfigError = _code("InvalidConfigError", 40, "INVALID_CONFIG", doc="A topic setting is invalid.")
InvalidRequestError = _code("InvalidRequestError", 42, "INVALID_REQUEST", doc="The request is malformed.")
OutOfOrderSequenceError = _code("OutOfOrderSequenceError", 45, "OUT_OF_ORDER_SEQUENCE_NUMBER", abortable=True,
                                doc="The batch's sequence number does not follow the last one.")
DuplicateSequenceError = _code("DuplicateSequenceError", 46, "DUPLICATE_SEQUENCE_NUMBER", doc="The batch was already written.")
InvalidProducerEpochError = _code("InvalidProducerEpochError", 47, "INVALID_PRODUCER_EPOCH", abortable=True,
                                  doc="The producer epoch is older than the partition's.")
InvalidTxnStateError = _code("InvalidTxnStateError", 48, "INVALID_TXN_STATE", fatal=True,
                             doc="The request is not valid in the transaction's state.")
InvalidProducerIdMappingError = _code("InvalidProducerIdMappingError", 49, "INVALID_PRODUCER_ID_MAPPING", abortable=True,
                                      doc="The producer id does not belong to that transactional id.")
InvalidTransactionTimeoutError = _code("InvalidTransactionTimeoutError", 50, "INVALID_TRANSACTION_TIMEOUT", fatal=True,
                                       doc="The transaction timeout is out of range.")
ConcurrentTransactionsError = _code("ConcurrentTransactionsError", 51, "CONCURRENT_TRANSACTIONS", retriable=True,
                                    doc="The previous transaction of this id is still completing.")
TransactionCoordinatorFencedError = _code("TransactionCoordinatorFencedError", 52, "TRANSACTION_COORDINATOR_FENCED",
                                          doc="A newer coordinator has taken over this producer.")
OperationNotAttemptedError = _code("OperationNotAttemptedError", 55, "OPERATION_NOT_ATTEMPTED",
                                   doc="Not attempted because another part of the request failed.")
KafkaStorageError = _code("KafkaStorageError", 56, "KAFKA_STORAGE_ERROR", retriable=True, doc="The log could not be written.")
UnknownProducerIdError = _code("UnknownProducerIdError", 59, "UNKNOWN_PRODUCER_ID", abortable=True, doc="The producer id is unknown.")
GroupIdNotFoundError = _code("GroupIdNotFoundError", 69, "GROUP_ID_NOT_FOUND", doc="The group does not exist.")
InconsistentGroupProtocolError = _code("InconsistentGroupProtocolError", 23, "INCONSISTENT_GROUP_PROTOCOL",
                                       doc="The member's protocol type or assignors do not match the group's.")
InvalidGroupIdError = _code("InvalidGroupIdError", 24, "INVALID_GROUP_ID", doc="The group id is invalid.")
NonEmptyGroupError = _code("NonEmptyGroupError", 68, "NON_EMPTY_GROUP", doc="The group has members; it cannot be deleted.")
MemberIdRequiredError = _code("MemberIdRequiredError", 79, "MEMBER_ID_REQUIRED",
                              doc="Rejoin with the member id the coordinator just gave.")
FencedInstanceIdError = _code("FencedInstanceIdError", 82, "FENCED_INSTANCE_ID", abortable=True, doc="A newer static member took over.")
InvalidRecordError = _code("InvalidRecordError", 87, "INVALID_RECORD", abortable=True, doc="The record is invalid.")
UnstableOffsetCommitError = _code("UnstableOffsetCommitError", 88, "UNSTABLE_OFFSET_COMMIT", retriable=True,
                                  doc="A transactional offset commit for this partition is undecided.")
ProducerFencedError = _code("ProducerFencedError", 90, "PRODUCER_FENCED", fatal=True,
                            doc="A newer producer with the same transactional id has fenced this one.")
TransactionalIdNotFoundError = _code("TransactionalIdNotFoundError", 105, "TRANSACTIONAL_ID_NOT_FOUND", doc="The transactional id is unknown.")
TransactionAbortableError = _code("TransactionAbortableError", 120, "TRANSACTION_ABORTABLE", abortable=True,
                                  doc="The transaction cannot commit; abort it.")



# RocketMQ's status codes (apache.rocketmq.v2.Code) for the half-message API: their numbers do not
# collide with Kafka's, so one table serves both protocols.
class RocketMQError(BrokerResponseError):
    """An error of RocketMQ's half-message protocol (ROCKETMQ-REFERENCE §5)."""


class InvalidTransactionIdError(RocketMQError):
    """The transaction id is unknown, or that transaction was decided otherwise."""

    errno = 40008
    name = "INVALID_TRANSACTION_ID"


class IllegalMessagePropertyKeyError(RocketMQError):
    """A message property uses a name RocketMQ reserves for its own properties."""

    errno = 40007
    name = "ILLEGAL_MESSAGE_PROPERTY_KEY"


class MessagePropertyConflictWithTypeError(RocketMQError):
    """The topic does not accept messages of this type (e.g. TRANSACTION)."""

    errno = 40014
    name = "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE"


class TopicNotFoundError(RocketMQError):
    """The topic does not exist."""

    errno = 40402
    name = "TOPIC_NOT_FOUND"


class InvalidReceiptHandleError(RocketMQError):
    """The receipt handle is malformed, or no longer names the message's latest delivery (RocketMQ's
    SimpleConsumer; raised only by the RocketMQ front door, like the next three)."""

    errno = 40013
    name = "INVALID_RECEIPT_HANDLE"


class IllegalInvisibleTimeError(RocketMQError):
    """The invisible duration is missing or out of range."""

    errno = 40011
    name = "ILLEGAL_INVISIBLE_TIME"


class MessageNotFoundError(RocketMQError):
    """Nothing to receive: the long poll ended empty."""

    errno = 40401
    name = "MESSAGE_NOT_FOUND"


class UnsupportedError(RocketMQError):
    """A RocketMQ feature txnsim does not serve."""

    errno = 50500
    name = "UNSUPPORTED"

#: every wire code, both ways
ERRORS_BY_CODE: dict[int, type[BrokerResponseError]] = {
    cls.errno: cls for cls in [*BrokerResponseError.__subclasses__(), *RocketMQError.__subclasses__()]
    if cls is not RocketMQError
}
NONE = 0


def for_code(code: int, message: str = "") -> BrokerResponseError:
    """The exception for a wire code; unknown codes become UNKNOWN_SERVER_ERROR."""
    cls = ERRORS_BY_CODE.get(code, UnknownServerError)
    prefix = f"[{cls.name}]"
    if not message:
        text = f"{prefix} {cls.__doc__}"
    else:
        text = message if message.startswith(prefix) else f"{prefix} {message}"
    return cls(text)


def needs_rediscovery(error: BaseException) -> bool:
    """Whether to ask the cluster again who to talk to before a retry: the node said it is the
    wrong one (invalid metadata), could not be reached, or did not answer in time (it may be
    stalled or gone: a new owner may have taken over)."""
    return isinstance(error, KafkaError) and (error.invalid_metadata or isinstance(error, KafkaTimeoutError))


def raise_for(code: int, message: str = "") -> None:
    """Raise the error for `code`; do nothing for 0 (NONE)."""
    if code != NONE:
        raise for_code(code, message)


def code_of(error: BaseException) -> int:
    """The wire code of an exception (UNKNOWN_SERVER_ERROR for anything not from a node)."""
    return error.errno if isinstance(error, BrokerResponseError) else UnknownServerError.errno


def name_of(code: int) -> str:
    return ERRORS_BY_CODE[code].name if code in ERRORS_BY_CODE else "NONE" if code == 0 else f"UNKNOWN({code})"
