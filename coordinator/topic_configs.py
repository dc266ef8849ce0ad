"""Every topic setting txnsim accepts: Kafka's (its names, types and defaults) and txnsim's own.

Kafka's tools and frameworks create topics with settings (Kafka Connect and Schema Registry insist on
`cleanup.policy=compact` for their topics) and read them back with DescribeConfigs; refusing them would
lock those clients out. So each of Kafka's topic settings is accepted and validated as Kafka validates
it; `enforced` says whether txnsim also honours it (docs/kafka-wire.md lists which it does not).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from proto.errors import InvalidConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


class ConfigType(enum.IntEnum):
    """DescribeConfigs' config_type (v3+), as Kafka's ConfigEntry.ConfigType numbers them."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


@dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    type: ConfigType
    #: Kafka's default; for the few a node overrides (max.message.bytes, segment.bytes) see default_for()
    default: str
    #: what the value must be: a number at least `minimum` (and at most `maximum`), or one of `choices`
    minimum: float | None = None
    maximum: float | None = None
    choices: frozenset[str] = frozenset()
    #: True when txnsim acts on it; False: accepted, stored and described, but not acted on
    enforced: bool = False
    #: the broker setting that gives its default (Kafka's ServerTopicConfigSynonyms)
    broker_synonym: str | None = None
    #: settings whose value is fixed once the topic exists
    fixed_after_create: bool = False

    def check(self, value: str) -> str:
        """The value as stored (numbers normalised), or INVALID_CONFIG saying what it must be."""
        if self.type is ConfigType.BOOLEAN:
            lowered = value.strip().lower()
            if lowered not in ("true", "false"):
                raise self._invalid(value, "true or false")
            return lowered
        if self.type in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
            try:
                number = int(value.strip())
            except ValueError:
                raise self._invalid(value, "an integer") from None
            self._in_range(number, value)
            return str(number)
        if self.type is ConfigType.DOUBLE:
            try:
                ratio = float(value.strip())
            except ValueError:
                raise self._invalid(value, "a number") from None
            self._in_range(ratio, value)
            return str(ratio)
        if self.type is ConfigType.LIST:
            items = [item.strip() for item in value.split(",") if item.strip()]
            if self.choices and (not items or any(item not in self.choices for item in items)):
                raise self._invalid(value, f"a list of {', '.join(sorted(self.choices))}")
            return ",".join(items)
        if self.choices and value not in self.choices:
            raise self._invalid(value, f"one of {', '.join(sorted(self.choices))}")
        return value

    def _in_range(self, number: float, value: str) -> None:
        if self.minimum is not None and number < self.minimum:
            raise self._invalid(value, f"at least {self.minimum:g}")
        top = self.maximum if self.maximum is not None else (INT_MAX if self.type is ConfigType.INT else LONG_MAX)
        if number > top:
            raise self._invalid(value, f"at most {top:g}")

    def _invalid(self, value: str, wanted: str) -> InvalidConfigError:
        return InvalidConfigError(f"[INVALID_CONFIG] invalid value {value!r} for topic setting {self.name}: it must "
                                  f"be {wanted}")


def _c(name: str, kind: ConfigType, default: str, **more: object) -> TopicConfig:
    return TopicConfig(name, kind, default, **more)  # type: ignore[arg-type]


B, S, I, L, D, LIST = (ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.LONG, ConfigType.DOUBLE,
                       ConfigType.LIST)
_COMPRESSION = frozenset({"uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"})

#: every topic setting, by name (Kafka's LogConfig, its defaults, then txnsim's own)
TOPIC_CONFIGS: dict[str, TopicConfig] = {c.name: c for c in (
    _c("cleanup.policy", LIST, "delete", choices=frozenset({"delete", "compact"}), broker_synonym="log.cleanup.policy"),
    _c("compression.type", S, "producer", choices=_COMPRESSION),
    _c("compression.gzip.level", I, "-1", minimum=-1, maximum=9),
    _c("compression.lz4.level", I, "9", minimum=1, maximum=17),
    _c("compression.zstd.level", I, "3", minimum=-131072, maximum=22),
    _c("delete.retention.ms", L, "86400000", minimum=0),
    _c("file.delete.delay.ms", L, "60000", minimum=0),
    _c("flush.messages", L, str(LONG_MAX), minimum=1),
    _c("flush.ms", L, str(LONG_MAX), minimum=0),
    _c("follower.replication.throttled.replicas", LIST, ""),
    _c("index.interval.bytes", I, "4096", minimum=0),
    _c("leader.replication.throttled.replicas", LIST, ""),
    _c("local.retention.bytes", L, "-2", minimum=-2),
    _c("local.retention.ms", L, "-2", minimum=-2),
    _c("max.compaction.lag.ms", L, str(LONG_MAX), minimum=1),
    _c("max.message.bytes", I, "1048588", minimum=1, enforced=True, broker_synonym="message.max.bytes"),
    _c("message.downconversion.enable", B, "true"),
    # deprecated in Kafka 3 and gone in 4.0, still sent by clients and tests written for Kafka 3
    _c("message.format.version", S, "3.0-IV1", broker_synonym="log.message.format.version"),
    _c("message.timestamp.difference.max.ms", L, str(LONG_MAX), minimum=0,
       broker_synonym="log.message.timestamp.difference.max.ms"),
    _c("message.timestamp.after.max.ms", L, "3600000", minimum=0),
    _c("message.timestamp.before.max.ms", L, str(LONG_MAX), minimum=0),
    _c("message.timestamp.type", S, "CreateTime", choices=frozenset({"CreateTime", "LogAppendTime"}),
       broker_synonym="log.message.timestamp.type"),
    _c("min.cleanable.dirty.ratio", D, "0.5", minimum=0, maximum=1),
    _c("min.compaction.lag.ms", L, "0", minimum=0),
    _c("min.insync.replicas", I, "1", minimum=1),
    _c("preallocate", B, "false"),
    _c("remote.storage.enable", B, "false"),
    _c("retention.bytes", L, "-1", enforced=True, broker_synonym="log.retention.bytes"),
    _c("retention.ms", L, "604800000", minimum=-1, enforced=True, broker_synonym="log.retention.ms"),
    _c("segment.bytes", I, "1073741824", minimum=14, enforced=True, broker_synonym="log.segment.bytes"),
    _c("segment.index.bytes", I, "10485760", minimum=4),
    _c("segment.jitter.ms", L, "0", minimum=0),
    _c("segment.ms", L, "604800000", minimum=1, broker_synonym="log.roll.ms"),
    _c("unclean.leader.election.enable", B, "false"),
    # txnsim's own: RocketMQ 5's topic message type, and how an undecided transactional message waits
    _c("message.type", S, "MIXED", choices=frozenset({"NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"}),
       enforced=True),
    _c("half.message.storage", S, "rocketmq", choices=frozenset({"rocketmq", "kafka"}), enforced=True,
       fixed_after_create=True),
)}


def check_configs(configs: dict[str, str]) -> dict[str, str]:
    """The settings as stored, each checked; INVALID_CONFIG names an unknown one or a bad value."""
    checked = {}
    for name, value in configs.items():
        definition = TOPIC_CONFIGS.get(name)
        if definition is None:
            raise InvalidConfigError(f"[INVALID_CONFIG] unknown topic config name: {name}")
        if value is None:
            raise InvalidConfigError(f"[INVALID_CONFIG] topic setting {name} needs a value (null given)")
        checked[name] = definition.check(str(value))
    return checked


def not_enforced(configs: dict[str, str]) -> list[str]:
    """The names among `configs` that txnsim stores but does not act on."""
    return sorted(name for name in configs if not TOPIC_CONFIGS[name].enforced)

