"""Replication: what three replicas cost a transactional producer, how fast a killed leader's partition is
served again, and how far followers trail their leader meanwhile.

Two replicated clusters run side by side, round by round in rotated order: one keeps three replicas of every
log (data with acks=all and min.insync.replicas 2, __transaction_state with its min ISR of 2), the baseline
one replica of every log with acks=1. Each round times commit_transaction() of small transactions and
counts a producer committing every 100 ms; on the three-replica cluster a sampler scrapes every node's
follower lag (txnsim_replica_follower_lag_records) meanwhile. Then a cluster of its own, with a short
ZooKeeper session, has a partition's leader SIGKILLed again and again, timing until a produce with acks=all
succeeds at the next leader.
"""
from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from client.transport import NodeChannels, call
from producer import Producer
from proto import records
from proto import txnsim_pb2 as pb
from proto.errors import KafkaError, raise_for
from txnsim.bench.chart_spec import Bars, RatioBars, RatioSeries, Sweep, Target
from txnsim.bench.harness import NullProgress, Progress, bench_cluster
from txnsim.bench.producer_bench import VALUE, Variant, measure_throughput
from txnsim.bench.report import BenchResult, ResultTable, Verdict, format_count, format_ms, format_ratio
from txnsim.bench.schedule import rotated
from txnsim.bench.stats import Summary, median, median_confidence_interval, paired_ratios
from txnsim.cluster import LocalCluster

TOPIC = "bench-replication"
PARTITIONS = 3
#: the targets: commit p50 on three replicas at most this many times one replica's, and the producer
#: committing every 100 ms keeping at least this share of its one-replica rate
TARGET_COMMIT_RATIO = 2.0
TARGET_THROUGHPUT_SHARE = 0.6
#: a SIGKILLed leader's partition served again within this (p99), with the short session below
TARGET_FAILOVER_S = 2.0
FAILOVER_SESSION_TIMEOUT_MS = 1_000
#: transactions timed per round for the commit latency, each of this many records over every partition
COMMITS_PER_ROUND, RECORDS_PER_COMMIT = 20, 30
COMMIT_EVERY_100_MS = Variant("transactional, commits every 100 ms", 0.100)
LAG_SAMPLE_S = 0.1
PROBE_TIMEOUT_S = 0.5
ROUND_TIMEOUT_S = 30.0

COST_CHART = RatioBars((RatioSeries("ratio to 1 replica", "95% CI of ratio"),),
                       value_label="three replicas over one (same round)",
                       targets=(Target(TARGET_COMMIT_RATIO, f"commit p50 at most {TARGET_COMMIT_RATIO:g}x"),
                                Target(TARGET_THROUGHPUT_SHARE, f"throughput at least {TARGET_THROUGHPUT_SHARE:g}")))
LAG_CHART = Sweep("second", ("p50 records", "max records"), x_label="seconds into the producer runs",
                  value_label="records a follower has yet to fetch")
FAILOVER_CHART = Bars(("p50 ms", "p99 ms", "max ms"), value_label="milliseconds",
                      targets=(Target(TARGET_FAILOVER_S * 1000, f"target: {TARGET_FAILOVER_S:g} s"),))


@dataclass(frozen=True, slots=True, eq=False)  # told apart by identity: its settings are a dict
class Setup:
    """A cluster to measure. Its producers write with acks=all, as a transactional producer must (Kafka's
    too); on one replica the ISR is the leader alone, so there that is acks=1."""

    label: str
    replication_factor: int
    settings: dict[str, Any]


THREE = Setup("3 replicas, acks=all, min.insync.replicas 2", 3, {"min_insync_replicas": 2})
ONE = Setup("1 replica, acks=1 (baseline)", 1, {"transaction_state_log_replication_factor": 1,
                                                "transaction_state_log_min_isr": 1,
                                                "offsets_topic_replication_factor": 1})
SETUPS = (ONE, THREE)


@dataclass(slots=True)
class Round:
    commit_s: list[float]
    records_per_s: float


