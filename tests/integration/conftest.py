"""Integration fixtures: real node processes on loopback, real gRPC, real files."""
from __future__ import annotations

import itertools

import pytest

from txnsim import Admin, LocalCluster

#: short intervals so timeouts and expiry happen within a test's patience
FAST_SETTINGS = dict(
    txn_shards=8,
    offsets_shards=4,
    transaction_abort_timed_out_transaction_cleanup_interval_ms=200,
    group_min_session_timeout_ms=500,
    log_segment_bytes=1024 * 1024,
    # snapshot and roll the shards often, so failovers load from snapshot + tail
    transaction_state_snapshot_interval_records=20,
    offsets_snapshot_interval_records=20,
    internal_log_segment_bytes=8192,
)

_names = itertools.count()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One 3-node cluster per test module (start-up costs about a second)."""
    with LocalCluster(nodes=3, data_dir=tmp_path_factory.mktemp("cluster"), **FAST_SETTINGS) as c:
        yield c


@pytest.fixture(scope="module")
def admin(cluster):
    with Admin(cluster.bootstrap_servers) as a:
        yield a


@pytest.fixture
def topic(admin, request):
    """A fresh 3-partition topic for each test."""
    name = f"t{next(_names)}-{request.node.name[:40].replace('[', '-').replace(']', '')}"
    admin.create_topic(name, partitions=3)
    return name


@pytest.fixture
def txn_id(request):
    return f"tx-{next(_names)}-{request.node.name[:30]}"
