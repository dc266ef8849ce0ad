"""Kafka listener addresses in DATA/cluster.json: written beside the gRPC ones, optional when read."""
from __future__ import annotations

import json

import pytest

from coordinator.layout import (
    ClusterLayout,
    ClusterSpec,
    read_cluster_spec,
    write_cluster_spec,
)
from proto.errors import KafkaConfigurationError
from txnsim.cluster import LocalCluster


def test_kafka_addresses_round_trip_through_the_cluster_file(tmp_path):
    layout = ClusterLayout(tmp_path)
    spec = ClusterSpec({0: "127.0.0.1:7000", 1: "127.0.0.1:7001"}, kafka_nodes={0: "127.0.0.1:9092",
                                                                                1: "127.0.0.1:9093"})
    write_cluster_spec(layout, spec)
    assert json.loads(layout.cluster_file.read_text())["kafka_nodes"] == {"0": "127.0.0.1:9092", "1": "127.0.0.1:9093"}
    assert read_cluster_spec(layout) == spec
    assert spec.kafka_bootstrap_servers == "127.0.0.1:9092,127.0.0.1:9093"


def test_a_cluster_file_from_before_the_kafka_listener_still_loads_and_gets_free_ports(tmp_path):
    layout = ClusterLayout(tmp_path)
    layout.make_dirs()
    layout.cluster_file.write_text(json.dumps({"nodes": {"0": "127.0.0.1:7000", "1": "127.0.0.1:7001"}}))
    assert read_cluster_spec(layout).kafka_nodes == {}
    cluster = LocalCluster(nodes=2, data_dir=tmp_path)
    assert cluster.spec.nodes == {0: "127.0.0.1:7000", 1: "127.0.0.1:7001"}  # the gRPC ports stay
    assert sorted(cluster.spec.kafka_nodes) == [0, 1]
    assert len(set(cluster.kafka_bootstrap_servers.split(","))) == 2


def test_kafka_port_gives_the_first_node_that_port_and_the_next_ones_the_ports_after_it(tmp_path):
    cluster = LocalCluster(nodes=3, data_dir=tmp_path, kafka_port=19092)
    assert cluster.kafka_bootstrap_servers == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
    with pytest.raises(KafkaConfigurationError, match="kafka_port"):
        LocalCluster(nodes=3, data_dir=tmp_path / "other", kafka_port=65534)
