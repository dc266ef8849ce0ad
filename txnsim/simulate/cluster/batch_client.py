"""A simulated Spark-style query: each micro-batch written by several tasks as ONE batch transaction.

txnsim's extension of Kafka's protocol (coordinator/txn/batches.py, docs/spark-exactly-once.md): every
task attempt joins the query's batch transaction for the batch id (JoinBatchTxn gives it a fresh
producer id), adds its partition and writes; the driver ends the batch naming the winning attempts
(EndBatchTxn), and everything else is aborted. The driver here fails the way Spark's does, seeded:
a task attempt is lost after it wrote (a new attempt writes again), the driver dies before it ends
the batch, or after (its restart replays the same batch id, which the coordinator answers as
already committed). Each attempt is a chaos-History transaction named `spark/<batch>/<task>/<attempt>`,
so the checker sees a loser's records read (G1a) or a winner's lost; the model checks at the end
that each task of a batch is visible exactly once and each batch all or nothing.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from proto import records as codec
from proto import txnsim_pb2 as pb
from proto.structs import TRANSACTION_STATE_TOPIC, TopicPartition
from txnsim.chaos.history import TXN_HEADER, Outcome
from txnsim.simulate.cluster.clients import REQUEST_TIMEOUT_MS, _error_name
from txnsim.simulate.cluster.shape import BATCH_TOPIC
from txnsim.simulate.network import TIMED_OUT

if TYPE_CHECKING:
    from txnsim.simulate.cluster.roles import ClientCluster

QUERY = "spark-query"
TASKS = 3
BATCH_TIMEOUT_MS = 3_000
#: seeded failures per batch (per mille)
LOSE_ATTEMPT, DIE_BEFORE_END, DIE_AFTER_END = 150, 100, 100
_RETRY_MS = 50
_RESTART_MS = 300


@dataclass
class _Run:
    """One run of one batch by the driver (a restart begins a new run of the same batch id)."""

    batch: int
    attempts: list[str] = field(default_factory=list)
    winners: dict[int, tuple[int, str]] = field(default_factory=dict)  # task -> (producer id, attempt)
    skipped: set[int] = field(default_factory=set)  # tasks told the batch had committed already
    dead: bool = False


class SparkQuery:
    """The driver and its tasks in one actor: batch after batch, each task a participant."""

    def __init__(self, name: str, model: ClientCluster, rng: random.Random) -> None:
        self.name = name
        self.model = model
        self.net = model.network
        self.rng = rng
        self.batch = 1
        self.attempt = 0
        self.stopped = False
        self.run: _Run | None = None
        self.partitions = model.control.partitions_for(BATCH_TOPIC) or 1

    def _coordinator(self) -> int:
        return self.model.control.owner_now(TRANSACTION_STATE_TOPIC, self.model.control.shard_of(QUERY))

    def _send(self, node: int, request: Any, on_reply: Any) -> None:
        self.net.call(self.name, f"n{node}", request, REQUEST_TIMEOUT_MS, on_reply)

    def _after(self, delay_ms: int, work: Any, *args: Any) -> None:
        self.net.set_timer(self.name, delay_ms, work, *args, label=getattr(work, "__name__", "spark"))

    def _chance(self, per_mille: int) -> bool:
        return self.rng.randrange(1000) < per_mille

    def start(self) -> None:
        self._after(self.rng.randint(1, 50), self.start_batch)

    def start_batch(self) -> None:
        if self.stopped:
            return
        run = self.run = _Run(self.batch)
        for task in range(TASKS):
            self.run_task(run, task)

    # ------------------------------------------------------------ a task attempt

    def run_task(self, run: _Run, task: int) -> None:
        if run.dead:
            return
        self.attempt += 1
        attempt = f"spark/{run.batch}/{task}/{self.attempt}"
        tp = TopicPartition(BATCH_TOPIC, task % self.partitions)
        request = pb.JoinBatchTxnRequest(batch_txn_id=QUERY, batch_id=run.batch, task=task, attempt=self.attempt,
                                         transaction_timeout_ms=BATCH_TIMEOUT_MS)

        def joined(response: Any) -> None:
            if run.dead:
                return
            if response is TIMED_OUT or response.error_code:
                return self._after(_RETRY_MS, self.run_task, run, task)
            if response.already_committed:
                run.skipped.add(task)
                return self.task_done(run)
            run.attempts.append(attempt)
            self.model.history.begun(attempt, self.name)
            add(response.producer_id, response.producer_epoch)

        def add(producer_id: int, epoch: int) -> None:
            add_request = pb.AddPartitionsToTxnRequest(
                transactional_id=QUERY, producer_id=producer_id, producer_epoch=epoch,
                partitions=[pb.TopicPartitionRef(topic=tp.topic, partition=tp.partition)])

            def added(response: Any) -> None:
                if run.dead:
                    return
                code = -1 if response is TIMED_OUT else (
                    response.error_code or next((r.error_code for r in response.results if r.error_code), 0))
                if code:
                    return self._after(_RETRY_MS, self.run_task, run, task)  # a new attempt
                write(producer_id, epoch)

            self._send(self._coordinator(), add_request, added)

        def write(producer_id: int, epoch: int) -> None:
            values = [self.model.control.next_value() for _ in range(self.rng.randint(1, 3))]
            now = self.net.now(self.name)
            header = ((TXN_HEADER, attempt.encode()),)
            batch = codec.encode_batch([(now, None, str(v).encode(), header) for v in values],
                                       producer_id=producer_id, producer_epoch=epoch, base_sequence=0,
                                       transactional=True)
            produce = pb.ProduceRequest(transactional_id=QUERY, acks=-1, timeout_ms=REQUEST_TIMEOUT_MS,
                                        partitions=[pb.PartitionRecords(topic=tp.topic, partition=tp.partition,
                                                                        records=batch)])

            def written(response: Any) -> None:
                if run.dead:
                    return
                if response is TIMED_OUT or response.partitions[0].error_code:
                    return self._after(_RETRY_MS, self.run_task, run, task)
                base = response.partitions[0].base_offset
                for i, value in enumerate(values):
                    self.model.history.sent(self.name, attempt, tp.topic, tp.partition, value, base + i)
                if self._chance(LOSE_ATTEMPT):  # the executor is lost after writing: Spark runs the task again
                    return self.run_task(run, task)
                run.winners[task] = (producer_id, attempt)
                self.task_done(run)

            self._send(self.model.control.owner_now(tp.topic, tp.partition), produce, written)

        self._send(self._coordinator(), request, joined)

    def task_done(self, run: _Run) -> None:
        if len(run.winners) + len(run.skipped) < TASKS or run.dead:
            return
        if self._chance(DIE_BEFORE_END):
            return self.restart(run)
        self.end(run)

    # ------------------------------------------------------------ the driver's decision

    def end(self, run: _Run) -> None:
        winners = sorted(pid for pid, _ in run.winners.values())
        request = pb.EndBatchTxnRequest(batch_txn_id=QUERY, batch_id=run.batch, committed=True, winners=winners)
        for attempt in run.attempts:
            self.model.history.commit_started(attempt)

        def ended(response: Any) -> None:
            if run.dead:
                return
            if response is TIMED_OUT:
                return self._after(_RETRY_MS, self.end, run)
            if response.error_code:
                name = _error_name(response.error_code)
                if name == "INVALID_TXN_STATE":  # the batch timed out or was abandoned: replay it
                    return self.restart(run, decided=Outcome.ABORTED)
                return self._after(_RETRY_MS, self.end, run)
            chosen = {attempt for _, attempt in run.winners.values()}
            for attempt in run.attempts:
                self.model.history.ended(attempt, Outcome.COMMITTED if attempt in chosen else Outcome.ABORTED)
            run.dead = True
            if self._chance(DIE_AFTER_END):  # the driver dies before it notes the commit: it replays the batch
                return self._after(_RESTART_MS, self.start_batch)
            self.batch += 1
            self._after(self.rng.randint(10, 100), self.start_batch)

        self._send(self._coordinator(), request, ended)

    def restart(self, run: _Run, decided: Outcome | None = None) -> None:
        """The driver dies (or gives the batch up) before its decision: a new run replays the same batch id;
        what this run wrote is aborted by the coordinator (the replay names only its own attempts)."""
        run.dead = True
        for attempt in run.attempts:
            self.model.history.ended(attempt, decided or Outcome.ABORTED)
        self._after(_RESTART_MS, self.start_batch)
