"""What send() returns: one future per record, all resolved together when their batch is answered.

A ProduceRequestResult belongs to a batch and is completed exactly once by the sender
thread (base offset or error); each FutureRecordMetadata derives its record's offset from
it. Waiting costs nothing until get() is called: no per-record lock or event.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from proto.errors import KafkaError, KafkaTimeoutError
from proto.structs import RecordMetadata, TopicPartition

from producer.transaction_manager import copy_error

log = logging.getLogger(__name__)


class ProduceRequestResult:
    """The outcome of one batch: its base offset, or the error that failed it."""

    __slots__ = ("topic_partition", "base_offset", "error", "_done")

    def __init__(self, topic_partition: TopicPartition) -> None:
        self.topic_partition = topic_partition
        self.base_offset = -1
        self.error: KafkaError | None = None
        self._done = threading.Event()

    def set(self, base_offset: int, error: KafkaError | None) -> None:
        self.base_offset = base_offset
        self.error = error
        self._done.set()

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

    @property
    def is_done(self) -> bool:
        return self._result.is_done

    def succeeded(self) -> bool:
        return self._result.is_done and self._result.error is None

    def failed(self) -> bool:
        return self._result.is_done and self._result.error is not None

    @property
    def exception(self) -> KafkaError | None:
        return self._result.error if self._result.is_done else None

    @property
    def value(self) -> RecordMetadata | None:
        return self._metadata() if self.succeeded() else None

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """The record's metadata once acknowledged; KafkaTimeoutError if `timeout` seconds pass first."""
        if not self._result.wait(timeout):
            tp = self._result.topic_partition
            raise KafkaTimeoutError(f"record for {tp} was not acknowledged within {timeout} s")
        if self._result.error is not None:
            raise copy_error(self._result.error)
        return self._metadata()

    def _metadata(self) -> RecordMetadata:
        tp = self._result.topic_partition
        base = self._result.base_offset
        offset = base + self._relative_offset if base >= 0 else -1
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
            if not self._result.is_done:
                if on_success:
                    self._callbacks = (self._callbacks or []) + [call]
                else:
                    self._errbacks = (self._errbacks or []) + [call]
                return self
        self._run(call, on_success)
        return self

    def _run(self, call: Callable[[Any], Any], on_success: bool) -> None:
        error = self._result.error
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
        for call in errbacks:
            self._run(call, False)
