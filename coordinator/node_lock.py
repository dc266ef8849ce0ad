"""One node process per node id and data directory: an exclusive flock the kernel drops the instant the
process dies (on a shared directory, peers probe it to see whether the node lives)."""
from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from proto.errors import KafkaConfigurationError


def take_node_lock(path: Path, refusal: str) -> int:
    """The lock's file descriptor, held until closed; KafkaConfigurationError(`refusal`) if another process
    holds it. Peers probe it for an instant, so this retries briefly before refusing."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + 2.0
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise KafkaConfigurationError(refusal) from None
            time.sleep(0.01)  # a peer's liveness probe holds it for microseconds
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd
