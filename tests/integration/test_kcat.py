"""kcat (Debian's, librdkafka inside), unchanged, against txnsim's Kafka port: the tool people reach for first to
look at a Kafka cluster from a shell. Metadata (-L, -J), produce and consume with keys and headers (-P, -C),
read_committed consumption of txnsim's own transactions, a consumer group that commits (-G) and offsets by time
(-Q), each checked against what txnsim itself says.

scripts/setup.sh installs kcat (apt-get, as root); without it these tests skip and say why.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

from tests.helpers import leader_of, read_all, wait_until
from txnsim import Admin, TopicPartition
from txnsim import Producer as TxnsimProducer

KCAT = shutil.which("kcat") or shutil.which("kafkacat")

pytestmark = [pytest.mark.timeout(120)]
if KCAT is None:
    pytestmark.append(pytest.mark.skip(reason="kcat is not installed (apt-get install kcat as root; "
                                              "scripts/setup.sh does it)"))


def kcat(cluster, *args: str, stdin: str | None = None, timeout_s: float = 30) -> str:
    """kcat's standard output; fails with its output unless it exits 0 within `timeout_s`."""
    command = [str(KCAT), "-b", cluster.kafka_bootstrap_servers, *args]
    try:
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        out, err = (s.decode(errors="replace") if isinstance(s, bytes) else s or "" for s in (exc.stdout, exc.stderr))
        pytest.fail(f"{' '.join(command)} still running after {timeout_s} s\n--- stdout\n{out}\n--- stderr\n{err}")
    assert done.returncode == 0, (f"{' '.join(command)} exited {done.returncode}\n--- stdout\n{done.stdout}\n"
                                  f"--- stderr\n{done.stderr}")
    return done.stdout


def consumed(cluster, *args: str) -> list[dict]:
    """Each message of a kcat consumer that exits at the end (-e), as its JSON envelope (-J)."""
    return [json.loads(line) for line in kcat(cluster, "-J", "-e", *args).splitlines() if line.strip()]


def test_kcat_metadata_lists_every_broker_and_the_leader_of_each_partition(cluster, topic):
    metadata = json.loads(kcat(cluster, "-L", "-J", "-t", topic))
    assert {b["id"]: b["name"] for b in metadata["brokers"]} == dict(
        enumerate(cluster.kafka_bootstrap_servers.split(",")))
    [described] = metadata["topics"]
    assert described["topic"] == topic and "error" not in described
    assert [(p["partition"], p["leader"]) for p in described["partitions"]] == [
        (p, leader_of(cluster.bootstrap_servers, topic, p)) for p in range(3)]
    assert all("error" not in p for p in described["partitions"])

    listing = kcat(cluster, "-L", "-t", topic)
    assert " 3 brokers:" in listing and f'topic "{topic}" with 3 partitions:' in listing


def test_kcat_produces_and_consumes_keys_values_and_headers(cluster, topic):
    kcat(cluster, "-P", "-t", topic, "-p", "1", "-K", ":", "-H", "trace=abc", "-H", "n=1",
         stdin="k1:v1\nk2:v2\nk3:v3\n")

    messages = consumed(cluster, "-C", "-t", topic, "-p", "1", "-o", "beginning")
    assert [(m["offset"], m["key"], m["payload"], m["headers"]) for m in messages] == [
        (i, f"k{i + 1}", f"v{i + 1}", ["trace", "abc", "n", "1"]) for i in range(3)]
    # what txnsim's own consumer reads back: the same records, headers in order
    records = read_all(cluster.bootstrap_servers, topic, partitions=3)
    assert [(r.partition, r.key, r.value, [(h[0], h[1]) for h in r.headers]) for r in records] == [
        (1, f"k{i}".encode(), f"v{i}".encode(), [("trace", b"abc"), ("n", b"1")]) for i in range(1, 4)]


def test_kcat_read_committed_shows_committed_transactions_only(cluster, topic, txn_id):
    with TxnsimProducer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=txn_id) as producer:
        producer.init_transactions()
        for values, end in ((["c1", "c2"], producer.commit_transaction), (["a1"], producer.abort_transaction),
                            (["c3"], producer.commit_transaction)):
            producer.begin_transaction()
            for value in values:  # each in the log before the end: an abort drops what is still unsent
                producer.send(topic, value=value.encode(), partition=0).get(timeout=10)
            end()
    # offsets: c1 0, c2 1, commit marker 2, a1 3, abort marker 4, c3 5, commit marker 6; the last marker is
    # written after EndTxn's answer, and read_committed stops at the LSO until it is
    committed = wait_until(
        lambda: (got := consumed(cluster, "-C", "-t", topic, "-p", "0", "-o", "beginning",
                                 "-X", "isolation.level=read_committed"))
        and got[-1]["payload"] == "c3" and got,
        timeout_s=15, what="kcat's read_committed consumer to reach c3")
    assert [(m["offset"], m["payload"]) for m in committed] == [(0, "c1"), (1, "c2"), (5, "c3")]

    uncommitted = consumed(cluster, "-C", "-t", topic, "-p", "0", "-o", "beginning",
                           "-X", "isolation.level=read_uncommitted")
    assert [(m["offset"], m["payload"]) for m in uncommitted] == [(0, "c1"), (1, "c2"), (3, "a1"), (5, "c3")]


@pytest.mark.slow
def test_kcat_consumer_group_commits_and_a_second_run_resumes_where_it_left(cluster, topic):
    group = f"kcat-{topic}"
    kcat(cluster, "-P", "-t", topic, "-K", ":", stdin="".join(f"k{i}:first-{i}\n" for i in range(6)))

    first = consumed(cluster, "-G", group, "-X", "auto.offset.reset=earliest", topic)
    assert sorted(m["payload"] for m in first) == [f"first-{i}" for i in range(6)]
    tps = [TopicPartition(topic, p) for p in range(3)]
    with Admin(cluster.bootstrap_servers) as admin:
        ends = admin.end_offsets(tps)
        # kcat commits what it consumed when it closes (librdkafka's auto commit at close)
        committed = admin.list_consumer_group_offsets(group, tps)
        assert {tp: committed[tp].offset for tp in committed} == {tp: end for tp, end in ends.items() if end > 0}
        [description] = admin.describe_consumer_groups([group])
        assert description.state == "Empty" and not description.members

    kcat(cluster, "-P", "-t", topic, "-K", ":", stdin="k0:second-0\nk1:second-1\n")
    second = consumed(cluster, "-G", group, "-X", "auto.offset.reset=earliest", topic)
    assert sorted(m["payload"] for m in second) == ["second-0", "second-1"]


def test_kcat_queries_the_first_offset_at_or_after_a_time(cluster, topic):
    base = int(time.time() * 1000) - 60_000
    with TxnsimProducer(bootstrap_servers=cluster.bootstrap_servers) as producer:
        for i in range(3):
            producer.send(topic, value=f"at-{i}".encode(), partition=0, timestamp_ms=base + 1000 * i)
        producer.flush()

    def offset_at(timestamp: int) -> int:
        answer = json.loads(kcat(cluster, "-Q", "-J", "-t", f"{topic}:0:{timestamp}"))
        return int(answer[topic]["0"]["offset"])

    assert [offset_at(t) for t in (base - 1, base, base + 500, base + 2000)] == [0, 0, 1, 2]
    assert offset_at(base + 2001) == -1  # no record that late: Kafka answers -1
    assert (offset_at(-2), offset_at(-1)) == (0, 3)  # earliest and latest
