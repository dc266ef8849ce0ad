"""The RocketMQ benchmark's pure parts: batches counted in segment files, fsyncs parsed from strace's
output, CPU read from /proc, and the verdicts drawn from runs."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from partitions.segment import segment_name
from proto.records import ControlType, encode_batch, encode_control_batch
from txnsim.bench.log_census import (
    DATA,
    HALF,
    MARKERS,
    OP,
    OTHER,
    TXN_STATE,
    BatchCount,
    Fsync,
    LogCensus,
    count_batches,
    cpu_seconds_from_stat,
    log_of,
    parse_fsyncs,
    per_message,
)
from txnsim.bench.rocketmq_bench import (
    KAFKA,
    ROCKETMQ,
    UNDECIDED_EVERY,
    ProduceRun,
    Results,
    Sent,
    fsync_log_of,
    verdicts,
)


def record_batch(value: bytes = b"v" * 100) -> bytes:
    return encode_batch([(1_000, None, value, [])])


def marker() -> bytes:
    return encode_control_batch(producer_id=7, producer_epoch=1, control_type=ControlType.COMMIT,
                                coordinator_epoch=0, timestamp=1_000)


def test_count_batches_tells_records_from_markers_and_leaves_a_torn_tail_for_later():
    whole = record_batch() + marker() + record_batch(b"x")
    count, length = count_batches(whole + record_batch()[:30])
    assert count == BatchCount(data=2, control=1, data_bytes=len(whole) - len(marker()), control_bytes=len(marker()))
    assert length == len(whole)
    assert count_batches(b"") == (BatchCount(), 0)


def test_log_of_names_the_column_a_log_counts_in():
    assert log_of("RMQ_SYS_TRANS_HALF_TOPIC-3") == HALF
    assert log_of("RMQ_SYS_TRANS_OP_HALF_TOPIC-3") == OP
    assert log_of("__transaction_state-41") == TXN_STATE
    assert log_of("__consumer_offsets-2") == OTHER
    assert log_of("TRANS_CHECK_MAX_TIME_TOPIC-0") == OTHER
    assert log_of("bench-rmq-kafka-2") == DATA


def _append(directory: Path, data: bytes) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / segment_name(0, 1)).open("ab") as f:
        f.write(data)


def test_log_census_reads_segments_on_from_where_it_stopped(tmp_path):
    logs = tmp_path / "logs"
    census = LogCensus(logs)
    assert census.take().batches == Counter()
    _append(logs / "RMQ_SYS_TRANS_HALF_TOPIC-3", record_batch())
    _append(logs / "topic-0", record_batch() + marker())
    _append(logs / "__transaction_state-7", record_batch() + record_batch())
    first = census.take()
    assert first.batches == Counter({HALF: 1, DATA: 1, MARKERS: 1, TXN_STATE: 2})
    assert first.bytes[MARKERS] == len(marker())
    torn = record_batch()
    _append(logs / "topic-0", torn[:40])           # being written: not counted yet
    assert census.take() == first
    _append(logs / "topic-0", torn[40:] + marker())
    assert per_message(first.batches, census.take().batches, 2) == {
        HALF: 0.0, OP: 0.0, DATA: 0.5, MARKERS: 0.5, TXN_STATE: 0.0, OTHER: 0.0}


def test_per_message_of_no_messages_is_zero():
    assert set(per_message(Counter(), Counter({DATA: 3}), 0).values()) == {0.0}


STRACE = """\
101   fsync(12</data/logs/RMQ_SYS_TRANS_HALF_TOPIC-3/00000000000000000000-e1.log>) = 0 <0.000210>
102   fsync(14</data/logs/topic-1/00000000000000000000-e1.log> <unfinished ...>
103   fdatasync(9</data/producer-ids/block-3>) = 0 <0.000100>
102   <... fsync resumed>) = 0 <0.000300>
104   fsync(5</data/logs/topic-1>) = 0 <0.000050>
105   fsync(6</data/logs/topic-2/00000000000000000000-e1.log> <unfinished ...>
"""


def test_parse_fsyncs_joins_an_interrupted_call_with_its_resumption():
    assert parse_fsyncs(STRACE) == [
        Fsync("/data/logs/RMQ_SYS_TRANS_HALF_TOPIC-3/00000000000000000000-e1.log", 0.000210),
        Fsync("/data/producer-ids/block-3", 0.000100),
        Fsync("/data/logs/topic-1/00000000000000000000-e1.log", 0.000300),
        Fsync("/data/logs/topic-1", 0.000050),
        Fsync("/data/logs/topic-2/00000000000000000000-e1.log", 0.0),  # still running when strace detached
    ]


def test_an_fsynced_file_counts_for_its_log_and_anything_else_as_other():
    logs = Path("/data/logs")
    assert fsync_log_of("/data/logs/RMQ_SYS_TRANS_OP_HALF_TOPIC-0/00000000000000000000-e2.log", logs) == OP
    assert fsync_log_of("/data/logs/topic-1/00000000000000000000-e1.log", logs) == DATA
    assert fsync_log_of("/data/logs/topic-1", logs) == OTHER            # the directory, after a roll
    assert fsync_log_of("/data/producer-ids/block-3", logs) == OTHER


def test_cpu_seconds_are_utime_and_stime_after_the_command_name():
    stat = "4242 (python -m (node)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0"
    assert cpu_seconds_from_stat(stat, 100) == pytest.approx(3.0)


def _run(messages: int, undecided_every: int | None, checks: int) -> ProduceRun:
    sent = tuple(Sent(b"%d" % i, 0.0, 0.001, 0.002,
                      undecided_every is not None and i % undecided_every == undecided_every - 1)
                 for i in range(messages))
    return ProduceRun(sent, 1.0, {}, 0.0, 0.0, 0.0, checks=checks)


def test_verdicts_count_checks_against_undecided_messages():
    results = Results()
    for design in (ROCKETMQ, KAFKA):
        results.produce[design].append(_run(20, None, 0))
        results.checks[(design, None, True)].append(_run(20, None, 0))
        results.checks[(design, UNDECIDED_EVERY, True)].append(_run(20, UNDECIDED_EVERY, 2))
        results.checks[(design, UNDECIDED_EVERY, False)].append(_run(10, UNDECIDED_EVERY, 1))
    assert [v.met for v in verdicts(results)] == [True, True, True]
    results.checks[(KAFKA, UNDECIDED_EVERY, False)].append(_run(10, UNDECIDED_EVERY, 3))  # one message checked thrice
    results.produce[KAFKA].append(_run(10, None, 1))
    results.repeats = 1
    assert [v.met for v in verdicts(results)] == [False, False, False]
