"""The write options of the ``txnsim`` sink and the columns it takes, checked once on the driver.

Names follow Spark's Kafka sink: a required `value` column (binary or string), optional
`key`, `topic`, `partition` and `headers` columns, and a `topic` option that overrides the
column. Other columns are ignored, as there. `transactional.id.prefix` names the batch
transactions (one per streaming query: prefix + query id); `delivery.guarantee` =
at-least-once writes without them, like Spark's Kafka sink (the benchmark's baseline).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import ArrayType, BinaryType, DataType, IntegerType, StringType, StructType

from proto.errors import KafkaConfigurationError
from spark.option_map import OptionMap, parse_bootstrap

DEFAULT_PREFIX = "txnsim-spark-"
#: the first is the default; at-least-once is Spark's own Kafka sink's guarantee, kept as the baseline
DELIVERY_GUARANTEES = ("exactly-once", "at-least-once")
DEFAULT_TIMEOUT_MS = 60_000
#: how long a task's participant may take for metadata, joining and flushing
DEFAULT_MAX_BLOCK_MS = 60_000
#: the write option that injects a driver crash right after one batch's commit (WriteOptions.kill_driver_after_batch)
KILL_DRIVER_AFTER_BATCH = "txnsim.fault.killDriverAfterBatch"


@dataclass(frozen=True, slots=True)
class WriteOptions:
    bootstrap_servers: str
    topic: str | None            # the option; None: every row names its topic in the `topic` column
    transactional_id_prefix: str
    #: "exactly-once" (batch transactions) or "at-least-once" (idempotent producer, as Spark's Kafka sink)
    delivery_guarantee: str
    transaction_timeout_ms: int
    max_block_ms: int
    #: the columns present, by role
    has_key: bool
    has_topic_column: bool
    has_partition: bool
    has_headers: bool
    #: fault injection on purpose (tests, demos): option `txnsim.fault.killDriverAfterBatch`, the batch id after
    #: whose commit (durable and visible) the driver's process group is SIGKILLed, before Spark writes its
    #: commit log; None: no fault
    kill_driver_after_batch: int | None = None

    @classmethod
    def parse(cls, options: Mapping[str, Any], schema: StructType) -> WriteOptions:
        opts = OptionMap(options)
        servers = parse_bootstrap(opts)
        fields = {f.name: f.dataType for f in schema.fields}
        _check_column(fields, "value", (BinaryType, StringType), required=True)
        _check_column(fields, "key", (BinaryType, StringType))
        _check_column(fields, "topic", (StringType,))
        _check_column(fields, "partition", (IntegerType,))
        if "headers" in fields and not _is_headers(fields["headers"]):
            raise KafkaConfigurationError(
                f"column 'headers' must be array<struct<key:string,value:binary>>, not {fields['headers'].simpleString()}")
        topic = opts.get("topic")
        if topic is None and "topic" not in fields:
            raise KafkaConfigurationError(
                "no topic: set option 'topic' or give the rows a string column named 'topic'")
        return cls(bootstrap_servers=servers, topic=topic,
                   transactional_id_prefix=opts.get("transactional.id.prefix") or DEFAULT_PREFIX,
                   delivery_guarantee=_choice(opts, "delivery.guarantee", DELIVERY_GUARANTEES),
                   transaction_timeout_ms=opts.positive_int("transaction.timeout.ms", default=DEFAULT_TIMEOUT_MS),
                   max_block_ms=opts.positive_int("max.block.ms", default=DEFAULT_MAX_BLOCK_MS),
                   has_key="key" in fields, has_topic_column="topic" in fields,
                   has_partition="partition" in fields, has_headers="headers" in fields,
                   kill_driver_after_batch=_batch_id(opts, KILL_DRIVER_AFTER_BATCH))


def _batch_id(opts: OptionMap, name: str) -> int | None:
    text = opts.get(name)
    if text is None:
        return None
    if not text.isdigit():
        raise KafkaConfigurationError(f"option '{name}' must be a batch id (0 or more), not {text!r}")
    return int(text)


def _check_column(fields: dict[str, DataType], name: str, allowed: tuple[type[DataType], ...], *,
                  required: bool = False) -> None:
    if name not in fields:
        if required:
            raise KafkaConfigurationError(
                f"the rows need a '{name}' column (binary or string); they have {sorted(fields)}")
        return
    if not isinstance(fields[name], allowed):
        kinds = " or ".join(t.typeName() for t in allowed)
        raise KafkaConfigurationError(f"column '{name}' must be {kinds}, not {fields[name].simpleString()}")


def _is_headers(data_type: object) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    inner = {f.name: f.dataType for f in data_type.elementType.fields}
    return isinstance(inner.get("key"), StringType) and isinstance(inner.get("value"), (BinaryType, StringType))


def _choice(opts: OptionMap, name: str, choices: tuple[str, ...]) -> str:
    value = (opts.get(name) or choices[0]).lower()
    if value not in choices:
        raise KafkaConfigurationError(f"option '{name}' must be one of {', '.join(choices)}, not {value!r}")
    return value
