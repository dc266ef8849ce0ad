"""DATA/metadata/ownership.log: one JSON line per ownership change, appended by the node concerned.

Lines are small single write()s to a file opened with O_APPEND, so concurrent nodes never
interleave within a line. It is a record for people (`txnsim cluster status`), not state:
nothing reads it to decide ownership.
"""
from __future__ import annotations

import json
import os
import time
from collections import deque
from pathlib import Path

from proto import txnsim_pb2 as pb


class OwnershipLog:
    def __init__(self, metadata_dir: Path) -> None:
        self._path = metadata_dir / "ownership.log"

    def record(self, node_id: int, action: str, topic: str, partition: int, leader_epoch: int, reason: str) -> None:
        line = json.dumps({"time_ms": int(time.time() * 1000), "node_id": node_id, "action": action,
                           "topic": topic, "partition": partition, "leader_epoch": leader_epoch,
                           "reason": reason}) + "\n"
        fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def recent(self, limit: int = 500) -> list[pb.OwnershipChange]:
        try:
            with open(self._path, "rb") as f:
                lines = deque(f, maxlen=limit)
        except FileNotFoundError:
            return []
        changes = []
        for raw in lines:
            try:
                changes.append(pb.OwnershipChange(**json.loads(raw)))
            except (ValueError, TypeError):
                continue  # a line cut by a crash: skip it
        return changes
