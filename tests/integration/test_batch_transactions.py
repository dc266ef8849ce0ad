"""Batch transactions (txnsim's extension for Spark): many producers, one atomic, idempotent decision."""
from __future__ import annotations

import pytest

from client.cluster import ClusterClient
from producer.batch_participant import BatchParticipant, end_batch_transaction
from tests.helpers import wait_until
from tests.integration.test_transactions import read_values
from txnsim import Admin, errors


def participant(bs, batch_key, **config):
    return BatchParticipant(bootstrap_servers=bs, transactional_id=batch_key, **config)


def write_share(bs, batch_key, batch_id, task, attempt, topic, values):
    """One task attempt: join, write `values` across the topic's partitions, finish; returns its producer id."""
    with participant(bs, batch_key) as p:
        assert p.join(batch_id, task=task, attempt=attempt)
        for i, value in enumerate(values):
            p.send(topic, value=value, partition=i % 3)
        p.finish()
        return p.producer_id_and_epoch[0]


@pytest.fixture
def client(cluster):
    c = ClusterClient(cluster.bootstrap_servers)
    yield c
    c.close()


def test_only_the_named_attempts_commit_and_all_at_once(cluster, topic, txn_id, client):
    bs = cluster.bootstrap_servers
    winner0 = write_share(bs, txn_id, 0, 0, 1, topic, [b"a0", b"a1", b"a2"])
    winner1 = write_share(bs, txn_id, 0, 1, 0, topic, [b"b0", b"b1"])
    write_share(bs, txn_id, 0, 0, 0, topic, [b"failed-attempt"])  # task 0's first attempt lost
    # nothing visible before the decision (the batch is open on purpose)
    assert read_values(bs, topic, "read_committed", left_open=True, settle_s=0) == []
    outcome = end_batch_transaction(client, txn_id, 0, committed=True, winners=[winner0, winner1])
    assert outcome.completed and not outcome.repeated_commit
    assert sorted(read_values(bs, topic, "read_committed")) == [b"a0", b"a1", b"a2", b"b0", b"b1"]
    assert b"failed-attempt" in read_values(bs, topic, "read_uncommitted")


def test_a_repeated_commit_and_a_replayed_batch_change_nothing(cluster, topic, txn_id, client):
    bs = cluster.bootstrap_servers
    winner = write_share(bs, txn_id, 7, 0, 0, topic, [b"once"])
    end_batch_transaction(client, txn_id, 7, committed=True, winners=[winner])
    assert end_batch_transaction(client, txn_id, 7, committed=True, winners=[winner]).repeated_commit
    end_batch_transaction(client, txn_id, 7, committed=False, winners=[])  # Spark's abort after a failed commit
    with participant(bs, txn_id) as replay:
        assert replay.join(7, task=0, attempt=0) is False  # the replay writes nothing
    assert read_values(bs, topic, "read_committed") == [b"once"]


def test_a_stale_attempt_cannot_write_after_the_decision(cluster, topic, txn_id, client):
    bs = cluster.bootstrap_servers
    stale = participant(bs, txn_id)
    assert stale.join(3, task=0, attempt=0)
    stale.send(topic, value=b"early", partition=0)
    stale.finish()
    winner = write_share(bs, txn_id, 3, 0, 1, topic, [b"winner"])
    end_batch_transaction(client, txn_id, 3, committed=True, winners=[winner])
    with pytest.raises(errors.KafkaError):
        stale.send(topic, value=b"late", partition=1).get(timeout=10)
        stale.finish()
    stale.close()
    assert read_values(bs, topic, "read_committed") == [b"winner"]


def test_a_timed_out_batch_is_aborted_and_its_replay_commits(cluster, admin, topic, txn_id, client):
    bs = cluster.bootstrap_servers
    with participant(bs, txn_id, transaction_timeout_ms=500) as p:
        assert p.join(0)
        p.send(topic, value=b"slow", partition=0)
        p.finish()
        lost = p.producer_id_and_epoch[0]
    wait_until(lambda: admin.describe_transaction(txn_id).state == "CompleteAbort", timeout_s=15,
               what="the timeout abort of the batch")
    with pytest.raises(errors.InvalidTxnStateError, match="restart the query"):
        end_batch_transaction(client, txn_id, 0, committed=True, winners=[lost])
    winner = write_share(bs, txn_id, 0, 0, 0, topic, [b"replayed"])  # the restarted query replays batch 0
    end_batch_transaction(client, txn_id, 0, committed=True, winners=[winner])
    assert read_values(bs, topic, "read_committed") == [b"replayed"]


def test_a_new_batch_aborts_an_abandoned_one(cluster, topic, txn_id, client):
    bs = cluster.bootstrap_servers
    write_share(bs, txn_id, 4, 0, 0, topic, [b"abandoned"])
    winner = write_share(bs, txn_id, 5, 0, 0, topic, [b"next"])
    end_batch_transaction(client, txn_id, 5, committed=True, winners=[winner])
    assert read_values(bs, topic, "read_committed") == [b"next"]


def test_batch_keys_and_transactional_ids_do_not_mix(cluster, txn_id, client):
    bs = cluster.bootstrap_servers
    with participant(bs, txn_id) as p:
        p.join(0)
    from txnsim import Producer
    with Producer(bootstrap_servers=bs, transactional_id=txn_id) as p:
        with pytest.raises(errors.InvalidRequestError, match="batch transaction id"):
            p.init_transactions()


def test_the_decision_survives_the_coordinator_killed(tmp_path):
    """Killed before EndBatchTxn: the participants are durable; killed right after: the next owner finishes."""
    from tests.integration.conftest import FAST_SETTINGS
    from txnsim import LocalCluster
    with LocalCluster(nodes=3, data_dir=tmp_path / "c", **FAST_SETTINGS) as cluster:
        bs = cluster.bootstrap_servers
        with Admin(bs) as admin:
            admin.create_topic("t", partitions=3)
        client = ClusterClient(bs)
        try:
            winners = [write_share(bs, "q", 0, task, 0, "t", [f"0-{task}-{i}".encode() for i in range(3)])
                       for task in range(2)]
            cluster.kill(cluster.coordinator_for("q"))
            end_batch_transaction(client, "q", 0, committed=True, winners=winners)
            winners = [write_share(bs, "q", 1, task, 0, "t", [f"1-{task}".encode()]) for task in range(2)]
            end_batch_transaction(client, "q", 1, committed=True, winners=winners, wait_s=0)
            cluster.kill(cluster.coordinator_for("q"))
            with Admin(bs) as admin:
                wait_until(lambda: admin.describe_transaction("q").state == "CompleteCommit", timeout_s=15,
                           what="the next owner to complete batch 1")
            assert end_batch_transaction(client, "q", 1, committed=True, winners=winners).repeated_commit
        finally:
            client.close()
        values = read_values(bs, "t", "read_committed")
        assert sorted(values) == sorted([f"0-{t}-{i}".encode() for t in range(2) for i in range(3)]
                                        + [b"1-0", b"1-1"])
