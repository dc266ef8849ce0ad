"""One producer measurement run of `txnsim bench code` (run as a script, with PYTHONPATH set to the source tree
under test, so the same measuring code drives an older producer and the current one).

Prints one JSON line: {scenario: {"records_per_s": ..., "client_cpu_us_per_record": ...}}. It uses only
what every tree of this repository has had (producer.Producer and txnsim.bench.harness.bench_cluster), so
the producer is the only thing that differs between trees.
"""
from __future__ import annotations

import json
import sys
import time
from typing import Any

VALUE = b"v" * 100
#: scenario -> (partitions, commit every N records or None, commit every S seconds or None)
SCENARIOS: dict[str, tuple[int, int | None, float | None]] = {
    "peer": (4, 1_000, None),      # the peer workload: explicit partitions i % 4, a commit per 1,000 records
    "idempotent": (3, None, None),  # producer_bench's baseline: unkeyed (sticky) records, no transaction
    "txn-100ms": (3, None, 0.100),
    "txn-10ms": (3, None, 0.010),
}


def measure(bootstrap_servers: str, scenario: str, seconds: float, settings: dict[str, Any],
            run_id: str) -> dict[str, float]:
    from producer import Producer
    partitions, per_records, per_seconds = SCENARIOS[scenario]
    topic = f"code-{scenario}"
    transactional = per_records is not None or per_seconds is not None
    tid = f"code-{scenario}-{run_id}" if transactional else None
    with Producer(bootstrap_servers=bootstrap_servers, transactional_id=tid, **settings) as producer:
        if transactional:
            producer.init_transactions()
            producer.begin_transaction()
        producer.send(topic, value=VALUE, partition=0).get(timeout=30)  # metadata, connections
        if transactional:
            producer.commit_transaction()
        send, clock, acknowledged, futures = producer.send, time.monotonic, 0, []
        cpu_start = time.process_time()
        start = clock()
        end = start + seconds
        if not transactional:
            while clock() < end:
                futures.append(send(topic, value=VALUE))
            producer.flush()
            acknowledged = sum(1 for f in futures if f.succeeded())
        else:
            while (now := clock()) < end:
                producer.begin_transaction()
                if per_records is not None:
                    for i in range(per_records):
                        send(topic, value=VALUE, partition=i % partitions)
                    sent = per_records
                else:
                    txn_end, sent = min(now + per_seconds, end), 0  # type: ignore[operator]
                    while clock() < txn_end:
                        send(topic, value=VALUE)
                        sent += 1
                producer.commit_transaction()
                acknowledged += sent
        elapsed = clock() - start
        cpu = time.process_time() - cpu_start
    return {"records_per_s": acknowledged / elapsed, "client_cpu_us_per_record": 1e6 * cpu / max(acknowledged, 1)}


def main(argv: list[str]) -> None:
    seconds, run_id, settings_json, *scenarios = argv
    settings = json.loads(settings_json)
    from txnsim.bench.harness import bench_cluster
    topics = {f"code-{name}": SCENARIOS[name][0] for name in scenarios}
    with bench_cluster(topics) as cluster:
        results = {name: measure(cluster.bootstrap_servers, name, float(seconds), settings, run_id)
                   for name in scenarios}
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
