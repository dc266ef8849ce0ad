"""The coordination store on a real ZooKeeper, through kazoo's asynchronous calls.

Callbacks run on kazoo's event thread; a driver hands them on to its own I/O (they must not block). The
session is kazoo's: a lost connection is retried for as long as the session lives (SUSPENDED, then
CONNECTED again), an expired one is followed by a new session without the old one's ephemeral znodes
(EXPIRED, then CONNECTED with a new session id), which the member must register again. A member cut off
from every server for a whole session timeout is told EXPIRED then, not when it reaches a server again.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from kazoo import exceptions as kz
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import WatchedEvent, ZnodeStat
from kazoo.retry import KazooRetry

from coordinator.controller.store import (
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
from coordinator.timers import Timer, Timers

log = logging.getLogger(__name__)

_ERRORS: dict[type[Exception], type[StoreError]] = {
    kz.NoNodeError: NoNodeError,
    kz.NodeExistsError: NodeExistsError,
    kz.BadVersionError: BadVersionError,
    kz.NotEmptyError: NotEmptyError,
}
_UNAVAILABLE = (kz.ConnectionLoss, kz.SessionExpiredError, kz.ConnectionClosedError, kz.OperationTimeoutError,
                kz.ZookeeperStoppedError, KazooTimeoutError)
_SESSION_EVENTS = {KazooState.CONNECTED: SessionEvent.CONNECTED, KazooState.SUSPENDED: SessionEvent.SUSPENDED,
                   KazooState.LOST: SessionEvent.EXPIRED}


def store_error(exc: BaseException) -> StoreError:
    """kazoo's exception as the store's, with ZooKeeper's name."""
    if isinstance(exc, StoreError):
        return exc
    for kazoo_type, ours in _ERRORS.items():
        if isinstance(exc, kazoo_type):
            return ours(str(exc) or ours.name)
    if isinstance(exc, _UNAVAILABLE):
        return StoreUnavailableError(f"[CONNECTIONLOSS] ZooKeeper did not answer: {type(exc).__name__} {exc}")
    error = StoreError(f"[{type(exc).__name__}] {exc}")
    return error


