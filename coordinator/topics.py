"""The cluster's topics: one small JSON file in the shared data directory.

Each topic maps to its partition count, or, with settings, to {"partitions": N, "configs": {...}}
(every setting a topic may have is in coordinator/topic_configs.py).

Any node may create or delete a topic; an exclusive flock serialises writers and an atomic rename
means readers never see half a file. Readers cache by modification time, so a topic created or
deleted through one node is seen by every node at its next lookup. Invariant: a topic created
starts with empty logs, so creating a name removes any log directories a deletion left behind.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple, NotRequired, Protocol, TypedDict

from coordinator.layout import write_atomically
from coordinator.topic_configs import TOPIC_CONFIGS, check_configs
from proto.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    KafkaStorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from proto.structs import INTERNAL_TOPICS, MAX_PARTITIONS_PER_TOPIC, validate_topic_name

log = logging.getLogger(__name__)


class TopicEntry(TypedDict):
    """A topic with settings of its own, in topics.json (a topic without any is just its partition count)."""
    partitions: int
    configs: NotRequired[dict[str, str]]


#: topics.json: topic -> its partition count, or its entry when it has settings
TopicsFile = dict[str, int | TopicEntry]

class TopicCatalog(Protocol):
    """The cluster's topics as nodes serve them: topics.json here (TopicStore), the coordination store on a
    replicated cluster (coordinator/controller/store_topics.py)."""

    def all(self) -> dict[str, int]: ...
    def partitions(self, topic: str) -> int | None: ...
    def configs(self, topic: str) -> dict[str, str]: ...
    def configs_view(self, topic: str) -> Mapping[str, str]: ...
    def validate(self, name: str, partitions: int, configs: dict[str, str] | None = None,
                 replication_factor: int = -1) -> dict[str, str]: ...
    def create(self, name: str, partitions: int, configs: dict[str, str] | None = None,
               replication_factor: int = -1) -> int: ...
    def delete(self, name: str) -> int: ...
    def alter(self, name: str, partitions: int, set_configs: dict[str, str], delete_configs: list[str]
              ) -> tuple[int, dict[str, str]]: ...
    def replace_configs(self, name: str, configs: dict[str, str], *, validate_only: bool = False
                        ) -> dict[str, str]: ...
    def remove_logs_if_deleted(self, name: str) -> list[str]: ...


def _check_changeable(names: set[str]) -> None:
    fixed = sorted(name for name in names if name in TOPIC_CONFIGS and TOPIC_CONFIGS[name].fixed_after_create)
    if fixed:
        raise InvalidConfigError(f"[INVALID_CONFIG] {', '.join(fixed)} is chosen when a topic is created and cannot "
                                 "change (undecided messages wait where they were sent)")


def check_alterable(name: str) -> None:
    """INVALID_TOPIC_EXCEPTION for the cluster's own topics, which clients may not change."""
    if name in INTERNAL_TOPICS or name.startswith("__"):
        raise InvalidTopicError(f"[INVALID_TOPIC_EXCEPTION] internal topic {name!r} cannot be altered")


def check_changes(set_configs: dict[str, str], delete_configs: list[str]) -> dict[str, str]:
    """IncrementalAlterConfigs' SET and DELETE, checked (settings fixed at creation, unknown names, bad values):
    the settings to set."""
    _check_changeable(set(set_configs) | set(delete_configs))
    for key in delete_configs:
        if key not in TOPIC_CONFIGS:
            raise InvalidConfigError(f"[INVALID_CONFIG] unknown topic config name: {key}")
    return check_configs(set_configs)


def with_changes(current: Mapping[str, str], set_configs: dict[str, str],
                 delete_configs: list[str]) -> dict[str, str]:
    """`current` with `set_configs` set and `delete_configs` removed."""
    changed = {**current, **set_configs}
    for key in delete_configs:
        changed.pop(key, None)
    return changed


def check_replacement(old: Mapping[str, str], new: Mapping[str, str]) -> None:
    """AlterConfigs replacing `old` with `new`: every setting fixed at creation keeps its value."""
    _check_changeable({key for key in set(old) | set(new) if old.get(key) != new.get(key)})


def check_new_topic(name: str, partitions: int, configs: dict[str, str] | None = None) -> dict[str, str]:
    """What any new topic must be, wherever topics are kept: a legal name outside the internal ones, a
    partition count within bounds; returns its settings, checked."""
    validate_topic_name(name)
    if name in INTERNAL_TOPICS or name.startswith("__"):
        raise InvalidTopicError(f"topic names starting with '__' are reserved for internal topics: {name!r}")
    if not 1 <= partitions <= MAX_PARTITIONS_PER_TOPIC:
        raise InvalidPartitionsError(f"a topic needs 1..{MAX_PARTITIONS_PER_TOPIC} partitions, not {partitions}")
    return check_configs(configs or {})


