"""RocketMQ 5's wire contract as the front door uses it: the generated stubs of the official client,
and the one table that turns every txnsim error into a RocketMQ status code.

Invariant: a RocketMQ client never sees a gRPC error or a traceback from txnsim; every failure is a
`Status{code, message}` with the code this table gives.
"""
from __future__ import annotations

# The stubs are the official client's (rocketmq-python-client ships them; txnsim keeps no copy of
# RocketMQ's .proto files). `rocketmq.grpc_protocol` cannot be imported without running the package's
# __init__, which imports the whole client (OpenTelemetry included) and creates
# ~/logs/rocketmq_python/rocketmq_client.log; loading the files around it would mean faking the
# package in sys.modules, so we accept that cost (a fraction of a second at node start-up).
from rocketmq.grpc_protocol import definition_pb2 as rmq
from rocketmq.grpc_protocol import service_pb2 as rmq_service
from rocketmq.grpc_protocol import service_pb2_grpc as rmq_grpc

from proto.errors import (
    InvalidRecordError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaTimeoutError,
    RecordListTooLargeError,
    RecordTooLargeError,
    RequestTimedOutError,
    RocketMQError,
    UnknownTopicOrPartitionError,
)

__all__ = ["rmq", "rmq_service", "rmq_grpc", "code_for", "status", "status_for", "OK"]


#: txnsim's errors that have a RocketMQ counterpart (checked in order; subclasses first)
_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (UnknownTopicOrPartitionError, rmq.TOPIC_NOT_FOUND),
    (InvalidTopicError, rmq.ILLEGAL_TOPIC),
    (InvalidRequestError, rmq.BAD_REQUEST),
    (InvalidRecordError, rmq.BAD_REQUEST),
    (RecordTooLargeError, rmq.MESSAGE_BODY_TOO_LARGE),
    (RecordListTooLargeError, rmq.MESSAGE_BODY_TOO_LARGE),
    (KafkaTimeoutError, rmq.PROXY_TIMEOUT),
    (RequestTimedOutError, rmq.PROXY_TIMEOUT),
)

#: the codes txnsim answers with itself, as the ints they are (the generated module ships no type hints)
OK: int = rmq.OK
INTERNAL_ERROR: int = rmq.INTERNAL_ERROR


def code_for(error: BaseException) -> int:
    """RocketMQ's Code for a txnsim error: its own for RocketMQ-coded errors, else from the table,
    else INTERNAL_ERROR (a retriable move of ownership included: the client retries those)."""
    if isinstance(error, RocketMQError):
        return error.errno
    for error_type, code in _CODES:
        if isinstance(error, error_type):
            return code
    return INTERNAL_ERROR


def status(code: int = OK, message: str = "OK") -> rmq.Status:
    return rmq.Status(code=code, message=message)


def status_for(error: BaseException) -> rmq.Status:
    return rmq.Status(code=code_for(error), message=str(error) or type(error).__name__)
