"""The pure parts of the command line: console-producer line parsing, the transaction outcome of each
offset, and growing a topic in topics.json."""
from __future__ import annotations

import argparse

import pytest

from coordinator.topics import TopicStore
from proto.errors import InvalidConfigError, InvalidPartitionsError, InvalidRecordError
from proto.records import ControlType, encode_batch, encode_control_batch, set_base_offset
from txnsim.cli.io_cmd import LineParser
from txnsim.cli.txn_status import ABORTED, COMMITTED, NOT_TRANSACTIONAL, OPEN, classify


def _parser(*props: tuple[str, str], key_separator: str | None = None) -> LineParser:
    return LineParser.from_args(argparse.Namespace(property=list(props), key_separator=key_separator))


def test_lines_parse_as_kafka_console_producer_reads_them():
    plain = _parser()
    assert plain.parse(b"k:v", 1) == (None, b"k:v", [])
    keyed = _parser(("parse.key", "true"), ("key.separator", ":"))
    assert keyed.parse(b"k:v:w", 1) == (b"k", b"v:w", [])
    assert keyed.parse(b"no key", 2) == (None, b"no key", [])
    assert _parser(key_separator="=").parse(b"a=b", 1) == (b"a", b"b", [])
    full = _parser(("parse.headers", "true"), ("parse.key", "true"))
    assert full.parse(b"h1:a,h2:\tk\tv", 1) == (b"k", b"v", [("h1", b"a"), ("h2", b"")])
    with pytest.raises(InvalidRecordError, match="line 3"):
        full.parse(b"no delimiter", 3)


def _at(batch: bytes, offset: int) -> bytes:
    return set_base_offset(batch, offset, 0)


def test_each_offset_gets_the_outcome_of_its_producers_next_marker():
    log = b"".join([
        _at(encode_batch([(1, None, b"a", ()), (1, None, b"b", ())], producer_id=7, producer_epoch=0,
                         base_sequence=0, transactional=True), 0),
        _at(encode_batch([(1, None, b"x", ())], producer_id=8, producer_epoch=0, base_sequence=0,
                         transactional=True), 2),
        _at(encode_batch([(1, None, b"plain", ())]), 3),
        _at(encode_control_batch(producer_id=7, producer_epoch=0, control_type=ControlType.COMMIT,
                                 coordinator_epoch=0, timestamp=2), 4),
        _at(encode_control_batch(producer_id=8, producer_epoch=0, control_type=ControlType.ABORT,
                                 coordinator_epoch=0, timestamp=2), 5),
        _at(encode_batch([(1, None, b"pending", ())], producer_id=7, producer_epoch=0, base_sequence=2,
                         transactional=True), 6),
    ])
    statuses: dict[int, str] = {}
    assert classify(log, statuses) == 7
    # the markers themselves (4, 5) are no records a consumer returns
    assert statuses == {0: COMMITTED, 1: COMMITTED, 2: ABORTED, 3: NOT_TRANSACTIONAL, 6: OPEN}


def test_a_topic_grows_but_never_shrinks_and_keeps_its_storage_setting(tmp_path):
    (tmp_path / "metadata").mkdir()
    store = TopicStore(tmp_path / "metadata")
    store.create("orders", 2, {"half.message.storage": "kafka"})
    assert store.alter("orders", 5, {"message.type": "FIFO"}, []) == (
        5, {"half.message.storage": "kafka", "message.type": "FIFO"})
    assert store.all() == {"orders": 5}
    assert store.alter("orders", 0, {}, ["message.type"]) == (5, {"half.message.storage": "kafka"})
    with pytest.raises(InvalidPartitionsError):
        store.alter("orders", 5, {}, [])
    with pytest.raises(InvalidConfigError):
        store.alter("orders", 0, {"half.message.storage": "rocketmq"}, [])
    with pytest.raises(InvalidConfigError):
        store.alter("orders", 0, {"message.type": "SOMETIMES"}, [])
