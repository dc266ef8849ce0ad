"""The producers connected to this node that can answer check-backs, by producer group.

A channel is whatever carries a check to one producer: txnsim's CheckBack stream, or a RocketMQ 5
client's Telemetry stream. A check goes to one live producer of the group, chosen round-robin
(RocketMQ's broker also picks one channel of the group).
"""
from __future__ import annotations

import itertools
import queue
import threading
from typing import Protocol

from proto import txnsim_pb2 as pb


class CheckChannel(Protocol):
    @property
    def closed(self) -> bool: ...

    def offer(self, check: pb.TransactionCheck) -> bool:
        """Hand the check to the producer; False if this channel can no longer carry it."""
        ...


class QueueChannel:
    """A channel drained by a streaming RPC handler: offer() enqueues, the handler yields."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self._queue: queue.SimpleQueue[pb.TransactionCheck | None] = queue.SimpleQueue()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def offer(self, check: pb.TransactionCheck) -> bool:
        if self._closed:
            return False
        self._queue.put(check)
        return True

    def next(self, timeout_s: float) -> pb.TransactionCheck | None:
        try:
            return self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def close(self) -> None:
        self._closed = True
        self._queue.put(None)


class ProducerRegistry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._channels: dict[str, list[CheckChannel]] = {}
        self._turn = itertools.count()

    def register(self, group: str, channel: CheckChannel) -> None:
        with self._lock:
            self._channels.setdefault(group, []).append(channel)

    def unregister(self, group: str, channel: CheckChannel) -> None:
        with self._lock:
            channels = self._channels.get(group, [])
            if channel in channels:
                channels.remove(channel)
            if not channels:
                self._channels.pop(group, None)

    def pick(self, group: str) -> CheckChannel | None:
        """One open channel of the group (round-robin), or None."""
        with self._lock:
            channels = [c for c in self._channels.get(group, []) if not c.closed]
            if not channels:
                return None
            return channels[next(self._turn) % len(channels)]

    def deliver(self, check: pb.TransactionCheck) -> bool:
        """Offer the check to the group's channels here until one takes it."""
        for _ in range(4):
            channel = self.pick(check.producer_group)
            if channel is None:
                return False
            if channel.offer(check):
                return True
        return False

    def groups(self) -> dict[str, int]:
        with self._lock:
            return {group: sum(not c.closed for c in channels) for group, channels in self._channels.items()}
