"""The Spark sink: the streaming copy that txnsim ships (spark.jobs copy, txnsim -> txnsim, trigger
availableNow, a fixed maxOffsetsPerTrigger) written exactly once and at least once (the baseline: an
idempotent producer, no transactions), interleaved round by round in one SparkSession; then the
sink's commit time per micro-batch against the rows in the batch (one EndBatchTxn whatever the rows).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage

from producer import Producer
from spark.jobs import copy_query
from spark.source import TxnsimDataSource
from spark.writer import StreamWriter, TaskCommit
from txnsim.bench.chart_spec import RatioBars, RatioSeries, Sweep, Target
from txnsim.bench.harness import NullProgress, Progress, bench_cluster
from txnsim.bench.report import BenchResult, ResultTable, Verdict, format_count, format_ms, format_ratio
from txnsim.bench.schedule import rotated
from txnsim.bench.stats import median, median_confidence_interval, paired_ratios, percentile, ratio

INPUT_TOPIC = "bench-spark-in"
PARTITIONS = 2
VALUE = b"v" * 100
MASTER = "local[2]"
GUARANTEES = ("at-least-once", "exactly-once")  # the first is the baseline
BASELINE = GUARANTEES[0]
#: the issue's target: the exactly-once sink keeps at least this share of the baseline's rows/s
TARGET_SHARE = 0.90
#: micro-batch sizes of the commit-cost table: (rows per batch, micro-batches per query); each
#: round runs one query of every size, so sizes interleave; a round takes about 15 s
COMMIT_COST_SIZES: tuple[tuple[int, int], ...] = ((1_000, 5), (10_000, 5), (100_000, 3))
#: "does not grow": the p50 commit of the largest batches within this factor of the smallest
COMMIT_GROWTH_LIMIT = 1.5
#: the tables' charts (`txnsim bench --plot`)
THROUGHPUT_CHART = RatioBars((RatioSeries("ratio to baseline", "95% CI of ratio"),),
                             value_label="rows/s over at-least-once's (same round)",
                             targets=(Target(TARGET_SHARE, f"target {TARGET_SHARE:g}"),))
COMMIT_COST_CHART = Sweep("rows per batch", ("commit p50 ms", "commit p95 ms", "addBatch p50 ms"),
                          x_label="rows per micro-batch (log scale)", value_label="milliseconds (log scale)",
                          log_x=True, log_y=True)  # commits of ms beside writes of a second
#: option naming the file where the timed sink appends one JSON line per committed batch
TIMINGS_OPTION = "bench.commit.timings"
TIMED_FORMAT = "txnsim-timed"
QUERY_TIMEOUT_S = 600.0


# ---------------------------------------------------------------- the timed sink


class TimedStreamWriter(StreamWriter):
    """The sink's StreamWriter, its commit timed. Spark calls commit in a Python process of its own,
    once per micro-batch, so the time goes to the file the bench names in an option: one line per batch."""

    def __init__(self, options: dict[str, str], schema: Any, overwrite: bool) -> None:
        super().__init__(options, schema, overwrite)
        self._timings = options[TIMINGS_OPTION]

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 (Spark's name)
        started = time.monotonic()
        super().commit(messages, batchId)
        elapsed = time.monotonic() - started
        rows = sum(m.records for m in messages if isinstance(m, TaskCommit))
        line = json.dumps({"batch": batchId, "rows": rows, "commit_s": elapsed})
        with open(self._timings, "a") as timings:
            timings.write(line + "\n")


class TimedTxnsimDataSource(TxnsimDataSource):
    """The txnsim format with TimedStreamWriter; reading and writing rows are txnsim's own code."""

    @classmethod
    def name(cls) -> str:
        return TIMED_FORMAT

    def streamWriter(self, schema: Any, overwrite: bool) -> StreamWriter:  # noqa: N802 (Spark's name)
        return TimedStreamWriter(dict(self.options), schema, overwrite)


# ---------------------------------------------------------------- what one query run measured


@dataclass(frozen=True, slots=True)
class BatchCommit:
    batch: int
    rows: int
    commit_s: float


