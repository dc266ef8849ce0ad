"""What a node costs: CPU of the three node processes per acknowledged record (an idempotent producer writing)
and per served record (a read_committed consumer reading the same records back), in microseconds, from /proc.

The nodes' CPU is read before and after each phase, so it holds everything a node does meanwhile: gRPC,
record batch checks, appends, fsyncs, replies, and the little it does when idle (membership probes every
50 ms), which is measured separately and shown, so a reader can take it off.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from consumer import Consumer
from producer import Producer
from proto.structs import TopicPartition
from txnsim.bench.chart_spec import Bars
from txnsim.bench.harness import NullProgress, Progress, bench_cluster
from txnsim.bench.proc_stats import process_cpu_s
from txnsim.bench.report import BenchResult, ResultTable, Verdict, format_count
from txnsim.bench.stats import median

PARTITIONS = 4
VALUE = b"v" * 100
IDLE_WINDOW_S = 1.0
READ_TIMEOUT_S = 300.0
#: the table's chart (`txnsim bench --plot`): what a record costs the nodes and the client, side by side
CPU_CHART = Bars(("node CPU µs/record (3 nodes)", "client CPU µs/record"), value_label="CPU µs per record")
PHASES = ("produce (per acknowledged record)", "read_committed fetch (per served record)")


@dataclass(frozen=True, slots=True)
class PhaseRun:
    records: int
    elapsed_s: float
    #: CPU-seconds of each node process during the phase
    node_cpu_s: tuple[float, ...]
    client_cpu_s: float

    def node_us_per_record(self) -> float:
        return sum(self.node_cpu_s) / self.records * 1e6


def _measured(node_pids: Sequence[int], work: Callable[[], int]) -> PhaseRun:
    """Run `work` (it returns the records it wrote or read) with the nodes' and this process's CPU metered."""
    before = [process_cpu_s(pid) for pid in node_pids]
    cpu_start, start = time.process_time(), time.monotonic()
    records = work()
    elapsed, client = time.monotonic() - start, time.process_time() - cpu_start
    after = [process_cpu_s(pid) for pid in node_pids]
    return PhaseRun(records, elapsed, tuple(a - b for a, b in zip(after, before)), client)


def produce(bootstrap_servers: str, topic: str, records: int) -> int:
    """`records` records over the partitions by an idempotent producer; returns how many were acknowledged."""
    with Producer(bootstrap_servers=bootstrap_servers) as producer:
        futures = [producer.send(topic, value=VALUE, partition=i % PARTITIONS) for i in range(records)]
        producer.flush()
        return sum(1 for future in futures if future.succeeded())


def read_back(bootstrap_servers: str, topic: str, expected: int) -> int:
    """A fresh read_committed consumer reads `expected` records of `topic` from the start; returns the count."""
    returned = 0
    deadline = time.monotonic() + READ_TIMEOUT_S
    with Consumer(bootstrap_servers=bootstrap_servers, isolation_level="read_committed",
                  auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        while returned < expected:
            returned += sum(len(records) for records in consumer.poll(timeout_ms=500).values())
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {returned:,} of {expected:,} records of {topic} in {READ_TIMEOUT_S:.0f} s")
    return returned


def idle_cpu_per_s(node_pids: Sequence[int]) -> float:
    """The three nodes' CPU-seconds per second while no client talks to them."""
    before = sum(process_cpu_s(pid) for pid in node_pids)
    time.sleep(IDLE_WINDOW_S)  # the metering window itself, not a wait for a condition
    return (sum(process_cpu_s(pid) for pid in node_pids) - before) / IDLE_WINDOW_S


def run(records: int = 200_000, repeat: int = 3, progress: Progress | None = None) -> BenchResult:
    progress = progress or NullProgress()
    runs: dict[str, list[PhaseRun]] = {phase: [] for phase in PHASES}
    topics = {f"bench-nodecpu-{r}": PARTITIONS for r in range(repeat)} | {"bench-nodecpu-warm": PARTITIONS}
    with bench_cluster(topics) as cluster:
        bs = cluster.bootstrap_servers
        node_pids = [pid for node in cluster.node_ids if (pid := cluster.pid(node)) is not None]
        produce(bs, "bench-nodecpu-warm", 1_000)  # connections and metadata warm, untimed
        idle = idle_cpu_per_s(node_pids)
        progress.phase(f"node CPU: {repeat} rounds of {records:,} records written and read back", 2 * repeat)
        for round_ in range(repeat):
            topic = f"bench-nodecpu-{round_}"
            written = _measured(node_pids, lambda: produce(bs, topic, records))
            runs[PHASES[0]].append(written)
            progress.advance()
            runs[PHASES[1]].append(_measured(node_pids, lambda: read_back(bs, topic, written.records)))
            progress.advance()
    return BenchResult("nodecpu", (cpu_table(runs, records, repeat, idle),), verdicts(runs, records))


def cpu_table(runs: dict[str, list[PhaseRun]], records: int, repeat: int, idle_per_s: float) -> ResultTable:
    rows = []
    for phase, phase_runs in runs.items():
        per_node = [median([r.node_cpu_s[i] / r.records * 1e6 for r in phase_runs])
                    for i in range(len(phase_runs[0].node_cpu_s))]
        rows.append((phase, format_count(median([r.records / r.elapsed_s for r in phase_runs])),
                     f"{median([r.node_us_per_record() for r in phase_runs]):.1f}",
                     " / ".join(f"{us:.1f}" for us in per_node),
                     f"{median([idle_per_s * r.elapsed_s / r.records * 1e6 for r in phase_runs]):.2f}",
                     f"{median([sum(r.node_cpu_s) / r.elapsed_s for r in phase_runs]):.2f}",
                     f"{median([r.client_cpu_s / r.records * 1e6 for r in phase_runs]):.1f}"))
    return ResultTable(
        f"Node CPU per record: {records:,} records of 100 bytes over {PARTITIONS} partitions, 3 nodes, "
        f"median of {repeat} rounds",
        ("phase", "records/s", "node CPU µs/record (3 nodes)", "per node µs/record", "of which idle µs/record",
         "node CPU (cores)", "client CPU µs/record"),
        tuple(rows),
        ("Node CPU: utime + stime of the three node processes from /proc, read before and after the phase, per "
         "record acknowledged (an idempotent producer: linger 5 ms, 16 KiB batches, one flush at the end) or "
         "returned (a fresh read_committed consumer from offset 0, default fetch sizes). of which idle: what the "
         f"nodes burn with no client ({idle_per_s * 1000:.1f} ms of CPU per second for the three, measured for "
         f"{IDLE_WINDOW_S:g} s before the rounds) over the phase's length. client CPU: this process, every "
         "thread.",),
        chart=CPU_CHART)


def verdicts(runs: dict[str, list[PhaseRun]], records: int) -> tuple[Verdict, ...]:
    written = [r.records for r in runs[PHASES[0]]]
    return (Verdict("every record written was acknowledged (the CPU per record counts real records)",
                    all(w == records for w in written), f"{', '.join(f'{w:,}' for w in written)} of {records:,}"),)
