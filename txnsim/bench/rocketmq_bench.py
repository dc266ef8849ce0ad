"""RocketMQ-style transactional messages in both storage designs (half.message.storage=rocketmq and
=kafka) against a Kafka transaction of one message, interleaved round by round on one cluster: producer
and consumer rates, send-to-visible latency, where a message's time goes, the log batches and fsyncs
it costs, and what 10% undecided local transactions cost through check-back. Ratios are paired with
the run of the comparison's baseline in the same round; the measuring code never prints."""
from __future__ import annotations

import contextlib
import itertools
import os
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from consumer import Consumer
from producer import Producer
from producer.local_transaction import LocalTransactionState, SendStatus, TransactionListener, TransactionMessage
from proto.structs import TopicPartition
from txnsim.admin import Admin
from txnsim.bench.chart_spec import Bars, RatioBars, RatioSeries
from txnsim.bench.harness import NullProgress, Progress, bench_cluster
from txnsim.bench.log_census import (
    DATA,
    LOGS,
    MARKERS,
    OTHER,
    Census,
    Fsync,
    FsyncTrace,
    LogCensus,
    cpu_seconds_from_stat,
    log_of,
    per_message,
)
from txnsim.bench.report import BenchResult, ResultTable, Verdict, format_count, format_ms, format_ratio
from txnsim.bench.schedule import rotated
from txnsim.bench.stats import median, median_confidence_interval, paired_ratios, percentile
from txnsim.cluster import LocalCluster

PARTITIONS = 3
VALUE_BYTES = 100
#: the check-back part's cluster settings (also in force for the rest: nothing else waits that long)
CHECK_INTERVAL_MS = 200
HALF_MESSAGE_TIMEOUT_MS = 200
#: every UNDECIDED_EVERY-th local transaction answers UNKNOW (10%); its check-back answers COMMIT
UNDECIDED_EVERY = 10
VISIBLE_TIMEOUT_S = 30.0
#: a read of the topics takes a few tens of ms: this many read rounds per round of the rest
READS_PER_ROUND = 3
#: what a run owes is written once the logs stop growing for this long
QUIET_S = 0.1


@dataclass(frozen=True, slots=True)
class Design:
    label: str
    #: the topic's half.message.storage; None for the baseline, a Kafka transaction of one message
    storage: str | None
    topic: str


ROCKETMQ = Design("RocketMQ storage", "rocketmq", "bench-rmq-rocketmq")
KAFKA = Design("Kafka storage", "kafka", "bench-rmq-kafka")
BASELINE = Design("Kafka transaction of 1 message (baseline)", None, "bench-rmq-baseline")
DESIGNS = (ROCKETMQ, KAFKA, BASELINE)
#: the check-back comparison writes topics of its own, so the consumer reads compare like with like
CHECK_TOPICS = {ROCKETMQ: "bench-rmq-rocketmq-checks", KAFKA: "bench-rmq-kafka-checks"}
#: the tables' charts (`txnsim bench --plot`); the throughput and check-back tables repeat their ratio
#: headers, so their columns are named by index
THROUGHPUT_CHART = RatioBars((RatioSeries(2, 3, "producer msgs/s"), RatioSeries(5, 6, "consumer msgs/s")),
                             value_label="msgs/s over a Kafka transaction of 1 message (same round)")
PHASES_CHART = Bars(("stored / acked p50 ms", "then returned p50 ms", "then visible p50 ms"),
                    value_label="milliseconds from send to visible, p50 of each phase", stacked=True)
WRITES_CHART = Bars(LOGS, value_label="batches appended per message, by log", stacked=True)
CHECK_CHART = RatioBars((RatioSeries(3, 4, "producer msgs/s"), RatioSeries(6, 7, "with a consumer: msgs/s")),
                        value_label="msgs/s over the same design with no undecided message (same round)",
                        row_names=("design", "undecided"))
#: (design, undecided every n-th, a read_committed consumer watching): runs of the check-back part; its
#: unwatched 0% runs are the main throughput runs of the same round
CheckVariant = tuple[Design, "int | None", bool]
CHECK_VARIANTS: tuple[CheckVariant, ...] = tuple(
    (design, every, watched) for design in (ROCKETMQ, KAFKA) for every, watched in (
        (UNDECIDED_EVERY, False), (None, True), (UNDECIDED_EVERY, True)))


# ------------------------------------------------------------ the clients