@dataclass(frozen=True, slots=True)
class CopyRun:
    """One availableNow query from start to termination."""

    rows: int                   # input rows over all micro-batches (numInputRows)
    batches: int                # micro-batches that had rows
    batch_s: float              # sum of the micro-batches' triggerExecution: the query's processing time
    wall_s: float               # start() until terminated: adds query start-up and the gaps between batches
    add_batch_s: tuple[float, ...]  # per micro-batch with rows: Spark's addBatch (write tasks and commit)
    commits: tuple[BatchCommit, ...]

    @property
    def rows_per_s(self) -> float:
        return ratio(self.rows, self.batch_s)

    @property
    def wall_rows_per_s(self) -> float:
        return ratio(self.rows, self.wall_s)


def parse_timings(text: str) -> list[BatchCommit]:
    """The timed sink's file: one JSON object per committed micro-batch."""
    commits = []
    for line in text.splitlines():
        if line.strip():
            record = json.loads(line)
            commits.append(BatchCommit(record["batch"], record["rows"], record["commit_s"]))
    return sorted(commits, key=lambda c: c.batch)


def copy_run(progress: Sequence[Mapping[str, Any]], commits: Sequence[BatchCommit], wall_s: float) -> CopyRun:
    """A CopyRun from the query's progress reports (StreamingQuery.recentProgress) and the sink's timings."""
    with_rows = [p for p in progress if p["numInputRows"] > 0]
    return CopyRun(rows=sum(p["numInputRows"] for p in progress), batches=len(with_rows),
                   batch_s=sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000,
                   wall_s=wall_s, add_batch_s=tuple(p["durationMs"].get("addBatch", 0) / 1000 for p in with_rows),
                   commits=tuple(commits))


# ---------------------------------------------------------------- running queries


def fill(bootstrap_servers: str, topic: str, rows: int) -> None:
    """`rows` 100-byte values, alternating between the partitions, from an idempotent producer."""
    with Producer(bootstrap_servers=bootstrap_servers) as producer:
        for i in range(rows):
            producer.send(topic, value=VALUE, partition=i % PARTITIONS)
        producer.flush()


def copy(spark: Any, bootstrap_servers: str, source: str, output: str, *, guarantee: str, batch_rows: int,
         run_dir: Path, expected_rows: int) -> CopyRun:
    """Copy `source` (from earliest) into `output` until the input present at start is copied;
    `run_dir` (new) gets the query's checkpoint and the sink's timings."""
    run_dir.mkdir(parents=True)
    timings = run_dir / "commit-timings.jsonl"
    checkpoint = run_dir / "checkpoint"
    frame = copy_query(spark, argparse.Namespace(bootstrap_servers=bootstrap_servers, input=source,
                                                 max_offsets_per_trigger=batch_rows))
    query = (frame.writeStream.format(TIMED_FORMAT).option("bootstrap.servers", bootstrap_servers)
             .option("topic", output).option("delivery.guarantee", guarantee).option(TIMINGS_OPTION, str(timings))
             .option("checkpointLocation", str(checkpoint)).outputMode("append").trigger(availableNow=True)
             .start())
    started = time.monotonic()
    if not query.awaitTermination(QUERY_TIMEOUT_S):  # raises StreamingQueryException if the query failed
        query.stop()
        raise TimeoutError(f"copying {source} to {output} ({guarantee}) did not finish in {QUERY_TIMEOUT_S:.0f} s")
    wall = time.monotonic() - started
    run = copy_run(query.recentProgress, parse_timings(timings.read_text() if timings.exists() else ""), wall)
    written = sum(c.rows for c in run.commits)
    if run.rows != expected_rows or written != expected_rows:
        raise RuntimeError(f"copying {source} to {output} ({guarantee}): {run.rows:,} rows read and {written:,} "
                           f"written, {expected_rows:,} expected")
    return run


