"""What became of the transaction each record was written in: committed, aborted, or still open.

A consumer does not say (read_uncommitted hands out all three alike), so `txnsim consume --print-txn-status`
reads the partition's batches itself, read_uncommitted with the control batches left in, and pairs each
transactional batch with the next COMMIT or ABORT marker of its producer: Kafka's own rule for what a
read_committed reader keeps.
"""
from __future__ import annotations

from client.cluster import ClusterClient
from client.transport import call
from proto import txnsim_pb2 as pb
from proto.errors import raise_for
from proto.records import ControlType, iter_batches
from proto.structs import TopicPartition

COMMITTED, ABORTED, OPEN, NOT_TRANSACTIONAL = "committed", "aborted", "open", "-"

_FETCH_BYTES = 1 << 20


def classify(raw_batches: bytes, statuses: dict[int, str]) -> int:
    """Add the status of every record offset in `raw_batches` (consecutive batches of one partition, from its
    start) to `statuses`; returns the offset after the last batch."""
    pending: dict[int, list[tuple[int, int]]] = {}  # producer id -> its undecided (first, last) offset ranges
    end = 0
    for batch in iter_batches(raw_batches, verify_crc=False):
        h = batch.header
        end = h.last_offset + 1
        if h.is_control:
            marker = batch.control_record()
            outcome = COMMITTED if marker.type == ControlType.COMMIT else ABORTED
            for first, last in pending.pop(h.producer_id, []):
                statuses.update(dict.fromkeys(range(first, last + 1), outcome))
        elif h.is_transactional:
            pending.setdefault(h.producer_id, []).append((h.base_offset, h.last_offset))
        else:
            statuses.update(dict.fromkeys(range(h.base_offset, h.last_offset + 1), NOT_TRANSACTIONAL))
    for ranges in pending.values():
        for first, last in ranges:
            statuses.update(dict.fromkeys(range(first, last + 1), OPEN))
    return end


class TransactionStatuses:
    """Statuses of one consumer's records, re-read from the partition when a record is not yet known or was
    open when last read (its transaction may have ended since)."""

    def __init__(self, client: ClusterClient, timeout_s: float) -> None:
        self._client = client
        self._timeout_s = timeout_s
        self._known: dict[TopicPartition, dict[int, str]] = {}

    def status(self, tp: TopicPartition, offset: int) -> str:
        known = self._known.get(tp, {})
        if known.get(offset, OPEN) == OPEN:
            known = self._known[tp] = self._read(tp)
        return known.get(offset, OPEN)

    def _read(self, tp: TopicPartition) -> dict[int, str]:
        raw = bytearray()
        offset = 0
        while True:
            request = pb.FetchRequest(isolation_level=0, max_wait_ms=0, min_bytes=0, max_bytes=_FETCH_BYTES,
                                      partitions=[pb.FetchPartition(topic=tp.topic, partition=tp.partition,
                                                                    fetch_offset=offset, max_bytes=_FETCH_BYTES)])
            response = call(self._client.stubs(self._client.leader_address(tp)).partitions.Fetch, request,
                            self._timeout_s)
            part = response.partitions[0]
            raise_for(part.error_code, part.error_message)
            if offset == 0:
                offset = part.log_start_offset
                if offset > 0:
                    continue  # the log was trimmed: read from where it starts
            if not part.records:
                break
            raw += part.records
            scratch: dict[int, str] = {}
            offset = classify(bytes(part.records), scratch)
            if offset >= part.high_watermark:
                break
        statuses: dict[int, str] = {}
        classify(bytes(raw), statuses)
        return statuses