class ZooKeeperStore:
    """One session with a ZooKeeper ensemble (`hosts`: "host:port,host:port[/chroot]")."""

    def __init__(self, hosts: str, *, session_timeout_ms: int = 6_000, connect_timeout_s: float = 10.0,
                 request_timeout_ms: int = 5_000) -> None:
        self.hosts = hosts
        #: a call not answered by then fails with CONNECTIONLOSS (kazoo itself would wait for the reconnect)
        self.request_timeout_ms = request_timeout_ms
        self._timers = Timers("zookeeper-requests")
        # reconnect for as long as it takes (the session may outlive the outage); calls fail fast meanwhile
        self._client = KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000,
                                   connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0),
                                   command_retry=None)
        self._listeners: list[Callable[[SessionEvent], None]] = []
        self._session_lock = threading.Lock()
        self._expiry: Timer | None = None  # armed while SUSPENDED: the session times out unheard
        self._told_expired = False  # EXPIRED said before kazoo learnt it (its LOST then says nothing new)
        self._client.add_listener(self._state_changed)
        try:
            self._client.start(timeout=connect_timeout_s)
        except KazooTimeoutError:
            self._client.stop()
            self._client.close()
            raise StoreUnavailableError(f"[CONNECTIONLOSS] no ZooKeeper answered at {hosts} within "
                                        f"{connect_timeout_s:.0f} s; is it running (txnsim starts one for "
                                        f"`cluster start`; on hosts of their own, start it first)?") from None

    @property
    def session_id(self) -> int:
        client_id = self._client.client_id
        return int(client_id[0]) if client_id else 0

    @property
    def session_timeout_ms(self) -> int:
        """What the server granted (it clamps the asked timeout to its min and max)."""
        return int(self._client._session_timeout)

    def on_session(self, listener: Callable[[SessionEvent], None]) -> None:
        self._listeners.append(listener)

    def _state_changed(self, state: str) -> None:
        event = _SESSION_EVENTS.get(state)
        if event is None:
            return
        with self._session_lock:
            if self._expiry is not None:
                self._expiry.cancel()
                self._expiry = None
            if event is SessionEvent.SUSPENDED:
                self._expiry = self._timers.call_later(self.session_timeout_ms / 1000, self._expired_locally)
            elif event is SessionEvent.EXPIRED and self._told_expired:
                self._told_expired = False
                return  # said already, when the session timed out unheard
            else:
                self._told_expired = False
        self._tell(event)

    def _expired_locally(self) -> None:
        """Cut off from every server for a whole session timeout: the ensemble has expired this session
        (it would have heard from the member within that time otherwise), though kazoo learns so only when
        it reaches a server again. Say so now, as ZooKeeper's own clients do ("session expired" after the
        timeout without a server), so a leader cut off from the store stops leading instead of waiting for a
        reconnect that may never come."""
        with self._session_lock:
            if self._expiry is None:
                return  # connected again meanwhile
            self._expiry = None
            self._told_expired = True
        log.warning("no ZooKeeper server answered for the session timeout (%d ms): the session has expired",
                    self.session_timeout_ms)
        self._tell(SessionEvent.EXPIRED)

    def _tell(self, event: SessionEvent) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # a listener's bug must not stop kazoo's connection thread
                log.exception("session listener failed on %s", event.value)

    # ------------------------------------------------------------ calls

    def create(self, path: str, data: bytes, done: Done, *, ephemeral: bool = False) -> None:
        self._call(lambda: self._client.create_async(path, data, ephemeral=ephemeral), done)

    def ensure_path(self, path: str, done: Done) -> None:
        self._call(lambda: self._client.ensure_path_async(path), done, lambda _result: None)

    def get(self, path: str, done: Done, *, watch: Watch | None = None) -> None:
        kazoo_watch = _one_shot(watch)

        def answered(outcome: Any) -> None:
            if isinstance(outcome, NoNodeError) and kazoo_watch is not None:
                # ZooKeeper sets no watch on a znode that is not there; exists() does, for its creation
                def exists(stat: Any) -> None:
                    if isinstance(stat, ZnodeStat):  # created meanwhile: read it after all
                        self.get(path, done, watch=watch)
                    else:
                        done(outcome if stat is None else stat)
                self._call(lambda: self._client.exists_async(path, watch=kazoo_watch), exists)
                return
            done(outcome)
        self._call(lambda: self._client.get_async(path, watch=kazoo_watch), answered,
                   lambda result: Znode(result[0], result[1].version, result[1].ephemeralOwner))

    def children(self, path: str, done: Done, *, watch: Watch | None = None) -> None:
        self._call(lambda: self._client.get_children_async(path, watch=_one_shot(watch)), done, sorted)

    def set(self, path: str, data: bytes, done: Done, *, version: int = -1) -> None:
        self._call(lambda: self._client.set_async(path, data, version), done, lambda stat: stat.version)

    def delete(self, path: str, done: Done, *, version: int = -1) -> None:
        self._call(lambda: self._client.delete_async(path, version), done, lambda _result: None)

    def commit(self, ops: Sequence[Op], done: Done) -> None:
        transaction = self._client.transaction()
        for op in ops:
            if isinstance(op, Check):
                transaction.check(op.path, op.version)
            elif isinstance(op, Create):
                transaction.create(op.path, op.data, ephemeral=op.ephemeral)
            elif isinstance(op, SetData):
                transaction.set_data(op.path, op.data, op.version)
            elif isinstance(op, Delete):
                transaction.delete(op.path, op.version)

        def committed(outcome: Any) -> None:
            if isinstance(outcome, list):
                failed = [r for r in outcome if isinstance(r, Exception) and not isinstance(r, kz.RolledBackError)]
                if failed:
                    outcome = store_error(failed[0])
                else:
                    outcome = [r.version if isinstance(r, ZnodeStat) else r for r in outcome]
            done(outcome)
        self._call(transaction.commit_async, committed)

    def close(self) -> None:
        self._listeners.clear()  # a session this member closes did not expire: nobody is told it did
        try:
            self._client.stop()
        finally:
            self._client.close()
            self._timers.stop()

    # ------------------------------------------------------------ helpers

    def _call(self, start: Callable[[], Any], done: Done, transform: Callable[[Any], Any] = lambda r: r) -> None:
        """Start a kazoo call and hand its outcome (transformed, or as a StoreError) to `done`, once: a call
        made while the connection is down fails at once, one in flight when it drops fails at the request
        timeout (kazoo would hold both until it reconnects, which may be never)."""
        if self._client.state != KazooState.CONNECTED:
            done(StoreUnavailableError(f"[CONNECTIONLOSS] not connected to ZooKeeper at {self.hosts} "
                                       f"({self._client.state.lower()})"))
            return
        lock = threading.Lock()
        answered = [False]

        def once(outcome: Any) -> None:
            with lock:
                if answered[0]:
                    return
                answered[0] = True
            timer.cancel()
            done(outcome)

        def finished(result: Any) -> None:
            try:
                outcome = transform(result.get_nowait())
            except Exception as exc:
                outcome = store_error(exc)
            once(outcome)
        timer = self._timers.call_later(self.request_timeout_ms / 1000, lambda: once(StoreUnavailableError(
            f"[CONNECTIONLOSS] ZooKeeper at {self.hosts} did not answer within {self.request_timeout_ms} ms")))
        try:
            start().rawlink(finished)
        except Exception as exc:  # kazoo refused before sending
            once(store_error(exc))


def _one_shot(watch: Watch | None) -> Callable[[WatchedEvent], None] | None:
    if watch is None:
        return None
    return lambda _event: watch()
