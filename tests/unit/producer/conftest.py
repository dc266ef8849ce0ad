"""A scripted, in-process fake of txnsim's nodes, just enough wire protocol to drive a Producer.

FakeCluster runs one real gRPC server per fake node on 127.0.0.1:0, all sharing one state:
Metadata, FindCoordinator, InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn
(Transactions V2: every end bumps the epoch; a retried end is recognised), Produce (with
KIP-890 verification, sequence checks and duplicate detection) and TxnOffsetCommit.
Tests script answers per RPC (`script("EndTxn", 51, 16)`) and read every request back
from `calls`. Nothing here sleeps: tests wait on `wait_for(predicate)`.
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from client.transport import SERVER_OPTIONS
from coordinator.verification import verification_error
from proto import txnsim_pb2 as pb
from proto import txnsim_pb2_grpc as rpc
from proto.records import iter_batches
from proto.structs import TopicPartition

NONE = 0


@dataclass
class Txn:
    producer_id: int
    epoch: int
    timeout_ms: int
    state: str = "Empty"
    partitions: set[tuple[str, int]] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    last_result: bool | None = None


@dataclass
class LogEntry:
    offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int
    transactional: bool
    records: list[tuple[bytes | None, bytes | None]]
    payload: bytes


@dataclass
class Marker:
    producer_id: int
    producer_epoch: int
    committed: bool


class FakeCluster:
    TXN_MAX_TIMEOUT_MS = 900_000

    def __init__(self, nodes: int = 1, topics: dict[str, int] | None = None) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.topics = dict(topics or {"orders": 3})
        self.leaders: dict[tuple[str, int], int] = {}
        self.txn_coordinator = 0
        self.group_coordinator = 0
        self.logs: dict[tuple[str, int], list[LogEntry | Marker]] = defaultdict(list)
        self.next_offset: dict[tuple[str, int], int] = defaultdict(int)
        self.producer_state: dict[tuple[tuple[str, int], int], dict[str, Any]] = {}
        self.txns: dict[str, Txn] = {}
        self.pending_offsets: dict[str, dict[tuple[str, int], int]] = defaultdict(dict)
        self.committed_offsets: dict[str, dict[tuple[str, int], int]] = defaultdict(dict)
        self.next_pid = 1000
        self.scripts: dict[str, deque[Any]] = defaultdict(deque)
        self.calls: list[tuple[str, int, Any]] = []
        self.holds: dict[str, deque[threading.Event]] = defaultdict(deque)
        self.held: list[tuple[str, int, Any]] = []  # calls that waited on hold_next()
        self.servers: list[grpc.Server | None] = []
        self.addresses: list[str] = []
        for node_id in range(nodes):
            server, address = self._start(node_id)
            self.servers.append(server)
            self.addresses.append(address)

    # ------------------------------------------------------------ plumbing

    @property
    def bootstrap(self) -> str:
        return ",".join(self.addresses)

    def _start(self, node_id: int) -> tuple[grpc.Server, str]:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=SERVER_OPTIONS)
        cluster = self

        def handler(method: str) -> Callable[[Any, Any, Any], Any]:
            return lambda _self, request, _context: cluster.handle(method, node_id, request)

        def servicer(base: type, methods: list[str]) -> Any:
            return type(f"Fake{base.__name__}", (base,), {m: handler(m) for m in methods})()

        rpc.add_ClusterServicer_to_server(servicer(rpc.ClusterServicer, ["Metadata", "FindCoordinator"]), server)
        rpc.add_PartitionsServicer_to_server(servicer(rpc.PartitionsServicer, ["Produce"]), server)
        rpc.add_TransactionCoordinatorServicer_to_server(servicer(
            rpc.TransactionCoordinatorServicer, ["InitProducerId", "AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn"]),
            server)
        rpc.add_GroupCoordinatorServicer_to_server(servicer(rpc.GroupCoordinatorServicer, ["TxnOffsetCommit"]),
                                                   server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        return server, f"127.0.0.1:{port}"

    def stop_node(self, node_id: int) -> None:
        server = self.servers[node_id]
        if server is not None:
            server.stop(0).wait()
            self.servers[node_id] = None

    def stop(self) -> None:
        for node_id in range(len(self.servers)):
            self.stop_node(node_id)

    def script(self, method: str, *answers: Any) -> None:
        """Queue answers for the next calls of `method`: an error code (nothing applied), ("after", code)
        (applied, then answered with that error: a lost answer), or a callable(request, node_id)."""
        with self.lock:
            self.scripts[method].extend(answers)

    def calls_of(self, method: str) -> list[Any]:
        with self.lock:
            return [request for name, _node, request in self.calls if name == method]

    def methods(self) -> list[str]:
        with self.lock:
            return [name for name, _node, _request in self.calls]

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError("condition not reached within the deadline")
                self.changed.wait(remaining)

    def leader_for(self, topic: str, partition: int) -> int:
        return self.leaders.get((topic, partition), partition % len(self.servers))

    def data(self, topic: str, partition: int) -> list[LogEntry]:
        with self.lock:
            return [e for e in self.logs[(topic, partition)] if isinstance(e, LogEntry)]

    # ------------------------------------------------------------ dispatch

    def hold_next(self, method: str) -> threading.Event:
        """The next call of `method` waits (outside the cluster's lock) until the returned event is set."""
        release = threading.Event()
        with self.lock:
            self.holds[method].append(release)
        return release

    def handle(self, method: str, node_id: int, request: Any) -> Any:
        with self.lock:
            hold = self.holds[method].popleft() if self.holds[method] else None
            if hold is not None:
                self.held.append((method, node_id, request))
                self.changed.notify_all()
        if hold is not None:
            hold.wait(10)
        with self.lock:
            self.calls.append((method, node_id, request))
            answer = self.scripts[method].popleft() if self.scripts[method] else None
            try:
                if callable(answer):
                    response = answer(request, node_id)
                    if response is not None:
                        return response
                    answer = None
                response_type = getattr(pb, f"{method}Response")
                if isinstance(answer, int):
                    return self._error_response(method, request, response_type, answer)
                response = getattr(self, f"_{method}")(node_id, request)
                if isinstance(answer, tuple) and answer[0] == "after":
                    return self._error_response(method, request, response_type, answer[1])
                return response
            finally:
                self.changed.notify_all()

    def _error_response(self, method: str, request: Any, response_type: type, code: int) -> Any:
        if method == "Produce":
            return pb.ProduceResponse(partitions=[
                pb.PartitionProduceResult(topic=p.topic, partition=p.partition, error_code=code,
                                          error_message="scripted", base_offset=-1)
                for p in request.partitions])
        return response_type(error_code=code, error_message="scripted")

    # ------------------------------------------------------------ cluster

    def _Metadata(self, node_id: int, request: pb.MetadataRequest) -> pb.MetadataResponse:
        names = list(request.topics) or list(self.topics)
        topics = []
        for name in names:
            if name not in self.topics:
                topics.append(pb.TopicMetadata(name=name, error_code=3, error_message=f"unknown topic {name}"))
                continue
            topics.append(pb.TopicMetadata(name=name, partitions=[
                pb.PartitionMetadata(partition=p, leader=self.leader_for(name, p))
                for p in range(self.topics[name])]))
        nodes = [pb.NodeInfo(node_id=i, address=a, alive=self.servers[i] is not None)
                 for i, a in enumerate(self.addresses)]
        return pb.MetadataResponse(nodes=nodes, topics=topics, txn_shards=50, offsets_shards=50)

    def _FindCoordinator(self, node_id: int, request: pb.FindCoordinatorRequest) -> pb.FindCoordinatorResponse:
        owner = self.txn_coordinator if request.key_type == 1 else self.group_coordinator
        return pb.FindCoordinatorResponse(node_id=owner, address=self.addresses[owner])

    # ------------------------------------------------------------ transaction coordinator (TV2)

    def _InitProducerId(self, node_id: int, request: pb.InitProducerIdRequest) -> pb.InitProducerIdResponse:
        if not request.HasField("transactional_id"):
            self.next_pid += 1
            return pb.InitProducerIdResponse(producer_id=self.next_pid, producer_epoch=0)
        if node_id != self.txn_coordinator:
            return pb.InitProducerIdResponse(error_code=16, error_message="not the coordinator")
        if not 1 <= request.transaction_timeout_ms <= self.TXN_MAX_TIMEOUT_MS:
            return pb.InitProducerIdResponse(error_code=50, error_message="timeout above transaction_max_timeout_ms")
        txn = self.txns.get(request.transactional_id)
        if txn is None:
            self.next_pid += 1
            txn = self.txns[request.transactional_id] = Txn(self.next_pid, 0, request.transaction_timeout_ms)
        else:
            if txn.state == "Ongoing":
                self._complete(txn, committed=False)
            txn.epoch += 1
            txn.state = "Empty"
            txn.timeout_ms = request.transaction_timeout_ms
        return pb.InitProducerIdResponse(producer_id=txn.producer_id, producer_epoch=txn.epoch)

    def _check_txn(self, node_id: int, tid: str, producer_id: int, epoch: int) -> tuple[Txn | None, int]:
        if node_id != self.txn_coordinator:
            return None, 16
        txn = self.txns.get(tid)
        if txn is None or txn.producer_id != producer_id:
            return None, 49
        if epoch != txn.epoch:
            return None, 90
        return txn, NONE

    def _AddPartitionsToTxn(self, node_id: int, request: pb.AddPartitionsToTxnRequest) -> pb.AddPartitionsToTxnResponse:
        txn, code = self._check_txn(node_id, request.transactional_id, request.producer_id, request.producer_epoch)
        if txn is None:
            return pb.AddPartitionsToTxnResponse(error_code=code)
        txn.partitions.update((p.topic, p.partition) for p in request.partitions)
        txn.state = "Ongoing"
        return pb.AddPartitionsToTxnResponse(results=[
            pb.PartitionError(topic=p.topic, partition=p.partition) for p in request.partitions])

    def _AddOffsetsToTxn(self, node_id: int, request: pb.AddOffsetsToTxnRequest) -> pb.AddOffsetsToTxnResponse:
        txn, code = self._check_txn(node_id, request.transactional_id, request.producer_id, request.producer_epoch)
        if txn is None:
            return pb.AddOffsetsToTxnResponse(error_code=code)
        txn.groups.add(request.group_id)
        txn.state = "Ongoing"
        return pb.AddOffsetsToTxnResponse()

    def _EndTxn(self, node_id: int, request: pb.EndTxnRequest) -> pb.EndTxnResponse:
        if node_id != self.txn_coordinator:
            return pb.EndTxnResponse(error_code=16)
        txn = self.txns.get(request.transactional_id)
        if txn is None or txn.producer_id != request.producer_id:
            return pb.EndTxnResponse(error_code=49)
        complete = {True: "CompleteCommit", False: "CompleteAbort"}
        if request.producer_epoch == txn.epoch - 1 and txn.state == complete[request.committed]:
            return pb.EndTxnResponse(producer_id=txn.producer_id, producer_epoch=txn.epoch)  # a retry
        if request.producer_epoch != txn.epoch:
            return pb.EndTxnResponse(error_code=90)
        if txn.state != "Ongoing" and request.committed:
            return pb.EndTxnResponse(error_code=48, error_message=f"commit in state {txn.state}")
        self._complete(txn, request.committed)
        txn.epoch += 1
        return pb.EndTxnResponse(producer_id=txn.producer_id, producer_epoch=txn.epoch)

    def _complete(self, txn: Txn, committed: bool) -> None:
        for tp in sorted(txn.partitions):
            self.logs[tp].append(Marker(txn.producer_id, txn.epoch, committed))
            self.next_offset[tp] += 1
        for group in txn.groups:
            pending = self.pending_offsets.pop(group, {})
            if committed:
                self.committed_offsets[group].update(pending)
        txn.partitions.clear()
        txn.groups.clear()
        txn.state = "CompleteCommit" if committed else "CompleteAbort"
        txn.last_result = committed

    # ------------------------------------------------------------ group coordinator

    def _TxnOffsetCommit(self, node_id: int, request: pb.TxnOffsetCommitRequest) -> pb.TxnOffsetCommitResponse:
        if node_id != self.group_coordinator:
            return pb.TxnOffsetCommitResponse(error_code=16)
        if request.add_partitions:  # transactions V2: the group coordinator adds the offsets partition
            txn, code = self._check_txn(self.txn_coordinator, request.transactional_id, request.producer_id,
                                        request.producer_epoch)
            offsets = TopicPartition("__consumer_offsets", 0)
            error = verification_error(code, request.transactional_id, offsets, request.producer_id,
                                       request.producer_epoch)
            if txn is None or error is not None:
                return pb.TxnOffsetCommitResponse(error_code=error.errno if error else 49)
            txn.groups.add(request.group_id)
            txn.state = "Ongoing"
        for entry in request.offsets:
            self.pending_offsets[request.group_id][(entry.topic, entry.partition)] = entry.offset
        return pb.TxnOffsetCommitResponse(results=[
            pb.PartitionError(topic=e.topic, partition=e.partition) for e in request.offsets])

    # ------------------------------------------------------------ partitions

    def _Produce(self, node_id: int, request: pb.ProduceRequest) -> pb.ProduceResponse:
        results = []
        for part in request.partitions:
            code, base_offset = self._append(node_id, request, part)
            results.append(pb.PartitionProduceResult(topic=part.topic, partition=part.partition, error_code=code,
                                                     base_offset=base_offset))
        return pb.ProduceResponse(partitions=results)

    def _implicit_add(self, tid: str, producer_id: int, epoch: int, tp: tuple[str, int]) -> int:
        """Transactions V2: the leader adds the partition by an AddPartitionsToTxn of its own (scripts apply
        to it and it is in `calls`), answering the produce as a node does when that fails."""
        request = pb.AddPartitionsToTxnRequest(transactional_id=tid, producer_id=producer_id, producer_epoch=epoch,
                                               partitions=[pb.TopicPartitionRef(topic=tp[0], partition=tp[1])])
        response = self.handle("AddPartitionsToTxn", self.txn_coordinator, request)
        code = response.error_code or next((r.error_code for r in response.results if r.error_code), 0)
        error = verification_error(code, tid, TopicPartition(*tp), producer_id, epoch)
        return 0 if error is None else error.errno

    def _append(self, node_id: int, request: pb.ProduceRequest, part: pb.PartitionRecords) -> tuple[int, int]:
        tp = (part.topic, part.partition)
        if part.topic not in self.topics or not 0 <= part.partition < self.topics[part.topic]:
            return 3, -1
        if self.leader_for(*tp) != node_id:
            return 6, -1
        (batch,) = list(iter_batches(part.records))
        h = batch.header
        if h.is_transactional:
            txn = self.txns.get(request.transactional_id) if request.HasField("transactional_id") else None
            if txn is None or txn.producer_id != h.producer_id:
                return 120, -1
            if h.producer_epoch < txn.epoch:
                return 47, -1
            if request.add_partitions and (tp not in txn.partitions or txn.state != "Ongoing"):
                code = self._implicit_add(request.transactional_id, h.producer_id, h.producer_epoch, tp)
                if code:
                    return code, -1
            if tp not in txn.partitions or txn.state != "Ongoing":
                return 120, -1  # KIP-890 verification: not registered
        if h.producer_id >= 0:
            state = self.producer_state.get((tp, h.producer_id))
            last_seq = h.base_sequence + h.last_offset_delta
            if state is not None:
                if h.producer_epoch < state["epoch"]:
                    return 47, -1
                if h.producer_epoch == state["epoch"]:
                    for first, last, offset in state["batches"]:
                        if (first, last) == (h.base_sequence, last_seq):
                            return NONE, offset  # a duplicate: the original offsets
                    if h.base_sequence != state["last_seq"] + 1:
                        return 45, -1
                elif h.base_sequence != 0:
                    return 45, -1
            if state is None or h.producer_epoch > state["epoch"]:
                state = self.producer_state[(tp, h.producer_id)] = {"epoch": h.producer_epoch, "last_seq": -1,
                                                                    "batches": deque(maxlen=5)}
        base_offset = self.next_offset[tp]
        self.next_offset[tp] += h.records_count
        self.logs[tp].append(LogEntry(base_offset, h.producer_id, h.producer_epoch, h.base_sequence,
                                      h.records_count, h.is_transactional,
                                      [(r.key, r.value) for r in batch.records()], part.records))
        if h.producer_id >= 0:
            state["last_seq"] = last_seq
            state["batches"].append((h.base_sequence, last_seq, base_offset))
        return NONE, base_offset


@pytest.fixture
def fake_cluster() -> Any:
    cluster = FakeCluster(nodes=1)
    yield cluster
    cluster.stop()


@pytest.fixture
def fake_cluster2() -> Any:
    cluster = FakeCluster(nodes=2)
    yield cluster
    cluster.stop()


#: settings that make retries and lingering quick in tests
FAST = dict(linger_ms=1, retry_backoff_ms=5, retry_backoff_max_ms=20, request_timeout_ms=2000,
            delivery_timeout_ms=5000, max_block_ms=5000)


@pytest.fixture
def make_producer() -> Any:
    from producer import Producer

    made: list[Producer] = []

    class ExplicitAddProducer(Producer):
        """Registers partitions with AddPartitionsToTxn of its own, as batch participants do."""
        _implicit_add = False

    def make(cluster: FakeCluster, *, explicit_add: bool = False, **overrides: Any) -> Producer:
        settings = {**FAST, **overrides}
        producer = (ExplicitAddProducer if explicit_add else Producer)(bootstrap_servers=cluster.bootstrap, **settings)
        made.append(producer)
        return producer

    yield make
    for producer in made:
        producer.close(timeout=2)
