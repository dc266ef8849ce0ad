"""What send() returns: one future per record, all resolved together when their batch is answered.

A ProduceRequestResult belongs to a batch and is completed exactly once by the sender
thread (base offset or error); each FutureRecordMetadata derives its record's offset from
it. Waiting costs nothing until get() is called: no per-record lock or event.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from producer.transaction_manager import copy_error
from proto.errors import KafkaError, KafkaTimeoutError
from proto.structs import RecordMetadata, TopicPartition

log = logging.getLogger(__name__)


class ProduceRequestResult:
    """The outcome of one batch: its base offset, or the error that failed it."""

    __slots__ = ("topic_partition", "base_offset", "error", "_done", "children")

    def __init__(self, topic_partition: TopicPartition) -> None:
        self.topic_partition = topic_partition
        self.base_offset = -1
        self.error: KafkaError | None = None
        self._done = threading.Event()
        #: set when the batch was split (MESSAGE_TOO_LARGE): (first relative offset, result) per part
        self.children: tuple[tuple[int, ProduceRequestResult], ...] | None = None

    def set(self, base_offset: int, error: KafkaError | None) -> None:
        self.base_offset = base_offset
        self.error = error
        self._done.set()

    def split(self, children: tuple[tuple[int, ProduceRequestResult], ...]) -> None:
        """The batch was split and resent in parts: its records' futures follow them (Kafka chains them)."""
        self.children = children
        self._done.set()

    def locate(self, relative_offset: int) -> tuple[ProduceRequestResult, int]:
        """The result that holds the record at `relative_offset`, and its offset there, across splits."""
        result = self
        while result.children is not None:
            for start, child in reversed(result.children):
                if relative_offset >= start:
                    result, relative_offset = child, relative_offset - start
                    break
        return result, relative_offset

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    @property
    def is_done(self) -> bool:
        return self._done.is_set()


class FutureRecordMetadata:
    """kafka-python's future for one record: get(timeout), is_done, callbacks."""

    __slots__ = ("_result", "_relative_offset", "_timestamp", "_callbacks", "_errbacks", "_lock")

    def __init__(self, result: ProduceRequestResult, relative_offset: int, timestamp: int) -> None:
        self._result = result
        self._relative_offset = relative_offset
        self._timestamp = timestamp
        self._callbacks: list[Callable[[RecordMetadata], Any]] | None = None
        self._errbacks: list[Callable[[KafkaError], Any]] | None = None
        self._lock: threading.Lock | None = None

    # ------------------------------------------------------------ reading

    def _current(self) -> tuple[ProduceRequestResult, int]:
        """The result this record now belongs to (a split batch hands its records on) and its offset there."""
        if self._result.children is None:  # the common case: no split, no loop
            return self._result, self._relative_offset
        return self._result.locate(self._relative_offset)

    @property
    def is_done(self) -> bool:
        return self._current()[0].is_done

    def succeeded(self) -> bool:
        result = self._current()[0]
        return result.is_done and result.error is None

    def failed(self) -> bool:
        result = self._current()[0]
        return result.is_done and result.error is not None

    @property
    def exception(self) -> KafkaError | None:
        result = self._current()[0]
        return result.error if result.is_done else None

    @property
    def value(self) -> RecordMetadata | None:
        return self._metadata() if self.succeeded() else None

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """The record's metadata once acknowledged; KafkaTimeoutError if `timeout` seconds pass first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            result, _ = self._current()
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            if not result.wait(remaining):
                raise KafkaTimeoutError(f"record for {result.topic_partition} was not acknowledged within {timeout} s")
            if result.children is None:
                break  # else the batch was split meanwhile: wait for the part that holds this record
        if result.error is not None:
            raise copy_error(result.error)
        return self._metadata()

    def _metadata(self) -> RecordMetadata:
        result, relative_offset = self._current()
        tp = result.topic_partition
        base = result.base_offset
        offset = base + relative_offset if base >= 0 else -1
        return RecordMetadata(tp.topic, tp.partition, offset, self._timestamp)

    # ------------------------------------------------------------ callbacks

    def add_callback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> FutureRecordMetadata:
        """Call fn(*args, record_metadata, **kwargs) on success (now, if already done)."""
        return self._add(True, lambda value: fn(*args, value, **kwargs))

    def add_errback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> FutureRecordMetadata:
        """Call fn(*args, error, **kwargs) on failure (now, if already failed)."""
        return self._add(False, lambda error: fn(*args, error, **kwargs))

    def add_both(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> FutureRecordMetadata:
        self.add_callback(fn, *args, **kwargs)
        return self.add_errback(fn, *args, **kwargs)

    def _add(self, on_success: bool, call: Callable[[Any], Any]) -> FutureRecordMetadata:
        if self._lock is None:
            self._lock = threading.Lock()  # benign race: only futures with callbacks ever build one
        with self._lock:
            if not self.is_done:
                if on_success:
                    self._callbacks = (self._callbacks or []) + [call]
                else:
                    self._errbacks = (self._errbacks or []) + [call]
                return self
        self._run(call, on_success)
        return self

    def _run(self, call: Callable[[Any], Any], on_success: bool) -> None:
        error = self._current()[0].error
        if on_success != (error is None):
            return
        try:
            call(self._metadata() if error is None else error)
        except Exception:  # a user callback must not kill the sender thread
            log.exception("producer callback for %s raised", self._result.topic_partition)

    def has_callbacks(self) -> bool:
        return self._callbacks is not None or self._errbacks is not None

    def fire_callbacks(self) -> None:
        """Run the registered callbacks once the result is set (called by the batch)."""
        if self._lock is None:
            return
        with self._lock:
            callbacks, errbacks = self._callbacks or [], self._errbacks or []
            self._callbacks = self._errbacks = None
        for call in callbacks:
            self._run(call, True)
        for errback in errbacks:
            self._run(errback, False)
