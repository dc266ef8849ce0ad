"""The controller's store on a real ZooKeeper server: versioned writes refuse a stale writer, ephemeral
registrations go with their session (a paused member's expires), watches fire, multi-op writes are all or
nothing, and an outage of the service is a clear CONNECTIONLOSS, never a hang, with everything persistent
still there once it is back."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from coordinator.controller.store import (
    SessionEvent,
    StoreUnavailableError,
)
from coordinator.controller.zookeeper_store import ZooKeeperStore
from coordinator.runtime.io import wait_for
from tests.helpers import wait_until
from tests.store_contract import CONTRACT
from txnsim.zookeeper import ZooKeeperServer, zookeeper_available

_MISSING = zookeeper_available()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=f"ZooKeeper cannot run here: {_MISSING}")


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer(tmp_path_factory.mktemp("zk")) as server:
        yield server


@pytest.fixture
def store(zookeeper: ZooKeeperServer, request: pytest.FixtureRequest) -> Iterator[ZooKeeperStore]:
    session = ZooKeeperStore(zookeeper.address, session_timeout_ms=2_000)
    wait_for(lambda done: session.ensure_path(f"/{request.node.name}", done))
    yield session
    session.close()


@pytest.mark.parametrize("case", CONTRACT, ids=lambda case: case.__name__)
def test_zookeeper_keeps_the_store_contract(store: ZooKeeperStore, case: Callable[[ZooKeeperStore, str], None],
                                            request: pytest.FixtureRequest) -> None:
    case(store, f"/{request.node.name}")


_MEMBER = """
import sys, time
from coordinator.controller.zookeeper_store import ZooKeeperStore
from coordinator.runtime.io import wait_for
store = ZooKeeperStore(sys.argv[1], session_timeout_ms=800)
wait_for(lambda done: store.create(sys.argv[2], b"member", done, ephemeral=True))
print("registered", flush=True)
time.sleep(600)
"""


def test_a_paused_members_registration_goes_when_its_session_expires(store: ZooKeeperStore,
                                                                       zookeeper: ZooKeeperServer) -> None:
    root = "/test_a_paused_members_registration_goes_when_its_session_expires"
    member = subprocess.Popen([sys.executable, "-c", _MEMBER, zookeeper.address, f"{root}/1"],
                              stdout=subprocess.PIPE, cwd=Path(__file__).resolve().parents[2],
                              env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])))
    try:
        assert member.stdout is not None and member.stdout.readline().strip() == b"registered"
        changed = threading.Event()
        assert wait_for(lambda done: store.children(root, done, watch=changed.set)) == ["1"]
        member.send_signal(signal.SIGSTOP)  # the member's process is paused: it sends no heartbeats
        started = time.monotonic()
        assert changed.wait(10), "the registration of a paused member outlived its session"
        assert wait_for(lambda done: store.children(root, done)) == []
        assert time.monotonic() - started >= 0.5  # not before its session timeout (800 ms, as granted)
    finally:
        member.send_signal(signal.SIGCONT)
        member.kill()
        member.wait()


def test_an_outage_of_zookeeper_is_connectionloss_and_persistent_state_survives_it(tmp_path: Path) -> None:
    with ZooKeeperServer(tmp_path / "zk") as server:
        session = ZooKeeperStore(server.address, session_timeout_ms=4_000)
        events: list[SessionEvent] = []
        session.on_session(events.append)
        try:
            wait_for(lambda done: session.create("/brokers", b"", done))
            server.kill()
            wait_until(lambda: SessionEvent.SUSPENDED in events, 10, "the session to notice the outage")
            started = time.monotonic()
            with pytest.raises(StoreUnavailableError, match="CONNECTIONLOSS"):
                wait_for(lambda done: session.get("/brokers", done))
            assert time.monotonic() - started < 5
            server.start()  # same port, same data directory
            wait_until(lambda: events[-1] is SessionEvent.CONNECTED, 15, "the session to reconnect")
            assert wait_for(lambda done: session.get("/brokers", done)).version == 0
        finally:
            session.close()
