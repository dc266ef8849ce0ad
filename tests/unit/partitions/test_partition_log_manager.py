"""LogManager: log directories, leadership claims with durable epochs, one open log per partition."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from partitions import LogManager
from partitions.leader_epochs import LeaderEpochs
from proto import records
from proto.errors import InvalidTopicError, NotLeaderOrFollowerError


def test_each_leadership_claims_a_higher_epoch_and_records_where_it_starts(tmp_path: Path):
    manager = LogManager(tmp_path / "logs", node_id=4)
    log = manager.open_as_leader("orders-eu", 3)
    assert log.leader_epoch == 0
    assert manager.log_dir("orders-eu", 3) == tmp_path / "logs" / "orders-eu-3"
    log.append(records.encode_batch([(1, None, b"v", ())]))
    manager.close("orders-eu", 3)
    assert manager.get("orders-eu", 3) is None
    again = LogManager(tmp_path / "logs", node_id=5).open_as_leader("orders-eu", 3)  # released: no wait
    try:
        assert again.leader_epoch == 1 and again.high_watermark == 1
        assert next(again.batches()).header.partition_leader_epoch == 0
        claims = LeaderEpochs(tmp_path / "logs" / "orders-eu-3").claims()
        assert [(c.epoch, c.node_id, c.start_offset, c.released) for c in claims] == [
            (0, 4, 0, True), (1, 5, 1, False)]
        assert not list((tmp_path / "logs" / "orders-eu-3").rglob("*.tmp"))
    finally:
        again.close()


def test_a_log_another_node_still_leads_is_refused_unless_that_node_may_be_cut_off(tmp_path: Path):
    first = LogManager(tmp_path / "logs", node_id=1)
    first.open_as_leader("t", 0)
    second = LogManager(tmp_path / "logs", node_id=2)
    with pytest.raises(NotLeaderOrFollowerError, match="still led by node 1"):
        second.open_as_leader("t", 0)
    with pytest.raises(NotLeaderOrFollowerError):
        second.open_as_leader("t", 0, may_cut_off=lambda node: node != 1)
    taken = second.open_as_leader("t", 0, may_cut_off=lambda node: node == 1)
    assert taken.leader_epoch == 1
    assert first.get("t", 0).fenced and not taken.fenced
    second.close_all()
    first.close_all()  # closing a fenced log neither raises nor marks its epoch released
    claims = LeaderEpochs(tmp_path / "logs" / "t-0").claims()
    assert [(c.epoch, c.node_id, c.released) for c in claims] == [(0, 1, False), (1, 2, True)]


def test_a_node_restarting_takes_back_what_its_earlier_life_led(tmp_path: Path):
    LogManager(tmp_path / "logs", node_id=3).open_as_leader("t", 0)  # never closed: the process "died"
    reborn = LogManager(tmp_path / "logs", node_id=3)
    assert reborn.open_as_leader("t", 0).leader_epoch == 1
    reborn.close_all()


def test_a_restarted_node_lets_go_of_what_its_earlier_life_led(tmp_path: Path):
    """Node 1 dies leading t-0, comes back, and t-0 is now placed on node 2: without the release
    node 2 would wait forever for node 1, which is alive but no longer has the log open."""
    LogManager(tmp_path / "logs", node_id=1).open_as_leader("t", 0)  # never closed: the process "died"
    other = LogManager(tmp_path / "logs", node_id=2)
    with pytest.raises(NotLeaderOrFollowerError):
        other.open_as_leader("t", 0)
    assert LogManager(tmp_path / "logs", node_id=1).release_earlier_lives() == ["t-0"]
    assert other.open_as_leader("t", 0).leader_epoch == 1
    other.close_all()


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
