"""Failover: SIGKILL the node that coordinates a transactional id and time until the id's
transaction-state shard is served again, by another node, then restart the node and time
the handback. Nodes notice a death through its released flock (coordinator/membership.py),
so the figure is detection plus shard loading plus the client finding the new owner.
Then the same with SIGSTOP instead of SIGKILL: a paused node keeps its lock, so the others
count it out only when its heartbeat has stood still for the session timeout, take its shards
over under a new epoch, and it is fenced when SIGCONT wakes it; the handback is timed from there.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from client.cluster import TRANSACTION
from client.transport import NodeChannels, Stubs, call
from coordinator.config import NodeConfig
from producer import Producer
from proto import txnsim_pb2 as pb
from proto.errors import KafkaError
from txnsim.bench.chart_spec import Bars, Target
from txnsim.bench.harness import NullProgress, Progress, bench_cluster
from txnsim.bench.report import BenchResult, ResultTable, Verdict, format_ms
from txnsim.bench.stats import Summary
from txnsim.cluster import LocalCluster

TOPIC = "bench-failover"
PARTITIONS = 3
#: the issue's aim for the time until a killed node's shards serve again
TARGET_S = 2.0
#: resolution of the measurement: the probe asks again this long after a failed attempt
POLL_INTERVAL_S = 0.002
RPC_TIMEOUT_S = 0.5
ROUND_TIMEOUT_S = 30.0
#: A node counts every node alive for its first 0.5 s (start_up_grace_s in coordinator/membership.py),
#: so a crash in that window waits for the grace to end. Nothing outside the node shows when it has
#: ended, so the next round's kill comes this long after the previous restart: each round measures
#: one crash in a settled cluster, not a second fault while a node is still starting.
ROUND_SPACING_S = 1.0
#: broker_session_timeout_ms of the bench cluster (the node default)
PAUSE_SESSION_TIMEOUT_S = NodeConfig().broker_session_timeout_ms / 1000
#: the tables' charts (`txnsim bench --plot`): intervals from 10 ms to seconds, so a log scale
KILL_CHART = Bars(("p50 ms", "p99 ms", "max ms"), value_label="milliseconds (log scale)", log_scale=True,
                  targets=(Target(TARGET_S * 1000, f"target for a new owner: {TARGET_S:g} s"),))
PAUSE_CHART = Bars(("p50 ms", "p99 ms", "max ms"), value_label="milliseconds (log scale)", log_scale=True)
ATTEMPTS_CHART = Bars(("per round",), value_label="failed attempts per round")


class NotServedYet(Exception):
    """The probe's attempt failed; `reason` says how (for the table of what clients saw)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ShardProbe:
    """One attempt at a time: FindCoordinator at a node, then InitProducerId at the node it names.

    Raw RPCs with short deadlines and no client backoff, so what is timed is the cluster,
    not a client's retry schedule (the in-flight commit below shows the client's view)."""

    def __init__(self, cluster: LocalCluster) -> None:
        self._addresses = dict(cluster.spec.nodes)
        self._channels = {node: NodeChannels() for node in self._addresses}

    def close(self) -> None:
        for channels in self._channels.values():
            channels.close()

    def reconnect(self, node: int) -> None:
        """A new channel to `node`: the old one waits out gRPC's reconnect backoff (up to
        max_reconnect_backoff_ms) after the node died, which would be timed instead of the node."""
        self._channels.pop(node).close()
        self._channels[node] = NodeChannels()

    def _stubs(self, node: int) -> Stubs:
        return self._channels[node].stubs(self._addresses[node])

    def find(self, transactional_id: str, ask: int) -> pb.FindCoordinatorResponse:
        request = pb.FindCoordinatorRequest(key_type=TRANSACTION, key=transactional_id)
        found: pb.FindCoordinatorResponse = call(self._stubs(ask).cluster.FindCoordinator, request, RPC_TIMEOUT_S)
        return found

    def served_by(self, transactional_id: str, ask: int) -> int:
        """The node that answered InitProducerId for the id; NotServedYet if this attempt failed."""
        try:
            found = self.find(transactional_id, ask)
            if found.node_id < 0 or found.node_id not in self._addresses:
                raise NotServedYet("no coordinator")
            request = pb.InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=60_000,
                                               producer_id=-1, producer_epoch=-1)
            call(self._stubs(found.node_id).transactions.InitProducerId, request, RPC_TIMEOUT_S)
            return found.node_id
        except KafkaError as exc:
            raise NotServedYet(type(exc).__name__) from None

    def await_owner(self, transactional_id: str, accept: Callable[[int], bool], ask: list[int],
                    reasons: Counter[str]) -> float:
        """Attempt until a node that `accept`s serves the id; the monotonic time of that success."""
        deadline = time.monotonic() + ROUND_TIMEOUT_S
        attempt = 0
        while True:
            try:
                node = self.served_by(transactional_id, ask[attempt % len(ask)])
                if accept(node):
                    return time.monotonic()
                reasons[f"served by node {node} still"] += 1
            except NotServedYet as failure:
                reasons[failure.reason] += 1
            attempt += 1
            if time.monotonic() > deadline:
                raise TimeoutError(f"{transactional_id!r} was not served as wanted within {ROUND_TIMEOUT_S:.0f} s "
                                   f"(failed attempts: {dict(reasons)})")
            time.sleep(POLL_INTERVAL_S)  # the measurement's resolution, bounded by the deadline

    def sibling(self, transactional_id: str, shard: int, ask: int) -> str:
        """Another transactional id in the same shard (so both live and die together)."""
        for n in range(10_000):
            candidate = f"{transactional_id}/sibling-{n}"
            if self.find(candidate, ask).shard == shard:
                return candidate
        raise LookupError(f"no id in shard {shard} among 10,000 candidates")


