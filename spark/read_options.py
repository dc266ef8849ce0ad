"""The read options of the ``txnsim`` source, parsed once into a frozen ReadOptions.

Names and meanings follow Spark's Kafka source. Every bad value raises KafkaConfigurationError
naming the option and what it accepts, at load() or at query start, never deep in a task.
Parsing does no I/O: it runs wherever Spark builds a reader (driver, runner, executors).
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proto.errors import KafkaConfigurationError
from proto.structs import IsolationLevel, TopicPartition
from spark.option_map import OptionMap, parse_bootstrap

#: the special offsets of startingOffsets/endingOffsets JSON, as in Spark's Kafka source
EARLIEST = -2
LATEST = -1

_SUBSCRIPTION_OPTIONS = ("subscribe", "subscribePattern", "assign")
#: rows per Arrow record batch handed to Spark: large enough to amortise, small enough to stream
DEFAULT_ARROW_BATCH_ROWS = 4096


@dataclass(frozen=True, slots=True)
class Subscription:
    """Which partitions to read: a topic list, a topic regex, or fixed partitions (exactly one)."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[TopicPartition, ...] = ()

    def describe(self) -> str:
        if self.pattern is not None:
            return f"subscribePattern={self.pattern!r}"
        if self.partitions:
            return f"assign={sorted(map(str, self.partitions))}"
        return f"subscribe={list(self.topics)}"

    def matches(self, topic: str) -> bool:
        """Whether `topic` is read (for a pattern: the whole name matches, as Java's Matcher.matches)."""
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        if self.partitions:
            return any(tp.topic == topic for tp in self.partitions)
        return topic in self.topics


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """startingOffsets / endingOffsets: one special offset for every partition, or one per partition.

    `fallback` is EARLIEST or LATEST for the words "earliest"/"latest"; None for JSON, where
    `per_partition` must then name every partition read (Spark's rule, so no partition is
    silently read from an offset the user did not choose).
    """

    option: str
    fallback: int | None
    per_partition: tuple[tuple[TopicPartition, int], ...] = ()

    def offset_for(self, tp: TopicPartition) -> int | None:
        """The configured offset (maybe EARLIEST/LATEST) of `tp`, or None if JSON does not name it."""
        for known, offset in self.per_partition:
            if known == tp:
                return offset
        return self.fallback


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Every read option, validated."""

    bootstrap_servers: str
    subscription: Subscription
    starting_offsets: OffsetSpec
    #: batch only; None in streaming queries
    ending_offsets: OffsetSpec | None
    isolation_level: IsolationLevel = IsolationLevel.READ_COMMITTED
    fail_on_data_loss: bool = True
    include_headers: bool = False
    #: offsets per micro-batch across all partitions, None for no limit (batch reads ignore it, as Spark's)
    max_offsets_per_trigger: int | None = None
    #: a task that makes no progress for this long fails with KafkaTimeoutError rather than hanging
    poll_timeout_ms: int = 120_000
    arrow_batch_rows: int = DEFAULT_ARROW_BATCH_ROWS

    @property
    def reads_committed(self) -> bool:
        return self.isolation_level is IsolationLevel.READ_COMMITTED

    @classmethod
    def parse(cls, options: Mapping[str, Any], *, streaming: bool | None) -> ReadOptions:
        """Validate Spark's option map (keys case-insensitive) for a batch or a streaming read.

        `streaming=None` (at load(), before Spark says which) checks everything but the rules
        that depend on the kind of query, and plans as a batch would.
        """
        opts = OptionMap(options)
        bootstrap_servers = parse_bootstrap(opts)
        subscription = _parse_subscription(opts)
        if streaming:
            if opts.get("endingOffsets") is not None:
                raise KafkaConfigurationError(
                    "option 'endingOffsets' is not valid in a streaming query (it runs until stopped); "
                    "use spark.read for a bounded read, or trigger(availableNow=True)")
            starting = _parse_offset_spec(opts, "startingOffsets", default="latest", subscription=subscription)
            ending = None
        else:
            batch = streaming is not None
            starting = _parse_offset_spec(opts, "startingOffsets", default="earliest", subscription=subscription,
                                          forbidden=LATEST if batch else None)
            ending = _parse_offset_spec(opts, "endingOffsets", default="latest", subscription=subscription,
                                        forbidden=EARLIEST if batch else None)
        return cls(
            bootstrap_servers=bootstrap_servers,
            subscription=subscription,
            starting_offsets=starting,
            ending_offsets=ending,
            isolation_level=_parse_isolation_level(opts),
            fail_on_data_loss=opts.boolean("failOnDataLoss", default=True),
            include_headers=opts.boolean("includeHeaders", default=False),
            max_offsets_per_trigger=opts.positive_int("maxOffsetsPerTrigger", default=None),
            poll_timeout_ms=opts.positive_int("kafkaConsumer.pollTimeoutMs", default=120_000),
            arrow_batch_rows=opts.positive_int("arrowBatchRows", default=DEFAULT_ARROW_BATCH_ROWS),
        )


# ---------------------------------------------------------------- the pieces

def _parse_isolation_level(opts: OptionMap) -> IsolationLevel:
    name, text = opts.either("isolation.level")
    if text is None:
        return IsolationLevel.READ_COMMITTED
    try:
        return IsolationLevel.parse(text.lower())
    except ValueError:
        raise KafkaConfigurationError(
            f"option '{name}' must be 'read_committed' or 'read_uncommitted', not {text!r}") from None


def _parse_subscription(opts: OptionMap) -> Subscription:
    given = [name for name in _SUBSCRIPTION_OPTIONS if opts.get(name) is not None]
    if len(given) != 1:
        found = f"got {', '.join(repr(g) for g in given)}" if given else "got none"
        raise KafkaConfigurationError(
            f"set exactly one of the options 'subscribe' (comma-separated topics), 'subscribePattern' (a regex) "
            f"or 'assign' (JSON like {{\"topic\": [0, 1]}}); {found}")
    name = given[0]
    text = opts.get(name)
    assert text is not None
    if name == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
        if not topics:
            raise KafkaConfigurationError(f"option 'subscribe' must list at least one topic, not {text!r}")
        return Subscription(topics=topics)
    if name == "subscribePattern":
        try:
            re.compile(text)
        except re.error as exc:
            raise KafkaConfigurationError(f"option 'subscribePattern' is not a valid regex ({exc}): {text!r}") from None
        return Subscription(pattern=text)
    parsed = _load_json(name, text, 'like {"topic": [0, 1]}')
    if not isinstance(parsed, dict) or not parsed or not all(
            isinstance(parts, list) and all(_is_int(p) and p >= 0 for p in parts) for parts in parsed.values()):
        raise KafkaConfigurationError(
            f"option 'assign' must map each topic to a list of partition numbers, like {{\"topic\": [0, 1]}}, "
            f"not {text!r}")
    partitions = tuple(sorted({TopicPartition(topic, p) for topic, parts in parsed.items() for p in parts}))
    if not partitions:
        raise KafkaConfigurationError(f"option 'assign' names no partition: {text!r}")
    return Subscription(partitions=partitions)


def _parse_offset_spec(opts: OptionMap, name: str, *, default: str, subscription: Subscription,
                       forbidden: int | None = None) -> OffsetSpec:
    """"earliest", "latest", or JSON {"topic": {"0": 23, "1": -2}}; `forbidden` is the special offset
    that makes no sense here (latest as a batch start, earliest as a batch end)."""
    text = opts.get(name) or default
    word = text.lower()
    words = {"earliest": EARLIEST, "latest": LATEST}
    if word in words:
        if words[word] == forbidden:
            raise KafkaConfigurationError(f"option '{name}' cannot be {word!r} in a batch query")
        return OffsetSpec(name, words[word])
    example = '\'earliest\', \'latest\' or JSON like {"topic": {"0": 23, "1": -2}} (-2 = earliest, -1 = latest)'
    parsed = _load_json(name, text, example)
    if not isinstance(parsed, dict) or not parsed:
        raise KafkaConfigurationError(f"option '{name}' must be {example}, not {text!r}")
    offsets: list[tuple[TopicPartition, int]] = []
    for topic, by_partition in parsed.items():
        if not isinstance(by_partition, dict):
            raise KafkaConfigurationError(
                f"option '{name}': topic {topic!r} must map partition numbers to offsets, like {{\"0\": 23}}, "
                f"not {by_partition!r}")
        for partition, offset in by_partition.items():
            if not str(partition).isdigit() or not _is_int(offset) or offset < EARLIEST:
                raise KafkaConfigurationError(
                    f"option '{name}': {topic!r} partition {partition!r} -> {offset!r} is not a partition number "
                    f"with an offset >= 0 (or -2 = earliest, -1 = latest)")
            if offset == forbidden:
                raise KafkaConfigurationError(
                    f"option '{name}': offset {offset} ({'latest' if offset == LATEST else 'earliest'}) for "
                    f"{topic}-{partition} is not allowed in a batch query")
            offsets.append((TopicPartition(topic, int(partition)), offset))
    unread = sorted(str(tp) for tp, _ in offsets if not subscription.matches(tp.topic)
                    or (subscription.partitions and tp not in subscription.partitions))
    if unread:
        raise KafkaConfigurationError(
            f"option '{name}' names partitions that {subscription.describe()} does not read: {unread}")
    return OffsetSpec(name, None, tuple(sorted(offsets)))


def _load_json(name: str, text: str, example: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise KafkaConfigurationError(f"option '{name}' must be {example}; {text!r} is not valid JSON ({exc})") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

