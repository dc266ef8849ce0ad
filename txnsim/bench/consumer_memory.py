"""Memory of a read_committed consumer sitting behind a transaction left open while many records are written
after it: its process's RSS, sampled as the records pile up. Kafka's design (and txnsim's, see
docs/architecture.md) keeps undecided records on the node: the last stable offset stops at the open
transaction's first record, fetches return nothing past it, so the consumer buffers nothing and its memory
stays flat however much waits behind. A consumer that fetched and held undecided records would grow with
them.

The consumer runs in a process of its own (spawned: a fresh interpreter) so that its RSS is its own, not the
producers'.
"""
from __future__ import annotations

import multiprocessing
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection

from consumer import Consumer
from producer import Producer
from proto.structs import TopicPartition
from txnsim.bench.chart_spec import Sweep
from txnsim.bench.harness import Progress
from txnsim.bench.proc_stats import process_rss_bytes
from txnsim.bench.report import ResultTable, Verdict, format_count

TOPIC = "bench-consume-behind"
PARTITIONS = 3
VALUE = b"b" * 100
OPEN_TXN_RECORDS_PER_PARTITION = 10
#: records written behind the open transaction, in this many flushed chunks (one RSS sample after each)
BEHIND_RECORDS, CHUNKS = 200_000, 10
#: the chunks are paced at least this far apart, so the samples span several seconds of polling
CHUNK_PERIOD_S = 0.5
#: "flat": the RSS may grow by at most this much from the first sample to the largest
FLAT_LIMIT_BYTES = 8 * 1024 * 1024
START_TIMEOUT_S = 60.0
MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Sample:
    behind: int
    seconds: float
    rss_bytes: int


def poll_behind(bootstrap_servers: str, conn: Connection) -> None:
    """The consumer process: read_committed from the start of every partition, polling until told to stop;
    reports, once it has polled, and at the end how many records it was handed."""
    returned = 0
    with Consumer(bootstrap_servers=bootstrap_servers, isolation_level="read_committed",
                  auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        returned += sum(len(r) for r in consumer.poll(timeout_ms=500).values())
        conn.send("polling")
        while not conn.poll():
            returned += sum(len(r) for r in consumer.poll(timeout_ms=100).values())
    conn.recv()
    conn.send(returned)


def measure(bootstrap_servers: str, progress: Progress,
            behind_records: int = BEHIND_RECORDS) -> tuple[list[Sample], int]:
    """(RSS samples as records pile up behind the open transaction, records the consumer was handed)."""
    progress.phase(f"read_committed consumer behind an open transaction: {behind_records:,} records written "
                   f"after it", CHUNKS + 1)
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    with Producer(bootstrap_servers=bootstrap_servers, transactional_id="bench-left-open",
                  transaction_timeout_ms=600_000) as open_txn, Producer(bootstrap_servers=bootstrap_servers) as writer:
        open_txn.init_transactions()
        open_txn.begin_transaction()
        for p in range(PARTITIONS):
            for _ in range(OPEN_TXN_RECORDS_PER_PARTITION):
                open_txn.send(TOPIC, value=VALUE, partition=p)
        open_txn.flush()  # in the log, undecided: the LSO stops here
        process = context.Process(target=poll_behind, args=(bootstrap_servers, theirs), daemon=True)
        process.start()
        try:
            if not ours.poll(START_TIMEOUT_S) or ours.recv() != "polling":
                raise TimeoutError(f"the consumer process did not poll within {START_TIMEOUT_S:.0f} s")
            assert process.pid is not None
            start = time.monotonic()
            samples = [Sample(0, 0.0, process_rss_bytes(process.pid))]
            progress.advance()
            per_chunk = behind_records // CHUNKS
            for chunk in range(CHUNKS):
                for i in range(per_chunk):
                    writer.send(TOPIC, value=VALUE, partition=i % PARTITIONS)
                writer.flush()
                time.sleep(max(0.0, start + (chunk + 1) * CHUNK_PERIOD_S - time.monotonic()))  # pacing, not a wait
                samples.append(Sample((chunk + 1) * per_chunk, time.monotonic() - start,
                                      process_rss_bytes(process.pid)))
                progress.advance()
            ours.send("stop")
            if not ours.poll(START_TIMEOUT_S):
                raise TimeoutError(f"the consumer process did not stop within {START_TIMEOUT_S:.0f} s")
            returned: int = ours.recv()
        finally:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
        open_txn.abort_transaction()
    return samples, returned


#: the table's chart (`txnsim bench --plot`): flat is the finding
MEMORY_CHART = Sweep("their values MiB", ("consumer RSS MiB",), x_label="MiB of records written behind the open "
                     "transaction", value_label="consumer RSS (MiB)")


def memory_table(samples: list[Sample]) -> ResultTable:
    first = samples[0].rss_bytes
    rows = tuple((format_count(s.behind), f"{s.behind * len(VALUE) / MiB:.1f}", f"{s.seconds:.1f}",
                  f"{s.rss_bytes / MiB:.1f}", f"{(s.rss_bytes - first) / MiB:+.1f}") for s in samples)
    return ResultTable(
        f"Memory of a read_committed consumer behind a transaction left open ({PARTITIONS} partitions, "
        f"{OPEN_TXN_RECORDS_PER_PARTITION} undecided records at the head of each)",
        ("records written behind it", "their values MiB", "seconds", "consumer RSS MiB", "RSS vs first sample MiB"),
        rows,
        ("The consumer is a fresh process polling in a loop (read_committed, from offset 0, default fetch "
         "sizes); an idempotent producer in this process writes records after the open transaction in "
         f"{CHUNKS} flushed chunks, and the consumer process's RSS (VmRSS from /proc) is read after each.",),
        chart=MEMORY_CHART)


def verdicts(samples: list[Sample], returned: int) -> tuple[Verdict, ...]:
    growth = max(s.rss_bytes for s in samples) - samples[0].rss_bytes
    return (
        Verdict(f"a read_committed consumer's memory stays flat behind an open transaction (RSS grows by at most "
                f"{FLAT_LIMIT_BYTES / MiB:.0f} MiB)", growth <= FLAT_LIMIT_BYTES,
                f"+{growth / MiB:.1f} MiB while {samples[-1].behind * len(VALUE) / MiB:.0f} MiB of values were "
                f"written behind it"),
        Verdict("nothing behind the open transaction is handed out", returned == 0, f"{returned:,} records returned"),
    )
