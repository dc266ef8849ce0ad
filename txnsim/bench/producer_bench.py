"""Producer throughput: an idempotent producer against transactional ones committing every
10, 100 and 1000 ms, interleaved round by round; and the latency of a commit against the
number of records in the transaction (it should not grow: a commit writes one marker per
partition, whatever the number of records).
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from producer import Producer
from producer.future import FutureRecordMetadata
from proto.structs import TopicPartition
from txnsim.admin import Admin
from txnsim.bench.chart_spec import RatioBars, RatioSeries, Sweep, Target
from txnsim.bench.harness import NullProgress, Progress, bench_cluster
from txnsim.bench.readable import ReadableWatch
from txnsim.bench.report import BenchResult, ResultTable, Verdict, format_count, format_ms, format_ratio
from txnsim.bench.schedule import interleaved, rotated
from txnsim.bench.stats import Summary, median, median_confidence_interval, paired_ratios, ratio

TOPIC = "bench-produce"
COMMIT_COST_TOPIC = "bench-commit-cost"
PARTITIONS = 3
VALUE = b"v" * 100
#: the issue's target: committing every 100 ms costs at most this share of the idempotent rate
TARGET_LOSS_AT_100_MS = 0.05
#: issue 14's targets: the share of the idempotent rate kept when committing every 100 ms (with a confidence
#: interval that says so: its lower end) and every 10 ms, and the absolute rate of both
TARGET_SHARE_AT_100_MS, TARGET_SHARE_AT_10_MS = 0.97, 0.85
TARGET_RECORDS_PER_S = 150_000
#: transaction sizes of the commit-cost table and how many transactions of each are timed
COMMIT_COST_SIZES: tuple[tuple[int, int], ...] = ((10, 100), (1_000, 50), (10_000, 20))
#: "does not grow": the p50 commit of the largest transactions within this factor of the smallest
COMMIT_GROWTH_LIMIT = 1.5
#: the tables' charts (`txnsim bench --plot`)
THROUGHPUT_CHART = RatioBars((RatioSeries("ratio to baseline", "95% CI of ratio"),),
                             value_label="records/s over the idempotent producer's (same round)",
                             targets=(Target(TARGET_SHARE_AT_100_MS, f"target at 100 ms: {TARGET_SHARE_AT_100_MS:g}"),
                                      Target(TARGET_SHARE_AT_10_MS, f"target at 10 ms: {TARGET_SHARE_AT_10_MS:g}")))
COMMIT_COST_CHART = Sweep("records per txn", ("commit p50 ms", "commit p99 ms", "until readable p50 ms",
                                              "until readable p99 ms"),
                          x_label="records per transaction (log scale)", value_label="milliseconds", log_x=True)


@dataclass(frozen=True, slots=True)
class Variant:
    label: str
    #: None: the idempotent baseline; else begin, send for this long, commit
    commit_interval_s: float | None


BASELINE = Variant("idempotent (baseline)", None)
VARIANTS: tuple[Variant, ...] = (
    BASELINE,
    Variant("transactional, commits every 10 ms", 0.010),
    Variant("transactional, commits every 100 ms", 0.100),
    Variant("transactional, commits every 1000 ms", 1.000),
)


@dataclass(frozen=True, slots=True)
class ThroughputRun:
    acknowledged: int
    failed: int
    commits: int
    elapsed_s: float
    #: CPU this process used during the run (every thread: the caller, the sender, gRPC's)
    client_cpu_s: float
    #: time the caller spent inside commit_transaction() (the baseline: in its final flush())
    in_commit_s: float

    @property
    def records_per_s(self) -> float:
        return self.acknowledged / self.elapsed_s


class AckCounter:
    """Counts futures that completed without error. The timed loop pays one append per record;
    counting happens after the clock stops, except in runs of millions of records, where done
    futures are swept from the front so memory stays bounded."""

    SWEEP_AT = 1_000_000

    def __init__(self) -> None:
        self._pending: deque[FutureRecordMetadata] = deque()
        self.acknowledged = 0
        self.failed = 0

    def add(self, future: FutureRecordMetadata) -> None:
        self._pending.append(future)
        if len(self._pending) >= self.SWEEP_AT:
            self.sweep()

    def sweep(self) -> None:
        pending = self._pending
        while pending and pending[0].is_done:
            if pending.popleft().succeeded():
                self.acknowledged += 1
            else:
                self.failed += 1

    def finish(self) -> None:
        """Count everything (after flush or commit every future is done; one that is not counts as failed)."""
        for future in self._pending:
            if future.succeeded():
                self.acknowledged += 1
            else:
                self.failed += 1
        self._pending.clear()


def measure_throughput(bootstrap_servers: str, variant: Variant, seconds: float, run_id: str, *,
                       topic: str = TOPIC) -> ThroughputRun:
    transactional_id = None if variant.commit_interval_s is None else f"bench-producer-{run_id}"
    with Producer(bootstrap_servers=bootstrap_servers, transactional_id=transactional_id) as producer:
        if transactional_id is not None:
            producer.init_transactions()
            producer.begin_transaction()
        producer.send(topic, value=VALUE).get(timeout=30)  # metadata and connections before the clock starts
        if transactional_id is not None:
            producer.commit_transaction()
        counter = AckCounter()
        send, add, clock, commits, in_commit = producer.send, counter.add, time.monotonic, 0, 0.0
        cpu_start = time.process_time()
        start = clock()
        end = start + seconds
        if variant.commit_interval_s is None:
            while clock() < end:
                add(send(topic, value=VALUE))
            flushing = clock()
            producer.flush()
            in_commit = clock() - flushing
        else:
            while (now := clock()) < end:
                producer.begin_transaction()
                txn_end = min(now + variant.commit_interval_s, end)
                while clock() < txn_end:
                    add(send(topic, value=VALUE))
                committing = clock()
                producer.commit_transaction()
                in_commit += clock() - committing
                commits += 1
        elapsed = clock() - start
        client_cpu = time.process_time() - cpu_start
        counter.finish()
    return ThroughputRun(counter.acknowledged, counter.failed, commits, elapsed, client_cpu, in_commit)


def measure_commit_cost(bootstrap_servers: str, progress: Progress,
                        sizes: Sequence[tuple[int, int]] = COMMIT_COST_SIZES) -> dict[int, tuple[list[float], list[float]]]:
    """For each size: commit_transaction() latencies, and commit-until-read latencies (see timed_commit).

    Records go round-robin to every partition and are flushed (acknowledged) before the clock
    starts, so the clock sees the commit alone: EndTxn, and then the markers."""
    tps = [TopicPartition(COMMIT_COST_TOPIC, p) for p in range(PARTITIONS)]
    latencies: dict[int, tuple[list[float], list[float]]] = {size: ([], []) for size, _count in sizes}
    schedule = interleaved(sizes)
    progress.phase("commit latency vs records per transaction", len(schedule))
    with Producer(bootstrap_servers=bootstrap_servers, transactional_id="bench-commit-cost") as producer, \
            Admin(bootstrap_servers) as admin, ReadableWatch(bootstrap_servers, tps) as watch:
        producer.init_transactions()
        for size in schedule:
            starts = admin.end_offsets(tps)
            producer.begin_transaction()
            for i in range(size):
                producer.send(COMMIT_COST_TOPIC, value=VALUE, partition=i % PARTITIONS)
            commit_s, readable_s = timed_commit(producer, watch, starts)
            latencies[size][0].append(commit_s)
            latencies[size][1].append(readable_s)
            progress.advance()
    return latencies


def timed_commit(producer: Producer, watch: ReadableWatch, starts: Mapping[TopicPartition, int]) -> tuple[float, float]:
    """Flush the open transaction's records, then commit it: (commit_transaction()'s latency, until a
    read_committed consumer waiting in poll() was handed its first record on every partition), both from
    the commit's start, so the clock sees the commit alone. `starts`: the end offsets before the
    transaction's first record (the partitions it wrote to)."""
    producer.flush()
    start = time.monotonic()
    producer.commit_transaction()
    committed = time.monotonic()
    return committed - start, watch.wait_until_readable(starts) - start