@dataclass(slots=True)
class LagSamples:
    """(seconds since the first sample, the followers' lags then), gathered across the producer runs."""

    points: list[tuple[float, list[int]]] = field(default_factory=list)
    clock_s: float = 0.0


def run(seconds: float = 3.0, repeat: int = 5, progress: Progress | None = None, kills: int = 20) -> BenchResult:
    progress = progress or NullProgress()
    rounds: dict[Setup, list[Round]] = {s: [] for s in SETUPS}
    lags = LagSamples()
    progress.phase(f"replication cost: 2 clusters x {repeat} rounds", 2 * repeat)
    with replicated_cluster(ONE) as one, replicated_cluster(THREE) as three:
        clusters = {ONE: one, THREE: three}
        for round_ in range(repeat):
            for setup in rotated(SETUPS, round_):
                cluster = clusters[setup]
                with lag_sampler(cluster, lags) if setup is THREE else nullcontext():
                    rounds[setup].append(measure_round(cluster, setup, seconds, f"{round_}"))
                progress.advance()
    failovers = measure_failover(kills, progress)
    return BenchResult("replication", (cost_table(rounds, seconds, repeat), lag_table(lags),
                                       failover_table(failovers)), verdicts(rounds, failovers))


def replicated_cluster(setup: Setup, **extra: Any) -> AbstractContextManager[LocalCluster]:
    return bench_cluster({TOPIC: PARTITIONS}, replication_factor=setup.replication_factor, replicated=True,
                         **setup.settings, **extra)


def measure_round(cluster: LocalCluster, setup: Setup, seconds: float, run_id: str) -> Round:
    bs = cluster.bootstrap_servers
    throughput = measure_throughput(bs, COMMIT_EVERY_100_MS, seconds, f"{setup.replication_factor}-{run_id}",
                                    topic=TOPIC)
    commits = []
    with Producer(bootstrap_servers=bs, transactional_id=f"bench-replication-{run_id}") as p:
        p.init_transactions()
        for _ in range(COMMITS_PER_ROUND):
            p.begin_transaction()
            for i in range(RECORDS_PER_COMMIT):
                p.send(TOPIC, value=VALUE, partition=i % PARTITIONS)
            p.flush()
            start = time.monotonic()
            p.commit_transaction()
            commits.append(time.monotonic() - start)
    return Round(commits, throughput.records_per_s)


