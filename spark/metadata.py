"""Planning-time lookups: which partitions the options select, and each one's log start and readable end.

Used by the driver-side runner (initialOffset, latestOffset, partitions). A short-lived,
group-less Consumer does the asking, opened and closed per call so nothing unpicklable is kept.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable

from consumer import Consumer
from proto.errors import UnknownTopicOrPartitionError
from proto.structs import TopicPartition
from spark.offsets import PartitionBounds
from spark.read_options import ReadOptions

log = logging.getLogger(__name__)


class ClusterView:
    """`with ClusterView(options) as view:` partitions() and bounds() at the options' isolation level."""

    def __init__(self, options: ReadOptions) -> None:
        self._options = options
        self._consumer: Consumer | None = None

    def __enter__(self) -> ClusterView:
        self._consumer = Consumer(bootstrap_servers=self._options.bootstrap_servers,
                                  client_id="txnsim-spark-planner",
                                  isolation_level=self._options.isolation_level,
                                  enable_auto_commit=False)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._consumer is not None:
            self._consumer.close(autocommit=False)
            self._consumer = None

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            raise RuntimeError("use ClusterView as a context manager")
        return self._consumer

    def partitions(self, *, missing_ok: bool) -> list[TopicPartition]:
        """Every partition the subscription selects now, sorted.

        A topic (or assigned partition) that does not exist is skipped when `missing_ok` (a stream
        picks it up once it is created), else UNKNOWN_TOPIC_OR_PARTITION names it.
        """
        subscription = self._options.subscription
        if subscription.pattern is not None:
            topics = sorted(t for t in self.consumer.topics() if subscription.matches(t))
        else:
            topics = sorted({tp.topic for tp in subscription.partitions} or set(subscription.topics))
        found: list[TopicPartition] = []
        for topic in topics:
            try:
                existing = self.consumer.partitions_for_topic(topic)
            except UnknownTopicOrPartitionError:
                existing = set()
            wanted = ([tp for tp in subscription.partitions if tp.topic == topic] if subscription.partitions
                      else [TopicPartition(topic, p) for p in existing])
            absent = sorted(str(tp) for tp in wanted if tp.partition not in existing)
            if not existing or absent:
                what = f"topic {topic!r} does not exist" if not existing else f"partitions {absent} do not exist"
                if not missing_ok:
                    raise UnknownTopicOrPartitionError(
                        f"[UNKNOWN_TOPIC_OR_PARTITION] {what} (read with {subscription.describe()}); "
                        f"create it first, or check the option's spelling")
                log.info("%s yet; reading it once it does", what)
            found.extend(tp for tp in wanted if tp.partition in existing)
        return sorted(found)

    def bounds(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionBounds]:
        """Log start and readable end (last stable offset under read_committed, else high watermark)."""
        partitions = list(partitions)
        if not partitions:
            return {}
        starts = self.consumer.beginning_offsets(partitions)
        ends = self.consumer.end_offsets(partitions)
        return {tp: PartitionBounds(starts[tp], ends[tp]) for tp in sorted(partitions)}
