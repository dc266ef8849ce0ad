"""find-hanging and abort, as kafka-transactions.sh does them, on a transaction its coordinator forgot.

The fault is injected on purpose: the cluster is stopped and the transaction's
__transaction_state shard deleted, the "coordinator lost its state" case of KIP-664.
"""
from __future__ import annotations

import shutil

from proto.hashing import partition_for
from tests.integration.conftest import FAST_SETTINGS
from txnsim import Admin, LocalCluster, Producer, TopicPartition


def test_find_hanging_reports_a_forgotten_transaction_and_abort_releases_the_lso(tmp_path):
    data_dir = tmp_path / "cluster"
    tp = TopicPartition("events", 1)
    with LocalCluster(nodes=2, data_dir=data_dir, **FAST_SETTINGS) as cluster:
        with Admin(cluster.bootstrap_servers) as admin:
            admin.create_topic("events", partitions=2)
        p = Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="forgotten",
                     transaction_timeout_ms=900_000)
        p.init_transactions()
        p.begin_transaction()
        start = p.send("events", value=b"stuck", partition=1).get(timeout=10).offset
        # the producer crashes here: it never ends its transaction (close() would abort it)
    shard = partition_for("forgotten", FAST_SETTINGS["txn_shards"])
    shutil.rmtree(data_dir / "logs" / f"__transaction_state-{shard}")
    with LocalCluster(nodes=2, data_dir=data_dir, **FAST_SETTINGS) as cluster, \
            Admin(cluster.bootstrap_servers) as admin:
        assert admin.last_stable_offsets([tp])[tp] == start  # read_committed consumers are stuck here
        hanging = admin.find_hanging_transactions(topic="events")
        assert [(h.topic_partition, h.start_offset) for h in hanging] == [(tp, start)]
        admin.abort_transaction("events", 1, start)
        assert admin.last_stable_offsets([tp])[tp] == admin.end_offsets([tp])[tp]
        assert admin.find_hanging_transactions(topic="events") == []
    p.close(timeout=0)