@contextmanager
def lag_sampler(cluster: LocalCluster, lags: LagSamples) -> Iterator[None]:
    """Scrape every node's follower lags every LAG_SAMPLE_S while the block runs."""
    stop = threading.Event()
    urls = [url for url in (cluster.metrics_url(n) for n in cluster.node_ids) if url]
    offset = lags.clock_s

    def sample() -> None:
        started = time.monotonic()
        while not stop.wait(LAG_SAMPLE_S):
            lags.points.append((offset + time.monotonic() - started, [v for url in urls for v in scrape_lags(url)]))
        lags.clock_s = offset + time.monotonic() - started

    thread = threading.Thread(target=sample, name="lag-sampler", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def scrape_lags(url: str) -> list[int]:
    """Every txnsim_replica_follower_lag_records value of the bench topic in one node's /metrics."""
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:  # loopback: the node's own metrics
            text = response.read().decode()
    except OSError:
        return []
    return [int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
            if line.startswith("txnsim_replica_follower_lag_records{") and f'topic="{TOPIC}"' in line]


# ------------------------------------------------------------ failover

def measure_failover(kills: int, progress: Progress) -> list[float]:
    """Seconds from each SIGKILL of partition 0's leader until a produce with acks=all succeeds at another."""
    progress.phase(f"failover: {kills} SIGKILLs of a leader", kills)
    found: list[float] = []
    with replicated_cluster(THREE, zookeeper_session_timeout_ms=FAILOVER_SESSION_TIMEOUT_MS,
                            leader_imbalance_check_interval_seconds=3600) as cluster:
        channels = NodeChannels()
        try:
            for _ in range(kills):
                leader = leader_of(cluster, channels, exclude=-1)
                wait_in_sync(cluster, channels)
                cluster.kill(leader)
                killed = time.monotonic()
                while not produce_once(cluster, channels, exclude=leader):
                    if time.monotonic() - killed > ROUND_TIMEOUT_S:
                        raise TimeoutError(f"partition 0 not served within {ROUND_TIMEOUT_S:.0f} s of killing "
                                           f"node {leader}")
                found.append(time.monotonic() - killed)
                cluster.restart(leader)
                progress.advance()
        finally:
            channels.close()
    return found


def leader_of(cluster: LocalCluster, channels: NodeChannels, exclude: int) -> int:
    for node in cluster.node_ids:
        if node == exclude:
            continue
        try:
            response: pb.MetadataResponse = call(channels.stubs(cluster.spec.nodes[node]).cluster.Metadata,
                                                 pb.MetadataRequest(topics=[TOPIC]), PROBE_TIMEOUT_S)
        except KafkaError:
            continue
        return int(response.topics[0].partitions[0].leader)
    return -1


def wait_in_sync(cluster: LocalCluster, channels: NodeChannels) -> None:
    """Until partition 0 has its three replicas in sync again (the restarted one caught up)."""
    deadline = time.monotonic() + ROUND_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            response: pb.MetadataResponse = call(channels.stubs(cluster.spec.nodes[0]).cluster.Metadata,
                                                 pb.MetadataRequest(topics=[TOPIC]), PROBE_TIMEOUT_S)
            if len(response.topics[0].partitions[0].isr) == 3:
                return
        except KafkaError:
            pass
        time.sleep(0.05)  # polling the cluster's own answer, bounded by the deadline
    raise TimeoutError("partition 0 did not get its three replicas back in sync")


def produce_once(cluster: LocalCluster, channels: NodeChannels, exclude: int) -> bool:
    """One acks=all produce at the leader a live node names; True when acknowledged."""
    leader = leader_of(cluster, channels, exclude)
    if leader < 0 or leader == exclude:
        return False
    batch = records.encode_batch([(int(time.time() * 1000), None, VALUE, ())])
    request = pb.ProduceRequest(acks=-1, timeout_ms=int(PROBE_TIMEOUT_S * 1000),
                                partitions=[pb.PartitionRecords(topic=TOPIC, partition=0, records=batch)])
    try:
        response: pb.ProduceResponse = call(channels.stubs(cluster.spec.nodes[leader]).partitions.Produce, request,
                                            PROBE_TIMEOUT_S)
        raise_for(response.error_code, response.error_message)
        raise_for(response.partitions[0].error_code, response.partitions[0].error_message)
    except KafkaError:
        return False
    return True


# ------------------------------------------------------------ tables and verdicts

def commit_ratios(rounds: dict[Setup, list[Round]]) -> list[float]:
    """Round by round: three replicas' median commit over one replica's."""
    return paired_ratios([median(r.commit_s) for r in rounds[THREE]], [median(r.commit_s) for r in rounds[ONE]])


def rate_ratios(rounds: dict[Setup, list[Round]]) -> list[float]:
    """Round by round: three replicas' producer rate over one replica's."""
    return paired_ratios([r.records_per_s for r in rounds[THREE]], [r.records_per_s for r in rounds[ONE]])


def cost_table(rounds: dict[Setup, list[Round]], seconds: float, repeat: int) -> ResultTable:
    commit_pairs, rate_pairs = commit_ratios(rounds), rate_ratios(rounds)
    commit_one, commit_three = (median([median(r.commit_s) for r in rounds[s]]) for s in (ONE, THREE))
    rate_one, rate_three = (median([r.records_per_s for r in rounds[s]]) for s in (ONE, THREE))
    rows = (("commit_transaction() p50 ms", format_ms(commit_one), format_ms(commit_three),
             format_ratio(median(commit_pairs)), "%.3f .. %.3f" % median_confidence_interval(commit_pairs)),
            ("records/s committing every 100 ms", format_count(rate_one), format_count(rate_three),
             format_ratio(median(rate_pairs)), "%.3f .. %.3f" % median_confidence_interval(rate_pairs)))
    return ResultTable(
        f"Three replicas against one: {repeat} interleaved rounds; each {COMMITS_PER_ROUND} commits of "
        f"{RECORDS_PER_COMMIT} records over {PARTITIONS} partitions, and a producer committing every 100 ms for "
        f"{seconds:g} s",
        ("measure", "1 replica, acks=1", "3 replicas, acks=all", "ratio to 1 replica", "95% CI of ratio"),
        rows,
        ("Two replicated clusters of 3 nodes run at once, on the same cores; each round measures both, in "
         "rotated order. 3 replicas: the topic and __transaction_state on three replicas, acks=all, "
         "min.insync.replicas 2 (the coordinator's state writes wait for two in-sync replicas, markers for the "
         "ISR). 1 replica: every log on one, acks=1. The ratio is the median over rounds of three over one in "
         "the same round, with a distribution-free 95% confidence interval (the whole range below 6 rounds).",),
        chart=COST_CHART)


def lag_table(lags: LagSamples) -> ResultTable:
    by_second: dict[int, list[int]] = {}
    for at, values in lags.points:
        by_second.setdefault(int(at), []).extend(values)
    rows = tuple((str(second), f"{median([float(v) for v in values]):.0f}" if values else "-",
                  str(max(values)) if values else "-") for second, values in sorted(by_second.items()))
    every = [float(v) for _at, values in lags.points for v in values]
    summary = Summary.of(every) if every else None
    note = (f"over every sample: p50 {summary.p50:.0f}, p99 {summary.p99:.0f}, max {summary.maximum:.0f} records"
            if summary else "no samples")
    return ResultTable(
        "Follower lag while the producers run on three replicas (records a follower has yet to fetch)",
        ("second", "p50 records", "max records"), rows,
        (f"Every node's txnsim_replica_follower_lag_records for the bench topic, scraped every "
         f"{LAG_SAMPLE_S * 1000:.0f} ms during the three-replica rounds (their seconds laid end to end): the "
         f"leader's log end minus the offset the follower fetched last. {note}.",), chart=LAG_CHART)


def failover_table(failovers: list[float]) -> ResultTable:
    s = Summary.of(failovers)
    return ResultTable(
        f"A SIGKILLed leader's partition served again (ZooKeeper session {FAILOVER_SESSION_TIMEOUT_MS} ms)",
        ("measure", "kills", "p50 ms", "p99 ms", "max ms"),
        (("until an acks=all produce succeeds at the next leader", str(s.count), format_ms(s.p50), format_ms(s.p99),
          format_ms(s.maximum)),),
        ("From the SIGKILL of partition 0's leader (its three replicas in sync) until a produce with acks=all, "
         "sent to the leader a live node names, is acknowledged: the session expiring in ZooKeeper, the "
         "controller electing an ISR member, that one leading, and the write reaching the ISR.",),
        chart=FAILOVER_CHART)


def verdicts(rounds: dict[Setup, list[Round]], failovers: list[float]) -> tuple[Verdict, ...]:
    commit, share = median(commit_ratios(rounds)), median(rate_ratios(rounds))
    p99 = Summary.of(failovers).p99
    return (
        Verdict(f"commit_transaction() p50 on 3 replicas (acks=all) at most {TARGET_COMMIT_RATIO:g}x 1 replica's "
                "(acks=1)", commit <= TARGET_COMMIT_RATIO, f"median ratio {commit:.2f}"),
        Verdict(f"committing every 100 ms on 3 replicas keeps at least {TARGET_THROUGHPUT_SHARE:g} of 1 replica's "
                "rate", share >= TARGET_THROUGHPUT_SHARE, f"median ratio {share:.2f}"),
        Verdict(f"a SIGKILLed leader's partition served again within {TARGET_FAILOVER_S:g} s (p99)",
                p99 <= TARGET_FAILOVER_S, f"p99 {p99 * 1000:.0f} ms over {len(failovers)} kills"),
    )
