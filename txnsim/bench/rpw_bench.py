"""Read-process-write: the exactly-once loop (read_committed consumer in a group, transactional producer; per
poll: begin, send each record transformed, send_offsets_to_transaction, commit) against the at-least-once
loop (per poll: send each record transformed, flush, a synchronous consumer commit), on the same input,
interleaved round by round.

Both loops wait once per poll for the same kind of thing (the output durable, the offsets stored); the
exactly-once loop's wait is a commit (EndTxn, then markers), the at-least-once loop's a flush and an
OffsetCommit. Kafka's case for transactions is that their commit amortises: the issue's target is the
exactly-once loop at 2x or more of the at-least-once one. Every exactly-once run is read back with
read_committed afterwards: each input record in the output exactly once.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from consumer import Consumer, read_to_end
from producer import Producer
from proto.structs import ConsumerRecord, OffsetAndMetadata, TopicPartition
from txnsim.bench.harness import NullProgress, Progress, bench_cluster
from txnsim.bench.report import (
    BenchResult,
    ResultTable,
    Verdict,
    format_count,
    format_ratio,
)
from txnsim.bench.schedule import rotated
from txnsim.bench.stats import median, median_confidence_interval, paired_ratios

INPUT = "bench-rpw-in"
PARTITIONS = 4
VALUE_SIZE = 100
EOS, ALO = "exactly-once (transaction per poll)", "at-least-once (flush + sync commit per poll)"
LOOPS = (ALO, EOS)  # the first is the baseline
#: the issue's target: exactly-once at this multiple of at-least-once, or more
TARGET_RATIO = 2.0
RUN_TIMEOUT_S = 300.0

Batch = dict[TopicPartition, list[ConsumerRecord]]
#: where the caller's time goes, per poll: poll(), the send() calls, the offsets (send_offsets_to_transaction or
#: consumer.commit), the wait for the output (commit_transaction or flush)
PARTS = ("poll", "send", "offsets", "commit_transaction / flush")


@dataclass(frozen=True, slots=True)
class LoopRun:
    records: int
    polls: int
    elapsed_s: float
    client_cpu_s: float
    #: seconds the caller spent in each part of the loop, summed over the polls: see PARTS
    parts_s: tuple[float, ...]
    #: the exactly-once check (EOS runs only): output records read back with read_committed, and distinct ones
    output_records: int | None = None
    distinct_output: int | None = None

    @property
    def records_per_s(self) -> float:
        return self.records / self.elapsed_s

    @property
    def commits_per_s(self) -> float:
        return self.polls / self.elapsed_s


def input_value(i: int) -> bytes:
    """A 100-byte value that names its record, so the output can be checked for duplicates."""
    return b"%010d" % i + b"x" * (VALUE_SIZE - 10)


def transform(value: bytes) -> bytes:
    """The "processing": cheap, so the loops' commit paths are what is compared."""
    return value.upper()


def fill(bootstrap_servers: str, records: int, progress: Progress) -> None:
    """`records` values over the input's partitions, by an idempotent producer (no transactions to skip)."""
    progress.phase(f"writing {records:,} input records", 1)
    with Producer(bootstrap_servers=bootstrap_servers) as producer:
        for i in range(records):
            producer.send(INPUT, value=input_value(i), partition=i % PARTITIONS)
        producer.flush()
    progress.advance()


def _consumer(bootstrap_servers: str, group: str) -> Consumer:
    consumer = Consumer(bootstrap_servers=bootstrap_servers, group_id=group, isolation_level="read_committed",
                        enable_auto_commit=False, auto_offset_reset="earliest")
    consumer.subscribe([INPUT])
    return consumer


def _loop(consumer: Consumer, records: int, step: Callable[[Batch], tuple[float, float, float]]) -> LoopRun:
    """Poll and `step` each non-empty batch until `records` were processed; the clock starts at the first
    batch (the group join is left out: both loops pay it alike, once)."""
    done = polls = 0
    start = cpu_start = None
    parts = [0.0] * len(PARTS)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while done < records:
        polling = time.monotonic()
        batch = consumer.poll(timeout_ms=1000)
        if start is not None:
            parts[0] += time.monotonic() - polling
        if time.monotonic() > deadline:
            raise TimeoutError(f"read-process-write processed {done:,} of {records:,} records in {RUN_TIMEOUT_S:.0f} s")
        if not batch:
            continue
        if start is None:
            start, cpu_start = time.monotonic(), time.process_time()
        for i, seconds in enumerate(step(batch), start=1):
            parts[i] += seconds
        polls += 1
        done += sum(len(records_) for records_ in batch.values())
    assert start is not None and cpu_start is not None
    return LoopRun(done, polls, time.monotonic() - start, time.process_time() - cpu_start, tuple(parts))


def run_exactly_once(bootstrap_servers: str, records: int, run_id: str) -> LoopRun:
    output = f"bench-rpw-out-{run_id}"
    with Producer(bootstrap_servers=bootstrap_servers, transactional_id=f"bench-rpw-{run_id}") as producer, \
            _consumer(bootstrap_servers, f"bench-rpw-{run_id}") as consumer:
        producer.init_transactions()
        send = producer.send

        def step(batch: Batch) -> tuple[float, float, float]:
            t0 = time.monotonic()
            producer.begin_transaction()
            for tp, batch_records in batch.items():
                for record in batch_records:
                    send(output, value=transform(record.value), partition=tp.partition)
            t1 = time.monotonic()
            producer.send_offsets_to_transaction(
                {tp: OffsetAndMetadata(batch_records[-1].offset + 1) for tp, batch_records in batch.items()},
                consumer.group_metadata())
            t2 = time.monotonic()
            producer.commit_transaction()
            return t1 - t0, t2 - t1, time.monotonic() - t2

        loop = _loop(consumer, records, step)
    output_records, distinct = read_back(bootstrap_servers, output)
    return LoopRun(loop.records, loop.polls, loop.elapsed_s, loop.client_cpu_s, loop.parts_s, output_records,
                   distinct)


def run_at_least_once(bootstrap_servers: str, records: int, run_id: str) -> LoopRun:
    output = f"bench-rpw-out-{run_id}"
    with Producer(bootstrap_servers=bootstrap_servers) as producer, \
            _consumer(bootstrap_servers, f"bench-rpw-{run_id}") as consumer:
        send = producer.send

        def step(batch: Batch) -> tuple[float, float, float]:
            t0 = time.monotonic()
            for tp, batch_records in batch.items():
                for record in batch_records:
                    send(output, value=transform(record.value), partition=tp.partition)
            t1 = time.monotonic()
            producer.flush()
            t2 = time.monotonic()
            consumer.commit({tp: OffsetAndMetadata(batch_records[-1].offset + 1)
                             for tp, batch_records in batch.items()})
            return t1 - t0, time.monotonic() - t2, t2 - t1

        return _loop(consumer, records, step)


def read_back(bootstrap_servers: str, topic: str) -> tuple[int, int]:
    """(records, distinct values) of `topic` read with read_committed, to the log's end (untimed)."""
    values = [r.value for r in read_to_end(bootstrap_servers, [TopicPartition(topic, p) for p in range(PARTITIONS)],
                                           timeout_s=RUN_TIMEOUT_S, poll_ms=500)]
    return len(values), len(set(values))


def run(records: int = 200_000, repeat: int = 3, progress: Progress | None = None) -> BenchResult:
    progress = progress or NullProgress()
    runs: dict[str, list[LoopRun]] = {loop: [] for loop in LOOPS}
    topics = {INPUT: PARTITIONS} | {f"bench-rpw-out-{r}-{i}": PARTITIONS for r in range(repeat) for i in range(2)}
    with bench_cluster(topics) as cluster:
        bs = cluster.bootstrap_servers
        fill(bs, records, progress)
        progress.phase(f"read-process-write: {len(LOOPS)} loops x {repeat} rounds x {records:,} records",
                       len(LOOPS) * repeat)
        for round_ in range(repeat):
            for loop in rotated(LOOPS, round_):
                run_id = f"{round_}-{LOOPS.index(loop)}"
                measure = run_exactly_once if loop == EOS else run_at_least_once
                runs[loop].append(measure(bs, records, run_id))
                progress.advance()
    return BenchResult("rpw", (rpw_table(runs, records, repeat),), verdicts(runs, records))


