"""Calls that do not block their caller (client.call_workers, behind client.transport.call_in_worker), against a
real gRPC server on loopback: answers, errors and callbacks arrive as grpc.Future's would, and a client
sending one call at a time no longer starts a thread per call."""
from __future__ import annotations

import threading
from concurrent import futures

import grpc
import pytest

from client import call_workers
from client.transport import CHANNEL_OPTIONS, call_in_worker, result_of
from proto import txnsim_pb2 as pb
from proto import txnsim_pb2_grpc as rpc
from proto.errors import KafkaConnectionError, KafkaTimeoutError


class Cluster(rpc.ClusterServicer):
    """FindCoordinator answers with the key; keys name what else to do first."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.held = threading.Semaphore(0)

    def FindCoordinator(self, request, context):
        if request.key == "hold":
            self.held.release()
            self.release.wait(10)
        elif request.key == "unavailable":
            context.abort(grpc.StatusCode.UNAVAILABLE, "node is restarting")
        elif request.key == "slow":
            self.release.wait(10)
        return pb.FindCoordinatorResponse(address=request.key)


#: the test server's own threads: its pool may start a second one when a call arrives before the first is idle
SERVER_THREADS = "test-server"


@pytest.fixture
def served():
    servicer = Cluster()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix=SERVER_THREADS))
    rpc.add_ClusterServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS)
    yield servicer, rpc.ClusterStub(channel).FindCoordinator
    servicer.release.set()
    channel.close()
    server.stop(None)


def ask(key: str) -> pb.FindCoordinatorRequest:
    return pb.FindCoordinatorRequest(key_type=0, key=key)


def test_one_call_at_a_time_reuses_one_worker_instead_of_a_thread_per_call(served, monkeypatch):
    _, method = served
    assert result_of(call_in_worker(method, ask("warm-up"), 5)).address == "warm-up"
    threads_started: list[str] = []
    start = threading.Thread.start

    def counted_start(thread: threading.Thread) -> None:
        if not thread.name.startswith(SERVER_THREADS):  # the client's threads are what the test counts
            threads_started.append(thread.name)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", counted_start)  # gRPC's own future() starts one per call here
    for n in range(30):
        assert result_of(call_in_worker(method, ask(f"key-{n}"), 5)).address == f"key-{n}"
    assert threads_started == []


def test_calls_in_flight_together_each_get_a_worker_and_call_back_when_answered(served):
    servicer, method = served
    answered: list[str] = []
    all_answered = threading.Event()

    def on_done(future: grpc.Future) -> None:
        answered.append(result_of(future).address)
        if len(answered) == 5:
            all_answered.set()

    calls = [call_in_worker(method, ask("hold"), 10) for _ in range(5)]
    for call in calls:
        call.add_done_callback(on_done)
    for _ in range(5):  # all five reach the server at once: none waits for another's worker
        assert servicer.held.acquire(timeout=5)
    assert not any(call.done() for call in calls) and answered == []
    servicer.release.set()
    assert all_answered.wait(5)
    assert answered == ["hold"] * 5
    late: list[grpc.Future] = []
    calls[0].add_done_callback(late.append)  # a callback added after the answer runs at once
    assert late == [calls[0]]


def test_errors_and_deadlines_come_back_as_kafka_errors(served):
    _, method = served
    with pytest.raises(KafkaConnectionError, match="node is restarting"):
        result_of(call_in_worker(method, ask("unavailable"), 5))
    with pytest.raises(KafkaTimeoutError):
        result_of(call_in_worker(method, ask("slow"), 0.2))


def test_a_started_call_cannot_be_cancelled_and_a_failing_callback_harms_no_other(served):
    servicer, method = served
    call = call_in_worker(method, ask("hold"), 10)
    assert servicer.held.acquire(timeout=5)
    assert call.running() and not call.cancel()
    with pytest.raises(grpc.FutureTimeoutError):
        call.result(timeout=0.05)
    seen: list[str] = []
    called_back = threading.Event()
    call.add_done_callback(lambda _: 1 / 0)
    call.add_done_callback(lambda f: (seen.append(f.result().address), called_back.set()))
    servicer.release.set()
    assert call.exception(timeout=5) is None
    assert called_back.wait(5) and seen == ["hold"]
    assert result_of(call_in_worker(method, ask("after"), 5)).address == "after"  # the worker lives on


def test_a_call_cancelled_before_it_starts_never_reaches_the_server():
    future = call_workers.CallFuture()
    fired: list[bool] = []
    future.add_done_callback(lambda f: fired.append(f.cancelled()))
    assert future.cancel() and future.done() and fired == [True]
    assert not future._start()  # the worker that takes it skips it
    with pytest.raises(grpc.FutureCancelledError):
        future.result()
