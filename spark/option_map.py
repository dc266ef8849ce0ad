"""Spark's string options as both sides of the connector read them: one spelling rule, one set of errors.

Names are case-insensitive and trimmed, "kafka."-prefixed spellings are accepted as Spark's
Kafka source does, and every bad value raises KafkaConfigurationError naming the option.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, overload

from proto.errors import KafkaConfigurationError

#: Spark's Kafka source and sink read client settings from "kafka."-prefixed options; accept both spellings
KAFKA_PREFIX = "kafka."


class OptionMap:
    """Case-insensitive, whitespace-trimmed view of Spark's string options."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self._values = {str(k).lower(): v for k, v in options.items()}

    def get(self, name: str) -> str | None:
        value = self._values.get(name.lower())
        if value is None:
            return None
        text = str(value).strip()
        return text or None

    def either(self, name: str) -> tuple[str, str | None]:
        """`name` or its "kafka."-prefixed spelling; both given with different values is an error."""
        plain, prefixed = self.get(name), self.get(KAFKA_PREFIX + name)
        if plain is not None and prefixed is not None and plain != prefixed:
            raise KafkaConfigurationError(
                f"options '{name}' ({plain!r}) and '{KAFKA_PREFIX}{name}' ({prefixed!r}) disagree; set only one")
        if plain is not None:
            return name, plain
        return KAFKA_PREFIX + name, prefixed

    def boolean(self, name: str, *, default: bool) -> bool:
        text = self.get(name)
        if text is None:
            return default
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise KafkaConfigurationError(f"option '{name}' must be 'true' or 'false', not {text!r}")

    @overload
    def positive_int(self, name: str, *, default: int) -> int: ...

    @overload
    def positive_int(self, name: str, *, default: None) -> int | None: ...

    def positive_int(self, name: str, *, default: int | None) -> int | None:
        text = self.get(name)
        if text is None:
            return default
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise KafkaConfigurationError(f"option '{name}' must be a positive integer, not {text!r}")
        return value


def parse_bootstrap(opts: OptionMap) -> str:
    name, servers = opts.either("bootstrap.servers")
    if servers is None:
        raise KafkaConfigurationError(
            "option 'bootstrap.servers' is required, e.g. .option('bootstrap.servers', '127.0.0.1:7001,127.0.0.1:7002')")
    for server in (s.strip() for s in servers.split(",")):
        host, _, port = server.rpartition(":")
        if not host or not port.isdigit():
            raise KafkaConfigurationError(
                f"option '{name}' must be 'host:port[,host:port...]', not {servers!r}")
    return servers
