"""KafkaJS 2.2.4 and the RocketMQ 5 Node.js client (rocketmq-client-nodejs 1.0.8), unchanged, against a real
txnsim cluster: each test runs one script of tests/clients/node/ with Node and passes when it exits 0; the
script's header says what it checks, and its output (shown when a test fails) says how far it got.

Node's clients are worth their own tests because they lean on txnsim differently from librdkafka, the JVM
and Python clients: KafkaJS speaks old API versions (v1 of every transactional API, so a fenced producer
must be told INVALID_PRODUCER_EPOCH, not PRODUCER_FENCED) and refuses an API a broker does not list; the
RocketMQ Node client dereferences answer fields the others leave alone (backoff_policy, body_digest), reads
only queue 0 of each broker, and reopens a Telemetry stream the server ends.

scripts/setup.sh installs the packages (npm ci in tests/clients/node); without Node, or without them, these
tests skip and say why.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import FAST_SETTINGS
from txnsim import LocalCluster

NODE_DIR = Path(__file__).resolve().parents[1] / "clients" / "node"
NODE = shutil.which("node")
#: each script stops itself after 55 s; this is for a script that hangs anyway
SCRIPT_TIMEOUT_S = 90

if NODE is None:
    pytestmark = [pytest.mark.skip(reason="node is not installed (Node.js 20; scripts/setup.sh then installs "
                                          "the clients with npm)")]
elif not (NODE_DIR / "node_modules" / "kafkajs").is_dir() or not (
        NODE_DIR / "node_modules" / "rocketmq-client-nodejs").is_dir():
    pytestmark = [pytest.mark.skip(reason=f"the Node.js clients are not installed in {NODE_DIR} (scripts/setup.sh "
                                          "runs npm ci there)")]
else:
    pytestmark = [pytest.mark.timeout(SCRIPT_TIMEOUT_S + 30)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A first check-back 2 s after a half message is stored (6 s by default): the Node client's transactions
    set no check immunity, so this is when txnsim asks its checker."""
    with LocalCluster(nodes=3, data_dir=tmp_path_factory.mktemp("node-clients"), half_message_timeout_ms=2000,
                      **FAST_SETTINGS) as c:
        yield c


def run_script(script: str, *args: str) -> str:
    """Run `node script args...` in tests/clients/node; fail with its output unless it exits 0 in time."""
    env = {k: v for k, v in os.environ.items() if k not in ("VERBOSE", "TRACE")}
    try:
        done = subprocess.run([str(NODE), script, *args], cwd=NODE_DIR, env=env, capture_output=True, text=True,
                              timeout=SCRIPT_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        out, err = (s.decode(errors="replace") if isinstance(s, bytes) else s or "" for s in (exc.stdout, exc.stderr))
        pytest.fail(f"node {script} still running after {SCRIPT_TIMEOUT_S} s\n--- stdout\n{out}\n--- stderr\n{err}")
    assert done.returncode == 0, (f"node {script} exited {done.returncode}\n--- stdout\n{done.stdout}\n"
                                  f"--- stderr\n{done.stderr}")
    return done.stdout


# ------------------------------------------------------------ KafkaJS, on the Kafka port


def test_kafkajs_admin_creates_lists_configures_grows_trims_and_deletes_topics(cluster):
    run_script("kafkajs_admin.js", cluster.kafka_bootstrap_servers)


@pytest.mark.slow
def test_kafkajs_idempotent_records_come_back_once_in_order_to_a_group_that_commits(cluster):
    run_script("kafkajs_idempotent.js", cluster.kafka_bootstrap_servers)


@pytest.mark.slow
def test_kafkajs_read_committed_consumer_sees_committed_transactions_only(cluster):
    run_script("kafkajs_transactions.js", cluster.kafka_bootstrap_servers)


@pytest.mark.slow
def test_kafkajs_fenced_producer_is_answered_invalid_producer_epoch_on_every_call(cluster):
    run_script("kafkajs_fencing.js", cluster.kafka_bootstrap_servers)


@pytest.mark.slow
def test_kafkajs_offsets_commit_with_the_output_transaction_and_a_group_rebalances(cluster):
    run_script("kafkajs_exactly_once_and_rebalance.js", cluster.kafka_bootstrap_servers)


# ------------------------------------------------------------ RocketMQ's Node.js client, on the txnsim port


@pytest.mark.slow
def test_rocketmq_node_producer_and_simple_consumer_send_receive_ack_and_shut_down(cluster):
    run_script("rocketmq_normal.js", cluster.rocketmq_endpoints, cluster.kafka_bootstrap_servers)


def test_rocketmq_node_simple_consumer_receives_every_partition_of_every_node(cluster):
    run_script("rocketmq_all_partitions.js", cluster.rocketmq_endpoints, cluster.kafka_bootstrap_servers)


@pytest.mark.slow
def test_rocketmq_node_transaction_commits_is_checked_back_and_rolls_back(cluster):
    run_script("rocketmq_transaction.js", cluster.rocketmq_endpoints, cluster.kafka_bootstrap_servers)