def run(seconds: float = 3.0, repeat: int = 3, progress: Progress | None = None) -> BenchResult:
    progress = progress or NullProgress()
    runs: dict[Variant, list[ThroughputRun]] = {v: [] for v in VARIANTS}
    with bench_cluster({TOPIC: PARTITIONS, COMMIT_COST_TOPIC: PARTITIONS}) as cluster:
        bs = cluster.bootstrap_servers
        progress.phase(f"producer throughput: {len(VARIANTS)} variants x {repeat} rounds x {seconds:g} s",
                       len(VARIANTS) * repeat)
        for round_ in range(repeat):
            for variant in rotated(VARIANTS, round_):
                runs[variant].append(measure_throughput(bs, variant, seconds, f"{round_}-{VARIANTS.index(variant)}"))
                progress.advance()
        commit_latencies = measure_commit_cost(bs, progress)
    return BenchResult("producer", (throughput_table(runs, seconds, repeat), commit_cost_table(commit_latencies)),
                       verdicts(runs, commit_latencies))


def throughput_table(runs: dict[Variant, list[ThroughputRun]], seconds: float, repeat: int) -> ResultTable:
    baseline_rates = [r.records_per_s for r in runs[BASELINE]]
    rows = []
    for variant, variant_runs in runs.items():
        rates = [r.records_per_s for r in variant_runs]
        pairs = paired_ratios(rates, baseline_rates)
        transactional = variant.commit_interval_s is not None
        commits = median([r.commits / r.elapsed_s for r in variant_runs])
        in_commit = median([r.in_commit_s / r.elapsed_s for r in variant_runs])
        cores = median([r.client_cpu_s / r.elapsed_s for r in variant_runs])
        rows.append((variant.label, format_count(median(rates)), format_ratio(median(pairs)),
                     "%.3f .. %.3f" % median_confidence_interval(pairs), f"{commits:,.1f}" if transactional else "-",
                     f"{in_commit:.0%}", f"{cores:.2f}",
                     format_count(sum(r.failed for r in variant_runs))))
    return ResultTable(
        f"Producer throughput: 100-byte values, 3 partitions, {seconds:g} s per run, median of {repeat} "
        f"interleaved rounds",
        ("producer", "records/s", "ratio to baseline", "95% CI of ratio", "commits/s", "time in commit or flush",
         "client CPU (cores)", "failed records"),
        tuple(rows),
        ("records/s counts acknowledged records (futures done without error) over the run, final flush or "
         "commit included. Each round runs every variant once, in rotated order; the ratio is the median over "
         "the rounds of the variant's rate over the baseline's rate in the same round, with a distribution-free "
         "95% confidence interval for that median (the whole range when there are fewer than 6 rounds). "
         "time in commit or flush: share of the run the caller spent blocked in commit_transaction() (the "
         "baseline: in its final flush()). client CPU: CPU-seconds of the producer's process (all threads) per "
         "second of the run.",), chart=THROUGHPUT_CHART)