class Listener(TransactionListener):
    """A no-op local transaction: COMMIT_MESSAGE, or UNKNOW when the send's arg says so, whose check-back
    then answers COMMIT. Notes when the local transaction ran, i.e. when the half message was stored."""

    def __init__(self) -> None:
        self.ran_at = 0.0
        self.checks = 0
        self._lock = threading.Lock()

    def execute_local_transaction(self, msg: TransactionMessage, arg: object) -> LocalTransactionState:
        self.ran_at = time.monotonic()
        return LocalTransactionState.UNKNOW if arg else LocalTransactionState.COMMIT_MESSAGE

    def check_local_transaction(self, msg: TransactionMessage) -> LocalTransactionState:
        with self._lock:
            self.checks += 1
        return LocalTransactionState.COMMIT_MESSAGE


@dataclass(frozen=True, slots=True)
class Sent:
    value: bytes
    #: send_message_in_transaction called (baseline: begin_transaction)
    start: float
    #: the half message is stored and the local transaction runs (baseline: flush() returned, the record is acked)
    stored: float
    #: send_message_in_transaction returned (baseline: commit_transaction returned)
    returned: float
    undecided: bool = False


class Sender:
    """One producer of one design (a fresh group or transactional id): send() is one transaction of one
    message, timed by phase."""

    def __init__(self, bootstrap_servers: str, design: Design, name: str) -> None:
        self.design = design
        self.name = name
        self.listener = Listener()
        if design.storage is None:
            self.producer = Producer(bootstrap_servers=bootstrap_servers, transactional_id=name)
            self.producer.init_transactions()
        else:
            self.producer = Producer(bootstrap_servers=bootstrap_servers, producer_group=name,
                                     transaction_listener=self.listener)
            if not self.producer.wait_for_check_backs(10):
                raise TimeoutError(f"producer group {name!r} never registered for check-backs")

    def send(self, topic: str, value: bytes, undecided: bool = False) -> Sent:
        start = time.monotonic()
        if self.design.storage is None:
            self.producer.begin_transaction()
            self.producer.send(topic, value=value)
            self.producer.flush()  # what commit_transaction() does first, timed apart here
            stored = time.monotonic()
            self.producer.commit_transaction()
        else:
            result = self.producer.send_message_in_transaction(topic, value=value, arg=undecided)
            if result.send_status != SendStatus.SEND_OK.value:  # not stored: the local transaction did not run
                raise RuntimeError(f"the half message to {topic} was not stored: {result.send_status}")
            stored = self.listener.ran_at
        return Sent(value, start, stored, time.monotonic(), undecided)

    def close(self) -> None:
        self.producer.close()


class Watcher:
    """A read_committed consumer on a thread of its own, from the end of `topic` when entered: when each
    value first arrived, and how many arrived again."""

    def __init__(self, bootstrap_servers: str, topic: str) -> None:
        self._bootstrap = bootstrap_servers
        self._topic = topic
        self.arrived: dict[bytes, float] = {}
        self.repeats = 0
        self.deliveries = 0
        self._changed = threading.Condition()
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"watch-{topic}", daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        if not self._ready.wait(30) or self._error is not None:
            raise RuntimeError(f"the read_committed consumer of {self._topic} did not start: {self._error}")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        tps = [TopicPartition(self._topic, p) for p in range(PARTITIONS)]
        try:
            with Consumer(bootstrap_servers=self._bootstrap, isolation_level="read_committed",
                          enable_auto_commit=False) as consumer:
                consumer.assign(tps)
                consumer.seek_to_end(*tps)
                for tp in tps:
                    consumer.position(tp)  # resolved now, before anything is sent
                self._ready.set()
                while not self._stop.is_set():
                    batch = consumer.poll(timeout_ms=50)
                    now = time.monotonic()
                    with self._changed:
                        self.deliveries += bool(batch)
                        for records in batch.values():
                            for record in records:
                                if record.value in self.arrived:
                                    self.repeats += 1
                                else:
                                    self.arrived[record.value] = now
                        self._changed.notify_all()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread, which raises it
            with self._changed:
                self._error = exc
                self._changed.notify_all()
            self._ready.set()

    def wait_for(self, values: Collection[bytes], timeout_s: float = VISIBLE_TIMEOUT_S) -> float:
        """When the last of `values` arrived; TimeoutError if one did not within `timeout_s`."""
        with self._changed:
            arrived = self._changed.wait_for(
                lambda: self._error is not None or all(v in self.arrived for v in values), timeout_s)
            if self._error is not None:
                raise RuntimeError(f"the read_committed consumer of {self._topic} failed: {self._error}")
            if not arrived:
                missing = sum(v not in self.arrived for v in values)
                raise TimeoutError(f"{missing} of {len(values)} messages of {self._topic} were not visible to "
                                   f"read_committed within {timeout_s:g} s")
            return max(self.arrived[v] for v in values)


