"""Fixtures for the partition log tests: logs in tmp_path, closed at teardown.

A module runs its tests on the real disk and on the simulated one (memory_storage.py) with
pytestmark = pytest.mark.parametrize("storage", ["file", "memory"], indirect=True).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from partitions import LogConfig, PartitionLog
from partitions.memory_storage import MemoryStorage
from partitions.storage import FILE_STORAGE, Storage


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "orders-0"


@pytest.fixture
def storage(request: pytest.FixtureRequest) -> Storage:
    """The real disk unless the test is parametrised with "memory"."""
    return MemoryStorage() if getattr(request, "param", "file") == "memory" else FILE_STORAGE


@pytest.fixture
def open_log(log_dir: Path, storage: Storage) -> Iterator[Callable[..., PartitionLog]]:
    """open_log(leader_epoch=0, **LogConfig fields) opens (or reopens) the log in log_dir."""
    opened: list[PartitionLog] = []

    def _open(*, leader_epoch: int = 0, **config: object) -> PartitionLog:
        log = PartitionLog.open(log_dir, "orders", 0, leader_epoch=leader_epoch, config=LogConfig(**config),
                                storage=storage)
        opened.append(log)
        return log

    yield _open
    for log in opened:
        log.close()
