"""Every node's Prometheus metrics, scraped over HTTP from real node processes and parsed with
prometheus_client's own parser: the counters move with what the cluster does, the gauges show
what it holds now, and `txnsim cluster status` says where to scrape."""
from __future__ import annotations

import itertools
import os
import subprocess
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import wait_until
from tests.integration.conftest import FAST_SETTINGS
from txnsim import Consumer, LocalCluster, LocalTransactionState, Producer, TransactionListener

SETTINGS = dict(FAST_SETTINGS, half_shards=4, transaction_check_interval_ms=200, transaction_check_max=4,
                half_message_timeout_ms=200, group_initial_rebalance_delay_ms=1)
_names = itertools.count()

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    """One real scrape: GET /metrics, parsed as Prometheus parses the text format."""
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def scrape_all(cluster: LocalCluster) -> list[Samples]:
    return [scrape(url) for url in (cluster.metrics_url(n) for n in cluster.node_ids) if url is not None]


def total(cluster: LocalCluster, name: str, **labels: str) -> float:
    return sum(value(samples, name, **labels) for samples in scrape_all(cluster))


def lso_lag(cluster: LocalCluster, topic: str, partition: int) -> float | None:
    """The lag reported by the partition's leader (None while no node leads it)."""
    for samples in scrape_all(cluster):
        key = ("txnsim_partition_last_stable_offset_lag", (("partition", str(partition)), ("topic", topic)))
        if key in samples:
            return samples[key]
    return None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Check-backs every 200 ms and no initial rebalance delay, so every counter moves within a test."""
    with LocalCluster(nodes=3, data_dir=tmp_path_factory.mktemp("metrics"), **SETTINGS) as c:
        yield c


def test_every_node_serves_its_own_metrics_on_loopback(cluster):
    urls = [cluster.metrics_url(n) for n in cluster.node_ids]
    assert all(url and url.startswith("http://127.0.0.1:") and url.endswith("/metrics") for url in urls)
    assert len(set(urls)) == 3, "one port per node"
    for samples in scrape_all(cluster):
        assert value(samples, "txnsim_owned_logs", log="transaction_state") > 0
        assert ("txnsim_transactions_committed_total", ()) in samples


def test_commits_and_aborts_are_counted_by_the_transaction_coordinator(cluster, topic, txn_id):
    url = cluster.metrics_url(cluster.coordinator_for(txn_id))
    before = scrape(url)
    with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=txn_id) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, value=b"kept", partition=0).get(timeout=10)
        p.send(topic, value=b"kept", partition=1).get(timeout=10)
        p.commit_transaction()
        p.begin_transaction()
        p.send(topic, value=b"dropped", partition=2).get(timeout=10)
        p.abort_transaction()

    def moved(name: str, **labels: str) -> float:
        return value(scrape(url), name, **labels) - value(before, name, **labels)

    # Complete* is written after EndTxn is answered, once every marker is acknowledged
    wait_until(lambda: moved("txnsim_transactions_committed_total") == 1
               and moved("txnsim_transactions_aborted_total") == 1, 10, "CompleteCommit and CompleteAbort")
    assert moved("txnsim_transactions_started_total") == 2
    assert moved("txnsim_transactions_timed_out_total") == 0
    assert moved("txnsim_transaction_commit_latency_seconds_count") == 1
    assert 0 < moved("txnsim_transaction_commit_latency_seconds_sum") < 10
    assert moved("txnsim_end_txn_latency_seconds_count", result="commit") == 1
    assert moved("txnsim_end_txn_latency_seconds_count", result="abort") == 1


def test_an_open_transaction_holds_the_lso_back_until_the_coordinator_times_it_out(cluster, topic, txn_id):
    url = cluster.metrics_url(cluster.coordinator_for(txn_id))
    before = scrape(url)
    p = Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=txn_id, transaction_timeout_ms=600)
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, value=b"undecided", partition=0).get(timeout=10)
        p.send(topic, value=b"undecided", partition=0).get(timeout=10)
        open_now = scrape(url)
        assert value(open_now, "txnsim_transactions_open", state="Ongoing") >= 1
        assert lso_lag(cluster, topic, 0) == 2, "both records are held back from read_committed"
        wait_until(lambda: value(scrape(url), "txnsim_transactions_timed_out_total")
                   - value(before, "txnsim_transactions_timed_out_total") == 1, 15, "the timeout abort")
        # the ABORT marker moves the LSO past the records: nothing is held back any more
        wait_until(lambda: lso_lag(cluster, topic, 0) == 0, 10, "the LSO to reach the high watermark")
        after = scrape(url)
        assert value(after, "txnsim_transactions_aborted_total") - value(before, "txnsim_transactions_aborted_total") == 1
        assert value(after, "txnsim_transactions_open", state="Ongoing") == 0
    finally:
        p.close(timeout=1)


def test_abort_markers_of_transactions_timed_out_together_share_requests(cluster, topic):
    """Six transactions of one coordinator time out in the same sweep or two: the first abort's marker goes
    at once, and those owed to the same node while it travels go together in the next request."""
    first = f"shared-markers-{next(_names)}"
    coordinator = cluster.coordinator_for(first)
    ids = [first] + list(itertools.islice(
        (tid for tid in (f"shared-markers-{next(_names)}" for _ in range(200))
         if cluster.coordinator_for(tid) == coordinator), 5))
    url = cluster.metrics_url(coordinator)
    before = scrape(url)
    producers = [Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=tid,
                          transaction_timeout_ms=500) for tid in ids]
    try:
        for p in producers:
            p.init_transactions()
        for p in producers:  # all six begin within a few ms, so one or two abort sweeps (200 ms apart) find them
            p.begin_transaction()
        sent = [p.send(topic, value=b"left open", partition=0) for p in producers]
        for future in sent:
            future.get(timeout=10)

        def moved(name: str) -> float:
            return value(scrape(url), name) - value(before, name)

        wait_until(lambda: moved("txnsim_transactions_aborted_total") == 6, 15, "the six timeout aborts to complete")
        requests = moved("txnsim_txn_marker_request_producers_count")
        assert moved("txnsim_txn_marker_request_producers_sum") >= 6, "every abort's marker was sent"
        assert 1 <= requests < 6, f"six transactions' markers took {requests:.0f} requests"
    finally:
        for p in producers:
            p.close(timeout=1)


def test_a_consumer_group_joining_is_a_rebalance(cluster, topic):
    before = total(cluster, "txnsim_group_rebalances_total")
    settings = dict(bootstrap_servers=cluster.bootstrap_servers, group_id=f"metrics-group-{next(_names)}",
                    auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=3000,
                    heartbeat_interval_ms=200)
    with Consumer(**settings) as consumer:
        consumer.subscribe([topic])

        def assigned() -> bool:
            consumer.poll(timeout_ms=100)  # the consumer joins its group from poll
            return bool(consumer.assignment())
        wait_until(assigned, 20, "the consumer to be assigned its partitions")
        assert total(cluster, "txnsim_group_rebalances_total") - before >= 1


class _UnsureThenCommit(TransactionListener):
    """A local transaction that does not know at first (UNKNOW), and committed when checked back."""

    def execute_local_transaction(self, msg, arg):
        return LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg):
        return LocalTransactionState.COMMIT_MESSAGE


def test_a_half_message_left_undecided_is_checked_back_and_resolved(cluster, admin):
    name, group = f"points-{next(_names)}", f"order-service-{next(_names)}"
    admin.create_topic(name, partitions=1)
    sent_before = total(cluster, "txnsim_rocketmq_check_backs_sent_total")
    resolved_before = total(cluster, "txnsim_rocketmq_check_backs_resolved_total", resolution="commit")
    with Producer(bootstrap_servers=cluster.bootstrap_servers, producer_group=group,
                  transaction_listener=_UnsureThenCommit()) as p:
        assert p.wait_for_check_backs(10), "the producer never registered for check-backs"
        p.send_message_in_transaction(name, value=b"-10", key=b"order-1")
        wait_until(lambda: not admin.list_half_messages(group), 15, "the check-back to commit it")
    assert total(cluster, "txnsim_rocketmq_check_backs_sent_total") - sent_before >= 1
    assert total(cluster, "txnsim_rocketmq_check_backs_resolved_total", resolution="commit") - resolved_before == 1
    assert total(cluster, "txnsim_rocketmq_half_messages_undecided") == 0


def leaders(cluster: LocalCluster, topic: str) -> dict[int, int]:
    """partition -> the node leading it now."""
    metadata = cluster.client.refresh_metadata([topic])
    return {p.partition: p.leader for t in metadata.topics if t.name == topic for p in t.partitions}


@pytest.mark.slow
def test_markers_a_paused_partition_owner_does_not_acknowledge_are_sent_again(cluster, topic, txn_id):
    """SIGSTOP the owner of a partition in the transaction: its marker times out (5 s) and is resent to the
    node that took the partition over meanwhile."""
    coordinator = cluster.coordinator_for(txn_id)
    partition, owner = next((p, n) for p, n in sorted(leaders(cluster, topic).items()) if n != coordinator)
    url = cluster.metrics_url(coordinator)
    before = scrape(url)
    with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=txn_id) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, value=b"v", partition=partition).get(timeout=10)
        cluster.pause(owner)
        try:
            p.commit_transaction()  # answered once PrepareCommit is durable; the markers follow
            wait_until(lambda: value(scrape(url), "txnsim_transactions_committed_total")
                       - value(before, "txnsim_transactions_committed_total") == 1, 30, "the commit to complete")
        finally:
            cluster.resume(owner)
    assert value(scrape(url), "txnsim_txn_marker_retries_total") - value(before, "txnsim_txn_marker_retries_total") >= 1
    assert value(scrape(url), "txnsim_transaction_commit_latency_seconds_bucket", le="1.0") \
        - value(before, "txnsim_transaction_commit_latency_seconds_bucket", le="1.0") == 0, "the commit took seconds"
    # the woken node is fenced, then takes its preferred shards back: the next test finds the cluster whole
    wait_until(lambda: value(scrape(cluster.metrics_url(owner)), "txnsim_owned_logs", log="transaction_state") > 0,
               20, "the resumed node to own shards again")


def test_a_killed_node_moves_its_shards_and_cluster_status_shows_where_metrics_are(cluster):
    """Last in this module: it kills a node of the shared cluster."""
    victim, survivors = 2, [0, 1]
    urls = {n: cluster.metrics_url(n) for n in cluster.node_ids}

    def acquired() -> float:
        return sum(value(scrape(urls[n]), "txnsim_ownership_changes_total", action="acquired",
                         log="transaction_state") for n in survivors)

    before = acquired()
    victims_shards = value(scrape(urls[victim]), "txnsim_owned_logs", log="transaction_state")
    assert victims_shards > 0
    cluster.kill(victim)
    wait_until(lambda: acquired() - before >= victims_shards, 10, "the survivors to take the dead node's shards")
    assert cluster.metrics_url(victim) is None

    env = dict(os.environ, COLUMNS="200", TERM="dumb", NO_COLOR="1")
    status = subprocess.run([sys.executable, "-m", "txnsim.cli.main", "cluster", "status", "--data-dir",
                             str(cluster.data_dir)], capture_output=True, text=True, env=env, timeout=60)
    assert status.returncode == 0, status.stderr
    for n in survivors:
        assert f"node {n}  {urls[n]}" in status.stdout
    assert f"node {victim}  (not running)" in status.stdout