# ------------------------------------------------------------ runs

@dataclass(frozen=True, slots=True)
class ProduceRun:
    sent: tuple[Sent, ...]
    elapsed_s: float
    #: batches appended per message, by column of LOGS, once everything the messages owed was written
    writes: dict[str, float]
    #: bytes per message appended to the topic's partitions (records and markers): what a consumer reads
    topic_bytes: float
    client_cpu_s: float
    #: CPU of the three node processes during the run, less what they use when idle
    nodes_cpu_s: float
    checks: int = 0
    #: with a watcher: per message, from the start of its send until read_committed had it
    visible_s: tuple[float, ...] = ()
    #: with a watcher: from the return of the last send until every message was visible
    drain_s: float = 0.0
    #: with a watcher: the consumer's polls that returned messages
    deliveries: int = 0

    @property
    def rate(self) -> float:
        return len(self.sent) / self.elapsed_s

    def per_message_ms(self, cpu_s: float) -> float:
        return cpu_s / len(self.sent) * 1000


@dataclass
class Bench:
    """The cluster, and what every run needs of it."""

    cluster: LocalCluster
    admin: Admin
    census: LogCensus
    repeats: int = 0
    #: CPU-seconds per second the three nodes use with nothing to do (heartbeats, membership probes)
    idle_nodes_cpu: float = 0.0
    _names: Iterator[int] = field(default_factory=itertools.count)

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap_servers

    def nodes_cpu(self) -> float:
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for node in self.cluster.node_ids:
            pid = self.cluster.pid(node)
            with contextlib.suppress(OSError, IndexError, ValueError):
                total += cpu_seconds_from_stat(Path(f"/proc/{pid}/stat").read_text(), ticks) if pid else 0.0
        return total

    def measure_idle(self, seconds: float = 1.0) -> None:
        before = self.nodes_cpu()
        time.sleep(seconds)  # the measuring window: nothing is sent
        self.idle_nodes_cpu = (self.nodes_cpu() - before) / seconds

    def sender(self, design: Design, topic: str) -> Sender:
        sender = Sender(self.bootstrap, design, f"bench-rmq-{design.storage or 'txn'}-{next(self._names)}")
        sender.send(topic, b"warm-up")  # metadata, connections and coordinators before any clock starts
        return sender

    def settled(self, sender: Sender) -> Census:
        """The census once nothing the messages owe is left (undecided messages, copies, markers, DONE
        records and CompleteCommit are written after the producer's call returned): no half message of
        the group undecided, and the logs stopped growing."""
        deadline = time.monotonic() + VISIBLE_TIMEOUT_S
        while sender.design.storage is not None and self.admin.list_half_messages(sender.name):
            if time.monotonic() > deadline:
                raise TimeoutError(f"producer group {sender.name!r} still has undecided messages")
            time.sleep(0.02)  # poll interval, bounded by the deadline
        last = self.census.take()
        while True:
            time.sleep(QUIET_S)  # the quiet window itself: the logs must not grow over it
            now = self.census.take()
            if now == last or time.monotonic() > deadline:
                return now
            last = now


def value_of(run: str, index: int) -> bytes:
    return f"{run}-{index}".encode().ljust(VALUE_BYTES, b".")


