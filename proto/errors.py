"""Every error txnsim raises, with Kafka's names and codes, in one hierarchy.

KafkaError
 ├── RetriableError ── InvalidMetadataError          (kafka-python's grouping of retriable errors)
 ├── IllegalStateError, IllegalArgumentError, KafkaConfigurationError   (client misuse, never on the wire)
 ├── KafkaTimeoutError, KafkaConnectionError (= NoBrokersAvailable)     (client side, retriable)
 ├── CommitFailedError, NoOffsetForPartitionError, TransactionAbortedError   (client side)
 └── BrokerResponseError                              (one class per wire code; for_code() maps back)

Nodes and clients share this module, so a code means the same thing on both sides of
the wire. `retriable` says whether retrying the same request can succeed; for the
transactional producer, `abortable`/`fatal` follow Kafka's rules (KAFKA-REFERENCE §3).
kafka-python's class names are here too, as the same classes (docs/kafka-python-users.md),
so `except txnsim.errors.NotLeaderForPartitionError` means what it means there.
"""
from __future__ import annotations

import enum
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


class RetriableError(KafkaError):
    """Retrying the same request may succeed (kafka-python's base of retriable errors)."""

    retriable = True


class InvalidMetadataError(RetriableError):
    """Retriable once the client has asked the cluster again who leads or coordinates."""

    invalid_metadata = True


class IllegalStateError(KafkaError):
    """A call made in a state that does not allow it (e.g. commit before begin)."""


class IllegalArgumentError(KafkaError, ValueError):
    """An argument that no state of the cluster could make valid (kafka-python's name; Kafka's
    IllegalArgumentException). Also a ValueError, which kafka-python raises in the same places."""


class KafkaConfigurationError(KafkaError):
    """A client or node setting is invalid."""


class KafkaTimeoutError(RetriableError):
    """The operation did not finish before its deadline."""

    retriable = True


class KafkaConnectionError(InvalidMetadataError):
    """A node could not be reached."""

    retriable = True
    invalid_metadata = True


#: kafka-python 2.x raised NoBrokersAvailable when no bootstrap server answered; txnsim's clients
#: raise KafkaConnectionError then, so the old name catches the same failures
NoBrokersAvailable = KafkaConnectionError


class Cancelled(RetriableError):
    """The request was cancelled before it completed (kafka-python's name)."""


class KafkaProtocolError(KafkaError):
    """A response could not be understood."""


class CommitFailedError(KafkaError):
    """The offset commit cannot complete: the group rebalanced and gave the partitions to another
    member (kafka-python's CommitFailedError); poll() again to rejoin, then reprocess."""


class NoOffsetForPartitionError(KafkaError):
    """No committed offset and no auto_offset_reset policy to choose a start position."""


class NodeNotReadyError(RetriableError):
    """The connection to that node is not ready yet."""


class StaleMetadata(InvalidMetadataError):
    """The client's view of leaders is out of date."""


class TooManyInFlightRequests(RetriableError):
    """max_in_flight_requests_per_connection requests are already waiting on that node."""


class MetadataEmptyBrokerList(RetriableError):
    """The cluster answered with no nodes."""


class UnsupportedCodecError(KafkaError):
    """A compression codec this client cannot decode."""


class UnrecognizedBrokerVersion(KafkaError):
    """The node's version could not be determined."""


class TransactionAbortedError(KafkaError):
    """The transaction was aborted before this record was sent; it was not written (Kafka's
    TransactionAbortedException: client side, no wire code)."""


class BrokerResponseError(KafkaError):
    """An error code returned by a node."""

    errno: ClassVar[int] = -1
    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"


class UnknownServerError(BrokerResponseError):
    """An unexpected error on the node."""

    errno = -1
    name = "UNKNOWN_SERVER_ERROR"


class CorruptMessageError(RetriableError, BrokerResponseError):
    """A record batch failed its checksum or could not be parsed."""

    errno = 2
    name = "CORRUPT_MESSAGE"


class UnknownTopicOrPartitionError(InvalidMetadataError, BrokerResponseError):
    """The topic or partition does not exist."""

    errno = 3
    name = "UNKNOWN_TOPIC_OR_PARTITION"


class InvalidFetchSizeError(BrokerResponseError):
    """The requested fetch size is invalid."""

    errno = 4
    name = "INVALID_FETCH_SIZE"


class NotLeaderOrFollowerError(InvalidMetadataError, BrokerResponseError):
    """This node does not own that partition."""

    errno = 6
    name = "NOT_LEADER_OR_FOLLOWER"