def remove_log_dirs(logs_dir: Path, topic: str) -> list[str]:
    """Remove every `<topic>-<partition>` log directory under `logs_dir`; returns their names.

    Each is first renamed out of the way (atomic), so a crash midway leaves no half-deleted log under
    its real name; directories left renamed are removed by the next call for any topic.
    """
    if not logs_dir.is_dir():
        return []
    pattern = re.compile(re.escape(topic) + r"-\d+")
    removed = []
    for entry in sorted(logs_dir.iterdir()):
        if entry.is_dir() and pattern.fullmatch(entry.name):
            doomed = logs_dir / f".deleted-{entry.name}-{time.time_ns()}"
            os.rename(entry, doomed)
            removed.append(entry.name)
    for entry in logs_dir.iterdir():
        if entry.name.startswith(".deleted-"):
            shutil.rmtree(entry, ignore_errors=True)
    if removed:
        fd = os.open(logs_dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return removed


_NO_CONFIGS: Mapping[str, str] = MappingProxyType({})


class _TopicsRead(NamedTuple):
    key: tuple[int, int, int] | None  # the file's (inode, mtime_ns, size) when read; None: no file
    counts: dict[str, int]
    configs: dict[str, dict[str, str]]


class TopicStore:
    def __init__(self, metadata_dir: Path, logs_dir: Path | None = None) -> None:
        self._path = metadata_dir / "topics.json"
        #: where partition logs live, so that creating a topic can clear what a deletion left behind
        self._logs_dir = logs_dir
        self._lock_path = metadata_dir / "topics.lock"
        self._lock = threading.Lock()
        #: the file as last read, replaced whole (one attribute, so a reader without the lock sees one version)
        self._read = _TopicsRead(None, {}, {})
        self._reported_lost = False

    def _stat_key(self) -> tuple[int, int, int] | None:
        """What tells one version of the file from another: every write renames a new file into place, so its
        inode differs even when two writes in one timestamp tick leave the same size."""
        try:
            st = os.stat(self._path)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def _current(self) -> _TopicsRead:
        """The table, re-read only when the file changed (a stat per call, no lock while it has not: this is
        asked on every produce, marker and add)."""
        read = self._read
        if self._stat_key() == read.key:
            if read.key is None:
                self._check_not_lost()
            return read
        with self._lock:
            key = self._stat_key()
            if key is None:
                self._check_not_lost()
            if key != self._read.key:
                counts: dict[str, int] = {}
                configs: dict[str, dict[str, str]] = {}
                if key is not None:
                    for name, entry in json.loads(self._path.read_text()).items():
                        if isinstance(entry, dict):
                            counts[str(name)] = int(entry["partitions"])
                            configs[str(name)] = {str(k): str(v) for k, v in entry.get("configs", {}).items()}
                        else:
                            counts[str(name)] = int(entry)
                self._read = _TopicsRead(key, counts, configs)
            return self._read

    def all(self) -> dict[str, int]:
        """topic -> partition count."""
        return dict(self._current().counts)

    def partitions(self, topic: str) -> int | None:
        """One topic's partition count (no copy of the whole table)."""
        return self._current().counts.get(topic)

    def configs_view(self, topic: str) -> Mapping[str, str]:
        """The topic's own settings without a copy (read them, never change them): asked on every produce."""
        return self._current().configs.get(topic, _NO_CONFIGS)

    def configs(self, topic: str) -> dict[str, str]:
        """The topic's own settings (empty for none, or for a topic that does not exist)."""
        return dict(self._current().configs.get(topic, {}))

    def validate(self, name: str, partitions: int, configs: dict[str, str] | None = None,
                 replication_factor: int = -1) -> dict[str, str]:
        """Check a topic could be created as asked (TOPIC_ALREADY_EXISTS included); its settings, checked.
        `replication_factor`: 1 or -1 (the default); every log of a shared directory exists once."""
        if replication_factor not in (1, -1):
            raise InvalidReplicationFactorError(
                f"[INVALID_REPLICATION_FACTOR] a cluster on one shared directory keeps one copy of each partition; "
                f"replication factor {replication_factor} needs a replicated cluster (LocalCluster(replicated=True), "
                "or nodes started with --zookeeper)")
        settings = check_new_topic(name, partitions, configs)
        if name in self.all():
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        return settings

    def create(self, name: str, partitions: int, configs: dict[str, str] | None = None,
               replication_factor: int = -1) -> int:
        """`replication_factor`: as `validate` takes it. Returns the copies of each partition: 1."""
        settings = self.validate(name, partitions, configs, replication_factor)
        with self._locked() as current:
            if name in current:
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            if self._logs_dir is not None:  # what a deletion interrupted by a crash left behind
                remove_log_dirs(self._logs_dir, name)
            current[name] = {"partitions": partitions, "configs": settings} if settings else partitions
            write_atomically(self._path, json.dumps(current, indent=1, sort_keys=True).encode())
        return 1

    def delete(self, name: str) -> int:
        """Remove the topic from the cluster's topics, durably; returns how many partitions it had.

        The logs stay on disk until the caller removed them (`remove_log_dirs`, once no node has them
        open); a crash before that leaves them to the next creation of the name, which clears them.
        """
        if name in INTERNAL_TOPICS or name.startswith("__"):
            raise InvalidTopicError(f"[INVALID_TOPIC_EXCEPTION] internal topic {name!r} cannot be deleted")
        with self._locked() as current:
            entry = current.pop(name, None)
            if entry is None:
                raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] topic {name!r} does not exist")
            write_atomically(self._path, json.dumps(current, indent=1, sort_keys=True).encode())
        return int(entry["partitions"]) if isinstance(entry, dict) else int(entry)

    def alter(self, name: str, partitions: int, set_configs: dict[str, str], delete_configs: list[str]
              ) -> tuple[int, dict[str, str]]:
        """More partitions (0: as many as now) and changed settings, durably; returns (partitions, settings).

        Existing partitions keep their place and their logs (placement is per partition), so adding some
        moves nothing. half.message.storage stays as created: undecided messages wait where they were sent.
        """
        check_alterable(name)
        set_configs = check_changes(set_configs, delete_configs)
        with self._locked() as current:
            entry = current.get(name)
            if entry is None:
                raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] topic {name!r} does not exist")
            count = int(entry["partitions"]) if isinstance(entry, dict) else int(entry)
            configs = dict(entry.get("configs", {})) if isinstance(entry, dict) else {}
            if partitions and not count < partitions <= MAX_PARTITIONS_PER_TOPIC:
                raise InvalidPartitionsError(
                    f"[INVALID_PARTITIONS] topic {name!r} has {count} partitions; it can only grow, to at most "
                    f"{MAX_PARTITIONS_PER_TOPIC}, not to {partitions}")
            count = partitions or count
            configs = with_changes(configs, set_configs, delete_configs)
            current[name] = {"partitions": count, "configs": configs} if configs else count
            write_atomically(self._path, json.dumps(current, indent=1, sort_keys=True).encode())
        return count, configs

    def replace_configs(self, name: str, configs: dict[str, str], *, validate_only: bool = False) -> dict[str, str]:
        """Kafka's AlterConfigs: the topic's settings become exactly `configs` (those not named return to their
        defaults), durably; returns them. Settings fixed at creation must keep their values."""
        check_alterable(name)
        settings = check_configs(configs)
        with self._locked() as current:
            entry = current.get(name)
            if entry is None:
                raise UnknownTopicOrPartitionError(f"[UNKNOWN_TOPIC_OR_PARTITION] topic {name!r} does not exist")
            count = int(entry["partitions"]) if isinstance(entry, dict) else int(entry)
            old = dict(entry.get("configs", {})) if isinstance(entry, dict) else {}
            check_replacement(old, settings)
            if not validate_only:
                current[name] = {"partitions": count, "configs": settings} if settings else count
                write_atomically(self._path, json.dumps(current, indent=1, sort_keys=True).encode())
        return settings

    def remove_logs_if_deleted(self, name: str) -> list[str]:
        """Remove the log directories of a deleted topic, under the writers' flock and only while the name is
        still unused: a topic created again meanwhile keeps its new logs. Returns the directories removed."""
        if self._logs_dir is None:
            return []
        with self._locked() as current:
            return [] if name in current else remove_log_dirs(self._logs_dir, name)

    def _check_not_lost(self) -> None:
        """KAFKA_STORAGE_ERROR while topics.json is missing beside the logs of topics it must have listed: every
        topic would look unknown, and creating one again would clear its surviving logs."""
        orphaned = self._topics_with_logs()
        if not orphaned:
            return
        error = KafkaStorageError(
            f"[KAFKA_STORAGE_ERROR] {self._path} is missing, but {self._logs_dir} holds the logs of "
            f"{len(orphaned)} topic(s) ({', '.join(orphaned[:5])}{', ...' if len(orphaned) > 5 else ''}): every "
            f"topic would look unknown. Restore the file (it maps each topic to its partition count, e.g. "
            f'{{"{orphaned[0]}": 3}}) and the node serves them again')
        if not self._reported_lost:
            self._reported_lost = True
            log.error("%s", error.message)
        raise error

    def _topics_with_logs(self) -> list[str]:
        """Topics (not internal ones) whose partition logs lie under the logs directory."""
        if self._logs_dir is None or not self._logs_dir.is_dir():
            return []
        found = set()
        for entry in self._logs_dir.iterdir():
            topic, dash, partition = entry.name.rpartition("-")
            if (dash and partition.isdigit() and not entry.name.startswith(".") and topic not in INTERNAL_TOPICS
                    and not topic.startswith("__") and entry.is_dir()):
                found.add(topic)
        return sorted(found)

    @contextmanager
    def _locked(self) -> Iterator[TopicsFile]:
        """The topics file's current content, under the writers' flock."""
        with open(self._lock_path, "a+") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                if not self._path.exists():
                    self._check_not_lost()
                yield json.loads(self._path.read_text()) if self._path.exists() else {}
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)