def rpw_table(runs: dict[str, list[LoopRun]], records: int, repeat: int) -> ResultTable:
    baseline = [r.records_per_s for r in runs[ALO]]
    rows = []
    for loop, loop_runs in runs.items():
        pairs = paired_ratios([r.records_per_s for r in loop_runs], baseline)
        checked = [r for r in loop_runs if r.output_records is not None]
        output = (f"{sum(r.output_records or 0 for r in checked):,} / {sum(r.distinct_output or 0 for r in checked):,}"
                  if checked else "-")
        rows.append((loop + (" (baseline)" if loop == ALO else ""), format_count(median([r.records_per_s
                                                                                         for r in loop_runs])),
                     format_ratio(median(pairs)), "%.3f .. %.3f" % median_confidence_interval(pairs),
                     f"{median([r.commits_per_s for r in loop_runs]):,.1f}",
                     f"{median([r.records / r.polls for r in loop_runs]):,.0f}",
                     *(f"{median([r.parts_s[i] / r.polls for r in loop_runs]) * 1000:.1f}"
                       for i in range(len(PARTS))),
                     f"{median([r.client_cpu_s / r.elapsed_s for r in loop_runs]):.2f}", output))
    return ResultTable(
        f"Read-process-write: {records:,} 100-byte input records over {PARTITIONS} partitions, each loop reading "
        f"all of them, median of {repeat} interleaved rounds",
        ("loop", "records/s", "ratio to baseline", "95% CI of ratio", "commits/s", "records per poll",
         *(f"{part} ms/poll" for part in PARTS), "client CPU (cores)", "output read back / distinct"),
        tuple(rows),
        ("Both loops: one process, txnsim's Consumer (read_committed, in a group of its own, max_poll_records=500) "
         "and Producer, each output record sent to the partition its input came from. records/s: input records "
         "processed from the first batch returned to the last commit. commits/s: transactions (exactly-once) or "
         "synchronous OffsetCommits (at-least-once) per second, one per poll. ms/poll: the caller's time per poll in "
         "poll(), in the send() calls (begin_transaction included), in the offsets (send_offsets_to_transaction: "
         "AddOffsetsToTxn and TxnOffsetCommit; or consumer.commit: OffsetCommit) and in the wait for the output "
         "(commit_transaction, which flushes first; or flush). output read back: the exactly-once "
         "runs' output topics read afterwards with read_committed (records / distinct values, summed over the "
         "runs); equal to the input records of all runs is exactly once.",))


def verdicts(runs: dict[str, list[LoopRun]], records: int) -> tuple[Verdict, ...]:
    pairs = paired_ratios([r.records_per_s for r in runs[EOS]], [r.records_per_s for r in runs[ALO]])
    share, (low, high) = median(pairs), median_confidence_interval(pairs)
    checked = runs[EOS]
    exact = all(r.output_records == records and r.distinct_output == records for r in checked)
    found = ", ".join(f"{r.output_records:,} ({r.distinct_output:,} distinct)" for r in checked)
    return (
        Verdict(f"exactly-once read-process-write at {TARGET_RATIO:g}x or more of at-least-once",
                share >= TARGET_RATIO,
                f"median ratio {share:.3f}, 95% CI {low:.3f} .. {high:.3f}, {len(pairs)} rounds"),
        Verdict("each exactly-once run's output holds every input record exactly once", exact,
                f"{records:,} input records; output per run: {found}"),
    )