class RequestTimedOutError(RetriableError, BrokerResponseError):
    """The request timed out on the node."""

    errno = 7
    name = "REQUEST_TIMED_OUT"


class RecordTooLargeError(BrokerResponseError):
    """A record or batch is larger than the node accepts (message_max_bytes)."""

    errno = 10
    name = "MESSAGE_TOO_LARGE"
    abortable = True


MessageTooLargeError = RecordTooLargeError

class OffsetOutOfRangeError(BrokerResponseError):
    """The offset is outside the log's range."""

    errno = 1
    name = "OFFSET_OUT_OF_RANGE"


class CoordinatorLoadInProgressError(RetriableError, BrokerResponseError):
    """The coordinator is still loading its shard."""

    errno = 14
    name = "COORDINATOR_LOAD_IN_PROGRESS"


class CoordinatorNotAvailableError(InvalidMetadataError, BrokerResponseError):
    """The coordinator is not available."""

    errno = 15
    name = "COORDINATOR_NOT_AVAILABLE"


class NotCoordinatorError(InvalidMetadataError, BrokerResponseError):
    """This node is not the coordinator for that key."""

    errno = 16
    name = "NOT_COORDINATOR"


class InvalidTopicError(BrokerResponseError):
    """The topic name is invalid."""

    errno = 17
    name = "INVALID_TOPIC_EXCEPTION"


class RecordListTooLargeError(BrokerResponseError):
    """The batch is too large."""

    errno = 18
    name = "RECORD_LIST_TOO_LARGE"
    abortable = True


class NotEnoughReplicasError(RetriableError, BrokerResponseError):
    """Not enough replicas."""

    errno = 19
    name = "NOT_ENOUGH_REPLICAS"


class IllegalGenerationError(BrokerResponseError):
    """The group generation is not current."""

    errno = 22
    name = "ILLEGAL_GENERATION"
    abortable = True


class UnknownMemberIdError(BrokerResponseError):
    """The group member is unknown."""

    errno = 25
    name = "UNKNOWN_MEMBER_ID"
    abortable = True


class InvalidSessionTimeoutError(BrokerResponseError):
    """The session timeout is out of range."""

    errno = 26
    name = "INVALID_SESSION_TIMEOUT"


class RebalanceInProgressError(BrokerResponseError):
    """The group is rebalancing; rejoin."""

    errno = 27
    name = "REBALANCE_IN_PROGRESS"


class InvalidCommitOffsetSizeError(BrokerResponseError):
    """The offset metadata is too large."""

    errno = 28
    name = "INVALID_COMMIT_OFFSET_SIZE"


class TopicAlreadyExistsError(BrokerResponseError):
    """The topic already exists."""

    errno = 36
    name = "TOPIC_ALREADY_EXISTS"


class InvalidPartitionsError(BrokerResponseError):
    """The partition count is invalid."""

    errno = 37
    name = "INVALID_PARTITIONS"


class InvalidReplicationFactorError(BrokerResponseError):
    """The replication factor is invalid (txnsim keeps one copy of every log: 1 or -1)."""

    errno = 38
    name = "INVALID_REPLICATION_FACTOR"


class InvalidReplicaAssignmentError(BrokerResponseError):
    """Replicas were assigned by hand (txnsim places every partition itself)."""

    errno = 39
    name = "INVALID_REPLICA_ASSIGNMENT"


class InvalidConfigError(BrokerResponseError):
    """A topic setting is invalid."""

    errno = 40
    name = "INVALID_CONFIG"


class InvalidRequestError(BrokerResponseError):
    """The request is malformed."""

    errno = 42
    name = "INVALID_REQUEST"


class OutOfOrderSequenceError(BrokerResponseError):
    """The batch's sequence number does not follow the last one."""

    errno = 45
    name = "OUT_OF_ORDER_SEQUENCE_NUMBER"
    abortable = True


class DuplicateSequenceError(BrokerResponseError):
    """The batch was already written."""

    errno = 46
    name = "DUPLICATE_SEQUENCE_NUMBER"


class InvalidProducerEpochError(BrokerResponseError):
    """The producer epoch is older than the partition's."""

    errno = 47
    name = "INVALID_PRODUCER_EPOCH"
    abortable = True


class InvalidTxnStateError(BrokerResponseError):
    """The request is not valid in the transaction's state."""

    errno = 48
    name = "INVALID_TXN_STATE"
    fatal = True


class InvalidProducerIdMappingError(BrokerResponseError):
    """The producer id does not belong to that transactional id."""

    errno = 49
    name = "INVALID_PRODUCER_ID_MAPPING"
    abortable = True


