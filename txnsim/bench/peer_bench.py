"""The peer workload through confluent-kafka (librdkafka), against txnsim's Kafka listeners and against
librdkafka's own in-memory mock cluster, side by side in one run: 100-byte records, a commit every 1,000
records, 4 partitions. The mock keeps everything in memory and answers from librdkafka's own threads; txnsim
is three node processes that fsync, so the ratio says what durability and Python cost a C client.

Where the time goes is measured, not guessed: the CPU of the client process and of the three nodes per
committed record, and the time the caller spent blocked in commit_transaction().
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from txnsim.bench.chart_spec import RatioBars, RatioSeries, Target
from txnsim.bench.harness import NullProgress, Progress, bench_cluster
from txnsim.bench.proc_stats import process_cpu_s as _process_cpu_s
from txnsim.bench.report import BenchResult, ResultTable, Verdict, format_count, format_ratio
from txnsim.bench.schedule import rotated
from txnsim.bench.stats import Summary, median, median_confidence_interval, paired_ratios

TOPIC = "peer"
PARTITIONS = 4
VALUE = b"v" * 100
RECORDS_PER_TXN = 1_000
#: the issue's targets: txnsim's rate over the mock's in the same round
TARGET_RATIO, AIM_RATIO = 0.3, 0.5
MOCK, TXNSIM = "librdkafka mock cluster (in memory)", "txnsim, 3 nodes (fsynced)"
OWN = "txnsim's own producer, 3 nodes (fsynced)"
TARGETS = (MOCK, TXNSIM, OWN)
#: the table's chart (`txnsim bench --plot`)
PEER_CHART = RatioBars((RatioSeries("ratio to the mock", "95% CI of ratio"),),
                       value_label="committed records/s over the mock cluster's (same round)",
                       targets=(Target(TARGET_RATIO, f"target {TARGET_RATIO:g}"), Target(AIM_RATIO, f"aim {AIM_RATIO:g}")))


@dataclass(frozen=True, slots=True)
class PeerRun:
    committed: int
    elapsed_s: float
    client_cpu_s: float
    #: CPU of the three node processes during the run (0 for the mock: it runs inside the client)
    node_cpu_s: float
    in_commit_s: float
    commit_latencies_s: tuple[float, ...]

    @property
    def records_per_s(self) -> float:
        return self.committed / self.elapsed_s


def measure(config: dict[str, Any], seconds: float, transactional_id: str, node_pids: list[int]) -> PeerRun:
    """Transactions of RECORDS_PER_TXN records round-robin over the partitions, for `seconds`."""
    from confluent_kafka import Producer
    producer = Producer({**config, "transactional.id": transactional_id, "linger.ms": 5, "log_level": 3})
    producer.init_transactions(30)
    producer.begin_transaction()  # metadata and connections before the clock starts
    producer.produce(TOPIC, value=VALUE, partition=0)
    producer.commit_transaction(30)
    produce, poll, clock = producer.produce, producer.poll, time.monotonic
    committed, in_commit, latencies = 0, 0.0, []
    nodes_before = sum(_process_cpu_s(pid) for pid in node_pids)
    cpu_start = time.process_time()
    start = clock()
    while clock() - start < seconds:
        producer.begin_transaction()
        for i in range(RECORDS_PER_TXN):
            while True:
                try:
                    produce(TOPIC, value=VALUE, partition=i % PARTITIONS)
                    break
                except BufferError:  # librdkafka's queue is full: let it drain
                    poll(0.001)
        committing = clock()
        producer.commit_transaction(30)
        latencies.append(clock() - committing)
        in_commit += latencies[-1]
        committed += RECORDS_PER_TXN
    elapsed = clock() - start
    client_cpu = time.process_time() - cpu_start
    node_cpu = sum(_process_cpu_s(pid) for pid in node_pids) - nodes_before
    return PeerRun(committed, elapsed, client_cpu, node_cpu, in_commit, tuple(latencies))


def measure_own(bootstrap_servers: str, seconds: float, transactional_id: str, node_pids: list[int]) -> PeerRun:
    """The same workload through txnsim's own Producer (send, commit_transaction), for the same `seconds`."""
    from producer import Producer
    with Producer(bootstrap_servers=bootstrap_servers, transactional_id=transactional_id) as producer:
        producer.init_transactions()
        producer.begin_transaction()  # metadata and connections before the clock starts
        producer.send(TOPIC, value=VALUE, partition=0)
        producer.commit_transaction()
        send, clock = producer.send, time.monotonic
        committed, in_commit, latencies = 0, 0.0, []
        nodes_before = sum(_process_cpu_s(pid) for pid in node_pids)
        cpu_start = time.process_time()
        start = clock()
        while clock() - start < seconds:
            producer.begin_transaction()
            for i in range(RECORDS_PER_TXN):
                send(TOPIC, value=VALUE, partition=i % PARTITIONS)
            committing = clock()
            producer.commit_transaction()
            latencies.append(clock() - committing)
            in_commit += latencies[-1]
            committed += RECORDS_PER_TXN
        elapsed = clock() - start
        client_cpu = time.process_time() - cpu_start
        node_cpu = sum(_process_cpu_s(pid) for pid in node_pids) - nodes_before
    return PeerRun(committed, elapsed, client_cpu, node_cpu, in_commit, tuple(latencies))


