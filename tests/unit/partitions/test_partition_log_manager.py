"""LogManager: log directories, durable leader epochs, one open log per partition."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from partitions import LogManager
from partitions.log_manager import read_leader_epoch
from proto import records
from proto.errors import InvalidTopicError


def test_each_leadership_writes_a_higher_leader_epoch(tmp_path: Path):
    manager = LogManager(tmp_path / "logs")
    log = manager.open_as_leader("orders-eu", 3)
    assert log.leader_epoch == 0
    assert manager.log_dir("orders-eu", 3) == tmp_path / "logs" / "orders-eu-3"
    assert (tmp_path / "logs" / "orders-eu-3" / "leader-epoch").read_text().strip() == "0"
    log.append(records.encode_batch([(1, None, b"v", ())]))
    manager.close("orders-eu", 3)
    assert manager.get("orders-eu", 3) is None
    again = LogManager(tmp_path / "logs").open_as_leader("orders-eu", 3)
    try:
        assert again.leader_epoch == 1 and again.high_watermark == 1
        assert next(again.batches()).header.partition_leader_epoch == 0
        assert read_leader_epoch(tmp_path / "logs" / "orders-eu-3") == 1
        assert not list((tmp_path / "logs" / "orders-eu-3").glob("*.tmp"))
    finally:
        again.close()


def test_opening_an_open_log_returns_it_without_a_new_epoch(tmp_path: Path):
    manager = LogManager(tmp_path / "logs")
    try:
        with ThreadPoolExecutor(4) as pool:
            logs = list(pool.map(lambda _: manager.open_as_leader("t", 0), range(8)))
        assert all(log is logs[0] for log in logs)
        assert logs[0].leader_epoch == 0 and manager.get("t", 0) is logs[0]
    finally:
        manager.close_all()
    assert manager.get("t", 0) is None


def test_internal_topics_open_like_any_other(tmp_path: Path):
    manager = LogManager(tmp_path / "logs")
    try:
        log = manager.open_as_leader("__transaction_state", 17)
        assert log.topic == "__transaction_state" and log.partition == 17
        assert (tmp_path / "logs" / "__transaction_state-17").is_dir()
    finally:
        manager.close_all()


def test_an_illegal_topic_name_is_refused(tmp_path: Path):
    manager = LogManager(tmp_path / "logs")
    with pytest.raises(InvalidTopicError):
        manager.open_as_leader("../escape", 0)
