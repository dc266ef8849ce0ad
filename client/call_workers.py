"""Unary calls that do not block their caller, made as blocking calls by a pool of long-lived threads.

gRPC's own `multicallable.future()` starts a new thread whenever a channel goes from no call in flight
to one (its "channel spin" thread exits when the last call ends). A client that sends one request
at a time per node, as the consumer's fetcher does, paid for a thread start with every call: about
0.1-0.2 ms of CPU and a wait for the new thread to get the GIL (measured on loopback: a future call
cost 370-490 us of client CPU, a blocking one 190-250 us, one handed to a running worker 270-310 us).
Here a blocking call (gRPC runs it in the calling thread) is handed to a worker that is already
running; workers are started only when every one is busy, so their number follows the peak of calls
in flight, and they are daemon threads, never in the way of an exiting process.

Calls made here keep no order: two of them may reach a node, and be answered, in either order. The
producer's pipelined Produce requests need both orders kept and use gRPC's future()
(client.transport.call_future says why).

CallFuture offers the part of grpc.Future txnsim's clients use. A call that has started cannot be
cancelled (cancel() says False, as concurrent.futures does); closing the channel ends it at once.
"""
from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

import grpc

log = logging.getLogger(__name__)

#: (future, the multicallable, its request, its timeout in seconds)
_Job = tuple["CallFuture", Any, Any, float]


class CallFuture(grpc.Future):  # type: ignore[misc]  # grpc.Future is an untyped ABC
    """The outcome of one unary call: its response, or the grpc.RpcError it ended with."""

    def __init__(self) -> None:
        self._condition = threading.Condition(threading.Lock())
        self._state = "pending"  # -> running -> done, or pending -> cancelled
        self._response: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[CallFuture], Any]] = []

    def _start(self) -> bool:
        with self._condition:
            if self._state != "pending":
                return False
            self._state = "running"
            return True

    def _finish(self, response: Any, error: BaseException | None) -> None:
        with self._condition:
            self._response, self._error, self._state = response, error, "done"
            callbacks, self._callbacks = self._callbacks, []
            self._condition.notify_all()
        self._call_back(callbacks)

    def _call_back(self, callbacks: list[Callable[[CallFuture], Any]]) -> None:
        for callback in callbacks:
            try:
                callback(self)
            except Exception:  # as grpc.Future does: a failing callback is logged, the others still run
                log.exception("a callback of a gRPC call failed")

    def cancel(self) -> bool:
        with self._condition:
            if self._state == "pending":
                self._state = "cancelled"
                callbacks, self._callbacks = self._callbacks, []
                self._condition.notify_all()
            elif self._state != "cancelled":
                return False
            else:
                callbacks = []
        self._call_back(callbacks)
        return True

    def cancelled(self) -> bool:
        return self._state == "cancelled"

    def running(self) -> bool:
        return self._state == "running"

    def done(self) -> bool:
        return self._state in ("done", "cancelled")

    def _wait(self, timeout: float | None) -> None:
        with self._condition:
            if not self._condition.wait_for(self.done, timeout):
                raise grpc.FutureTimeoutError()
        if self._state == "cancelled":
            raise grpc.FutureCancelledError()

    def result(self, timeout: float | None = None) -> Any:
        self._wait(timeout)
        if self._error is not None:
            raise self._error
        return self._response

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return self._error

    def traceback(self, timeout: float | None = None) -> Any:
        error = self.exception(timeout)
        return None if error is None else error.__traceback__

    def add_done_callback(self, fn: Callable[[CallFuture], Any]) -> None:
        """`fn(future)` once the call is over (now, in this thread, if it already is; else in the worker's)."""
        with self._condition:
            if not self.done():
                self._callbacks.append(fn)
                return
        self._call_back([fn])


class CallWorkers:
    """The threads that make the calls; one pool per process (see `submit`)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # workers waiting for a job, less the jobs already promised to them
        self._started = 0

    def submit(self, method: Any, request: Any, timeout_s: float) -> CallFuture:
        """Start `method(request, timeout=timeout_s)` on an idle worker (a new one if none is idle)."""
        future = CallFuture()
        with self._lock:
            spawn = self._idle == 0
            if spawn:
                self._started += 1
                name = f"txnsim-call-{self._started}"
            else:
                self._idle -= 1
        self._jobs.put((future, method, request, timeout_s))
        if spawn:
            threading.Thread(target=self._work, name=name, daemon=True).start()
        return future

    def _work(self) -> None:
        jobs = self._jobs
        while True:
            future, method, request, timeout_s = jobs.get()
            if future._start():
                try:
                    response = method(request, timeout=timeout_s)
                except BaseException as error:  # noqa: BLE001 - a grpc.RpcError or not: whoever waits gets it
                    future._finish(None, error)
                else:
                    future._finish(response, None)
            del future, method, request  # hold nothing of a finished call while idle
            with self._lock:
                self._idle += 1


_workers = CallWorkers()


def _after_fork_in_child() -> None:
    global _workers
    _workers = CallWorkers()  # the parent's threads do not exist here


os.register_at_fork(after_in_child=_after_fork_in_child)


def submit(method: Any, request: Any, timeout_s: float) -> CallFuture:
    """One unary call, made by the process's call workers; see the module's docstring."""
    return _workers.submit(method, request, timeout_s)
