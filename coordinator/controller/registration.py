"""A broker's registration: the ephemeral /brokers/ids/<id> znode that says it is live, for as long as its
session lives, made again after the session expires.

A broker restarted quickly after kill -9 may find its previous life's registration still there (that
session lives until its timeout): it waits for it to go, watching it, rather than fail (Kafka's broker
refuses to start instead) or delete it (which would let two lives of one broker both look registered).
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from coordinator.controller.controller import Serial
from coordinator.controller.store import (
    CoordinationStore,
    NodeExistsError,
    NoNodeError,
    SessionEvent,
    StoreError,
    Znode,
)
from coordinator.controller.znodes import BROKER_IDS, BrokerInfo, broker_path

log = logging.getLogger(__name__)


class BrokerRegistration:
    def __init__(self, info: BrokerInfo, store: CoordinationStore, serial: Serial) -> None:
        self.info = info
        self._store = store
        self._serial = serial
        self.registered = False
        store.on_session(lambda event: serial(lambda: self._session(event)))

    def start(self) -> None:
        self._serial(lambda: self._store.ensure_path(BROKER_IDS, self._answered(lambda _o: self._register())))

    def _session(self, event: SessionEvent) -> None:
        if event is SessionEvent.EXPIRED:
            self.registered = False
            log.warning("broker %d: session expired; registering again once connected", self.info.broker_id)
        elif event is SessionEvent.CONNECTED and not self.registered:
            self._register()

    def _register(self) -> None:
        self._store.create(broker_path(self.info.broker_id), self.info.encode(), self._answered(self._created),
                           ephemeral=True)

    def _created(self, outcome: object) -> None:
        if isinstance(outcome, NodeExistsError):
            self._store.get(broker_path(self.info.broker_id), self._answered(self._existing),
                            watch=lambda: self._serial(self._register_unless_done))
        elif isinstance(outcome, StoreError):
            log.info("broker %d: not registered yet (%s)", self.info.broker_id, outcome)
        else:
            self.registered = True
            log.info("broker %d: registered at %s", self.info.broker_id, broker_path(self.info.broker_id))

    def _existing(self, outcome: object) -> None:
        if isinstance(outcome, Znode):
            if outcome.ephemeral_owner == self._store.session_id:
                self.registered = True
            else:
                log.warning("broker %d: an earlier life's registration is still live; waiting for its session to "
                            "expire", self.info.broker_id)
        elif isinstance(outcome, NoNodeError):  # its session ended between our create and our read
            self._register_unless_done()

    def _register_unless_done(self) -> None:
        if not self.registered:
            self._register()

    def _answered(self, handler: Callable[[object], None]) -> Callable[[object], None]:
        return lambda outcome: self._serial(lambda: handler(outcome))
