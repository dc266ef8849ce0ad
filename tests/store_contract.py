"""What any coordination store must do as ZooKeeper does, run against a real ZooKeeper server
(tests/integration/test_zookeeper_store.py) and against the simulator's (tests/unit/simulate/
test_sim_coordination.py): the simulator checks the controller on a model that behaves like the real one."""
from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from coordinator.controller.store import (
    BadVersionError,
    Check,
    CoordinationStore,
    Create,
    NodeExistsError,
    NoNodeError,
    SetData,
    Znode,
)
from coordinator.runtime.io import wait_for


def a_versioned_write_from_a_writer_that_read_an_older_version_fails(store: CoordinationStore, root: str) -> None:
    path = f"{root}/state"
    wait_for(lambda done: store.create(path, b'{"isr": [0, 1, 2]}', done))
    read: Znode = wait_for(lambda done: store.get(path, done))
    assert wait_for(lambda done: store.set(path, b'{"isr": [0, 1]}', done, version=read.version)) == read.version + 1
    with pytest.raises(BadVersionError):  # a second writer still holding the old version loses
        wait_for(lambda done: store.set(path, b'{"isr": [0, 2]}', done, version=read.version))
    assert wait_for(lambda done: store.get(path, done)).data == b'{"isr": [0, 1]}'
    with pytest.raises(NodeExistsError):
        wait_for(lambda done: store.create(path, b"again", done))
    with pytest.raises(NoNodeError):
        wait_for(lambda done: store.create(f"{root}/missing/child", b"", done))


def a_multi_op_guarded_by_a_stale_version_changes_nothing(store: CoordinationStore, root: str) -> None:
    wait_for(lambda done: store.create(f"{root}/controller_epoch", b"1", done))
    wait_for(lambda done: store.create(f"{root}/state", b"leader 0", done))
    wait_for(lambda done: store.set(f"{root}/controller_epoch", b"2", done))  # a newer controller took over
    with pytest.raises(BadVersionError):
        wait_for(lambda done: store.commit([Check(f"{root}/controller_epoch", 0),
                                            SetData(f"{root}/state", b"leader 1"),
                                            Create(f"{root}/extra")], done))
    assert wait_for(lambda done: store.get(f"{root}/state", done)).data == b"leader 0"
    assert wait_for(lambda done: store.children(root, done)) == ["controller_epoch", "state"]
    versions = wait_for(lambda done: store.commit([Check(f"{root}/controller_epoch", 1),
                                                   SetData(f"{root}/state", b"leader 1")], done))
    assert versions[1] == 1


def a_watch_on_a_missing_znode_fires_when_it_is_created(store: CoordinationStore, root: str) -> None:
    path = f"{root}/controller"
    fired = threading.Event()
    with pytest.raises(NoNodeError):
        wait_for(lambda done: store.get(path, done, watch=fired.set))
    wait_for(lambda done: store.create(path, b'{"brokerid": 1}', done, ephemeral=True))
    assert fired.wait(5), "the watch set on the missing znode never fired on its creation"


def a_child_watch_fires_once_when_the_children_change(store: CoordinationStore, root: str) -> None:
    fired: list[int] = []
    assert wait_for(lambda done: store.children(root, done, watch=lambda: fired.append(1))) == []
    wait_for(lambda done: store.create(f"{root}/1", b"", done, ephemeral=True))
    wait_for(lambda done: store.create(f"{root}/2", b"", done, ephemeral=True))
    deadline = threading.Event()
    deadline.wait(0.2)  # a second firing would come now: a watch is one-shot
    assert fired == [1]


CONTRACT: list[Callable[[CoordinationStore, str], None]] = [
    a_versioned_write_from_a_writer_that_read_an_older_version_fails,
    a_multi_op_guarded_by_a_stale_version_changes_nothing,
    a_watch_on_a_missing_znode_fires_when_it_is_created,
    a_child_watch_fires_once_when_the_children_change,
]
