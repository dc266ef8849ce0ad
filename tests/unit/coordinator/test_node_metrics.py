"""NodeMetrics without a cluster: each node's registry is its own, and a taken port is one clear error."""
from __future__ import annotations

import socket
import urllib.request
from dataclasses import dataclass

import pytest
from prometheus_client.parser import text_string_to_metric_families

from coordinator.metrics import NodeMetrics, NodeState
from proto.errors import KafkaConfigurationError


@dataclass
class FakeLog:
    topic: str
    partition: int
    high_watermark: int
    last_stable_offset: int


def samples(metrics: NodeMetrics, url: str | None = None) -> dict[tuple[str, tuple], float]:
    if url is None:
        families = metrics.registry.collect()
    else:
        with urllib.request.urlopen(url, timeout=5) as response:
            families = text_string_to_metric_families(response.read().decode())
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_two_nodes_in_one_process_count_apart():
    first, second = NodeMetrics(), NodeMetrics()
    first.transaction_completed(committed=True)
    first.ownership_changed("acquired", "__transaction_state", 0, 1)
    assert samples(first)[("txnsim_transactions_committed_total", ())] == 1
    assert samples(second)[("txnsim_transactions_committed_total", ())] == 0
    assert samples(first)[("txnsim_ownership_changes_total", (("action", "acquired"),
                                                               ("log", "transaction_state")))] == 1


def test_gauges_are_read_from_the_node_at_each_scrape():
    logs = [FakeLog("orders", 0, 10, 7), FakeLog("__consumer_offsets", 3, 5, 5)]
    metrics = NodeMetrics()
    metrics.watch(NodeState(open_transactions=lambda: {"Ongoing": 2}, open_logs=lambda: logs,
                            undecided_half_messages=lambda: 1))
    url = metrics.serve("127.0.0.1", 0)
    try:
        got = samples(metrics, url)
        assert got[("txnsim_partition_last_stable_offset_lag", (("partition", "0"), ("topic", "orders")))] == 3
        assert ("txnsim_partition_last_stable_offset_lag", (("partition", "3"), ("topic", "__consumer_offsets"))) \
            not in got, "internal logs are counted in txnsim_owned_logs, not as partitions"
        assert got[("txnsim_transactions_open", (("state", "Ongoing"),))] == 2
        assert got[("txnsim_owned_logs", (("log", "consumer_offsets"),))] == 1
        logs[0].last_stable_offset = 10  # the transaction ended
        assert samples(metrics, url)[("txnsim_partition_last_stable_offset_lag",
                                      (("partition", "0"), ("topic", "orders")))] == 0
    finally:
        metrics.stop()


def test_a_taken_port_is_one_clear_error_naming_it():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(KafkaConfigurationError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            NodeMetrics().serve("127.0.0.1", port)
