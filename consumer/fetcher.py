"""Fetch RPCs and the read_committed filter: turns fetched batches into the records poll() returns.

One Fetch per leader node covers all of that node's fetchable partitions and long-polls for
fetch_max_wait_ms. Each partition keeps at most one fetched response (`PartitionRecords`) and
is not fetched again until the application has drained it, so memory stays bounded however
long a transaction stays open. Invariant: a partition's position only moves past batches the
filter has consumed (returned, skipped as aborted, or control markers), in offset order.
"""
from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc

from client.cluster import ClusterClient
from client.transport import Deadline, call_future, call_in_worker, result_of, retrying
from consumer.config import ConsumerConfig, OffsetResetStrategy
from consumer.subscription import SubscriptionState
from proto import txnsim_pb2 as pb
from proto.errors import (
    CorruptMessageError,
    KafkaError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
    for_code,
)
from proto.read_committed import AbortedTransactions
from proto.records import HEADER_SIZE, Fields, RecordBatch, read_header
from proto.structs import ConsumerRecord, IsolationLevel, TopicPartition

log = logging.getLogger(__name__)
_new_tuple = tuple.__new__

#: (topic, headers, data) -> the application's key or value
DeserializeFn = Callable[[str, list[tuple[str, bytes | None]], bytes | None], Any]


