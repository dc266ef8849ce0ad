"""The transaction protocol end to end, as a user sees it, on real node processes."""
from __future__ import annotations

import pytest

from tests.helpers import read_all, wait_until
from txnsim import Consumer, OffsetAndMetadata, Producer, TopicPartition, errors


def read_values(bs, topic, isolation, partitions=3, *, left_open=False, settle_s=2.0):
    """The values a reader sees; `left_open`: a transaction may be open on purpose (read up to it)."""
    return [r.value for r in read_all(bs, topic, partitions=partitions, isolation_level=isolation,
                                      settle_s=settle_s, open_allowed=left_open)]


def test_commit_across_partitions_is_seen_by_both_isolation_levels(cluster, topic, txn_id):
    with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=txn_id) as p:
        p.init_transactions()
        p.begin_transaction()
        metas = [p.send(topic, value=f"v{i}".encode(), partition=i).get(timeout=10) for i in range(3)]
        p.commit_transaction()
    assert sorted(m.partition for m in metas) == [0, 1, 2]
    expected = sorted(f"v{i}".encode() for i in range(3))
    assert sorted(read_values(cluster.bootstrap_servers, topic, "read_committed")) == expected
    assert sorted(read_values(cluster.bootstrap_servers, topic, "read_uncommitted")) == expected


def test_aborted_records_are_hidden_from_read_committed_only(cluster, topic, txn_id):
    with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=txn_id) as p:
        p.init_transactions()
        p.begin_transaction()
        for i in range(3):
            p.send(topic, value=b"aborted", partition=i)
        p.flush()
        p.abort_transaction()
        p.begin_transaction()
        p.send(topic, value=b"kept", partition=1)
        p.commit_transaction()
    assert read_values(cluster.bootstrap_servers, topic, "read_committed") == [b"kept"]
    assert sorted(read_values(cluster.bootstrap_servers, topic, "read_uncommitted")) == \
        sorted([b"aborted"] * 3 + [b"kept"])


def test_read_committed_holds_records_behind_an_open_transaction(cluster, admin, topic, txn_id):
    bs = cluster.bootstrap_servers
    tp = TopicPartition(topic, 0)
    with Producer(bootstrap_servers=bs, transactional_id=txn_id) as open_txn, \
            Producer(bootstrap_servers=bs, transactional_id=txn_id + "-b") as later:
        open_txn.init_transactions()
        open_txn.begin_transaction()
        first = open_txn.send(topic, value=b"undecided", partition=0).get(timeout=10)
        later.init_transactions()
        later.begin_transaction()
        later.send(topic, value=b"committed-later", partition=0)
        later.commit_transaction()
        # the LSO is pinned at the open transaction's first offset, below the high watermark
        assert admin.last_stable_offsets([tp])[tp] == first.offset
        assert admin.end_offsets([tp])[tp] > first.offset + 1
        assert read_values(bs, topic, "read_committed", left_open=True, settle_s=0) == []
        assert sorted(read_values(bs, topic, "read_uncommitted", left_open=True, settle_s=0)) == [b"committed-later",
                                                                                      b"undecided"]
        open_txn.commit_transaction()
    assert read_values(bs, topic, "read_committed") == [b"undecided", b"committed-later"]


def test_a_zombie_producer_is_fenced_and_its_records_never_appear(cluster, topic, txn_id):
    bs = cluster.bootstrap_servers
    zombie = Producer(bootstrap_servers=bs, transactional_id=txn_id)
    zombie.init_transactions()
    zombie.begin_transaction()
    zombie.send(topic, value=b"zombie", partition=0).get(timeout=10)
    with Producer(bootstrap_servers=bs, transactional_id=txn_id) as fresh:
        fresh.init_transactions()
        # Kafka's order under transactions V2: the leader's implicit add hears PRODUCER_FENCED and answers the
        # send INVALID_PRODUCER_EPOCH (abortable); the abort's EndTxn then hears PRODUCER_FENCED (fatal)
        with pytest.raises(errors.InvalidProducerEpochError):
            zombie.send(topic, value=b"zombie-2", partition=1).get(timeout=10)
        with pytest.raises(errors.InvalidProducerEpochError, match="abort_transaction"):
            zombie.commit_transaction()
        with pytest.raises(errors.ProducerFencedError):
            zombie.abort_transaction()
        zombie.close()
        fresh.begin_transaction()
        fresh.send(topic, value=b"fresh", partition=2)
        fresh.commit_transaction()
    assert read_values(bs, topic, "read_committed") == [b"fresh"]


def test_transactional_offsets_become_visible_only_with_the_commit(cluster, topic, txn_id):
    bs = cluster.bootstrap_servers
    group = f"{txn_id}-group"
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap_servers=bs, group_id=group, isolation_level="read_committed",
                  enable_auto_commit=False) as c, \
            Producer(bootstrap_servers=bs, transactional_id=txn_id) as p:
        c.assign([tp])
        assert c.committed(tp) is None
        p.init_transactions()
        p.begin_transaction()
        p.send_offsets_to_transaction({tp: OffsetAndMetadata(42)}, c.group_metadata())
        p.abort_transaction()
        assert c.committed(tp) is None
        p.begin_transaction()
        p.send(topic, value=b"out", partition=1)
        p.send_offsets_to_transaction({tp: OffsetAndMetadata(7)}, c.group_metadata())
        p.commit_transaction()
        assert wait_until(lambda: c.committed(tp) == 7, what="offset 7 committed")


def test_the_coordinator_aborts_a_transaction_past_its_timeout(cluster, admin, topic, txn_id):
    bs = cluster.bootstrap_servers
    tp = TopicPartition(topic, 0)
    p = Producer(bootstrap_servers=bs, transactional_id=txn_id, transaction_timeout_ms=500)
    p.init_transactions()
    p.begin_transaction()
    p.send(topic, value=b"too-slow", partition=0).get(timeout=10)
    wait_until(lambda: admin.describe_transaction(txn_id).state == "CompleteAbort", timeout_s=15,
               what="timeout abort")
    assert admin.last_stable_offsets([tp])[tp] == admin.end_offsets([tp])[tp]
    with pytest.raises(errors.KafkaError) as failure:
        p.commit_transaction()
    assert isinstance(failure.value, (errors.ProducerFencedError, errors.InvalidProducerEpochError,
                                      errors.TransactionAbortableError))
    p.close()
    assert read_values(bs, topic, "read_committed") == []


def test_list_and_describe_transactions(cluster, admin, topic, txn_id):
    with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=txn_id) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, value=b"x", partition=2).get(timeout=10)
        d = admin.describe_transaction(txn_id)
        assert d.state == "Ongoing"
        assert d.partitions == {TopicPartition(topic, 2)}
        assert d.timeout_ms == 60000
        assert txn_id in {t.transactional_id for t in admin.list_transactions(states=["Ongoing"])}
        p.commit_transaction()
    assert wait_until(lambda: admin.describe_transaction(txn_id).state == "CompleteCommit")
    with pytest.raises(errors.TransactionalIdNotFoundError):
        admin.describe_transaction("never-used-" + txn_id)
