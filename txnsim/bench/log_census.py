"""What a run cost on disk, counted from the outside: record batches per log in the segment files, and
fsyncs seen by strace (the parsing is pure; strace is optional: without it the fsync columns read n/a).
Used by `txnsim bench rocketmq` to say how many log writes and fsyncs one message costs in each design."""
from __future__ import annotations

import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from partitions.segment import segment_files
from proto.errors import CorruptMessageError
from proto.records import HEADER_SIZE, read_header
from proto.structs import CHECK_MAX_TOPIC, HALF_TOPIC, OP_HALF_TOPIC, TRANSACTION_STATE_TOPIC

# the logs a message can cost a batch in (columns of the log-writes table, in this order)
HALF, OP, DATA, MARKERS, TXN_STATE, OTHER = ("half log", "OP log", "data partition", "markers",
                                             "__transaction_state", "other")
LOGS = (HALF, OP, DATA, MARKERS, TXN_STATE, OTHER)


# ------------------------------------------------------------ counting batches on disk (pure)

@dataclass(frozen=True, slots=True)
class BatchCount:
    """Whole batches in (part of) a segment file: record batches and control batches (markers)."""

    data: int = 0
    control: int = 0
    data_bytes: int = 0
    control_bytes: int = 0

    def __add__(self, other: BatchCount) -> BatchCount:
        return BatchCount(self.data + other.data, self.control + other.control,
                          self.data_bytes + other.data_bytes, self.control_bytes + other.control_bytes)


def count_batches(data: bytes) -> tuple[BatchCount, int]:
    """The whole batches at the start of `data` and the bytes they span; a batch still being written at
    the end is left for the next look."""
    pos, count = 0, BatchCount()
    while len(data) - pos >= HEADER_SIZE:
        try:
            header = read_header(data, pos)
        except CorruptMessageError:
            break
        if pos + header.size > len(data):
            break
        count += (BatchCount(control=1, control_bytes=header.size) if header.is_control
                  else BatchCount(data=1, data_bytes=header.size))
        pos += header.size
    return count, pos


def log_of(directory_name: str) -> str:
    """Which column a log's batches count in, from its directory name `<topic>-<partition>`."""
    topic = directory_name.rpartition("-")[0]
    return {HALF_TOPIC: HALF, OP_HALF_TOPIC: OP, TRANSACTION_STATE_TOPIC: TXN_STATE,
            CHECK_MAX_TOPIC: OTHER}.get(topic, OTHER if topic.startswith("__") else DATA)


@dataclass(frozen=True, slots=True)
class Census:
    """Batches and bytes appended so far, by column of LOGS (control batches count as MARKERS)."""

    batches: Counter[str]
    bytes: Counter[str]


class LogCensus:
    """What has been appended to every log under a data directory's logs/; segment files are read on
    from where the previous look stopped."""

    def __init__(self, logs_dir: Path) -> None:
        self._logs_dir = logs_dir
        self._read: dict[Path, tuple[int, BatchCount]] = {}

    def take(self) -> Census:
        for directory in self._logs_dir.iterdir() if self._logs_dir.is_dir() else ():
            for _base, _epoch, path in segment_files(directory):
                position, seen = self._read.get(path, (0, BatchCount()))
                try:
                    with path.open("rb") as f:
                        f.seek(position)
                        count, length = count_batches(f.read())
                except FileNotFoundError:
                    continue  # deleted below a coordinator's snapshot: what was read of it stays counted
                self._read[path] = (position + length, seen + count)
        batches: Counter[str] = Counter()
        sizes: Counter[str] = Counter()
        for path, (_position, seen) in self._read.items():
            log = log_of(path.parent.name)
            batches[log] += seen.data
            batches[MARKERS] += seen.control
            sizes[log] += seen.data_bytes
            sizes[MARKERS] += seen.control_bytes
        return Census(batches, sizes)


def per_message(before: Counter[str], after: Counter[str], messages: int) -> dict[str, float]:
    """What was appended between two censuses, per message, for every column of LOGS."""
    return {log: (after[log] - before[log]) / messages if messages else 0.0 for log in LOGS}


# ------------------------------------------------------------ fsyncs, seen by strace (parsing is pure)

_CALL = re.compile(r"^(?P<pid>\d+)\s+f(?:data)?sync\(\d+<(?P<path>[^>]*)>\)?(?P<rest>.*)$")
_RESUMED = re.compile(r"^(?P<pid>\d+)\s+<\.\.\. f(?:data)?sync resumed>(?P<rest>.*)$")
_DURATION = re.compile(r"<(\d+\.\d+)>\s*$")


@dataclass(frozen=True, slots=True)
class Fsync:
    path: str
    seconds: float


def parse_fsyncs(text: str) -> list[Fsync]:
    """Every fsync and fdatasync in `strace -f -T -y -o` output, with its file and duration (a call
    another thread interrupted is joined with its `resumed` line)."""
    calls, unfinished = [], {}
    for line in text.splitlines():
        if match := _CALL.match(line):
            duration = _DURATION.search(match["rest"])
            if "<unfinished" in match["rest"]:
                unfinished[match["pid"]] = match["path"]
            else:
                calls.append(Fsync(match["path"], float(duration[1]) if duration else 0.0))
        elif (match := _RESUMED.match(line)) and match["pid"] in unfinished:
            duration = _DURATION.search(match["rest"])
            calls.append(Fsync(unfinished.pop(match["pid"]), float(duration[1]) if duration else 0.0))
    return calls + [Fsync(path, 0.0) for path in unfinished.values()]


class FsyncTrace:
    """strace on the node processes while a block runs: `.fsyncs` afterwards, None if strace could not
    attach (not installed, or ptrace not allowed). strace stops every system call it traces, so the
    nodes run slower meanwhile: only counts are taken under it, never times of the workload."""

    def __init__(self, pids: Sequence[int], workdir: Path) -> None:
        self._pids = pids
        self._out, self._err = workdir / "strace.out", workdir / "strace.err"
        self._proc: subprocess.Popen[bytes] | None = None
        self.fsyncs: list[Fsync] | None = None

    def __enter__(self) -> FsyncTrace:
        command = ["strace", "-f", "-T", "-y", "-e", "trace=fsync,fdatasync", "-o", str(self._out)]
        for pid in self._pids:
            command += ["-p", str(pid)]
        try:
            with self._err.open("w") as err:
                self._proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
        except OSError:  # no strace here
            return self
        deadline = time.monotonic() + 10
        while self._err.read_text().count(" attached") < len(self._pids):  # strace says so per process
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self._stop()
                return self
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._stop()
            self.fsyncs = parse_fsyncs(self._out.read_text()) if self._out.exists() else None

    def _stop(self) -> None:
        assert self._proc is not None
        self._proc.send_signal(signal.SIGINT)  # detaches from the nodes, which run on
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def cpu_seconds_from_stat(text: str, ticks_per_second: int) -> float:
    """User + system CPU-seconds of a process from the text of its /proc/PID/stat."""
    fields = text.rpartition(")")[2].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / ticks_per_second