@dataclass(frozen=True, slots=True)
class Round:
    fault: str               # "kill" or "pause"
    victim: int
    served_s: float          # kill -> the id served by another node
    commit_s: float | None   # kill -> an in-flight commit_transaction() returned (None: it failed)
    handback_s: float        # restart() called -> the id served by the returned node
    handback_after_ready_s: float  # restart() returned (node answers Status) -> served by it
    restarted_at: float      # monotonic time of the restart (the next kill waits ROUND_SPACING_S from it)


def one_round(cluster: LocalCluster, probe: ShardProbe, number: int, reasons: Counter[str], not_before: float,
              fault: str = "kill") -> Round:
    """Kill (or pause) the coordinator of a fresh id (no earlier than `not_before`), time the takeover
    and an in-flight commit, restart (or resume) the node and time the handback."""
    transactional_id = f"bench-failover-{fault}-{number}"
    victim = cluster.coordinator_for(transactional_id)
    survivors = [n for n in cluster.node_ids if n != victim]
    probe.served_by(transactional_id, survivors[0])  # the id has state in its shard before the crash
    shard = probe.find(transactional_id, survivors[0]).shard
    committed_at: list[float] = []
    commit_errors: list[str] = []
    with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=probe.sibling(
            transactional_id, shard, survivors[0]), max_block_ms=int(ROUND_TIMEOUT_S * 1000)) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for partition in range(PARTITIONS):
            producer.send(TOPIC, value=b"in flight", partition=partition)
        producer.flush()

        def commit() -> None:
            try:
                producer.commit_transaction()
                committed_at.append(time.monotonic())
            except KafkaError as exc:
                commit_errors.append(f"in-flight commit failed: {type(exc).__name__}")

        time.sleep(max(0.0, not_before - time.monotonic()))  # pacing: see ROUND_SPACING_S
        killed_at = time.monotonic()
        (cluster.kill if fault == "kill" else cluster.pause)(victim)
        committer = threading.Thread(target=commit, name="bench-commit")
        committer.start()
        served_at = probe.await_owner(transactional_id, lambda node: node != victim, survivors, reasons)
        committer.join(ROUND_TIMEOUT_S)
        reasons.update(commit_errors)
    restart_at = time.monotonic()
    (cluster.restart if fault == "kill" else cluster.resume)(victim)
    ready_at = time.monotonic()
    probe.reconnect(victim)
    handback_reasons: Counter[str] = Counter()
    back_at = probe.await_owner(transactional_id, lambda node: node == victim, cluster.node_ids, handback_reasons)
    reasons.update({f"handback: {reason}": count for reason, count in handback_reasons.items()})
    return Round(fault, victim, served_at - killed_at, committed_at[0] - killed_at if committed_at else None,
                 back_at - restart_at, back_at - ready_at, restarted_at=restart_at)


