"""LogManager: opens the partition logs a node leads, under DATA/logs/<topic>-<partition>/.

Opening a log claims its next leader epoch (leader_epochs.py), and that claim, not a lock, is
what keeps two nodes from both writing it: the previous leader is fenced the moment the claim
exists. A claim is taken only when the previous leader is done with the log (it released it
cleanly, or it is this node's own earlier life) or when the caller says that leader may be
cut off (its node died or stopped answering); otherwise NOT_LEADER_OR_FOLLOWER, retry later.
The new epoch's first offset is recorded durably after recovery and before anything is written.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from partitions.leader_epochs import LeaderEpochs
from partitions.log import PartitionLog, wall_clock_ms
from partitions.model import LogConfig
from partitions.storage import FILE_STORAGE, Storage
from proto.errors import InvalidPartitionsError, KafkaError, KafkaStorageError, NotLeaderOrFollowerError
from proto.structs import validate_topic_name

logger = logging.getLogger(__name__)


def _never(_node_id: int) -> bool:
    return False


class LogManager:
    """The open logs of one node. Thread-safe; a log being recovered does not block other logs.

    `storage` and `now_ms` are handed to every log (a simulator gives each node its own disk and clock).
    """

    def __init__(self, root: Path, config: LogConfig = LogConfig(), internal_config: LogConfig | None = None,
                 node_id: int = 0, storage: Storage = FILE_STORAGE,
                 now_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.root = root
        self.storage = storage
        self.now_ms = now_ms
        self.config = config
        #: for internal topics (names starting with "__"), e.g. smaller segments
        self.internal_config = internal_config or config
        self.node_id = node_id
        self._lock = threading.Lock()
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        #: the inode of each open log's directory: a deleted topic's directory is gone or replaced
        self._inodes: dict[tuple[str, int], int] = {}
        self._opening: dict[tuple[str, int], threading.Lock] = {}
        #: logs whose acknowledged data is damaged (partitions/recovery_point.py): the error, and the inode of the
        #: directory it is about. Asked again, the same error, without claiming yet another epoch, until the
        #: node restarts (someone mended the files) or the directory is replaced (the topic was created again)
        self._damaged: dict[tuple[str, int], tuple[KafkaStorageError, int]] = {}
        #: told (topic, partition) once a log is closed here: released, fenced, or its topic deleted
        self._close_listeners: list[Callable[[str, int], None]] = []

    def on_close(self, listener: Callable[[str, int], None]) -> None:
        """Call `listener(topic, partition)` after each log this manager closes (requests waiting on it
        should hear that it is gone now rather than at their own deadline)."""
        self._close_listeners.append(listener)

    def _closed(self, topic: str, partition: int) -> None:
        for listener in self._close_listeners:
            listener(topic, partition)

    def log_dir(self, topic: str, partition: int) -> Path:
        return self.root / f"{topic}-{partition}"

    def open_as_leader(self, topic: str, partition: int,
                       may_cut_off: Callable[[int], bool] = _never) -> PartitionLog:
        """The log of topic-partition, opened at a newly claimed leader epoch (or the one already open here).

        If another node leads it and has not released it, `may_cut_off(node_id)` decides whether
        to take it over anyway (fencing that node) or to refuse with NOT_LEADER_OR_FOLLOWER.
        """
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
            self._check_not_damaged(key)
            try:
                log = self._claim_and_open(topic, partition, may_cut_off)
            except KafkaStorageError as error:
                with self._lock:
                    self._damaged[key] = (error, self._directory_id(self.log_dir(topic, partition)))
                raise
            finally:
                with self._lock:
                    self._opening.pop(key, None)
            with self._lock:
                self._logs[key] = log
                self._inodes[key] = self.storage.directory_id(log.directory)
            return log

    def _check_not_damaged(self, key: tuple[str, int]) -> None:
        with self._lock:
            damaged = self._damaged.get(key)
        if damaged is not None:
            if damaged[1] == self._directory_id(self.log_dir(*key)):
                raise damaged[0]
            with self._lock:
                self._damaged.pop(key, None)

    def _directory_id(self, directory: Path) -> int:
        try:
            return self.storage.directory_id(directory)
        except FileNotFoundError:
            return -1

    def _claim_and_open(self, topic: str, partition: int, may_cut_off: Callable[[int], bool]) -> PartitionLog:
        log_dir = self.log_dir(topic, partition)
        self.storage.mkdir(log_dir)
        epochs = LeaderEpochs(log_dir, self.storage)
        try:
            epochs.check_not_lost()
        except KafkaStorageError as error:
            logger.error("%s-%d: %s", topic, partition, error.message)
            raise
        latest = epochs.latest()
        if (latest is not None and not latest.released and latest.node_id != self.node_id
                and not may_cut_off(latest.node_id)):
            raise NotLeaderOrFollowerError(
                f"[NOT_LEADER_OR_FOLLOWER] {topic}-{partition} is still led by node {latest.node_id} "
                f"(epoch {latest.epoch}); retry once it lets go")
        epoch = epochs.claim(self.node_id, after=latest)
        config = self.internal_config if topic.startswith("__") else self.config
        try:
            epochs.void_unstarted(before=epoch)
            return PartitionLog.open(log_dir, topic, partition, leader_epoch=epoch, config=config, epochs=epochs,
                                     storage=self.storage, now_ms=self.now_ms)
        except BaseException:
            epochs.release(epoch)  # nothing was written at this epoch; the next opener need not wait
            raise

    def release_earlier_lives(self) -> list[str]:
        """Mark released every log whose newest claim is this node's from an earlier process.

        Call once at start-up, holding the node's lock (so that earlier process is surely dead):
        otherwise a log this node led before a crash, and that is now placed elsewhere, would
        wait forever for a release only a process that no longer exists could give.
        """
        released = []
        names = self.storage.list_dir(self.root) if self.storage.is_dir(self.root) else []
        for log_dir in (self.root / name for name in names):
            if log_dir.name.startswith("."):  # a deleted topic's directory on its way out
                continue
            epochs = LeaderEpochs(log_dir, self.storage)
            latest = epochs.latest() if self.storage.is_dir(log_dir) else None
            if latest is not None and latest.node_id == self.node_id and not latest.released:
                epochs.release(latest.epoch)
                released.append(log_dir.name)
        return released

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        """The open log, or None; a log whose directory was removed meanwhile (its topic was deleted while
        this node could not be told, e.g. paused) is forgotten, so a topic created again opens afresh."""
        key = (topic, partition)
        with self._lock:
            log = self._logs.get(key)
            if log is None:
                return None
            try:
                same = self.storage.directory_id(log.directory) == self._inodes.get(key)
            except FileNotFoundError:
                same = False
            if same:
                return log
            self._logs.pop(key, None)
            self._inodes.pop(key, None)
        self._close_quietly(log)
        return None

    def forget(self, topic: str, partition: int) -> None:
        """Close the log of a deleted topic if it is open here; nothing is released, the directory goes."""
        with self._lock:
            log = self._logs.pop((topic, partition), None)
            self._inodes.pop((topic, partition), None)
        if log is not None:
            self._close_quietly(log)
            self._closed(topic, partition)

    @staticmethod
    def _close_quietly(log: PartitionLog) -> None:
        try:
            log.close()
        except (KafkaError, OSError) as error:  # its data is being deleted: nothing left to protect
            logger.info("closing %s-%d of a deleted topic: %s", log.topic, log.partition, error)

    def open_logs(self) -> list[PartitionLog]:
        with self._lock:
            return list(self._logs.values())

    def close(self, topic: str, partition: int) -> None:
        """Close the log and hand its leadership back (only after everything written is durable)."""
        with self._lock:
            log = self._logs.pop((topic, partition), None)
            self._inodes.pop((topic, partition), None)
        if log is None:
            return
        try:
            log.close()
        finally:  # even if the last fsync failed: keeping the claim would only block the next leader
            if not log.fenced:
                LeaderEpochs(log.directory, self.storage).release(log.leader_epoch)
            self._closed(topic, partition)

    def close_all(self) -> None:
        with self._lock:
            keys = list(self._logs)
        for topic, partition in keys:
            self.close(topic, partition)