def commit_cost_table(latencies: dict[int, tuple[list[float], list[float]]]) -> ResultTable:
    smallest = min(latencies)
    base = Summary.of(latencies[smallest][0]).p50
    rows = []
    for size, (commit, stable) in latencies.items():
        c, s = Summary.of(commit), Summary.of(stable)
        rows.append((f"{size:,}", str(c.count), format_ms(c.p50), format_ms(c.p99),
                     format_ratio(ratio(c.p50, base)), format_ms(s.p50), format_ms(s.p99)))
    return ResultTable(
        "Commit latency vs records per transaction (3 partitions per transaction)",
        ("records per txn", "txns", "commit p50 ms", "commit p99 ms", "p50 vs smallest",
         "until readable p50 ms", "until readable p99 ms"),
        tuple(rows),
        ("commit = commit_transaction() after the records were flushed and acknowledged (EndTxn: "
         "PrepareCommit made durable). until readable = from the same start until a read_committed consumer "
         "waiting in poll() (a process of its own, long-poll fetches) was handed the transaction's first record on "
         "every partition (markers written). Sizes interleaved.",),
        chart=COMMIT_COST_CHART)


def verdicts(runs: dict[Variant, list[ThroughputRun]], latencies: dict[int, tuple[list[float], list[float]]]) -> tuple[Verdict, ...]:
    at_100 = next(v for v in runs if v.commit_interval_s == 0.100)
    pairs = paired_ratios([r.records_per_s for r in runs[at_100]], [r.records_per_s for r in runs[BASELINE]])
    share, (low, high) = median(pairs), median_confidence_interval(pairs)
    smallest, largest = min(latencies), max(latencies)
    growth = ratio(median(latencies[largest][0]), median(latencies[smallest][0]))
    at_10 = next((v for v in runs if v.commit_interval_s == 0.010), None)
    found = [
        Verdict(f"committing every 100 ms loses at most {TARGET_LOSS_AT_100_MS:.0%} of the idempotent rate",
                share >= 1 - TARGET_LOSS_AT_100_MS,
                f"median ratio {format_ratio(share)}, 95% CI {low:.3f} .. {high:.3f}, {len(pairs)} rounds"),
        Verdict(f"committing every 100 ms keeps at least {TARGET_SHARE_AT_100_MS} of the idempotent rate, the "
                f"95% CI's lower end included (issue 14)", low >= TARGET_SHARE_AT_100_MS,
                f"median ratio {share:.3f}, 95% CI {low:.3f} .. {high:.3f}, {len(pairs)} rounds"),
    ]
    if at_10 is not None:
        pairs_10 = paired_ratios([r.records_per_s for r in runs[at_10]], [r.records_per_s for r in runs[BASELINE]])
        share_10, (low_10, high_10) = median(pairs_10), median_confidence_interval(pairs_10)
        found.append(Verdict(f"committing every 10 ms keeps at least {TARGET_SHARE_AT_10_MS} of the idempotent rate "
                             "(issue 14)", share_10 >= TARGET_SHARE_AT_10_MS,
                             f"median ratio {share_10:.3f}, 95% CI {low_10:.3f} .. {high_10:.3f}"))
    for variant, what in ((BASELINE, "idempotent"), (at_100, "committing every 100 ms")):
        rate = median([r.records_per_s for r in runs[variant]])
        found.append(Verdict(f"the producer reaches {TARGET_RECORDS_PER_S:,} records/s {what} (issue 14)",
                             rate >= TARGET_RECORDS_PER_S, f"median {rate:,.0f} records/s"))
    found.append(Verdict(f"commit latency does not grow with records (p50 at {largest:,} records within "
                         f"{COMMIT_GROWTH_LIMIT}x of {smallest:,})", growth <= COMMIT_GROWTH_LIMIT, f"{growth:.2f}x"))
    return tuple(found)