def run(rounds: int = 20, progress: Progress | None = None, pause_rounds: int | None = None) -> BenchResult:
    """`rounds` kills, then `pause_rounds` pauses (default a quarter as many, at least 3: each
    waits out the session timeout)."""
    progress = progress or NullProgress()
    pause_rounds = max(3, rounds // 4) if pause_rounds is None else pause_rounds
    results: list[Round] = []
    reasons: Counter[str] = Counter()
    with bench_cluster({TOPIC: PARTITIONS}) as cluster, _quiet("producer"):
        probe = ShardProbe(cluster)
        not_before = time.monotonic() + ROUND_SPACING_S  # every node has just started
        try:
            for fault, count in (("kill", rounds), ("pause", pause_rounds)):
                progress.phase(f"failover: {count} rounds of {fault}, serve elsewhere, "
                               f"{'restart' if fault == 'kill' else 'resume'}, hand back", count)
                for number in range(count):
                    results.append(one_round(cluster, probe, number, reasons, not_before, fault))
                    not_before = results[-1].restarted_at + ROUND_SPACING_S
                    progress.advance()
        finally:
            probe.close()
    kills = [r for r in results if r.fault == "kill"]
    pauses = [r for r in results if r.fault == "pause"]
    tables = [failover_table(kills)] + ([pause_table(pauses)] if pauses else []) + [attempts_table(reasons, len(results))]
    return BenchResult("failover", tuple(tables), verdicts(kills) + pause_verdicts(pauses))


@contextlib.contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    """The producer warns at each retry of its commit; here those retries are the point, not news."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(max(level, logging.ERROR))
    try:
        yield
    finally:
        logger.setLevel(level)


def failover_table(results: list[Round]) -> ResultTable:
    served = Summary.of([r.served_s for r in results])
    commits = [r.commit_s for r in results if r.commit_s is not None]
    rows = [("kill -> shard served by a new owner", served)]
    if commits:
        rows.append(("kill -> in-flight commit_transaction() returns", Summary.of(commits)))
    rows += [("restart() -> shard served by the returned node", Summary.of([r.handback_s for r in results])),
             ("node ready -> shard served by the returned node",
              Summary.of([r.handback_after_ready_s for r in results]))]
    victims = Counter(r.victim for r in results)
    return ResultTable(
        f"Failover of a transaction coordinator: {len(results)} rounds of SIGKILL and restart",
        ("interval", "rounds", "p50 ms", "p99 ms", "max ms"),
        tuple((label, str(s.count), format_ms(s.p50), format_ms(s.p99), format_ms(s.maximum)) for label, s in rows),
        ("kill -> served: from just before SIGKILL until FindCoordinator (asked of a surviving node) names "
         f"another node and InitProducerId for the id succeeds there; attempts every {POLL_INTERVAL_S * 1000:g} ms "
         f"with {RPC_TIMEOUT_S * 1000:g} ms deadlines, no client backoff. in-flight commit: a Producer whose "
         "transaction (records on all 3 partitions, acknowledged) is coordinated by the same shard calls "
         "commit_transaction() right after the kill; its own retry backoff is included. restart(): starts "
         "the process and waits until it answers Status. Each kill comes at least "
         f"{ROUND_SPACING_S:g} s after the previous restart (a node ignores failures for its first 0.5 s). "
         "Nodes killed: "
         + ", ".join(f"node {n} x{c}" for n, c in sorted(victims.items())) + ".",), chart=KILL_CHART)


def pause_table(results: list[Round]) -> ResultTable:
    commits = [r.commit_s for r in results if r.commit_s is not None]
    rows = [("SIGSTOP -> shard served by a new owner", Summary.of([r.served_s for r in results]))]
    if commits:
        rows.append(("SIGSTOP -> in-flight commit_transaction() returns", Summary.of(commits)))
    rows.append(("SIGCONT -> shard served by the woken node again", Summary.of([r.handback_s for r in results])))
    return ResultTable(
        f"Takeover from a paused transaction coordinator: {len(results)} rounds of SIGSTOP and SIGCONT",
        ("interval", "rounds", "p50 ms", "p99 ms", "max ms"),
        tuple((label, str(s.count), format_ms(s.p50), format_ms(s.p99), format_ms(s.maximum)) for label, s in rows),
        (f"The paused node keeps its node lock; the others count it out after its heartbeat stood still for "
         f"the session timeout ({PAUSE_SESSION_TIMEOUT_S:g} s, broker_session_timeout_ms), then claim its shards "
         "at a higher epoch. After SIGCONT the woken node finds its logs fenced, drops them, and gets its shard "
         "back once the others see its heartbeat and release it.",), chart=PAUSE_CHART)


def pause_verdicts(results: list[Round]) -> tuple[Verdict, ...]:
    if not results:
        return ()
    worst = max(r.served_s for r in results)
    bound = PAUSE_SESSION_TIMEOUT_S + TARGET_S
    failed_commits = sum(1 for r in results if r.commit_s is None)
    return (
        Verdict(f"a paused coordinator's shards serve elsewhere within the session timeout + {TARGET_S:g} s",
                worst < bound, f"max {format_ms(worst)} ms over {len(results)} rounds (bound {bound:g} s)"),
        Verdict("every in-flight commit completes across the takeover from a paused node", failed_commits == 0,
                f"{failed_commits} of {len(results)} failed"),
    )


def attempts_table(reasons: Counter[str], rounds: int) -> ResultTable:
    rows = tuple((reason, str(count), f"{count / rounds:.1f}") for reason, count in reasons.most_common())
    return ResultTable("What the probe saw before the id was served as wanted (failed attempts, all rounds)",
                       ("failure", "attempts", "per round"), rows or (("none", "0", "0.0"),),
                       chart=ATTEMPTS_CHART)


def verdicts(results: list[Round]) -> tuple[Verdict, ...]:
    worst = max(r.served_s for r in results)
    failed_commits = sum(1 for r in results if r.commit_s is None)
    return (
        Verdict(f"a killed coordinator's shards serve again within {TARGET_S:g} s", worst < TARGET_S,
                f"max {format_ms(worst)} ms over {len(results)} rounds"),
        Verdict("every in-flight commit completes across the failover", failed_commits == 0,
                f"{failed_commits} of {len(results)} failed"),
    )
