"""Kafka's dynamic broker settings that txnsim has no use for, stored so AlterConfigs on a broker works.

Kafka lets AlterConfigs change some broker settings at run time (its DynamicBrokerConfig: thread pools,
the log cleaner, TLS and SASL material, metrics reporters, connection quotas), per broker or as the cluster
default (resource name ""). Admin tools and test suites set them (librdkafka's admin test sets
`sasl.kerberos.min.time.before.relogin`). txnsim has no such machinery, so it stores what it is given and
describes it back (source DYNAMIC_BROKER_CONFIG or DYNAMIC_DEFAULT_BROKER_CONFIG), acting on none of it.
A node's own settings (cluster.json: message.max.bytes, retention, limits) stay fixed while it runs, and
AlterConfigs on them is INVALID_REQUEST "Cannot update these configs dynamically", as Kafka answers for a
read-only setting.

One file, metadata/broker-configs.json, `{"<node id>" or "": {name: value}}`: an exclusive flock serialises
the nodes' writers and an atomic rename keeps readers whole, as for topics.json.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from pathlib import Path

from coordinator.layout import write_atomically

#: the resource name of the cluster-wide default
CLUSTER_DEFAULT = ""

#: Kafka's dynamic broker settings, by exact name, that txnsim stores and does not act on
STORED_NAMES = frozenset({
    "background.threads", "num.io.threads", "num.network.threads", "num.replica.fetchers",
    "num.recovery.threads.per.data.dir", "log.cleaner.threads", "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.size", "log.cleaner.io.buffer.load.factor",
    "log.cleaner.backoff.ms", "log.cleaner.min.cleanable.ratio", "log.cleaner.delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", "metric.reporters",
    "max.connection.creation.rate", "leader.replication.throttled.rate", "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second", "unclean.leader.election.enable", "compression.type",
    "log.flush.interval.messages", "log.flush.interval.ms", "log.preallocate", "log.index.interval.bytes",
    "log.index.size.max.bytes", "log.roll.ms", "log.roll.jitter.ms", "log.message.timestamp.type",
    "log.message.downconversion.enable", "producer.id.expiration.ms", "remote.log.manager.copy.max.bytes.per.second",
    "principal.builder.class", "super.users", "authorizer.class.name", "connections.max.reauth.ms",
})
#: prefixes of Kafka's dynamic security settings (TLS and SASL, also per listener)
STORED_PREFIXES = ("ssl.", "sasl.", "listener.name.")


def is_stored(name: str) -> bool:
    """Whether AlterConfigs may set `name` on a broker: one of Kafka's dynamic settings txnsim only stores."""
    return name in STORED_NAMES or name.startswith(STORED_PREFIXES)


class BrokerConfigStore:
    """The stored dynamic settings of every node and of the cluster default."""

    def __init__(self, metadata_dir: Path) -> None:
        self._path = metadata_dir / "broker-configs.json"
        self._lock_path = metadata_dir / "broker-configs.lock"

    def read(self) -> dict[str, dict[str, str]]:
        """resource name ("" or a node id) -> name -> value."""
        try:
            data = json.loads(self._path.read_text())
        except FileNotFoundError:
            return {}
        return {str(k): {str(n): str(v) for n, v in entry.items()} for k, entry in data.items()
                if isinstance(entry, dict)}

    def settings(self, resource: str) -> dict[str, str]:
        return self.read().get(resource, {})

    def replace(self, resource: str, settings: dict[str, str]) -> None:
        """Make `settings` the stored set of `resource` (an empty set removes it)."""
        with self._locked() as current:
            if settings:
                current[resource] = dict(sorted(settings.items()))
            else:
                current.pop(resource, None)
            write_atomically(self._path, json.dumps(current, indent=2, sort_keys=True).encode())

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, dict[str, str]]]:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "a") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                yield self.read()
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)
