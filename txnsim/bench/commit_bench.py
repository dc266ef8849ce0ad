"""Commit latency against the number of partitions in a transaction (1, 4, 16, 64), a fixed small number of
records on each: commit_transaction() alone, and until the transaction is readable (a read_committed
consumer waiting in poll() is handed its first record on every partition: readable.py).

A commit is one PrepareCommit and one CompleteCommit on the coordinator plus one marker per partition, the
markers to different nodes in parallel: so its cost may grow with partitions, but at most linearly. The
issue's targets: at 4 partitions, commit p50 <= 2.5 ms and until readable p50 <= 5 ms. The method is the
producer benchmark's commit-cost table (records flushed and acknowledged before the clock starts), by
partitions instead of by records.
"""
from __future__ import annotations

from collections.abc import Sequence

from producer import Producer
from proto.structs import TopicPartition
from txnsim.admin import Admin
from txnsim.bench.harness import NullProgress, Progress, bench_cluster
from txnsim.bench.node_metrics import histogram_total
from txnsim.bench.producer_bench import VALUE, timed_commit
from txnsim.bench.readable import ReadableWatch
from txnsim.bench.report import BenchResult, ResultTable, Verdict, format_ms, format_ratio
from txnsim.bench.schedule import interleaved
from txnsim.bench.stats import Summary, ratio

TOPIC = "bench-commit-partitions"
PARTITION_COUNTS = (1, 4, 16, 64)
RECORDS_PER_PARTITION = 2
#: the issue's targets at TARGET_PARTITIONS partitions per transaction
TARGET_PARTITIONS, TARGET_COMMIT_P50_S, TARGET_READABLE_P50_S = 4, 0.0025, 0.005
#: "at most linear": the cost each added partition brings between the two largest sizes may be at most this
#: multiple of what it brings between the two smallest (a superlinear cost grows it), or under SLOPE_FLOOR_S
SLOPE_GROWTH_LIMIT, SLOPE_FLOOR_S = 1.5, 0.000_05

#: the node's own histogram of a commit: EndTxn received until every marker acknowledged and CompleteCommit durable
COMMIT_COMPLETE = "txnsim_transaction_commit_latency_seconds"

#: per partition count: commit latencies, until-readable latencies, the node's EndTxn-to-complete latencies
Latencies = dict[int, tuple[list[float], list[float], list[float]]]


def measure(bootstrap_servers: str, metrics_urls: Sequence[str], transactions: int, progress: Progress,
            counts: Sequence[int] = PARTITION_COUNTS) -> Latencies:
    """For each partition count: commit_transaction() latencies and commit-until-readable latencies."""
    latencies: Latencies = {n: ([], [], []) for n in counts}
    schedule = interleaved([(n, transactions) for n in counts])
    progress.phase(f"commit latency vs partitions per transaction: {len(schedule)} transactions", len(schedule))
    every = [TopicPartition(TOPIC, p) for p in range(max(counts))]
    with Producer(bootstrap_servers=bootstrap_servers, transactional_id="bench-commit-partitions") as producer, \
            Admin(bootstrap_servers) as admin, ReadableWatch(bootstrap_servers, every) as watch:
        producer.init_transactions()
        _transaction(producer, admin, watch, max(counts))  # metadata, connections and every partition seen, untimed
        for n in schedule:
            before = histogram_total(metrics_urls, COMMIT_COMPLETE)
            commit_s, readable_s = _transaction(producer, admin, watch, n)
            node = histogram_total(metrics_urls, COMMIT_COMPLETE) - before
            latencies[n][0].append(commit_s)
            latencies[n][1].append(readable_s)
            latencies[n][2].append(node.mean_s)
            progress.advance()
    return latencies


def _transaction(producer: Producer, admin: Admin, watch: ReadableWatch, partitions: int) -> tuple[float, float]:
    """One transaction over partitions 0..n-1; (commit latency, until readable), both from the commit's start."""
    tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
    starts = admin.end_offsets(tps)
    producer.begin_transaction()
    for tp in tps:
        for _ in range(RECORDS_PER_PARTITION):
            producer.send(TOPIC, value=VALUE, partition=tp.partition)
    return timed_commit(producer, watch, starts)


