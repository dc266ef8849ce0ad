"""Shared test helpers: waiting on conditions with deadlines (never fixed sleeps), and damaged record batches
for the property tests of the compiled per-record walks."""
from __future__ import annotations

import socket
import struct
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import strategies as st

from proto.records import HEADER_SIZE

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout_s: float = 10.0, what: str = "condition") -> T:
    """Poll `condition` with a short backoff until it returns something truthy or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    backoff = 0.005
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(backoff)
        backoff = min(backoff * 2, 0.1)


def leader_of(bootstrap_servers: str, topic: str, partition: int) -> int:
    """The node that leads topic-partition now, as the cluster describes it."""
    from txnsim import Admin
    with Admin(bootstrap_servers) as admin:
        topics = admin.describe_cluster().topics
    return next(pt.leader for t in topics if t.name == topic for pt in t.partitions if pt.partition == partition)


def read_all(bootstrap_servers: str, topic: str, *, partitions: int, isolation_level: str = "read_committed",
             settle_s: float = 2.0, timeout_s: float = 30.0, open_allowed: bool = False) -> list:
    """Every record of `topic` from the start to its end as a consumer sees it (the LSO for
    read_committed).

    Markers are written after EndTxn answers, so first it gives open transactions up to
    `settle_s` to be decided (LSO reaching the high watermark everywhere). One still open then
    fails the read, unless the test left it open on purpose (`open_allowed`): then it holds the
    end where it is, as it would for any reader. Then it reads until every partition's position
    reaches that end (consumer.read_whole).
    """
    from consumer import read_to_end
    from txnsim import Admin, TopicPartition

    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with Admin(bootstrap_servers) as admin:
        settled_by = time.monotonic() + settle_s
        while (lso := admin.last_stable_offsets(tps)) != (hw := admin.end_offsets(tps)):
            if time.monotonic() > settled_by:
                if open_allowed:
                    break
                held = {str(tp): (lso[tp], hw[tp]) for tp in tps if lso[tp] != hw[tp]}
                raise AssertionError(f"read_all: transactions still open after {settle_s} s (LSO, HW): {held}")
            time.sleep(0.02)
    return list(read_to_end(bootstrap_servers, tps, isolation_level=isolation_level, timeout_s=timeout_s,
                            poll_ms=100))


class ScriptProcess:
    """A Python script run as a real process (an example a user would run); its output goes to a file, so no
    pipe fills up, and the file is shown when it does not exit in time."""

    def __init__(self, script: Path, args: list[str], log: Path) -> None:
        import subprocess
        import sys
        self.log = log
        with log.open("w") as out:
            self.process = subprocess.Popen([sys.executable, str(script), *args], stdout=out,
                                            stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text()

    def wait(self, timeout_s: float = 60) -> int:
        import subprocess
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"{self.log.stem} did not exit within {timeout_s} s; its output:\n{self.output()}")

    def kill(self) -> None:
        """SIGKILL: no clean-up, no leave-group, an open transaction stays open."""
        self.process.kill()
        self.process.wait()


def damage_records(raw: bytearray, data: st.DataObject) -> bytes:
    """The batch with its records overwritten, cut or extended in up to three places, the header kept:
    what the property tests of the two compiled per-record walks feed them."""
    for _ in range(data.draw(st.integers(0, 3))):
        where = data.draw(st.integers(HEADER_SIZE, len(raw) - 1))
        edit = data.draw(st.sampled_from(["byte", "cut", "grow"]))
        if edit == "byte":
            raw[where] = data.draw(st.integers(0, 255))
        elif edit == "cut":
            del raw[where:]
            if len(raw) == HEADER_SIZE:
                break
        else:
            raw[where:where] = data.draw(st.binary(min_size=1, max_size=12))
    return bytes(raw)


def kafka_round_trip(bootstrap_servers: str, request: Any, response_type: Any) -> Any:
    """One Kafka request sent as bytes on a fresh connection to the first address, its answer decoded: for what
    no client library will send (a broker resource named "", a malformed field)."""
    host, port = bootstrap_servers.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        request.with_header(correlation_id=1, client_id="raw")
        sock.sendall(bytes(request.encode(header=True, framed=True)))

        def exactly(n: int) -> bytes:
            data = b""
            while len(data) < n:
                chunk = sock.recv(n - len(data))
                assert chunk, "the node closed the connection"
                data += chunk
            return data
        (size,) = struct.unpack(">i", exactly(4))
        return response_type.decode(exactly(size), version=request.version, header=True)



class Serial:
    """One event at a time, in order, never re-entered (a controller's event thread, run inline)."""

    def __init__(self) -> None:
        self._queue: deque[Callable[[], None]] = deque()
        self._running = False

    def __call__(self, work: Callable[[], None]) -> None:
        self._queue.append(work)
        if self._running:
            return
        self._running = True
        try:
            while self._queue:
                self._queue.popleft()()
        finally:
            self._running = False