class InvalidTransactionTimeoutError(BrokerResponseError):
    """The transaction timeout is out of range."""

    errno = 50
    name = "INVALID_TRANSACTION_TIMEOUT"
    fatal = True


class ConcurrentTransactionsError(RetriableError, BrokerResponseError):
    """The previous transaction of this id is still completing."""

    errno = 51
    name = "CONCURRENT_TRANSACTIONS"


class TransactionCoordinatorFencedError(BrokerResponseError):
    """A newer coordinator has taken over this producer."""

    errno = 52
    name = "TRANSACTION_COORDINATOR_FENCED"


class OperationNotAttemptedError(BrokerResponseError):
    """Not attempted because another part of the request failed."""

    errno = 55
    name = "OPERATION_NOT_ATTEMPTED"


class KafkaStorageError(RetriableError, BrokerResponseError):
    """The log could not be written."""

    errno = 56
    name = "KAFKA_STORAGE_ERROR"


class UnknownProducerIdError(BrokerResponseError):
    """The producer id is unknown."""

    errno = 59
    name = "UNKNOWN_PRODUCER_ID"
    abortable = True


class GroupIdNotFoundError(BrokerResponseError):
    """The group does not exist."""

    errno = 69
    name = "GROUP_ID_NOT_FOUND"


class FencedInstanceIdError(BrokerResponseError):
    """A newer static member took over."""

    errno = 82
    name = "FENCED_INSTANCE_ID"
    abortable = True


class InvalidRecordError(BrokerResponseError):
    """The record is invalid."""

    errno = 87
    name = "INVALID_RECORD"
    abortable = True


class UnstableOffsetCommitError(RetriableError, BrokerResponseError):
    """A transactional offset commit for this partition is undecided."""

    errno = 88
    name = "UNSTABLE_OFFSET_COMMIT"


class ProducerFencedError(BrokerResponseError):
    """A newer producer with the same transactional id has fenced this one."""

    errno = 90
    name = "PRODUCER_FENCED"
    fatal = True


class TransactionalIdNotFoundError(BrokerResponseError):
    """The transactional id is unknown."""

    errno = 105
    name = "TRANSACTIONAL_ID_NOT_FOUND"


class TransactionAbortableError(BrokerResponseError):
    """The transaction cannot commit; abort it."""

    errno = 120
    name = "TRANSACTION_ABORTABLE"
    abortable = True


class AuthorizationError(BrokerResponseError):
    """Not authorized (kafka-python's common base of the *_AUTHORIZATION_FAILED codes)."""


class LeaderNotAvailableError(InvalidMetadataError, BrokerResponseError):
    """The partition has no leader right now (an election is under way)."""

    errno = 5
    name = "LEADER_NOT_AVAILABLE"


class BrokerNotAvailableError(BrokerResponseError):
    """The node is not available."""

    errno = 8
    name = "BROKER_NOT_AVAILABLE"


class ReplicaNotAvailableError(InvalidMetadataError, BrokerResponseError):
    """The replica is not available for that partition."""

    errno = 9
    name = "REPLICA_NOT_AVAILABLE"


class OffsetMetadataTooLargeError(BrokerResponseError):
    """The metadata string of a committed offset is too long."""

    errno = 12
    name = "OFFSET_METADATA_TOO_LARGE"


class NetworkExceptionError(InvalidMetadataError, BrokerResponseError):
    """The server disconnected before the response was received."""

    errno = 13
    name = "NETWORK_EXCEPTION"


class NotEnoughReplicasAfterAppendError(RetriableError, BrokerResponseError):
    """Written, but to fewer replicas than required."""

    errno = 20
    name = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"


class InvalidRequiredAcksError(BrokerResponseError):
    """acks must be -1, 0 or 1."""

    errno = 21
    name = "INVALID_REQUIRED_ACKS"


class InconsistentGroupProtocolError(BrokerResponseError):
    """The member's protocol type or assignors do not match the group's."""

    errno = 23
    name = "INCONSISTENT_GROUP_PROTOCOL"


class InvalidGroupIdError(BrokerResponseError):
    """The group id is invalid."""

    errno = 24
    name = "INVALID_GROUP_ID"


class TopicAuthorizationFailedError(AuthorizationError):
    """Not authorized to access the topic."""

    errno = 29
    name = "TOPIC_AUTHORIZATION_FAILED"
    abortable = True


class GroupAuthorizationFailedError(AuthorizationError):
    """Not authorized to access the group."""

    errno = 30
    name = "GROUP_AUTHORIZATION_FAILED"
    abortable = True


class ClusterAuthorizationFailedError(AuthorizationError):
    """Not authorized for this cluster operation."""

    errno = 31
    name = "CLUSTER_AUTHORIZATION_FAILED"
    fatal = True


class InvalidTimestampError(BrokerResponseError):
    """A record's timestamp is out of the accepted range."""

    errno = 32
    name = "INVALID_TIMESTAMP"


class UnsupportedVersionError(BrokerResponseError):
    """The node does not serve that version of the request."""

    errno = 35
    name = "UNSUPPORTED_VERSION"
    fatal = True


class UnsupportedForMessageFormatError(BrokerResponseError):
    """The message format does not support this request."""

    errno = 43
    name = "UNSUPPORTED_FOR_MESSAGE_FORMAT"


class PolicyViolationError(BrokerResponseError):
    """The request breaks a configured policy."""

    errno = 44
    name = "POLICY_VIOLATION"


class TransactionalIdAuthorizationFailedError(AuthorizationError):
    """Not authorized for that transactional id."""

    errno = 53
    name = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    fatal = True


class NonEmptyGroupError(BrokerResponseError):
    """The group has members; it cannot be deleted."""

    errno = 68
    name = "NON_EMPTY_GROUP"


class FetchSessionIdNotFoundError(RetriableError, BrokerResponseError):
    """The fetch names a session the leader does not hold (it restarted, or replaced it): fetch in full."""

    errno = 70
    name = "FETCH_SESSION_ID_NOT_FOUND"


class InvalidFetchSessionEpochError(RetriableError, BrokerResponseError):
    """The fetch's session epoch is not the one the leader expects next (a lost answer): fetch in full."""

    errno = 71
    name = "INVALID_FETCH_SESSION_EPOCH"


class FencedLeaderEpochError(InvalidMetadataError, BrokerResponseError):
    """The request names a leader epoch older than the partition's (KIP-320): the asker's metadata is stale."""

    errno = 74
    name = "FENCED_LEADER_EPOCH"


class UnknownLeaderEpochError(RetriableError, BrokerResponseError):
    """The request names a leader epoch newer than this replica knows: it has not heard of that leader yet."""

    errno = 75
    name = "UNKNOWN_LEADER_EPOCH"


class UnsupportedCompressionTypeError(BrokerResponseError):
    """The node does not accept that compression type."""

    errno = 76
    name = "UNSUPPORTED_COMPRESSION_TYPE"


class MemberIdRequiredError(BrokerResponseError):
    """Rejoin with the member id the coordinator just gave."""

    errno = 79
    name = "MEMBER_ID_REQUIRED"


class GroupMaxSizeReachedError(BrokerResponseError):
    """The group is full."""

    errno = 81
    name = "GROUP_MAX_SIZE_REACHED"


class GroupSubscribedToTopicError(BrokerResponseError):
    """The group's members are subscribed to the topic: its offsets cannot be deleted (OffsetDelete)."""

    errno = 86
    name = "GROUP_SUBSCRIBED_TO_TOPIC"


class ThrottlingQuotaExceededError(RetriableError, BrokerResponseError):
    """A quota was exceeded; retry later."""

    errno = 89
    name = "THROTTLING_QUOTA_EXCEEDED"


class IncompatibleBrokerVersion(UnsupportedVersionError):
    """The node is too old for this request (kafka-python's name; no code of its own)."""


# kafka-python's names for the codes above, the same classes (kafka/errors.py spells them so)
UnknownError = UnknownServerError
CorruptRecordError = CorruptMessageError
CorruptRecordException = CorruptMessageError
InvalidFetchRequestError = InvalidFetchSizeError
NotLeaderForPartitionError = NotLeaderOrFollowerError
MessageSizeTooLargeError = RecordTooLargeError
InvalidConfigurationError = InvalidConfigError
OutOfOrderSequenceNumberError = OutOfOrderSequenceError
DuplicateSequenceNumberError = DuplicateSequenceError


# RocketMQ's status codes (apache.rocketmq.v2.Code) for the half-message API: their numbers do not
# collide with Kafka's, so one table serves both protocols.
class RocketMQError(BrokerResponseError):
    """An error of RocketMQ's half-message protocol (ROCKETMQ-REFERENCE §5)."""


class InvalidTransactionIdError(RocketMQError):
    """The transaction id is unknown, or that transaction was decided otherwise."""

    errno = 40008
    name = "INVALID_TRANSACTION_ID"


class IllegalMessageIdError(RocketMQError):
    """The request names no message id, or one that is not the message's."""

    errno = 40009
    name = "ILLEGAL_MESSAGE_ID"


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
def _coded_classes(root: type[BrokerResponseError]) -> list[type[BrokerResponseError]]:
    """Every class below `root` that declares its own errno (grouping bases such as RocketMQError do not)."""
    found = []
    for cls in root.__subclasses__():
        if "errno" in vars(cls):
            found.append(cls)
        found.extend(_coded_classes(cls))
    return found


