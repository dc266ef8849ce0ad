"""The cluster's topics: one small JSON file in the shared data directory.

Each topic maps to its partition count, or, with settings, to {"partitions": N, "configs": {...}}
(the settings are in TOPIC_CONFIGS).

Any node may create a topic; an exclusive flock serialises writers and an atomic rename means
readers never see half a file. Readers cache by modification time, so a topic created
through one node is served by every node at its next lookup.
"""
from __future__ import annotations

import fcntl
import json
import os
import threading
from pathlib import Path

from coordinator.layout import write_atomically
from proto.errors import InvalidConfigError, InvalidPartitionsError, InvalidTopicError, TopicAlreadyExistsError
from proto.structs import INTERNAL_TOPICS, MAX_PARTITIONS_PER_TOPIC, validate_topic_name


#: the settings a topic may have, with the values each accepts
TOPIC_CONFIGS: dict[str, frozenset[str]] = {
    # RocketMQ 5's topic message type: which messages its queues accept (MIXED: all of them)
    "message.type": frozenset({"NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"}),
    # how an undecided transactional message waits (docs/rocketmq-transactions.md)
    "half.message.storage": frozenset({"rocketmq", "kafka"}),
}


def validate_configs(configs: dict[str, str]) -> dict[str, str]:
    for name, value in configs.items():
        allowed = TOPIC_CONFIGS.get(name)
        if allowed is None:
            raise InvalidConfigError(f"[INVALID_CONFIG] unknown topic setting {name!r}; known: {', '.join(TOPIC_CONFIGS)}")
        if value not in allowed:
            raise InvalidConfigError(
                f"[INVALID_CONFIG] topic setting {name} must be one of {', '.join(sorted(allowed))}, not {value!r}")
    return dict(configs)


class TopicStore:
    def __init__(self, metadata_dir: Path) -> None:
        self._path = metadata_dir / "topics.json"
        self._lock_path = metadata_dir / "topics.lock"
        self._lock = threading.Lock()
        self._cache: dict[str, int] = {}
        self._configs: dict[str, dict[str, str]] = {}
        self._cache_key: tuple[int, int] | None = None

    def _refresh(self) -> None:
        try:
            st = os.stat(self._path)
        except FileNotFoundError:
            self._cache, self._configs, self._cache_key = {}, {}, None
            return
        key = (st.st_mtime_ns, st.st_size)
        if key != self._cache_key:
            counts, configs = {}, {}
            for name, entry in json.loads(self._path.read_text()).items():
                if isinstance(entry, dict):
                    counts[str(name)] = int(entry["partitions"])
                    configs[str(name)] = {str(k): str(v) for k, v in entry.get("configs", {}).items()}
                else:
                    counts[str(name)] = int(entry)
            self._cache, self._configs, self._cache_key = counts, configs, key

    def all(self) -> dict[str, int]:
        """topic -> partition count, re-read only when the file changed."""
        with self._lock:
            self._refresh()
            return dict(self._cache)

    def partitions(self, topic: str) -> int | None:
        return self.all().get(topic)

    def configs(self, topic: str) -> dict[str, str]:
        """The topic's own settings (empty for none, or for a topic that does not exist)."""
        with self._lock:
            self._refresh()
            return dict(self._configs.get(topic, {}))

    def create(self, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        validate_topic_name(name)
        if name in INTERNAL_TOPICS or name.startswith("__"):
            raise InvalidTopicError(f"topic names starting with '__' are reserved for internal topics: {name!r}")
        if not 1 <= partitions <= MAX_PARTITIONS_PER_TOPIC:
            raise InvalidPartitionsError(f"a topic needs 1..{MAX_PARTITIONS_PER_TOPIC} partitions, not {partitions}")
        settings = validate_configs(configs or {})
        with open(self._lock_path, "a+") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                current = json.loads(self._path.read_text()) if self._path.exists() else {}
                if name in current:
                    raise TopicAlreadyExistsError(f"topic {name!r} already exists")
                current[name] = {"partitions": partitions, "configs": settings} if settings else partitions
                write_atomically(self._path, json.dumps(current, indent=1, sort_keys=True).encode())
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)