@contextlib.contextmanager
def spark_session(workdir: Path) -> Iterator[Any]:
    """One local SparkSession for the whole benchmark, its JVM's output in workdir/spark.log (so it does
    not tear the progress display). Afterwards the JVM and the Python workers it forked are shut down and
    reaped, so that the CPU they used counts as this benchmark's and not as other processes'."""
    from pyspark import SparkContext

    from spark.session import txnsim_session

    log_path = workdir / "spark.log"
    ours = SparkContext._gateway is None
    with open(log_path, "ab") as log, _stderr_to(log.fileno()):  # the JVM inherits stderr at launch
        spark = txnsim_session(MASTER, "txnsim-bench-spark", **{
            "spark.log.level": "ERROR", "spark.sql.streaming.numRecentProgressUpdates": "10000"})
    spark.dataSource.register(TimedTxnsimDataSource)
    try:
        yield spark
    except Exception as exc:
        tail = log_path.read_text(errors="replace").splitlines()[-30:]
        exc.add_note("last lines of the Spark driver's log:\n" + "\n".join(tail))
        raise
    finally:
        if ours:
            _stop_and_reap(spark)
            SparkContext._gateway = SparkContext._jvm = None  # a later session starts a new JVM
        else:
            spark.stop()


def _stop_and_reap(spark: Any, timeout_s: float = 30.0) -> None:
    """Stop the session and its JVM, and reap every process they started, so that the CPU time of all of
    them is this process's children's. The Python workers that did the work are children of pyspark's
    daemons, which ignore SIGCHLD: reaped there, a worker's CPU time is discarded. So the daemons go
    first; this process, a child subreaper, adopts their workers and reaps them when Spark stops them."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    assert gateway is not None, "a session is running, so its JVM gateway is open"
    jvm = gateway.proc
    subreaper = _set_child_subreaper(True)
    try:
        descendants = _descendants(jvm.pid)
        if subreaper:
            for pid in descendants:
                if _parent(pid) == jvm.pid and b"pyspark.daemon" in _cmdline(pid):
                    os.kill(pid, signal.SIGKILL)  # Spark's, started by this benchmark; the JVM reaps it
        spark.stop()
        gateway.shutdown()
        jvm.stdin.close()  # the JVM exits when the pipe on its stdin closes
        jvm.wait(timeout=timeout_s)
        if subreaper:
            _reap(descendants, timeout_s)
    finally:
        if subreaper:
            _set_child_subreaper(False)


def _set_child_subreaper(on: bool) -> bool:
    """prctl(PR_SET_CHILD_SUBREAPER) on Linux; False where it is not available."""
    try:
        import ctypes

        return bool(ctypes.CDLL(None, use_errno=True).prctl(36, int(on), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _descendants(root: int) -> list[int]:
    """Every live process below `root` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (parent := _parent(int(entry.name))) is not None:
            children.setdefault(parent, []).append(int(entry.name))
    found, frontier = [], [root]
    while frontier:
        below = children.get(frontier.pop(), [])
        found += below
        frontier += below
    return found


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None  # exited meanwhile


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _reap(pids: list[int], timeout_s: float) -> None:
    """Wait for `pids`, each either reaped by its own parent or, orphaned, adopted and reaped here;
    what still runs at the deadline (Spark's processes, started by this benchmark) is killed and reaped."""
    deadline = time.monotonic() + timeout_s
    waiting = set(pids)
    while waiting:
        for pid in list(waiting):
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    waiting.discard(pid)
            except ChildProcessError:  # not (yet) ours: gone, or still its living parent's
                if not Path(f"/proc/{pid}").exists():
                    waiting.discard(pid)
        if waiting and time.monotonic() > deadline:
            for pid in waiting:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            deadline = math.inf  # killed: reaped on the next passes
        if waiting:
            time.sleep(0.02)  # poll resolution of the processes' exit, bounded by the deadline