def run(transactions: int = 100, progress: Progress | None = None) -> BenchResult:
    progress = progress or NullProgress()
    with bench_cluster({TOPIC: max(PARTITION_COUNTS)}) as cluster:
        urls = [url for node in cluster.node_ids if (url := cluster.metrics_url(node)) is not None]
        latencies = measure(cluster.bootstrap_servers, urls, transactions, progress)
    return BenchResult("commit", (commit_table(latencies),), verdicts(latencies))


def _slope_s(latencies: Latencies, low: int, high: int, which: int = 0) -> float:
    """Added p50 latency per added partition between two partition counts."""
    return (Summary.of(latencies[high][which]).p50 - Summary.of(latencies[low][which]).p50) / (high - low)


def commit_table(latencies: Latencies) -> ResultTable:
    smallest = min(latencies)
    base = Summary.of(latencies[smallest][0]).p50
    rows = []
    previous: int | None = None
    for n, (commit, readable, node) in latencies.items():
        c, r = Summary.of(commit), Summary.of(readable)
        slope = "-" if previous is None else f"{_slope_s(latencies, previous, n) * 1e6:,.0f}"
        rows.append((str(n), str(c.count), format_ms(c.p50), format_ms(c.p99), format_ratio(ratio(c.p50, base)),
                     slope, format_ms(Summary.of(node).p50), format_ms(r.p50), format_ms(r.p99)))
        previous = n
    return ResultTable(
        f"Commit latency vs partitions per transaction ({RECORDS_PER_PARTITION} records of 100 bytes on each "
        f"partition, 3 nodes)",
        ("partitions per txn", "txns", "commit p50 ms", "commit p99 ms", "p50 vs 1 partition",
         "µs per added partition (p50, from the row above)", "node: EndTxn to complete p50 ms",
         "until readable p50 ms", "until readable p99 ms"),
        tuple(rows),
        ("commit = commit_transaction() after the records were flushed and acknowledged (so it times EndTxn: "
         "PrepareCommit made durable, and the partitions' registration). until readable = from the same start "
         "until a read_committed consumer waiting in poll() (a process of its own, one long-poll fetch per leader) was "
         "handed the transaction's first record on every partition. node: the coordinator's own "
         "histogram (scraped around each transaction): EndTxn received until every marker is acknowledged and "
         "CompleteCommit durable. Sizes interleaved, one producer.",))


def verdicts(latencies: Latencies) -> tuple[Verdict, ...]:
    at = latencies.get(TARGET_PARTITIONS)
    found: list[Verdict] = []
    if at is not None:
        commit, readable = Summary.of(at[0]).p50, Summary.of(at[1]).p50
        found += [Verdict(f"commit_transaction p50 <= {format_ms(TARGET_COMMIT_P50_S)} ms at {TARGET_PARTITIONS} "
                          f"partitions", commit <= TARGET_COMMIT_P50_S, f"{format_ms(commit)} ms"),
                  Verdict(f"until readable p50 <= {format_ms(TARGET_READABLE_P50_S)} ms at {TARGET_PARTITIONS} "
                          f"partitions", readable <= TARGET_READABLE_P50_S, f"{format_ms(readable)} ms")]
    counts = sorted(latencies)
    if len(counts) >= 3:
        for which, what in ((0, "commit"), (1, "until readable")):
            low = _slope_s(latencies, counts[0], counts[-2], which)
            high = _slope_s(latencies, counts[-2], counts[-1], which)
            found.append(Verdict(
                f"{what} at most linear in partitions (p50 µs per added partition from {counts[-2]} to "
                f"{counts[-1]} within {SLOPE_GROWTH_LIMIT}x of from {counts[0]} to {counts[-2]}, or under "
                f"{SLOPE_FLOOR_S * 1e6:.0f})", high <= max(SLOPE_GROWTH_LIMIT * low, SLOPE_FLOOR_S),
                f"{low * 1e6:,.0f} µs then {high * 1e6:,.0f} µs per partition"))
    return tuple(found)
