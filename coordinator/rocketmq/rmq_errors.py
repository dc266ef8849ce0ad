"""The errors only RocketMQ's front door raises, each carrying RocketMQ 5's Code (apache.rocketmq.v2.Code)
as its errno. They never travel on txnsim's own wire, so proto/errors.py's table of wire codes need
not know them; no generated code is imported here, so sans-I/O logic (pop_state.py) can raise them.
"""
from __future__ import annotations

from proto.errors import RocketMQError


class FrontDoorError(RocketMQError):
    """A request only the RocketMQ front door refuses."""


class InvalidReceiptHandleError(FrontDoorError):
    """The receipt handle is malformed, or no longer names the message's latest delivery."""

    errno = 40013
    name = "INVALID_RECEIPT_HANDLE"


class IllegalInvisibleTimeError(FrontDoorError):
    """The invisible duration is missing or out of range."""

    errno = 40011
    name = "ILLEGAL_INVISIBLE_TIME"


class MessageNotFoundError(FrontDoorError):
    """Nothing to receive: the long poll ended empty."""

    errno = 40401
    name = "MESSAGE_NOT_FOUND"


class UnsupportedError(FrontDoorError):
    """A RocketMQ feature txnsim does not serve."""

    errno = 50500
    name = "UNSUPPORTED"