def produce(bench: Bench, design: Design, seconds: float, *, topic: str | None = None,
            undecided_every: int | None = None, watch: bool = False) -> ProduceRun:
    """Sequential sends for `seconds`, one transaction per message, then what they appended. With
    `watch`, a read_committed consumer times each message's arrival (and the run waits for all)."""
    topic = topic or design.topic
    sender = bench.sender(design, topic)
    try:
        before = bench.settled(sender)
        with Watcher(bench.bootstrap, topic) if watch else contextlib.nullcontext() as watcher:
            sent: list[Sent] = []
            clock, send, index = time.monotonic, sender.send, 0
            cpu, nodes = time.process_time(), bench.nodes_cpu()
            start = clock()
            end = start + seconds
            while clock() < end:
                undecided = undecided_every is not None and index % undecided_every == undecided_every - 1
                sent.append(send(topic, value_of(sender.name, index), undecided))
                index += 1
            elapsed = clock() - start
            client_cpu = time.process_time() - cpu
            nodes_cpu = bench.nodes_cpu() - nodes - bench.idle_nodes_cpu * elapsed
            visible: tuple[float, ...] = ()
            drain, deliveries = 0.0, 0
            if watcher is not None:
                drain = watcher.wait_for([s.value for s in sent]) - sent[-1].returned
                visible = tuple(watcher.arrived[s.value] - s.start for s in sent)
                deliveries = watcher.deliveries
                bench.repeats += watcher.repeats
        after = bench.settled(sender)
    finally:
        sender.close()
    topic_bytes = per_message(before.bytes, after.bytes, len(sent))
    return ProduceRun(tuple(sent), elapsed, per_message(before.batches, after.batches, len(sent)),
                      topic_bytes[DATA] + topic_bytes[MARKERS], client_cpu, nodes_cpu, sender.listener.checks,
                      visible, drain, deliveries)


def latencies(bench: Bench, design: Design, count: int) -> list[tuple[Sent, float]]:
    """`count` messages one at a time, each sent only once the previous one was visible: each with the
    moment a read_committed consumer had it."""
    sender = bench.sender(design, design.topic)
    out = []
    try:
        with Watcher(bench.bootstrap, design.topic) as watcher:
            for index in range(count):
                sent = sender.send(design.topic, value_of(sender.name, index))
                out.append((sent, watcher.wait_for([sent.value])))
            bench.repeats += watcher.repeats
    finally:
        sender.close()
    return out


