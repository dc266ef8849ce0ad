"""The cluster's topics: one small JSON file in the shared data directory.

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
from proto.errors import InvalidPartitionsError, InvalidTopicError, TopicAlreadyExistsError
from proto.structs import INTERNAL_TOPICS, MAX_PARTITIONS_PER_TOPIC, validate_topic_name


class TopicStore:
    def __init__(self, metadata_dir: Path) -> None:
        self._path = metadata_dir / "topics.json"
        self._lock_path = metadata_dir / "topics.lock"
        self._lock = threading.Lock()
        self._cache: dict[str, int] = {}
        self._cache_key: tuple[int, int] | None = None

    def all(self) -> dict[str, int]:
        """topic -> partition count, re-read only when the file changed."""
        with self._lock:
            try:
                st = os.stat(self._path)
            except FileNotFoundError:
                return {}
            key = (st.st_mtime_ns, st.st_size)
            if key != self._cache_key:
                self._cache = {str(k): int(v) for k, v in json.loads(self._path.read_text()).items()}
                self._cache_key = key
            return dict(self._cache)

    def partitions(self, topic: str) -> int | None:
        return self.all().get(topic)

    def create(self, name: str, partitions: int) -> None:
        validate_topic_name(name)
        if name in INTERNAL_TOPICS or name.startswith("__"):
            raise InvalidTopicError(f"topic names starting with '__' are reserved for internal topics: {name!r}")
        if not 1 <= partitions <= MAX_PARTITIONS_PER_TOPIC:
            raise InvalidPartitionsError(f"a topic needs 1..{MAX_PARTITIONS_PER_TOPIC} partitions, not {partitions}")
        with open(self._lock_path, "a+") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                current = json.loads(self._path.read_text()) if self._path.exists() else {}
                if name in current:
                    raise TopicAlreadyExistsError(f"topic {name!r} already exists with {current[name]} partitions")
                current[name] = partitions
                write_atomically(self._path, json.dumps(current, indent=1, sort_keys=True).encode())
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)
