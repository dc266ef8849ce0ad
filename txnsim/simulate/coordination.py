"""The simulator's ZooKeeper: a linearizable tree of znodes with sessions, as a plain object.

One ZnodeTree is the whole service; a SimStore is one member's session with it, speaking the store
interface the shipping controller uses (coordinator/controller/store.py). Each call is applied to the tree
at once, in order, and its answer and any watch it fires are handed to `deliver`, which the simulator
routes through its network (latency, loss, partitions) and a test may run inline. Sessions expire when
their member has not been heard from for the session timeout (`expire_idle`), taking their ephemeral
znodes with them, exactly as ZooKeeper does; the contract tests run the same cases against a real server.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from coordinator.controller.store import (
    ANY_VERSION,
    BadVersionError,
    Check,
    Create,
    Delete,
    Done,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SessionEvent,
    SetData,
    StoreError,
    StoreUnavailableError,
    Watch,
    Znode,
)


@dataclass
class _Node:
    data: bytes
    version: int = 0
    ephemeral_owner: int = 0
    children: set[str] = field(default_factory=set)


@dataclass
class _Session:
    session_id: int
    timeout_ms: int
    last_heard_ms: int
    expired: bool = False
    listeners: list[Callable[[SessionEvent], None]] = field(default_factory=list)


class ZnodeTree:
    """The service's state: znodes, sessions, and the watches set on them."""

    def __init__(self) -> None:
        self._nodes: dict[str, _Node] = {"/": _Node(b"")}
        self._sessions: dict[int, _Session] = {}
        self._next_session = 0x1000
        self._data_watches: dict[str, list[Watch]] = {}
        self._child_watches: dict[str, list[Watch]] = {}
        #: while a commit runs, the watches it fires (they fire once it has succeeded)
        self._firing: list[Watch] | None = None

    # ------------------------------------------------------------ sessions

    def open_session(self, timeout_ms: int, now_ms: int) -> int:
        self._next_session += 1
        self._sessions[self._next_session] = _Session(self._next_session, timeout_ms, now_ms)
        return self._next_session

    def heard_from(self, session_id: int, now_ms: int) -> None:
        session = self._sessions.get(session_id)
        if session is not None and not session.expired:
            session.last_heard_ms = now_ms

    def expire_idle(self, now_ms: int) -> list[int]:
        """Expire every session not heard from for its timeout (the service's session tracker)."""
        idle = [s.session_id for s in self._sessions.values()
                if not s.expired and now_ms - s.last_heard_ms > s.timeout_ms]
        for session_id in idle:
            self.expire(session_id)
        return idle

    def expire(self, session_id: int) -> None:
        """The session ends: its ephemeral znodes go (firing their watches), its member is told."""
        session = self._sessions[session_id]
        if session.expired:
            return
        session.expired = True
        for path in sorted((p for p, n in self._nodes.items() if n.ephemeral_owner == session_id), reverse=True):
            self._remove(path)
        for listener in list(session.listeners):
            listener(SessionEvent.EXPIRED)

    def alive(self, session_id: int) -> bool:
        session = self._sessions.get(session_id)
        return session is not None and not session.expired

    def listen(self, session_id: int, listener: Callable[[SessionEvent], None]) -> None:
        self._sessions[session_id].listeners.append(listener)

    # ------------------------------------------------------------ operations (each linearized here)

    def create(self, session_id: int, path: str, data: bytes, ephemeral: bool) -> str:
        parent = _parent(path)
        if path in self._nodes:
            raise NodeExistsError(f"NodeExists: {path}")
        if parent not in self._nodes:
            raise NoNodeError(f"NoNode: {parent} (the parent of {path})")
        if self._nodes[parent].ephemeral_owner:
            raise StoreError(f"[NOCHILDRENFOREPHEMERALS] {parent} is ephemeral")
        self._nodes[path] = _Node(data, ephemeral_owner=session_id if ephemeral else 0)
        self._nodes[parent].children.add(path.rsplit("/", 1)[1])
        self._fire(self._data_watches, path)
        self._fire(self._child_watches, parent)
        return path

    def ensure_path(self, path: str) -> None:
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            prefix = "/" + "/".join(parts[:i])
            if prefix not in self._nodes:
                self.create(0, prefix, b"", False)

    def get(self, path: str, watch: Watch | None) -> Znode:
        if watch is not None:  # exists-style: a watch on a missing znode fires at its creation
            self._data_watches.setdefault(path, []).append(watch)
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(f"NoNode: {path}")
        return Znode(node.data, node.version, node.ephemeral_owner)

    def children(self, path: str, watch: Watch | None) -> list[str]:
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(f"NoNode: {path}")
        if watch is not None:
            self._child_watches.setdefault(path, []).append(watch)
        return sorted(node.children)

    def set(self, path: str, data: bytes, version: int) -> int:
        node = self._check(path, version)
        node.data, node.version = data, node.version + 1
        self._fire(self._data_watches, path)
        return node.version

    def delete(self, path: str, version: int) -> None:
        node = self._check(path, version)
        if node.children:
            raise NotEmptyError(f"NotEmpty: {path}")
        self._remove(path)

    def commit(self, session_id: int, ops: Sequence[Op]) -> list[object]:
        """All or nothing: every op is checked against the tree as the earlier ops of the same commit left
        it, on a copy; only if all pass does the tree change (and the watches fire)."""
        saved = ({p: _Node(n.data, n.version, n.ephemeral_owner, set(n.children)) for p, n in self._nodes.items()},
                 {p: list(w) for p, w in self._data_watches.items()},
                 {p: list(w) for p, w in self._child_watches.items()})
        fired: list[Watch] = []
        self._firing = fired
        try:
            results: list[object] = []
            for op in ops:
                if isinstance(op, Check):
                    self._check(op.path, op.version)
                    results.append(None)
                elif isinstance(op, Create):
                    results.append(self.create(session_id, op.path, op.data, op.ephemeral))
                elif isinstance(op, SetData):
                    results.append(self.set(op.path, op.data, op.version))
                elif isinstance(op, Delete):
                    self.delete(op.path, op.version)
                    results.append(None)
        except StoreError:
            self._nodes, self._data_watches, self._child_watches = saved
            raise
        finally:
            self._firing = None
        for watch in fired:
            watch()
        return results

    # ------------------------------------------------------------ helpers

    def _check(self, path: str, version: int) -> _Node:
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(f"NoNode: {path}")
        if version != ANY_VERSION and version != node.version:
            raise BadVersionError(f"BadVersion: {path} is at version {node.version}, not {version}")
        return node

    def _remove(self, path: str) -> None:
        del self._nodes[path]
        parent = _parent(path)
        self._nodes[parent].children.discard(path.rsplit("/", 1)[1])
        self._fire(self._data_watches, path)
        self._fire(self._child_watches, path)
        self._fire(self._child_watches, parent)

    def _fire(self, watches: dict[str, list[Watch]], path: str) -> None:
        for watch in watches.pop(path, ()):
            if self._firing is not None:
                self._firing.append(watch)
            else:
                watch()


def _parent(path: str) -> str:
    parent = path.rsplit("/", 1)[0]
    return parent or "/"


class SimStore:
    """One member's session with a ZnodeTree; answers and watches go through `deliver` (the network)."""

    def __init__(self, tree: ZnodeTree, *, timeout_ms: int, now_ms: Callable[[], int],
                 deliver: Callable[[Callable[[], None]], None] = lambda work: work(),
                 reachable: Callable[[], bool] = lambda: True) -> None:
        self._tree = tree
        self._now_ms = now_ms
        self._deliver = deliver
        #: False while the member is cut off from the service: calls fail, nothing is heard from it
        self._reachable = reachable
        self._timeout_ms = timeout_ms
        self._listeners: list[Callable[[SessionEvent], None]] = []
        self._connected = True
        #: watch events that fired while this member was cut off
        self._held: list[Watch] = []
        self.session_id = self._open()

    def _open(self) -> int:
        session_id = self._tree.open_session(self._timeout_ms, self._now_ms())
        self._tree.listen(session_id, self._tell)
        return session_id

    def on_session(self, listener: Callable[[SessionEvent], None]) -> None:
        self._listeners.append(listener)

    def _tell(self, event: SessionEvent) -> None:
        for listener in list(self._listeners):
            self._deliver(functools.partial(listener, event))

    def heartbeat(self) -> None:
        """The member's client pings the service (kazoo does every third of the session timeout): cut off, it
        says SUSPENDED once; back, CONNECTED, in a new session if the old one expired meanwhile."""
        if not self._reachable():
            if self._connected:
                self._connected = False
                if self._tree.alive(self.session_id):
                    self._tell(SessionEvent.SUSPENDED)
            return
        if not self._tree.alive(self.session_id):
            self.session_id = self._open()
            self._connected = True
            self._held = []  # the old session's watches went with it
            self._tell(SessionEvent.CONNECTED)
            return
        self._tree.heard_from(self.session_id, self._now_ms())
        # watch events that fired while the member was out of reach come now, even if it was out of reach too
        # briefly for its client to notice (ZooKeeper queues them on the session's connection)
        held, self._held = self._held, []
        for watch in held:
            self._deliver(watch)
        if not self._connected:
            self._connected = True
            self._tell(SessionEvent.CONNECTED)

    def create(self, path: str, data: bytes, done: Done, *, ephemeral: bool = False) -> None:
        self._apply(lambda: self._tree.create(self.session_id, path, data, ephemeral), done)

    def ensure_path(self, path: str, done: Done) -> None:
        self._apply(lambda: self._tree.ensure_path(path), done)

    def get(self, path: str, done: Done, *, watch: Watch | None = None) -> None:
        self._apply(lambda: self._tree.get(path, self._routed(watch)), done)

    def children(self, path: str, done: Done, *, watch: Watch | None = None) -> None:
        self._apply(lambda: self._tree.children(path, self._routed(watch)), done)

    def set(self, path: str, data: bytes, done: Done, *, version: int = ANY_VERSION) -> None:
        self._apply(lambda: self._tree.set(path, data, version), done)

    def delete(self, path: str, done: Done, *, version: int = ANY_VERSION) -> None:
        self._apply(lambda: self._tree.delete(path, version), done)

    def commit(self, ops: Sequence[Op], done: Done) -> None:
        self._apply(lambda: self._tree.commit(self.session_id, ops), done)

    def close(self) -> None:
        self._tree.expire(self.session_id)

    def _apply(self, operation: Callable[[], object], done: Done) -> None:
        if not self._reachable() or not self._tree.alive(self.session_id):
            if self._connected and self._tree.alive(self.session_id):  # the client finds the connection gone
                self._connected = False
                self._tell(SessionEvent.SUSPENDED)
            reason = "cut off from" if self._tree.alive(self.session_id) else "session expired at"
            error = StoreUnavailableError(f"[CONNECTIONLOSS] {reason} the simulated ZooKeeper")
            self._deliver(lambda: done(error))
            return
        self._tree.heard_from(self.session_id, self._now_ms())
        try:
            outcome: object = operation()
        except StoreError as exc:
            outcome = exc
        self._deliver(lambda: done(outcome))

    def _routed(self, watch: Watch | None) -> Watch | None:
        """The watch as the service keeps it: for this session only (an expired session's watches never fire,
        as ZooKeeper drops them with it), its event sent to the member."""
        if watch is None:
            return None
        session_id = self.session_id

        def fire() -> None:
            if self.session_id != session_id or not self._tree.alive(session_id):
                return
            if self._reachable():
                self._deliver(watch)
            else:  # the event waits for the connection (ZooKeeper sends it once the client is back)
                self._held.append(watch)
        return fire
