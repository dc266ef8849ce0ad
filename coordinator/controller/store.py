"""What the controller and the brokers need of a coordination service, written once for ZooKeeper and
for the simulator's linearizable store: znodes with versions, ephemeral znodes that live as long as their
session, one-shot watches, and atomic multi-op writes.

Calls take a `done` callback, as the node's I/O does (coordinator/runtime/io.py), so a driver runs the same
over a real ZooKeeper and over simulated time. Errors carry ZooKeeper's own names (KeeperException's
codes); they never reach a Kafka client, which sees what the controller makes of them.
"""
from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class StoreError(Exception):
    """A coordination-service call failed; `name` is ZooKeeper's code."""

    name = "SYSTEM_ERROR"


class NoNodeError(StoreError):
    name = "NONODE"


class NodeExistsError(StoreError):
    name = "NODEEXISTS"


class BadVersionError(StoreError):
    """A versioned write lost: someone changed the znode since the writer read it."""

    name = "BADVERSION"


class NotEmptyError(StoreError):
    name = "NOTEMPTY"


class StoreUnavailableError(StoreError):
    """No answer: the connection is lost (the session may still live) or the session expired."""

    name = "CONNECTIONLOSS"


class SessionEvent(enum.Enum):
    CONNECTED = "connected"
    #: the connection is lost; the session (and its ephemeral znodes) lives until its timeout
    SUSPENDED = "suspended"
    #: the session is over: its ephemeral znodes are gone, and with them this member's registration
    EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class Znode:
    data: bytes
    #: incremented by every write of the data; a versioned write names the version it read
    version: int
    #: the session that owns it if ephemeral, else 0
    ephemeral_owner: int


#: write with no version check
ANY_VERSION = -1


@dataclass(frozen=True, slots=True)
class Check:
    """A multi-op's guard: the znode is still at `version` (Kafka's controller guards its writes with the
    controller epoch znode's version this way)."""

    path: str
    version: int


@dataclass(frozen=True, slots=True)
class Create:
    path: str
    data: bytes = b""
    ephemeral: bool = False


@dataclass(frozen=True, slots=True)
class SetData:
    path: str
    data: bytes
    version: int = ANY_VERSION


@dataclass(frozen=True, slots=True)
class Delete:
    path: str
    version: int = ANY_VERSION


Op = Check | Create | SetData | Delete
#: a call's outcome: its result, or the StoreError it failed with
Outcome = Any
Done = Callable[[Outcome], None]
Watch = Callable[[], None]


class CoordinationStore(Protocol):
    """One member's session with the coordination service."""

    @property
    def session_id(self) -> int: ...

    def on_session(self, listener: Callable[[SessionEvent], None]) -> None:
        """Told when the session's connection is lost, comes back, or the session expires."""

    def create(self, path: str, data: bytes, done: Done, *, ephemeral: bool = False) -> None:
        """done(path) or done(NodeExistsError / NoNodeError (no parent))."""

    def ensure_path(self, path: str, done: Done) -> None:
        """Create `path` and its parents as persistent znodes if missing; done(None)."""

    def get(self, path: str, done: Done, *, watch: Watch | None = None) -> None:
        """done(Znode) or done(NoNodeError); `watch` fires once when the znode changes or goes (also when it
        did not exist and is created)."""

    def children(self, path: str, done: Done, *, watch: Watch | None = None) -> None:
        """done(sorted child names) or done(NoNodeError); `watch` fires once when the set changes."""

    def set(self, path: str, data: bytes, done: Done, *, version: int = ANY_VERSION) -> None:
        """done(the new version) or done(BadVersionError / NoNodeError)."""

    def delete(self, path: str, done: Done, *, version: int = ANY_VERSION) -> None:
        """done(None) or done(BadVersionError / NoNodeError / NotEmptyError)."""

    def commit(self, ops: Sequence[Op], done: Done) -> None:
        """All of `ops` or none: done(list of each op's result) or done(the first failing op's error)."""

    def close(self) -> None:
        """End the session (its ephemeral znodes go at once)."""
