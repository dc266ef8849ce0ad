"""Coordinator scaling: transactions per second of 100 transactional ids on clusters of 1, 2 and 3 nodes,
each transaction a few records on one or two partitions, with the CPU of the node processes and of the
client processes beside it, so a reader sees what limits the rate.

The 100 producers run on a few client processes (2 by default) of one thread per producer: one thread
each, because commit_transaction() blocks its caller and 100 transactions must be open at once for 100
ids to load the coordinators; a few processes, because one Python process runs its threads on one core
at a time (the GIL) and would cap the client below what 2 cores can give. The three clusters live side by
side and the node counts take turns round by round (rotated), so drift of a shared machine falls on all.
"""
from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from multiprocessing.connection import Connection

from producer import Producer
from txnsim.bench.harness import NullProgress, Progress, bench_cluster
from txnsim.bench.node_metrics import HistogramTotal, histogram_total
from txnsim.bench.proc_stats import process_cpu_s
from txnsim.bench.report import BenchResult, ResultTable, Verdict, format_count, format_ms, format_ratio
from txnsim.bench.schedule import rotated
from txnsim.bench.stats import Summary, median, median_confidence_interval, paired_ratios
from txnsim.cluster import LocalCluster

TOPIC = "bench-scaling"
PARTITIONS = 6
NODE_COUNTS = (1, 2, 3)
TRANSACTIONAL_IDS = 100
RECORDS_PER_TXN = 4
VALUE = b"v" * 100
READY_TIMEOUT_S = 120.0
WARMING_THREADS = 8
#: the nodes' histograms of the commit path: EndTxn answered (PrepareCommit durable), commit complete (markers)
END_TXN = ("txnsim_end_txn_latency_seconds", {"result": "commit"})
COMMIT_COMPLETE = ("txnsim_transaction_commit_latency_seconds", None)
#: producers per WriteTxnMarkers request (its _sum / _count: how many transactions shared a request)
MARKER_REQUESTS = ("txnsim_txn_marker_request_producers", None)


@dataclass(frozen=True, slots=True)
class WorkerRun:
    """What one client process did in one run."""

    commits: int
    failures: int
    elapsed_s: float
    cpu_s: float
    latencies_s: tuple[float, ...]
    first_error: str | None


@dataclass(frozen=True, slots=True)
class ScalingRun:
    commits: int
    failures: int
    elapsed_s: float
    client_cpu_s: float
    node_cpu_s: tuple[float, ...]
    latencies_s: tuple[float, ...]
    first_error: str | None
    #: node side, from the nodes' histograms over the run
    end_txn: HistogramTotal
    commit_complete: HistogramTotal
    marker_requests: HistogramTotal

    @property
    def txns_per_s(self) -> float:
        return self.commits / self.elapsed_s


def _partitions_of(producer_index: int, txn_index: int) -> tuple[int, ...]:
    """Every other transaction on two partitions, the rest on one; spread over the topic by id and turn."""
    first = (producer_index + txn_index) % PARTITIONS
    return (first,) if txn_index % 2 else (first, (first + 1) % PARTITIONS)


def _warm(producer: Producer) -> None:
    """init_transactions and one transaction: metadata and connections before the clock starts."""
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(TOPIC, value=VALUE, partition=0)
    producer.commit_transaction()