@contextlib.contextmanager
def _stderr_to(fd: int) -> Iterator[None]:
    saved = os.dup(2)
    os.dup2(fd, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


# ---------------------------------------------------------------- the benchmark


def run(records: int = 200_000, batch_rows: int = 20_000, repeat: int = 7, commit_rounds: int = 4,
        progress: Progress | None = None) -> BenchResult:
    progress = progress or NullProgress()
    size_topics = {size: f"bench-spark-rows-{size}" for size, _batches in COMMIT_COST_SIZES}
    outputs = [f"bench-spark-out-{r}-{g}" for r in range(repeat) for g in GUARANTEES]
    topics = {INPUT_TOPIC: PARTITIONS, **{t: PARTITIONS for t in size_topics.values()},
              **{f"{t}-out": PARTITIONS for t in size_topics.values()}, **{t: PARTITIONS for t in outputs},
              **{f"bench-spark-warm-up-{g}": PARTITIONS for g in GUARANTEES}}
    runs: dict[str, list[CopyRun]] = {g: [] for g in GUARANTEES}
    sized: dict[int, list[CopyRun]] = {size: [] for size, _batches in COMMIT_COST_SIZES}
    with bench_cluster(topics) as cluster, tempfile.TemporaryDirectory(prefix="txnsim-bench-spark-") as tmp:
        bs, workdir = cluster.bootstrap_servers, Path(tmp)
        progress.phase(f"filling input topics ({records:,} rows to copy, then the commit-cost topics)",
                       1 + len(COMMIT_COST_SIZES))
        fill(bs, INPUT_TOPIC, records)
        progress.advance()
        for size, batches in COMMIT_COST_SIZES:
            fill(bs, size_topics[size], size * batches)
            progress.advance()
        progress.phase(f"starting Spark ({MASTER}) and a warm-up copy of each guarantee", 1 + len(GUARANTEES))
        with spark_session(workdir) as spark:
            progress.advance()
            warm_size, warm_batches = COMMIT_COST_SIZES[0]
            for guarantee in GUARANTEES:  # Python workers started and modules imported before any clock
                copy(spark, bs, size_topics[warm_size], f"bench-spark-warm-up-{guarantee}", guarantee=guarantee,
                     batch_rows=warm_size, run_dir=workdir / f"warm-up-{guarantee}",
                     expected_rows=warm_size * warm_batches)
                progress.advance()
            progress.phase(f"copy throughput: {len(GUARANTEES)} guarantees x {repeat} rounds x {records:,} rows "
                           f"in batches of {batch_rows:,}", len(GUARANTEES) * repeat)
            for round_ in range(repeat):
                for guarantee in rotated(GUARANTEES, round_):
                    runs[guarantee].append(copy(spark, bs, INPUT_TOPIC, f"bench-spark-out-{round_}-{guarantee}",
                                                guarantee=guarantee, batch_rows=batch_rows,
                                                run_dir=workdir / f"copy-{round_}-{guarantee}", expected_rows=records))
                    progress.advance()
            progress.phase(f"commit time vs rows per batch: {len(COMMIT_COST_SIZES)} sizes x {commit_rounds} rounds",
                           len(COMMIT_COST_SIZES) * commit_rounds)
            for round_ in range(commit_rounds):
                for size, batches in rotated(COMMIT_COST_SIZES, round_):
                    sized[size].append(copy(spark, bs, size_topics[size], f"{size_topics[size]}-out",
                                            guarantee="exactly-once", batch_rows=size,
                                            run_dir=workdir / f"commit-cost-{size}-{round_}",
                                            expected_rows=size * batches))
                    progress.advance()
    return BenchResult("spark", (throughput_table(runs, records, batch_rows, repeat), commit_cost_table(sized)),
                       verdicts(runs, sized))


# ---------------------------------------------------------------- tables and targets


def throughput_table(runs: Mapping[str, Sequence[CopyRun]], records: int, batch_rows: int,
                     repeat: int) -> ResultTable:
    baseline = runs[BASELINE]
    rows = []
    for guarantee, guarantee_runs in runs.items():
        pairs = paired_ratios([r.rows_per_s for r in guarantee_runs], [r.rows_per_s for r in baseline])
        wall_pairs = paired_ratios([r.wall_rows_per_s for r in guarantee_runs],
                                   [r.wall_rows_per_s for r in baseline])
        commits = [c.commit_s for r in guarantee_runs for c in r.commits]
        rows.append((guarantee + (" (baseline)" if guarantee == BASELINE else ""),
                     format_count(median([r.rows_per_s for r in guarantee_runs])), format_ratio(median(pairs)),
                     "%.3f .. %.3f" % median_confidence_interval(pairs),
                     format_count(median([r.wall_rows_per_s for r in guarantee_runs])),
                     format_ratio(median(wall_pairs)),
                     str(round(median([r.batches for r in guarantee_runs]))),
                     format_ms(median([s for r in guarantee_runs for s in r.add_batch_s])),
                     format_ms(median(commits))))
    return ResultTable(
        f"Spark sink throughput: the copy query, {records:,} rows of 100-byte values (2 partitions), "
        f"maxOffsetsPerTrigger {batch_rows:,}, {MASTER}, median of {repeat} interleaved rounds",
        ("delivery.guarantee", "rows/s", "ratio to baseline", "95% CI of ratio", "rows/s (wall clock)",
         "ratio (wall clock)", "micro-batches", "addBatch p50 ms", "sink commit p50 ms"),
        tuple(rows),
        ("rows/s: input rows over the sum of the micro-batches' triggerExecution (query progress), i.e. over the "
         "time Spark spent processing batches, commits included; rows/s (wall clock) also counts query start-up "
         "and what Spark does between batches, about the same for both. Each round runs both guarantees once, in "
         "alternating order, into fresh output topics, in one SparkSession; the ratio is the median over the rounds "
         "of exactly-once's rate over at-least-once's in the same round, with a distribution-free 95% confidence "
         "interval. addBatch: Spark's time writing one micro-batch (the write tasks, then the commit); sink commit: "
         "the sink's StreamWriter.commit, timed inside Spark's commit process (at-least-once has nothing to "
         "commit).",), chart=THROUGHPUT_CHART)


def commit_cost_table(sized: Mapping[int, Sequence[CopyRun]]) -> ResultTable:
    base = median([c.commit_s for r in sized[min(sized)] for c in r.commits])
    rows = []
    for size, size_runs in sized.items():
        commits = [c for r in size_runs for c in r.commits]
        times = [c.commit_s for c in commits]
        rows.append((f"{size:,}", format_count(median([c.rows for c in commits])), str(len(commits)),
                     format_ms(median(times)), format_ms(percentile(times, 95)),
                     format_ratio(ratio(median(times), base)),
                     format_ms(median([s for r in size_runs for s in r.add_batch_s]))))
    return ResultTable(
        "Exactly-once commit time vs rows per micro-batch (2 partitions, 2 write tasks per batch)",
        ("maxOffsetsPerTrigger", "rows per batch", "batches", "commit p50 ms", "commit p95 ms", "p50 vs smallest",
         "addBatch p50 ms"),
        tuple(rows),
        ("commit: the sink's StreamWriter.commit for one micro-batch, timed inside the Python process where Spark "
         "calls it: a new cluster client finds the batch's coordinator, then EndBatchTxn names the tasks' producers "
         "as winners, is made durable at the coordinator and waits until the markers are written (the batch is "
         "readable on return). addBatch (query progress): the whole write of the batch, tasks and commit, for "
         "comparison. Each round runs one query per size, in rotated order.",), chart=COMMIT_COST_CHART)


def verdicts(runs: Mapping[str, Sequence[CopyRun]], sized: Mapping[int, Sequence[CopyRun]]) -> tuple[Verdict, ...]:
    pairs = paired_ratios([r.rows_per_s for r in runs["exactly-once"]], [r.rows_per_s for r in runs[BASELINE]])
    share, (low, high) = median(pairs), median_confidence_interval(pairs)
    smallest, largest = min(sized), max(sized)
    growth = ratio(median([c.commit_s for r in sized[largest] for c in r.commits]),
                   median([c.commit_s for r in sized[smallest] for c in r.commits]))
    return (
        Verdict(f"the exactly-once sink keeps at least {TARGET_SHARE:.0%} of the at-least-once rows/s",
                share >= TARGET_SHARE,
                f"median ratio {format_ratio(share)}, 95% CI {low:.3f} .. {high:.3f}, {len(pairs)} rounds"),
        Verdict(f"the per-batch commit time does not grow with rows (p50 at {largest:,} rows per batch within "
                f"{COMMIT_GROWTH_LIMIT}x of {smallest:,})", growth <= COMMIT_GROWTH_LIMIT, f"{growth:.2f}x"),
    )