def read(bench: Bench, topic: str, expected: int) -> float:
    """Seconds a fresh read_committed consumer takes from assign() to the `expected`-th message of `topic`."""
    with Consumer(bootstrap_servers=bench.bootstrap, isolation_level="read_committed",
                  auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        start = time.monotonic()
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        returned = 0
        while returned < expected:
            returned += sum(len(records) for records in consumer.poll(timeout_ms=1000).values())
            if time.monotonic() - start > VISIBLE_TIMEOUT_S:
                raise TimeoutError(f"read_committed read {returned:,} of {expected:,} messages of {topic}")
        return time.monotonic() - start


@dataclass(frozen=True, slots=True)
class FsyncCount:
    messages: int
    #: None: strace could not watch the nodes
    fsyncs: list[Fsync] | None


def count_fsyncs(bench: Bench, design: Design, count: int, workdir: Path) -> FsyncCount:
    """`count` messages sent while strace watches the nodes: every fsync they cost, settling included."""
    sender = bench.sender(design, design.topic)
    try:
        bench.settled(sender)
        pids = [pid for node in bench.cluster.node_ids if (pid := bench.cluster.pid(node))]
        with FsyncTrace(pids, workdir) as trace:
            for index in range(count):
                sender.send(design.topic, value_of(sender.name, index))
            bench.settled(sender)
    finally:
        sender.close()
    return FsyncCount(count, trace.fsyncs)


# ------------------------------------------------------------ the scenario

@dataclass
class Results:
    produce: dict[Design, list[ProduceRun]] = field(default_factory=lambda: {d: [] for d in DESIGNS})
    latency: dict[Design, list[list[tuple[Sent, float]]]] = field(default_factory=lambda: {d: [] for d in DESIGNS})
    checks: dict[CheckVariant, list[ProduceRun]] = field(
        default_factory=lambda: {v: [] for v in CHECK_VARIANTS})
    reads: dict[Design, list[float]] = field(default_factory=lambda: {d: [] for d in DESIGNS})
    read_messages: int = 0
    fsyncs: dict[Design, FsyncCount] = field(default_factory=dict)
    repeats: int = 0
    idle_nodes_cpu: float = 0.0


def run(seconds: float = 1.25, repeat: int = 6, latency_messages: int = 50, fsync_messages: int = 50,
        progress: Progress | None = None) -> BenchResult:
    progress = progress or NullProgress()
    results = Results()
    with bench_cluster(transaction_check_interval_ms=CHECK_INTERVAL_MS,
                       half_message_timeout_ms=HALF_MESSAGE_TIMEOUT_MS) as cluster, \
            Admin(cluster.bootstrap_servers) as admin:
        for design in DESIGNS:
            configs = {} if design.storage is None else {"half.message.storage": design.storage}
            admin.create_topic(design.topic, partitions=PARTITIONS, configs=configs)
            if design in CHECK_TOPICS:
                admin.create_topic(CHECK_TOPICS[design], partitions=PARTITIONS, configs=configs)
        bench = Bench(cluster, admin, LogCensus(cluster.layout.logs))
        bench.measure_idle()
        progress.phase(f"rocketmq: {repeat} rounds of {len(DESIGNS)} designs x {seconds:g} s and "
                       f"{latency_messages} timed messages, then {len(CHECK_VARIANTS)} check-back runs",
                       repeat * (2 * len(DESIGNS) + len(CHECK_VARIANTS)))
        for round_ in range(repeat):
            for design in rotated(DESIGNS, round_):
                results.produce[design].append(produce(bench, design, seconds))
                progress.advance()
                results.latency[design].append(latencies(bench, design, latency_messages))
                progress.advance()
            for variant in rotated(CHECK_VARIANTS, round_):
                design, every, watched = variant
                results.checks[variant].append(produce(bench, design, seconds, topic=CHECK_TOPICS[design],
                                                       undecided_every=every, watch=watched))
                progress.advance()
        # every design's topic holds at least this many committed messages (and a warm-up per producer)
        results.read_messages = min(sum(len(r.sent) for r in results.produce[d])
                                    + sum(len(lat) for lat in results.latency[d]) for d in DESIGNS)
        progress.phase(f"read_committed consumer: {results.read_messages:,} messages x {repeat * READS_PER_ROUND} "
                       "rounds", repeat * READS_PER_ROUND * len(DESIGNS))
        for round_ in range(repeat * READS_PER_ROUND):
            for design in rotated(DESIGNS, round_):
                results.reads[design].append(results.read_messages / read(bench, design.topic,
                                                                          results.read_messages))
                progress.advance()
        progress.phase(f"fsyncs: {fsync_messages} messages per design under strace", len(DESIGNS))
        with tempfile.TemporaryDirectory(prefix="txnsim-strace-") as tmp:
            for design in DESIGNS:
                results.fsyncs[design] = count_fsyncs(bench, design, fsync_messages, Path(tmp))
                progress.advance()
        results.repeats, results.idle_nodes_cpu = bench.repeats, bench.idle_nodes_cpu
        logs_dir = cluster.layout.logs.resolve()  # strace names files by their real path
    return BenchResult("rocketmq", (main_table(results, seconds, repeat, latency_messages),
                                    time_table(results, logs_dir), writes_table(results, repeat),
                                    check_table(results, seconds, repeat)), verdicts(results))


# ------------------------------------------------------------ tables

def _paired(values: Sequence[float], baselines: Sequence[float]) -> tuple[str, str]:
    pairs = paired_ratios(values, baselines)
    return format_ratio(median(pairs)), "%.3f .. %.3f" % median_confidence_interval(pairs)


def _visible(latency_run: list[tuple[Sent, float]]) -> list[float]:
    return [visible - sent.start for sent, visible in latency_run]


def main_table(results: Results, seconds: float, repeat: int, latency_messages: int) -> ResultTable:
    base_rates = [r.rate for r in results.produce[BASELINE]]
    base_p50 = [percentile(_visible(run), 50) for run in results.latency[BASELINE]]
    rows = []
    for design in DESIGNS:
        rates = [r.rate for r in results.produce[design]]
        visible = [v for run in results.latency[design] for v in _visible(run)]
        p50s = [percentile(_visible(run), 50) for run in results.latency[design]]
        rows.append((design.label, format_count(median(rates)), *_paired(rates, base_rates),
                     format_count(median(results.reads[design])),
                     *_paired(results.reads[design], results.reads[BASELINE]),
                     format_ms(percentile(visible, 50)), format_ms(percentile(visible, 99)),
                     format_ratio(median(paired_ratios(p50s, base_p50)))))
    return ResultTable(
        f"One message per transaction, 100-byte values, {PARTITIONS} partitions: median of {repeat} interleaved "
        f"rounds",
        ("design", "producer msgs/s", "ratio to baseline", "95% CI of ratio", "consumer msgs/s",
         "ratio to baseline", "95% CI of ratio", "send to visible p50 ms", "p99 ms", "p50 ratio to baseline"),
        tuple(rows),
        (f"producer: one thread sending sequentially for {seconds:g} s per run (RocketMQ designs: "
         "send_message_in_transaction with a no-op local transaction answering COMMIT_MESSAGE; baseline: "
         "begin_transaction, send, commit_transaction), a fresh producer group or transactional id per run. "
         f"consumer: a fresh read_committed Consumer reading the first {results.read_messages:,} messages of "
         "each design's topic, timed from assign() to the last. send to visible: from the call (baseline: "
         "begin_transaction) until a read_committed consumer polling the topic returned the message, "
         f"{latency_messages} messages per round one at a time, {repeat * latency_messages} in all. Ratios: "
         "median over the rounds of the design's figure over the baseline's in the same round, with a "
         "distribution-free 95% confidence interval (the whole range below 6 rounds).",), chart=THROUGHPUT_CHART)


def fsync_log_of(path: str, logs_dir: Path) -> str:
    """The LOGS column an fsynced file belongs to: a segment of a log under `logs_dir`, or OTHER
    (directories, snapshots, producer-id blocks)."""
    file = Path(path)
    if file.suffix == ".log" and file.parent.parent == logs_dir:
        return log_of(file.parent.name)
    return OTHER


def time_table(results: Results, logs_dir: Path) -> ResultTable:
    rows, by_log = [], []
    for design in DESIGNS:
        pairs = [p for run in results.latency[design] for p in run]
        runs = results.produce[design]
        counted = results.fsyncs[design]
        if counted.fsyncs is None:
            fsyncs = fsync_ms = "n/a"
        else:
            fsyncs = f"{len(counted.fsyncs) / counted.messages:.2f}"
            fsync_ms = f"{sum(f.seconds for f in counted.fsyncs) / counted.messages * 1000:.2f}"
            logs = Counter(fsync_log_of(f.path, logs_dir) for f in counted.fsyncs)
            by_log.append(f"{design.label}: " + ", ".join(
                f"{log} {logs[log] / counted.messages:.2f}" for log in LOGS if logs[log]))
        rows.append((design.label,
                     format_ms(percentile([s.stored - s.start for s, _v in pairs], 50)),
                     format_ms(percentile([s.returned - s.stored for s, _v in pairs], 50)),
                     format_ms(percentile([v - s.returned for s, v in pairs], 50)),
                     f"{median([r.per_message_ms(r.client_cpu_s) for r in runs]):.2f}",
                     f"{median([r.per_message_ms(r.nodes_cpu_s) for r in runs]):.2f}", fsyncs, fsync_ms))
    return ResultTable(
        "Where a message's time goes",
        ("design", "stored / acked p50 ms", "then returned p50 ms", "then visible p50 ms", "client CPU ms/msg",
         "nodes CPU ms/msg", "fsyncs/msg", "fsync ms/msg"),
        tuple(rows),
        ("Phases of the one-at-a-time messages: stored = from the call until the half message was stored and the "
         "local transaction ran (baseline: until flush() returned, the record acknowledged after "
         "AddPartitionsToTxn); then returned = until send_message_in_transaction returned, the end decided and "
         "carried out (baseline: commit_transaction, EndTxn); then visible = until the consumer returned it. "
         "CPU: CPU-seconds of this process and of the three node processes during the throughput runs, per "
         f"message; the nodes' idle use (measured before the first run: {results.idle_nodes_cpu:.3f} CPU-s per "
         "second) is "
         "subtracted. fsyncs: every fsync and fdatasync of the node processes (strace -f) while "
         f"{results.fsyncs[BASELINE].messages} messages were sent and settled, and the time spent in them.",
         *(["fsyncs per message by file: " + "; ".join(by_log) + " (other: directories, snapshots, producer-id "
            "blocks)."] if by_log else [])), chart=PHASES_CHART)


def writes_table(results: Results, repeat: int) -> ResultTable:
    base_totals = [sum(r.writes.values()) for r in results.produce[BASELINE]]
    rows = []
    for design in DESIGNS:
        runs = results.produce[design]
        totals = [sum(r.writes.values()) for r in runs]
        rows.append((design.label, *(f"{median([r.writes[log] for r in runs]):.2f}" for log in LOGS),
                     f"{median(totals):.2f}", format_ratio(median(paired_ratios(totals, base_totals))),
                     format_count(median([r.topic_bytes for r in runs]))))
    return ResultTable(
        f"Log writes per message: batches appended, median of {repeat} throughput runs",
        ("design", *LOGS, "total", "ratio to baseline", "topic bytes/msg"),
        tuple(rows),
        ("Batches appended to every log of the data directory (read from the segment files) between the start "
         "of a throughput run and the moment everything its messages owed was written, over the messages "
         "sent. data partition: record batches of the topic; markers: COMMIT/ABORT control batches; "
         "__transaction_state: the baseline coordinator's state records; other: every other log. topic bytes: "
         "what the topic's partitions grew by per message (record batches and markers), what a consumer "
         "reads.",), chart=WRITES_CHART)


def check_table(results: Results, seconds: float, repeat: int) -> ResultTable:
    rows = []
    for design in CHECK_TOPICS:
        unwatched_base = [r.rate for r in results.produce[design]]
        watched_base = [r.rate for r in results.checks[(design, None, True)]]
        for every in (None, UNDECIDED_EVERY):
            unwatched = results.produce[design] if every is None else results.checks[(design, every, False)]
            watched = results.checks[(design, every, True)]
            visible = [v for r in watched for s, v in zip(r.sent, r.visible_s) if not s.undecided]
            late = [v for r in watched for s, v in zip(r.sent, r.visible_s) if s.undecided]
            held = sum(s.undecided for r in unwatched + watched for s in r.sent)
            alone, along = [r.rate for r in unwatched], [r.rate for r in watched]
            rows.append((
                design.label, "0%" if every is None else f"{1 / every:.0%}",
                format_count(median(alone)), *_paired(alone, unwatched_base),
                format_count(median(along)), *_paired(along, watched_base),
                f"{sum(r.checks for r in unwatched + watched) / held:.2f}" if held else "-",
                f"{median([sum(r.writes.values()) for r in unwatched]):.2f}",
                format_ms(percentile(visible, 50)), format_ms(percentile(visible, 99)),
                format_ms(percentile(late, 50)) if late else "-", format_ms(median([r.drain_s for r in watched])),
                f"{median([r.deliveries / len(r.sent) for r in watched]):.2f}"))
    return ResultTable(
        f"Check-back: every {UNDECIDED_EVERY}th local transaction answers UNKNOW, its check-back COMMIT "
        f"(transaction_check_interval_ms = half_message_timeout_ms = {CHECK_INTERVAL_MS}), median of {repeat} "
        "interleaved rounds",
        ("design", "undecided", "producer msgs/s", "ratio to 0%", "95% CI of ratio", "with a consumer: msgs/s",
         "ratio to 0%", "95% CI of ratio", "checks per undecided", "log writes/msg",
         "decided: send to visible p50 ms", "p99 ms", "undecided: p50 ms", "last send to all visible ms",
         "consumer polls/msg"),
        tuple(rows),
        (f"{seconds:g} s of sequential sends per run, alone (the 0% runs are the throughput runs above) and while "
         "a read_committed consumer polls the topic; each ratio is against the same design with every local "
         "transaction answering COMMIT_MESSAGE, in the same round and the same setting. send to visible: from "
         "the call until the consumer returned the message, decided (COMMIT_MESSAGE at once) and undecided "
         "(committed by check-back) apart. last send to all visible: from the return of the last send until the "
         "consumer had every message of the run. consumer polls: the consumer's polls that returned messages, "
         "per message.",), chart=CHECK_CHART)


def verdicts(results: Results) -> tuple[Verdict, ...]:
    decided = [r for d in CHECK_TOPICS for r in results.produce[d]] + [
        r for (_design, every, _watched), runs in results.checks.items() if every is None for r in runs]
    unchecked = sum(r.checks for r in decided)
    held = [r for (_design, every, _watched), runs in results.checks.items() if every is not None for r in runs]
    undecided = sum(s.undecided for r in held for s in r.sent)
    checked = sum(r.checks for r in held)
    return (
        Verdict("read_committed returned every committed message, none twice", results.repeats == 0,
                f"{results.repeats} repeated"),
        Verdict("no check-back where every local transaction answered COMMIT_MESSAGE", unchecked == 0,
                f"{unchecked} checks"),
        Verdict("each undecided message was committed by one check-back", checked == undecided,
                f"{checked} checks for {undecided} undecided messages"),
    )
