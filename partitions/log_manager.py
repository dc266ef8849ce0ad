"""LogManager: opens the partition logs a node leads, under DATA/logs/<topic>-<partition>/.

Owns the leader-epoch file of each log. Invariants: a log is open in at most one process,
because opening it takes an exclusive flock on its owner.lock, held until close (the kernel
drops it when the process dies, however it dies); and every open_as_leader() durably writes an
epoch one higher than any before it (temp file, fsync, rename, fsync the directory) before the
log is opened, so batches written under two leaderships never share an epoch.
"""
from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from partitions.log import PartitionLog
from partitions.model import LogConfig
from partitions.segment import fsync_directory
from proto.errors import InvalidPartitionsError, KafkaStorageError, NotLeaderOrFollowerError
from proto.structs import validate_topic_name

LEADER_EPOCH_FILE = "leader-epoch"
OWNER_LOCK_FILE = "owner.lock"


def read_leader_epoch(log_dir: Path) -> int:
    """The last leader epoch written in `log_dir`, -1 if none."""
    path = log_dir / LEADER_EPOCH_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return -1
    try:
        return int(text.strip())
    except ValueError:
        raise KafkaStorageError(f"{path} holds {text!r}, not a leader epoch; fix or remove it") from None


def write_leader_epoch(log_dir: Path, epoch: int) -> None:
    path = log_dir / LEADER_EPOCH_FILE
    tmp = log_dir / f"{LEADER_EPOCH_FILE}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, f"{epoch}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(log_dir)


class LogManager:
    """The open logs of one node. Thread-safe; a log being recovered does not block other logs."""

    def __init__(self, root: Path, config: LogConfig = LogConfig(), internal_config: LogConfig | None = None) -> None:
        self.root = root
        self.config = config
        #: for internal topics (names starting with "__"), e.g. smaller segments
        self.internal_config = internal_config or config
        self._lock = threading.Lock()
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._opening: dict[tuple[str, int], threading.Lock] = {}
        self._owner_locks: dict[tuple[str, int], int] = {}

    def log_dir(self, topic: str, partition: int) -> Path:
        return self.root / f"{topic}-{partition}"

    def open_as_leader(self, topic: str, partition: int) -> PartitionLog:
        """The log of topic-partition, opened at the next leader epoch (or the one already open here)."""
        validate_topic_name(topic)
        if partition < 0:
            raise InvalidPartitionsError(f"partition {partition} of {topic!r} is negative")
        key = (topic, partition)
        with self._lock:
            if key in self._logs:
                return self._logs[key]
            opening = self._opening.setdefault(key, threading.Lock())
        with opening:
            with self._lock:
                if key in self._logs:
                    return self._logs[key]
            log_dir = self.log_dir(topic, partition)
            log_dir.mkdir(parents=True, exist_ok=True)
            lock_fd = _take_owner_lock(log_dir, topic, partition)
            try:
                epoch = read_leader_epoch(log_dir) + 1
                write_leader_epoch(log_dir, epoch)
                config = self.internal_config if topic.startswith("__") else self.config
                log = PartitionLog.open(log_dir, topic, partition, leader_epoch=epoch, config=config)
            except BaseException:
                os.close(lock_fd)
                raise
            with self._lock:
                self._logs[key] = log
                self._owner_locks[key] = lock_fd
                self._opening.pop(key, None)
            return log

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        with self._lock:
            return self._logs.get((topic, partition))

    def open_logs(self) -> list[PartitionLog]:
        with self._lock:
            return list(self._logs.values())

    def close(self, topic: str, partition: int) -> None:
        """Close the log and give up its ownership (only after everything written is durable)."""
        with self._lock:
            log = self._logs.pop((topic, partition), None)
            lock_fd = self._owner_locks.pop((topic, partition), None)
        try:
            if log is not None:
                log.close()
        finally:
            if lock_fd is not None:
                os.close(lock_fd)

    def close_all(self) -> None:
        with self._lock:
            keys = list(self._logs)
        for topic, partition in keys:
            self.close(topic, partition)


def _take_owner_lock(log_dir: Path, topic: str, partition: int) -> int:
    """The exclusive flock that makes this process the log's only writer, or NOT_LEADER_OR_FOLLOWER."""
    fd = os.open(log_dir / OWNER_LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise NotLeaderOrFollowerError(
            f"[NOT_LEADER_OR_FOLLOWER] {topic}-{partition} is still open in another node; retry") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd
