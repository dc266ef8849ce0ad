"""Consumer throughput: a fresh Consumer reading a topic of committed transactions with
read_uncommitted (the baseline) and read_committed, alternating in one process; then topics
where every tenth and every second transaction was aborted, where read_committed must drop
records; then the memory of a read_committed consumer behind a transaction left open.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from consumer import Consumer
from producer import Producer
from proto.structs import TopicPartition
from txnsim.bench import consumer_memory
from txnsim.bench.chart_spec import RatioBars, RatioSeries, Target
from txnsim.bench.harness import NullProgress, Progress, bench_cluster
from txnsim.bench.report import BenchResult, ResultTable, Verdict, format_count, format_ratio
from txnsim.bench.schedule import rotated
from txnsim.bench.stats import median, median_confidence_interval, paired_ratios

COMMITTED_TOPIC = "bench-consume"
MIXED_TOPIC = "bench-consume-aborts"
HALF_ABORTED_TOPIC = "bench-consume-half-aborted"
PARTITIONS = 3
COMMITTED_VALUE = b"c" * 100
ABORTED_VALUE = b"a" * 100
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")  # the first is the baseline
#: the issue's target: read_committed reads at least this share of read_uncommitted's rate
TARGET_SHARE = 0.95
READ_TIMEOUT_S = 300.0
#: the tables' chart (`txnsim bench --plot`)
READ_CHART = RatioBars((RatioSeries("ratio to baseline", "95% CI of ratio"),),
                       value_label="records/s over read_uncommitted's (same round)",
                       targets=(Target(TARGET_SHARE, f"target {TARGET_SHARE:g}"),))


@dataclass(frozen=True, slots=True)
class Filled:
    committed_records: int
    aborted_records: int


@dataclass(frozen=True, slots=True)
class ReadRun:
    returned: int
    aborted_returned: int
    elapsed_s: float

    @property
    def records_per_s(self) -> float:
        return self.returned / self.elapsed_s


def fill(bootstrap_servers: str, topic: str, records: int, txn_size: int, abort_every: int | None,
         progress: Progress) -> Filled:
    """`records` 100-byte values in transactions of `txn_size`, round-robin over the partitions;
    with `abort_every`, every such transaction is flushed (so its records are in the log) and aborted."""
    transactions = records // txn_size
    committed = aborted = 0
    progress.phase(f"filling {topic}: {transactions:,} transactions of {txn_size:,}", transactions)
    with Producer(bootstrap_servers=bootstrap_servers, transactional_id=f"bench-fill-{topic}") as producer:
        producer.init_transactions()
        for t in range(transactions):
            abort = abort_every is not None and t % abort_every == abort_every - 1
            producer.begin_transaction()
            value = ABORTED_VALUE if abort else COMMITTED_VALUE
            for i in range(txn_size):
                producer.send(topic, value=value, partition=i % PARTITIONS)
            if abort:
                producer.flush()
                producer.abort_transaction()
                aborted += txn_size
            else:
                producer.commit_transaction()
                committed += txn_size
            progress.advance()
    return Filled(committed, aborted)


def read_everything(bootstrap_servers: str, topic: str, isolation_level: str, expected: int) -> ReadRun:
    """Time a fresh consumer from construction until it has returned `expected` records."""
    start = time.monotonic()
    returned = aborted_returned = 0
    with Consumer(bootstrap_servers=bootstrap_servers, isolation_level=isolation_level,
                  auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        while returned < expected:
            for records in consumer.poll(timeout_ms=1000).values():
                returned += len(records)
                aborted_returned += sum(1 for r in records if r.value == ABORTED_VALUE)
            if time.monotonic() - start > READ_TIMEOUT_S:
                raise TimeoutError(f"{isolation_level} read {returned:,} of {expected:,} records of {topic} "
                                   f"in {READ_TIMEOUT_S:.0f} s")
        elapsed = time.monotonic() - start
    return ReadRun(returned, aborted_returned, elapsed)


def read_rounds(bootstrap_servers: str, topic: str, filled: Filled, repeat: int,
                progress: Progress) -> dict[str, list[ReadRun]]:
    expected = {"read_uncommitted": filled.committed_records + filled.aborted_records,
                "read_committed": filled.committed_records}
    runs: dict[str, list[ReadRun]] = {level: [] for level in ISOLATION_LEVELS}
    progress.phase(f"reading {topic}: both isolation levels x {repeat} rounds", len(ISOLATION_LEVELS) * repeat)
    for round_ in range(repeat):
        for level in rotated(ISOLATION_LEVELS, round_):
            runs[level].append(read_everything(bootstrap_servers, topic, level, expected[level]))
            progress.advance()
    return runs


def run(records: int = 300_000, txn_size: int = 1_000, repeat: int = 3, abort_every: int = 10,
        progress: Progress | None = None, half_abort_every: int = 2,
        behind_records: int = consumer_memory.BEHIND_RECORDS) -> BenchResult:
    progress = progress or NullProgress()
    with bench_cluster({COMMITTED_TOPIC: PARTITIONS, MIXED_TOPIC: PARTITIONS, HALF_ABORTED_TOPIC: PARTITIONS,
                        consumer_memory.TOPIC: consumer_memory.PARTITIONS}) as cluster:
        bs = cluster.bootstrap_servers
        committed = fill(bs, COMMITTED_TOPIC, records, txn_size, None, progress)
        committed_runs = read_rounds(bs, COMMITTED_TOPIC, committed, repeat, progress)
        mixed = fill(bs, MIXED_TOPIC, records, txn_size, abort_every, progress)
        mixed_runs = read_rounds(bs, MIXED_TOPIC, mixed, repeat, progress)
        half = fill(bs, HALF_ABORTED_TOPIC, records, txn_size, half_abort_every, progress)
        half_runs = read_rounds(bs, HALF_ABORTED_TOPIC, half, repeat, progress)
        samples, behind_returned = consumer_memory.measure(bs, progress, behind_records)
    pairs = paired_ratios([r.records_per_s for r in committed_runs["read_committed"]],
                          [r.records_per_s for r in committed_runs["read_uncommitted"]])
    share, (low, high) = median(pairs), median_confidence_interval(pairs)
    aborted_leaks = sum(r.aborted_returned for runs in (mixed_runs, half_runs) for r in runs["read_committed"])
    # with aborts the levels return different records: compare the time each takes to read the topic to its end
    half_pairs = paired_ratios([1 / r.elapsed_s for r in half_runs["read_committed"]],
                               [1 / r.elapsed_s for r in half_runs["read_uncommitted"]])
    half_share, (half_low, half_high) = median(half_pairs), median_confidence_interval(half_pairs)
    return BenchResult("consumer", (
        read_table(f"Consumer throughput: {committed.committed_records:,} committed records "
                   f"(transactions of {txn_size:,}, 100-byte values, 3 partitions), median of {repeat} "
                   f"alternating rounds", committed_runs),
        read_table(f"With aborted transactions: {mixed.committed_records:,} committed and "
                   f"{mixed.aborted_records:,} aborted records (every {abort_every}th transaction aborted), "
                   f"median of {repeat} alternating rounds", mixed_runs),
        read_table(f"Half the transactions aborted: {half.committed_records:,} committed and "
                   f"{half.aborted_records:,} aborted records (one transaction in {half_abort_every} aborted), "
                   f"median of {repeat} alternating rounds", half_runs),
        consumer_memory.memory_table(samples),
    ), (
        Verdict(f"read_committed reads at least {TARGET_SHARE:.0%} of read_uncommitted's records/s",
                share >= TARGET_SHARE,
                f"median ratio {format_ratio(share)}, 95% CI {low:.3f} .. {high:.3f}, {len(pairs)} rounds"),
        Verdict("read_committed returns no record of an aborted transaction", aborted_leaks == 0,
                f"{aborted_leaks:,} returned"),
        Verdict(f"with half the transactions aborted, read_committed reads the topic to its end in at most "
                f"1/{TARGET_SHARE} of read_uncommitted's time", half_share >= TARGET_SHARE,
                f"median ratio of speeds {format_ratio(half_share)}, 95% CI {half_low:.3f} .. {half_high:.3f}, "
                f"{len(half_pairs)} rounds"),
        *consumer_memory.verdicts(samples, behind_returned),
    ))


def read_table(title: str, runs: dict[str, list[ReadRun]]) -> ResultTable:
    baseline_rates = [r.records_per_s for r in runs["read_uncommitted"]]
    rows = []
    for level, level_runs in runs.items():
        rates = [r.records_per_s for r in level_runs]
        pairs = paired_ratios(rates, baseline_rates)
        rows.append((level + (" (baseline)" if level == "read_uncommitted" else ""),
                     format_count(level_runs[0].returned), format_count(level_runs[0].aborted_returned),
                     format_count(median(rates)), format_ratio(median(pairs)),
                     "%.3f .. %.3f" % median_confidence_interval(pairs),
                     f"{median([r.elapsed_s for r in level_runs]):.2f}"))
    return ResultTable(title, ("isolation level", "records returned", "of aborted txns", "records/s",
                               "ratio to baseline", "95% CI of ratio", "seconds"), tuple(rows),
                       ("A fresh Consumer per run, timed from construction to the last expected record "
                        "(default fetch settings: max_poll_records=500, max_partition_fetch_bytes=1 MiB). The ratio "
                        "is the median over the rounds of read_committed's rate over read_uncommitted's in the same "
                        "round, with a distribution-free 95% confidence interval for that median.",),
                       chart=READ_CHART)
