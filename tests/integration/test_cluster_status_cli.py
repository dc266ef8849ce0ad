"""`txnsim cluster status` right after a node restarts: the logs it leads but has not opened yet are named,
not counted as nothing; they leave the list once a client uses them."""
from __future__ import annotations

import json

from tests.helpers import wait_until
from tests.integration.conftest import FAST_SETTINGS
from tests.integration.test_cli import txnsim
from txnsim import Admin, LocalCluster, Producer, TopicPartition


def _status(bootstrap_servers: str) -> dict:
    result = txnsim("cluster", "status", "--json", "--bootstrap-servers", bootstrap_servers)
    assert result.returncode == 0, result
    return json.loads(result.stdout)


def test_status_names_the_partitions_a_restarted_node_has_not_opened_yet(tmp_path):
    with LocalCluster(nodes=2, data_dir=tmp_path / "cluster", **FAST_SETTINGS) as cluster, \
            Admin(cluster.bootstrap_servers) as admin:
        admin.create_topic("reopened", partitions=4)
        with Producer(bootstrap_servers=cluster.bootstrap_servers) as p:
            for partition in range(4):
                p.send("reopened", value=b"v", partition=partition)
        cluster.kill(1)
        cluster.restart(1)

        def unopened() -> list[str]:
            node = next(n for n in _status(cluster.bootstrap_servers)["nodes"] if n["node"] == 1)
            if not node["alive"] or node["error"]:
                return []
            return [name for name in node["not_yet_opened"] if name.startswith("reopened-")]

        pending = wait_until(unopened, timeout_s=30, what="node 1 to be back and lead partitions it has not opened")
        tps = [TopicPartition("reopened", int(name.rsplit("-", 1)[1])) for name in pending]
        wait_until(lambda: sum(admin.end_offsets(tps).values()) == len(tps), timeout_s=30,
                   what="the restarted node to serve its partitions again")  # opens them
        assert unopened() == []