def worker(bootstrap_servers: str, ids: Sequence[str], first_index: int, conn: Connection) -> None:
    """A client process: init a producer per id, say ready, and on "go" run transactions for the given time."""
    producers = [Producer(bootstrap_servers=bootstrap_servers, transactional_id=tid) for tid in ids]
    try:
        with ThreadPoolExecutor(max_workers=WARMING_THREADS) as pool:  # a few at a time: no connection storm
            list(pool.map(_warm, producers))
        conn.send("ready")
        seconds: float = conn.recv()
        counts = [[0, 0] for _ in producers]  # commits, failures per producer thread
        latencies: list[list[float]] = [[] for _ in producers]
        errors: list[str] = []
        end = time.monotonic() + seconds

        def drive(i: int) -> None:
            producer, index, txn = producers[i], first_index + i, 0
            while time.monotonic() < end:
                try:
                    producer.begin_transaction()
                    for p in _partitions_of(index, txn):
                        for _ in range(RECORDS_PER_TXN // len(_partitions_of(index, txn))):
                            producer.send(TOPIC, value=VALUE, partition=p)
                    start = time.monotonic()
                    producer.commit_transaction()
                    latencies[i].append(time.monotonic() - start)
                    counts[i][0] += 1
                except Exception as exc:  # a failed commit is counted and shown, and ends this id's run
                    counts[i][1] += 1
                    errors.append(f"{type(exc).__name__}: {exc}")
                    return
                txn += 1

        cpu_start, start = time.process_time(), time.monotonic()
        threads = [threading.Thread(target=drive, args=(i,), daemon=True) for i in range(len(producers))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        run = WorkerRun(sum(c[0] for c in counts), sum(c[1] for c in counts), time.monotonic() - start,
                        time.process_time() - cpu_start, tuple(x for lat in latencies for x in lat),
                        errors[0] if errors else None)
        conn.send(run)
    finally:
        for producer in producers:
            producer.close()


class ClientFleet:
    """The client processes of one run: started, readied, run, joined."""

    def __init__(self, bootstrap_servers: str, run_id: str, processes: int) -> None:
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no gRPC state forked
        ids = [f"bench-scaling-{run_id}-{i}" for i in range(TRANSACTIONAL_IDS)]
        share = -(-TRANSACTIONAL_IDS // processes)
        self._conns: list[Connection] = []
        self.processes: list[multiprocessing.process.BaseProcess] = []
        for first in range(0, TRANSACTIONAL_IDS, share):
            ours, theirs = context.Pipe()
            process = context.Process(target=worker, args=(bootstrap_servers, ids[first:first + share], first,
                                                           theirs), daemon=True)
            process.start()
            self._conns.append(ours)
            self.processes.append(process)

    def wait_ready(self) -> None:
        for conn, process in zip(self._conns, self.processes):
            if not conn.poll(READY_TIMEOUT_S) or conn.recv() != "ready":
                raise TimeoutError(f"client process {process.pid} was not ready within {READY_TIMEOUT_S:.0f} s "
                                   f"(exit code {process.exitcode})")

    def run(self, seconds: float) -> list[WorkerRun]:
        for conn in self._conns:
            conn.send(seconds)
        results = []
        for conn, process in zip(self._conns, self.processes):
            if not conn.poll(seconds + READY_TIMEOUT_S):
                raise TimeoutError(f"client process {process.pid} did not report within {READY_TIMEOUT_S:.0f} s "
                                   f"after its run")
            results.append(conn.recv())
        return results

    def close(self) -> None:
        for process in self.processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()


def measure(cluster: LocalCluster, seconds: float, run_id: str, processes: int) -> ScalingRun:
    node_pids = [pid for node in cluster.node_ids if (pid := cluster.pid(node)) is not None]
    urls = [url for node in cluster.node_ids if (url := cluster.metrics_url(node)) is not None]
    fleet = ClientFleet(cluster.bootstrap_servers, run_id, processes)
    try:
        fleet.wait_ready()
        end_txn, complete = histogram_total(urls, *END_TXN), histogram_total(urls, *COMMIT_COMPLETE)
        marker_requests = histogram_total(urls, *MARKER_REQUESTS)
        before = [process_cpu_s(pid) for pid in node_pids]
        results = fleet.run(seconds)
        node_cpu = tuple(process_cpu_s(pid) - b for pid, b in zip(node_pids, before))
        end_txn = histogram_total(urls, *END_TXN) - end_txn
        complete = histogram_total(urls, *COMMIT_COMPLETE) - complete
        marker_requests = histogram_total(urls, *MARKER_REQUESTS) - marker_requests
    finally:
        fleet.close()
    errors = [r.first_error for r in results if r.first_error]
    return ScalingRun(sum(r.commits for r in results), sum(r.failures for r in results),
                      max(r.elapsed_s for r in results), sum(r.cpu_s for r in results), node_cpu,
                      tuple(x for r in results for x in r.latencies_s), errors[0] if errors else None, end_txn,
                      complete, marker_requests)


def _clusters(stack: ExitStack, counts: Sequence[int]) -> Iterator[tuple[int, LocalCluster]]:
    for n in counts:
        yield n, stack.enter_context(bench_cluster({TOPIC: PARTITIONS}, nodes=n))


def run(seconds: float = 3.0, repeat: int = 3, processes: int = 2, progress: Progress | None = None,
        node_counts: Sequence[int] = NODE_COUNTS) -> BenchResult:
    progress = progress or NullProgress()
    runs: dict[int, list[ScalingRun]] = {n: [] for n in node_counts}
    with ExitStack() as stack:
        progress.phase(f"starting clusters of {', '.join(map(str, node_counts))} nodes", len(node_counts))
        clusters = {}
        for n, cluster in _clusters(stack, node_counts):
            clusters[n] = cluster
            progress.advance()
        progress.phase(f"scaling: {len(node_counts)} clusters x {repeat} rounds x {seconds:g} s, "
                       f"{TRANSACTIONAL_IDS} transactional ids", len(node_counts) * repeat)
        for round_ in range(repeat):
            for n in rotated(node_counts, round_):
                runs[n].append(measure(clusters[n], seconds, f"{round_}-{n}", processes))
                progress.advance()
    return BenchResult("scaling", (scaling_table(runs, seconds, repeat, processes),), verdicts(runs))


def scaling_table(runs: dict[int, list[ScalingRun]], seconds: float, repeat: int, processes: int) -> ResultTable:
    baseline = [r.txns_per_s for r in runs[min(runs)]]
    rows = []
    for n, node_runs in runs.items():
        pairs = paired_ratios([r.txns_per_s for r in node_runs], baseline)
        latency = Summary.of([x for r in node_runs for x in r.latencies_s] or [float("nan")])
        node_cores = median([sum(r.node_cpu_s) / r.elapsed_s for r in node_runs])
        per_node = " / ".join(f"{median([r.node_cpu_s[i] / r.elapsed_s for r in node_runs]):.2f}" for i in range(n))
        client_cores = median([r.client_cpu_s / r.elapsed_s for r in node_runs])
        rows.append((f"{n} node{'s' if n > 1 else ''}", format_count(median([r.txns_per_s for r in node_runs])),
                     format_ratio(median(pairs)), "%.3f .. %.3f" % median_confidence_interval(pairs),
                     format_ms(latency.p50), format_ms(latency.p99),
                     format_ms(median([r.end_txn.mean_s for r in node_runs])),
                     format_ms(median([r.commit_complete.mean_s for r in node_runs])),
                     f"{median([r.marker_requests.mean_s for r in node_runs]):.1f}", f"{node_cores:.2f}", per_node,
                     f"{client_cores:.2f}", f"{node_cores + client_cores:.2f}",
                     f"{median([sum(r.node_cpu_s) / r.commits * 1e6 for r in node_runs if r.commits]):,.0f}"))
    return ResultTable(
        f"Coordinator scaling: {TRANSACTIONAL_IDS} transactional ids, transactions of {RECORDS_PER_TXN} records on "
        f"1 or 2 of {PARTITIONS} partitions, {seconds:g} s per run, median of {repeat} rotated rounds",
        ("cluster", "txns/s", "ratio to 1 node", "95% CI of ratio", "commit p50 ms", "commit p99 ms",
         "node: EndTxn mean ms", "node: until complete mean ms", "txns per marker request",
         "node CPU (cores)", "per node (cores)", "client CPU (cores)", "client + nodes (cores)",
         "node CPU µs/txn"),
        tuple(rows),
        (f"{TRANSACTIONAL_IDS} producers in {processes} client processes, one thread per producer, each looping "
         "begin, send, commit_transaction() (latency: commit_transaction() alone, in the client). node: the nodes' "
         "own histograms over the run: EndTxn received to answered (PrepareCommit durable, the outcome decided) "
         "and EndTxn received to commit complete (every marker acknowledged, CompleteCommit durable); the client's "
         "commit latency less the node's EndTxn is time spent outside the coordinator (the client flushing its "
         "records and registering partitions, queues, gRPC). txns per marker request: the transactions whose "
         "markers one WriteTxnMarkers request carried, on average (markers owed to a node while a request to it is "
         "out share its next). txns/s: committed transactions "
         "per second of the run. CPU in cores: CPU-seconds per second of the run, from /proc for the node "
         "processes and from each client process itself (all its threads). A total near the machine's CPU "
         "count means the CPUs are the limit, not the coordinators.",))


def verdicts(runs: dict[int, list[ScalingRun]]) -> tuple[Verdict, ...]:
    failures = sum(r.failures for node_runs in runs.values() for r in node_runs)
    errors = [r.first_error for node_runs in runs.values() for r in node_runs if r.first_error]
    commits = sum(r.commits for node_runs in runs.values() for r in node_runs)
    return (Verdict("every transaction of every id committed", failures == 0 and commits > 0,
                    f"{commits:,} committed, {failures:,} failed" + (f"; first error: {errors[0]}" if errors else "")),)