ERRORS_BY_CODE: dict[int, type[BrokerResponseError]] = {cls.errno: cls for cls in _coded_classes(BrokerResponseError)}
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


# ------------------------------------------------------------ KIP-1050: what a client should do about an error


class ErrorClass(enum.Enum):
    """KIP-1050's classes of an error, by what the client should do about it (Kafka 4.1's exception bases)."""

    RETRIABLE = "retriable"                                  # the client retries by itself
    REFRESH_RETRIABLE = "refresh-retriable"                  # refresh metadata or the coordinator, then retry
    ABORTABLE = "abortable"                                  # abort the transaction; the producer stays usable
    APPLICATION_RECOVERABLE = "application-recoverable"      # close the producer, make a new one (rebalance)
    INVALID_CONFIG = "invalid-config"                        # fix the setting, the ACL or the request
    FATAL = "fatal"                                          # close the client

    @property
    def advice(self) -> str:
        return _ADVICE[self]


_ADVICE = {
    ErrorClass.RETRIABLE: "retried by the client",
    ErrorClass.REFRESH_RETRIABLE: "retried once the client has asked the cluster again who to talk to",
    ErrorClass.ABORTABLE: "abort the transaction; the producer stays usable",
    ErrorClass.APPLICATION_RECOVERABLE: "close the producer and create a new one",
    ErrorClass.INVALID_CONFIG: "fix the setting or the request; retrying cannot help",
    ErrorClass.FATAL: "not retriable (a producer that meets it must be closed)",
}

#: KIP-1050's classes by error name, as Kafka's TransactionExceptionHierarchyTest lists them; errors not named
#: here follow their place in txnsim's hierarchy (error_class_of)
KIP_1050_CLASSES: dict[str, ErrorClass] = {
    **{name: ErrorClass.RETRIABLE for name in (
        "REQUEST_TIMED_OUT", "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "COORDINATOR_LOAD_IN_PROGRESS",
        "CORRUPT_MESSAGE", "CONCURRENT_TRANSACTIONS")},
    **{name: ErrorClass.REFRESH_RETRIABLE for name in (
        "UNKNOWN_TOPIC_OR_PARTITION", "NOT_LEADER_OR_FOLLOWER", "NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE",
        "LEADER_NOT_AVAILABLE", "NETWORK_EXCEPTION", "KAFKA_STORAGE_ERROR", "FENCED_LEADER_EPOCH", "UNKNOWN_TOPIC_ID",
        "REPLICA_NOT_AVAILABLE", "LISTENER_NOT_FOUND")},
    **{name: ErrorClass.ABORTABLE for name in ("TRANSACTION_ABORTABLE", "INVALID_TXN_STATE")},
    **{name: ErrorClass.APPLICATION_RECOVERABLE for name in (
        "FENCED_INSTANCE_ID", "ILLEGAL_GENERATION", "INVALID_PRODUCER_ID_MAPPING", "INVALID_PRODUCER_EPOCH",
        "PRODUCER_FENCED", "UNKNOWN_MEMBER_ID")},
    **{name: ErrorClass.INVALID_CONFIG for name in (
        "INVALID_CONFIG", "SASL_AUTHENTICATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED",
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED",
        "UNSUPPORTED_VERSION", "UNSUPPORTED_FOR_MESSAGE_FORMAT", "INVALID_RECORD", "INVALID_REQUIRED_ACKS",
        "RECORD_LIST_TOO_LARGE", "INVALID_TOPIC_EXCEPTION")},
}


def error_class_of(error: type[KafkaError] | KafkaError) -> ErrorClass:
    """The KIP-1050 class of an error (or error type): Kafka's table first, then txnsim's hierarchy (a retriable
    error that needs new metadata, a retriable one, an abortable one, else fatal)."""
    cls = error if isinstance(error, type) else type(error)
    named = KIP_1050_CLASSES.get(getattr(cls, "name", ""))
    if named is not None and issubclass(cls, BrokerResponseError):
        return named
    if cls.invalid_metadata:
        return ErrorClass.REFRESH_RETRIABLE
    if cls.retriable:
        return ErrorClass.RETRIABLE
    if cls.abortable:
        return ErrorClass.ABORTABLE
    if issubclass(cls, KafkaConfigurationError):
        return ErrorClass.INVALID_CONFIG
    return ErrorClass.FATAL