def run(seconds: float = 3.0, repeat: int = 5, progress: Progress | None = None) -> BenchResult:
    progress = progress or NullProgress()
    runs: dict[str, list[PeerRun]] = {target: [] for target in TARGETS}
    with bench_cluster({TOPIC: PARTITIONS}, kafka_port=0) as cluster:
        node_pids = [pid for node in cluster.node_ids if (pid := cluster.pid(node)) is not None]
        configs: dict[str, tuple[dict[str, Any], list[int]]] = {MOCK: ({"test.mock.num.brokers": 3}, []),
                   TXNSIM: ({"bootstrap.servers": cluster.kafka_bootstrap_servers}, node_pids)}
        progress.phase(f"peer workload: {len(TARGETS)} producers x {repeat} rounds x {seconds:g} s",
                       len(TARGETS) * repeat)
        for round_ in range(repeat):
            for target in rotated(TARGETS, round_):
                run_id = f"peer-{round_}-{TARGETS.index(target)}"
                if target == OWN:
                    runs[target].append(measure_own(cluster.bootstrap_servers, seconds, run_id, node_pids))
                else:
                    config, pids = configs[target]
                    runs[target].append(measure(config, seconds, run_id, pids))
                progress.advance()
    return BenchResult("peer", (peer_table(runs, seconds, repeat),), verdicts(runs))


def peer_table(runs: dict[str, list[PeerRun]], seconds: float, repeat: int) -> ResultTable:
    mock_rates = [r.records_per_s for r in runs[MOCK]]
    rows = []
    for target, target_runs in runs.items():
        rates = [r.records_per_s for r in target_runs]
        pairs = paired_ratios(rates, mock_rates)
        latency = Summary.of([s for r in target_runs for s in r.commit_latencies_s])
        client_us = median([1e6 * r.client_cpu_s / r.committed for r in target_runs])
        node_us = median([1e6 * r.node_cpu_s / r.committed for r in target_runs])
        in_commit = median([r.in_commit_s / r.elapsed_s for r in target_runs])
        rows.append((target, format_count(median(rates)), format_ratio(median(pairs)),
                     "%.3f .. %.3f" % median_confidence_interval(pairs), f"{1000 * latency.p50:.2f}",
                     f"{in_commit:.0%}", f"{client_us:.2f}", f"{node_us:.2f}" if target != MOCK else "-"))
    return ResultTable(
        f"Peer workload through confluent-kafka and txnsim's own producer: 100-byte records, {RECORDS_PER_TXN:,} per transaction, "
        f"{PARTITIONS} partitions, {seconds:g} s per run, median of {repeat} interleaved rounds",
        ("cluster", "committed records/s", "ratio to the mock", "95% CI of ratio", "commit p50 ms",
         "time in commit", "client CPU µs/record", "node CPU µs/record (3 nodes)"),
        tuple(rows),
        ("The same librdkafka producer code against both: `test.mock.num.brokers=3` starts librdkafka's mock "
         "cluster inside the client process; txnsim is reached on its Kafka listeners. txnsim's own producer "
         "(producer.Producer, over gRPC) runs the same loop: send() each record to partition i % 4, "
         "commit_transaction() every 1,000. committed records/s "
         "counts records of committed transactions over the run. The ratio is the median over rounds of "
         "txnsim's rate over the mock's in the same round. CPU per record: CPU-seconds of the client process "
         "(for the mock, the mock brokers' threads too) and of the three node processes, per committed record.",),
        chart=PEER_CHART)


def verdicts(runs: dict[str, list[PeerRun]]) -> tuple[Verdict, ...]:
    found = []
    for target, who in ((TXNSIM, "txnsim (confluent-kafka)"), (OWN, "txnsim's own producer")):
        pairs = paired_ratios([r.records_per_s for r in runs[target]], [r.records_per_s for r in runs[MOCK]])
        share, (low, high) = median(pairs), median_confidence_interval(pairs)
        detail = f"median ratio {share:.3f}, 95% CI {low:.3f} .. {high:.3f}, {len(pairs)} rounds"
        found += [Verdict(f"{who} reaches at least {TARGET_RATIO} of the mock's rate", share >= TARGET_RATIO, detail),
                  Verdict(f"{who} reaches {AIM_RATIO} of the mock's rate (the aim)", share >= AIM_RATIO, detail)]
    return tuple(found)