def deserializer_fn(deserializer: Any) -> DeserializeFn | None:
    """kafka-python's kinds of deserializer as one call: an object with deserialize(topic, headers, data)
    (kafka-python 3's Deserializer) or deserialize(topic, data) (older ones), else a plain callable of the data.
    The arity is read once here, so a TypeError raised inside a deserializer is never mistaken for it."""
    if deserializer is None:
        return None
    method = getattr(deserializer, "deserialize", None)
    if not callable(method):
        return lambda _topic, _headers, data: deserializer(data)
    try:
        positional = [p for p in inspect.signature(method).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        with_headers = len(positional) >= 3 or any(p.kind is p.VAR_POSITIONAL
                                                   for p in inspect.signature(method).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: assume kafka-python 3's
        with_headers = True
    if with_headers:
        three_args: DeserializeFn = method  # its arity was just read: (topic, headers, data)
        return three_args
    return lambda topic, _headers, data: method(topic, data)


# ---------------------------------------------------------------- the read_committed filter

def iter_whole_batches(buf: bytes) -> Iterator[RecordBatch]:
    """The complete batches of a fetched buffer, CRC-checked; a trailing partial batch is ignored."""
    pos = 0
    end = len(buf)
    while pos < end:
        if end - pos < HEADER_SIZE:
            break
        header = read_header(buf, pos)
        stop = pos + header.size
        if stop > end:
            if pos == 0:
                raise RecordTooLargeError(
                    f"[MESSAGE_TOO_LARGE] the batch at offset {header.base_offset} ({header.size} bytes) does not "
                    f"fit in one fetch; raise max_partition_fetch_bytes / fetch_max_bytes")
            break
        batch = RecordBatch(header, bytes(buf[pos:stop]))
        if not batch.crc_ok():
            raise CorruptMessageError(f"[CORRUPT_MESSAGE] fetched batch at offset {header.base_offset} fails its CRC-32C")
        yield batch
        pos = stop


class PartitionRecords:
    """One partition's fetch response, drained lazily by `take` (KAFKA-REFERENCE §6).

    read_committed: batches of aborted transactions are skipped (proto/read_committed.py).
    Control batches never reach the application. `next_fetch_offset`
    moves past every batch consumed, whether its records were returned or not.
    """

    def __init__(self, tp: TopicPartition, fetch_offset: int, records: bytes, *,
                 isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
                 aborted_transactions: Iterable[tuple[int, int]] = (),
                 key_deserializer: DeserializeFn | None = None,
                 value_deserializer: DeserializeFn | None = None, high_watermark: int | None = None) -> None:
        self.tp = tp
        #: the fetch's high watermark: no batch it carries can reach it
        self._high_watermark = high_watermark
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self.fetch_offset = fetch_offset
        self.next_fetch_offset = fetch_offset
        self.exhausted = False
        self._aborted = (AbortedTransactions(aborted_transactions)
                         if isolation_level is IsolationLevel.READ_COMMITTED else None)
        self._batches = self._unpack(records)
        #: the records of the batch being drained (offset, timestamp, key, value, headers), and the next one's index
        self._pending: list[Fields] = []
        self._next = 0
        self._error: Exception | None = None

    def _advance_to(self, offset: int) -> None:
        self.next_fetch_offset = max(self.next_fetch_offset, offset)

    def _unpack(self, buf: bytes) -> Iterator[list[Fields]]:
        """The records of each batch the application should see, a batch at a time (decoding is one call per
        batch, proto/record_decoding.py); a damaged record raises after the ones before it were handed out,
        and so does a batch whose offsets cannot follow the ones before it (CORRUPT_MESSAGE either way: the
        position stays at the damage, so every poll() says so until the application seeks past it)."""
        for batch in iter_whole_batches(buf):
            header = batch.header
            if header.last_offset < self.next_fetch_offset or (self._high_watermark is not None
                                                               and header.last_offset >= self._high_watermark):
                raise CorruptMessageError(
                    f"[CORRUPT_MESSAGE] a batch fetched from {self.tp} at offset {self.next_fetch_offset} claims "
                    f"offsets {header.base_offset}-{header.last_offset}, which cannot follow"
                    + (f" below the high watermark {self._high_watermark}" if self._high_watermark is not None else ""))
            hidden = self._aborted.hides(batch) if self._aborted is not None else header.is_control
            if hidden:  # a control marker, or (read_committed) a batch of an aborted transaction
                self._advance_to(header.next_offset)
                continue
            decoded, problem = batch.decoded()
            # the node answers from the batch holding fetch_offset; its earlier records were consumed
            if decoded and decoded[0][0] < self.next_fetch_offset:
                decoded = [fields for fields in decoded if fields[0] >= self.next_fetch_offset]
            if decoded:
                yield decoded
            if problem is not None:
                raise CorruptMessageError(problem)
            self._advance_to(header.next_offset)

    def take(self, max_records: int) -> list[ConsumerRecord]:
        """Up to `max_records` records in offset order; position moves only past what is returned or skipped.

        A decoding or deserializer error after some records were taken is kept for the next call, so no
        taken record is ever lost with the exception; the position stays at the record that failed, so a
        later fetch fails there again until the application seeks past it (Kafka's and kafka-python's way).
        """
        if self._error is not None:
            error, self._error = self._error, None
            self.exhausted = True
            raise error
        out: list[ConsumerRecord] = []
        while len(out) < max_records:
            if self._next >= len(self._pending):
                try:
                    self._pending, self._next = next(self._batches), 0
                except StopIteration:
                    self.exhausted = True
                    break
                except Exception as exc:  # a damaged record: raised now, or by the next take
                    if not out:
                        self.exhausted = True
                        raise
                    self._error = exc
                    break
            chunk = self._pending[self._next:self._next + max_records - len(out)]
            try:
                self._convert(chunk, out)
            except Exception as exc:  # a deserializer may raise anything; raised now or by the next take
                if not out:
                    self.exhausted = True
                    raise
                self._error = exc
                break
            finally:
                if out:
                    self.next_fetch_offset = max(self.next_fetch_offset, out[-1].offset + 1)
            self._next += len(chunk)
        return out

    def _convert(self, chunk: list[Fields], out: list[ConsumerRecord]) -> None:
        """Append the chunk's records to `out` as the application sees them; a deserializer's error leaves
        `out` holding the records before the one that failed."""
        topic, partition = self.tp
        if self._key_deserializer is None and self._value_deserializer is None:
            prefix = (topic, partition)
            out += [_new_tuple(ConsumerRecord, prefix + fields) for fields in chunk]  # skips __new__'s argument parsing
            return
        for offset, timestamp, key, value, headers in chunk:
            header_list = list(headers)
            try:
                if self._key_deserializer is not None:
                    key = self._key_deserializer(topic, header_list, key)
                if self._value_deserializer is not None:
                    value = self._value_deserializer(topic, header_list, value)
            except Exception as exc:
                exc.add_note(f"txnsim: deserializing the record of {self.tp} at offset {offset} failed; "
                             f"poll() raises this until you seek({self.tp}, {offset + 1}) past it")
                raise
            out.append(ConsumerRecord(topic, partition, offset, timestamp, key, value, headers))


# ---------------------------------------------------------------- RPCs

@dataclass(frozen=True, slots=True)
class LogBounds:
    """ListOffsets' answer for one partition."""

    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    #: what a timestamp lookup found: the first record at or after it, and that record's timestamp (-1: none)
    offset_for_timestamp: int = -1
    timestamp: int = -1

    def end_offset(self, isolation_level: IsolationLevel) -> int:
        """Kafka's end offset: the LSO for read_committed, the high watermark otherwise."""
        if isolation_level is IsolationLevel.READ_COMMITTED:
            return self.last_stable_offset
        return self.high_watermark


class PartitionMissing(Exception):
    """Carries UnknownTopicOrPartitionError (a retriable class, as Kafka's) out of the retry loop."""

    def __init__(self, error: KafkaError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(slots=True)
class _InFlightFetch:
    future: grpc.Future
    offsets: dict[TopicPartition, int] = field(default_factory=dict)


class Fetcher:
    """Sends fetches, turns responses into PartitionRecords, and drains them into poll() results."""

    def __init__(self, cluster: ClusterClient, subscription: SubscriptionState, config: ConsumerConfig,
                 wakeup: threading.Event) -> None:
        self._cluster = cluster
        self._subscription = subscription
        self._config = config
        self._wakeup = wakeup
        self._request_timeout_s = config.request_timeout_ms / 1000
        self._backoff_s = config.retry_backoff_ms / 1000
        self._completed: dict[TopicPartition, PartitionRecords] = {}
        self._in_flight: dict[str, _InFlightFetch] = {}
        self._backoff_until: dict[TopicPartition, float] = {}
        self._failing_nodes: set[str] = set()
        self._error: Exception | None = None
        self._key_deserializer = deserializer_fn(config.key_deserializer)
        self._value_deserializer = deserializer_fn(config.value_deserializer)

    # ------------------------------------------------------------ fetch

    def send_fetches(self, deadline: Deadline) -> None:
        """One Fetch per leader for partitions with a position, nothing buffered and nothing in flight."""
        now = time.monotonic()
        busy = {tp for fetch in self._in_flight.values() for tp in fetch.offsets}
        by_node: dict[str, dict[TopicPartition, int]] = {}
        for tp in self._subscription.fetchable_partitions():
            if tp in self._completed or tp in busy or self._backoff_until.get(tp, 0.0) > now:
                continue
            try:
                address = self._cluster.leader_address(tp, deadline)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                log.debug("no leader for %s yet (%s); retrying after backoff", tp, exc)
                self._back_off(tp)
                continue
            if address in self._in_flight:
                continue  # one fetch per node at a time; this partition rides the next one
            position = self._subscription.position(tp)
            assert position is not None  # fetchable_partitions() only lists partitions with a position
            by_node.setdefault(address, {})[tp] = position
        for address, offsets in by_node.items():
            request = pb.FetchRequest(
                isolation_level=int(self._config.isolation_level), max_wait_ms=self._config.fetch_max_wait_ms,
                min_bytes=self._config.fetch_min_bytes, max_bytes=self._config.fetch_max_bytes,
                partitions=[pb.FetchPartition(topic=tp.topic, partition=tp.partition, fetch_offset=offset,
                                              max_bytes=self._config.max_partition_fetch_bytes)
                            for tp, offset in offsets.items()])
            try:
                future = call_in_worker(self._cluster.stubs(address).partitions.Fetch, request, self._request_timeout_s)
            except grpc.RpcError as exc:  # a channel that cannot even start the call
                log.warning("fetch from %s could not start: %s", address, exc)
                self._invalidate(offsets)
                continue
            self._in_flight[address] = _InFlightFetch(future, offsets)
            future.add_done_callback(lambda _f: self._wakeup.set())

    def has_in_flight(self) -> bool:
        return bool(self._in_flight)

    def handle_responses(self) -> None:
        """Turn every finished fetch into PartitionRecords (or a reset, a backoff, or an error for poll)."""
        for address, fetch in list(self._in_flight.items()):
            if not fetch.future.done():
                continue
            del self._in_flight[address]
            try:
                response = result_of(fetch.future, check=False)
            except KafkaError as exc:
                # once per outage at WARNING; the retries every retry_backoff_ms at DEBUG
                level = logging.DEBUG if address in self._failing_nodes else logging.WARNING
                log.log(level, "fetch from %s failed: %s; refreshing metadata and retrying", address, exc)
                self._failing_nodes.add(address)
                self._invalidate(fetch.offsets)
                continue
            if address in self._failing_nodes:
                self._failing_nodes.discard(address)
                log.info("fetch from %s works again", address)
            if response.error_code:  # the whole request failed: every partition in it did
                for tp, offset in fetch.offsets.items():
                    self._handle_partition(tp, offset, response.error_code, response.error_message,
                                           pb.FetchPartitionResult())
                continue
            for part in response.partitions:
                tp = TopicPartition(part.topic, part.partition)
                if tp in fetch.offsets:
                    self._handle_partition(tp, fetch.offsets[tp], part.error_code, part.error_message, part)

    def _handle_partition(self, tp: TopicPartition, fetch_offset: int, code: int, message: str,
                          part: pb.FetchPartitionResult) -> None:
        if not self._subscription.is_assigned(tp) or self._subscription.position(tp) != fetch_offset:
            return  # unassigned or sought elsewhere while the fetch was in flight: the data is stale
        if code == 0:
            self._subscription.update_bounds(tp, high_watermark=part.high_watermark,
                                             last_stable_offset=part.last_stable_offset,
                                             log_start_offset=part.log_start_offset)
            if part.records:
                self._completed[tp] = PartitionRecords(
                    tp, fetch_offset, part.records, isolation_level=self._config.isolation_level,
                    aborted_transactions=[(a.producer_id, a.first_offset) for a in part.aborted_transactions],
                    key_deserializer=self._key_deserializer, value_deserializer=self._value_deserializer,
                    high_watermark=part.high_watermark)
            return
        error = for_code(code, message)
        if isinstance(error, CorruptMessageError):  # the node found the stored batch damaged: retrying cannot help
            self._error = CorruptMessageError(
                f"[CORRUPT_MESSAGE] the batch of {tp} at offset {fetch_offset} is damaged on the node ({message}); "
                f"poll() raises this until you seek({tp}, ...) past it")
        elif isinstance(error, OffsetOutOfRangeError):
            if self._config.auto_offset_reset is OffsetResetStrategy.NONE:
                self._error = OffsetOutOfRangeError(
                    f"[OFFSET_OUT_OF_RANGE] offset {fetch_offset} of {tp} is out of range and auto_offset_reset "
                    f"is 'none'; seek() to a valid offset")
            else:
                log.info("offset %d of %s is out of range; resetting to %s", fetch_offset, tp,
                         self._config.auto_offset_reset.value)
                self._subscription.request_reset(tp)
        elif error.retriable or error.invalid_metadata:
            log.debug("fetch of %s failed with %s; retrying", tp, error)
            self._invalidate({tp: fetch_offset})
        else:
            self._error = error

    def drain(self, max_records: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Take up to `max_records` buffered records, moving positions as they are handed out."""
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        remaining = max_records
        for tp in list(self._completed):
            if remaining <= 0:
                break
            records = self._completed[tp]
            if not self._subscription.is_assigned(tp) or self._subscription.position(tp) != records.next_fetch_offset:
                del self._completed[tp]
                continue
            if not self._subscription.is_fetchable(tp):
                continue  # paused: keep the data for resume()
            try:
                taken = records.take(remaining)
            except Exception as exc:  # a damaged batch, a KafkaError or the application's deserializer: poll() raises
                del self._completed[tp]
                if not out:
                    raise
                self._error = exc  # after the records already taken from other partitions, never instead
                break
            self._subscription.seek(tp, records.next_fetch_offset)
            del self._completed[tp]
            if not records.exhausted:
                self._completed[tp] = records  # to the back of the line: partitions take turns
            if taken:
                out[tp] = taken
                remaining -= len(taken)
        return out

    def discard(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._completed.pop(tp, None)
            self._backoff_until.pop(tp, None)

    def buffered_partitions(self) -> set[TopicPartition]:
        return set(self._completed)

    def close(self) -> None:
        for fetch in self._in_flight.values():
            fetch.future.cancel()
        self._in_flight.clear()
        self._completed.clear()

    def _back_off(self, tp: TopicPartition) -> None:
        self._backoff_until[tp] = time.monotonic() + self._backoff_s

    def _invalidate(self, offsets: dict[TopicPartition, int]) -> None:
        for tp in offsets:
            self._cluster.invalidate(tp)
            self._back_off(tp)

    # ------------------------------------------------------------ offsets of the log

    def list_offsets(self, partitions: Iterable[TopicPartition], deadline: Deadline, *, retry: bool = True,
                     timestamps: Mapping[TopicPartition, int] | None = None,
                     fail_fast: bool = False) -> dict[TopicPartition, LogBounds]:
        """Log start, high watermark and LSO of each partition (ListOffsets to each leader); with `timestamps`,
        also the first record at or after each partition's timestamp.

        `fail_fast`: a partition that fresh metadata says does not exist raises UnknownTopicOrPartitionError
        at once (as the producer's send() does) instead of being retried until `deadline`.
        """
        wanted = set(partitions)
        found: dict[TopicPartition, LogBounds] = {}
        if not retry:
            try:
                self._list_offsets_once(wanted, found, deadline, timestamps)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                log.debug("ListOffsets of %s incomplete: %s", sorted(map(str, wanted - set(found))), exc)
            return found
        try:
            for attempt in retrying(deadline.remaining(), initial_backoff_s=max(self._backoff_s, 0.01)):
                with attempt:
                    self._list_offsets_once(wanted - set(found), found, deadline, timestamps, fail_fast=fail_fast)
        except PartitionMissing as missing:
            raise missing.error from None
        return found

    def _list_offsets_once(self, wanted: set[TopicPartition], found: dict[TopicPartition, LogBounds],
                           deadline: Deadline, timestamps: Mapping[TopicPartition, int] | None = None, *,
                           fail_fast: bool = False) -> None:
        first_error: KafkaError | None = None
        by_node: dict[str, list[TopicPartition]] = {}
        for tp in sorted(wanted):
            try:
                by_node.setdefault(self._cluster.leader_address(tp, deadline), []).append(tp)
            except UnknownTopicOrPartitionError as exc:  # the cluster's metadata, fresh, lacks it
                if fail_fast:
                    raise PartitionMissing(exc) from None
                first_error = first_error or exc
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                first_error = first_error or exc
        futures: list[tuple[Any, list[TopicPartition]]] = []
        for address, tps in by_node.items():
            request = pb.ListOffsetsRequest(
                partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition) for tp in tps],
                timestamps=[timestamps[tp] for tp in tps] if timestamps else [],
                isolation_level=int(self._config.isolation_level))
            stub = self._cluster.stubs(address).partitions.ListOffsets
            futures.append((call_future(stub, request, self._config.rpc_timeout(deadline)), tps))
        for future, tps in futures:
            try:
                response = result_of(future)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                for tp in tps:
                    self._cluster.invalidate(tp)
                first_error = first_error or exc
                continue
            for part in response.partitions:
                tp = TopicPartition(part.topic, part.partition)
                if part.error_code:
                    error = for_code(part.error_code, part.error_message)
                    if not error.retriable:
                        raise error
                    self._cluster.invalidate(tp)  # the next round asks fresh metadata whether it exists
                    first_error = first_error or error
                    continue
                found[tp] = LogBounds(part.log_start_offset, part.high_watermark, part.last_stable_offset,
                                      part.offset_for_timestamp if timestamps else -1,
                                      part.timestamp if timestamps else -1)
        if first_error is not None and not wanted <= set(found):
            raise first_error

    def reset_positions(self, deadline: Deadline, *, retry: bool = False) -> None:
        """Give every partition awaiting a reset its position from the log's bounds."""
        awaiting = self._subscription.awaiting_reset()
        if not awaiting:
            return
        for tp, strategy in awaiting.items():
            if strategy is OffsetResetStrategy.NONE:
                raise OffsetOutOfRangeError(
                    f"[OFFSET_OUT_OF_RANGE] {tp} has no committed offset and auto_offset_reset is 'none'; "
                    f"seek() to an offset or set auto_offset_reset to 'earliest' or 'latest'")
        bounds = self.list_offsets(awaiting, deadline, retry=retry)
        for tp, strategy in awaiting.items():
            if tp not in bounds or self._subscription.position(tp) is not None:
                continue
            b = bounds[tp]
            offset = b.log_start_offset if strategy is OffsetResetStrategy.EARLIEST \
                else b.end_offset(self._config.isolation_level)
            log.debug("reset %s to %s offset %d", tp, strategy.value, offset)
            self._subscription.seek(tp, offset)
