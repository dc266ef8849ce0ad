"""The Kafka listener of one node: every connection served by one selector thread and a shared worker pool.

No thread belongs to a connection. The selector thread accepts, reads frames as their bytes arrive, and
writes answers; a complete request goes to the worker pool, and a request that waits (a long-polling
Fetch, a held JoinGroup) is a future that completes later without holding a worker (Dispatcher.answer_later).
So a thousand idle or trickling connections cost buffers, not threads, and cannot starve anyone.

Per connection, answers leave in request order. Produce requests run concurrently as long as they write
disjoint partitions: a client pipelines one request per partition (librdkafka up to 5 in flight), and
each waits for its fsync, so serving them one at a time would add the fsyncs up. A produce request for a
partition an earlier request still writes waits for it (per-partition order keeps idempotent sequences in
order); every other request waits for all earlier ones and runs alone, as Kafka serves a connection.

Limits (ListenerLimits, Kafka's names): at most max_connections open (past it, the connection idle longest
is closed to make room, so a flood cannot lock others out) and max_connections_per_ip from one address;
a connection idle for connections_max_idle_ms is closed, where only a whole request counts as activity,
and a request whose bytes take longer than request_arrival_timeout_ms to arrive closes its connection, so
a byte every few seconds keeps nothing open; frames up to socket_request_max_bytes are read (a produce
over message_max_bytes is answered MESSAGE_TOO_LARGE, as Kafka does), within queued_max_request_bytes of
request bytes buffered across all connections.
"""
from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from coordinator.kafka.dispatch import CLIENT_HOST, Decoded, Dispatcher
from coordinator.kafka.framing import SIZE, CloseConnection, frame_size

log = logging.getLogger(__name__)

#: requests of one connection being handled or waiting to be sent (librdkafka pipelines up to 5 produces);
#: the selector stops reading a connection while this many are outstanding
MAX_IN_FLIGHT = 8
#: answers of one connection waiting to be sent past which it is not read (a client that does not read)
MAX_UNSENT_BYTES = 8 * 1024 * 1024
#: threads handling requests, shared by every connection (waiting requests hold none)
WORKER_THREADS = 32
_RECV_BYTES = 256 * 1024
#: how often deadlines are looked at (idle and arrival timeouts are this much late at most)
_EXPIRY_CHECK_S = 0.25


@dataclass(frozen=True, slots=True)
class ListenerLimits:
    """What one client, or many, may hold of a listener (Kafka's setting names; Kafka's defaults where it has
    them)."""

    max_connections: int = 10_000
    max_connections_per_ip: int = 2**31 - 1
    connections_max_idle_ms: int = 600_000
    #: not Kafka's: how long a request's bytes may take to arrive, once its first byte has
    request_arrival_timeout_ms: int = 30_000
    socket_request_max_bytes: int = 100 * 1024 * 1024
    #: request bytes buffered across every connection at once (Kafka's queued.max.request.bytes, which it
    #: leaves unbounded); a connection waits to read a large request until there is room
    queued_max_request_bytes: int = 512 * 1024 * 1024


@dataclass(eq=False)
class _Request:
    decoded: Decoded
    #: the partitions a Produce writes (None: it runs alone)
    partitions: frozenset[tuple[str, int]] | None
    answer: Future[bytes | None] = field(default_factory=Future)
    started: bool = False


@dataclass(eq=False)
class _Connection:
    sock: socket.socket
    peer: tuple[str, int]
    opened: float
    #: bytes read of the frame being received (its size prefix included)
    received: bytearray = field(default_factory=bytearray)
    #: the frame's size once its prefix is read, and the budget reserved for it
    expected: int | None = None
    reserved: int = 0
    #: when the first byte of the frame being received arrived (None between requests)
    frame_started: float | None = None
    #: the last time a whole request arrived or an answer was sent: what idleness is measured from
    last_activity: float = 0.0
    waiting: deque[_Request] = field(default_factory=deque)  # decoded, in order; the head may be running
    unsent: bytearray = field(default_factory=bytearray)
    #: set when the connection must close once what is already answered has been sent
    closing: str | None = None
    #: the client closed its side with requests still waiting: they are carried out (an acks=0 produce is
    #: answered by nothing, and a Kafka broker takes every request that reached it), their answers dropped
    peer_closed: bool = False
    #: the selector events it is registered for (0: not registered, paused)
    events: int = selectors.EVENT_READ

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.unsent and self.frame_started is None


class KafkaListener:
    def __init__(self, address: str, dispatcher: Dispatcher, *, limits: ListenerLimits = ListenerLimits()) -> None:
        host, port = address.rsplit(":", 1)
        self.address = address
        self._dispatcher = dispatcher
        self._limits = limits
        self._socket = socket.create_server((host, int(port)), reuse_port=False, backlog=512)
        self._socket.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._socket, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._connections: dict[socket.socket, _Connection] = {}
        self._per_ip: Counter[str] = Counter()
        self._buffered = 0  # request bytes reserved by connections receiving a frame
        self._paused: set[_Connection] = set()  # registered for nothing: waiting for room
        self._next_expiry = 0.0
        self._done: deque[_Connection] = deque()  # connections with an answer just completed (any thread)
        self._done_lock = threading.Lock()
        self._stopped = threading.Event()
        self._workers = ThreadPoolExecutor(max_workers=WORKER_THREADS, thread_name_prefix=f"kafka-{port}")
        self._thread = threading.Thread(target=self._run, name=f"kafka-io-{port}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting and close every connection; a request being handled finishes into a closed socket."""
        self._stopped.set()
        self._wake()
        self._thread.join(timeout=2)
        self._workers.shutdown(wait=False, cancel_futures=True)

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    # ------------------------------------------------------------ the selector thread

    def _run(self) -> None:
        try:
            while not self._stopped.is_set():
                events = self._selector.select(self._next_deadline_s())
                for key, mask in events:
                    if key.fileobj is self._socket:
                        self._accept()
                    elif key.fileobj is self._wake_r:
                        self._drain_wakes()
                    else:
                        conn = self._connections.get(key.fileobj)  # type: ignore[call-overload]
                        if conn is None:
                            continue
                        if mask & selectors.EVENT_READ:
                            self._read(conn)
                        if mask & selectors.EVENT_WRITE and conn.sock in self._connections:
                            self._send(conn)
                self._answered()
                self._expire()
        except Exception:  # a bug here would silence the port: say so loudly
            log.exception("Kafka listener %s stopped on a bug", self.address)
        finally:
            for conn in list(self._connections.values()):
                self._close(conn, None)
            self._selector.close()
            self._socket.close()
            self._wake_r.close()
            self._wake_w.close()

    def _accept(self) -> None:
        while True:
            try:
                sock, peer = self._socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors: make room, try again at the next event
                log.warning("Kafka listener %s: accept failed: %s", self.address, exc)
                self._evict_idlest()
                return
            ip = peer[0]
            if self._per_ip[ip] >= self._limits.max_connections_per_ip:
                log.warning("Kafka listener %s: %s already has %d connections (max_connections_per_ip); refusing "
                            "another", self.address, ip, self._per_ip[ip])
                sock.close()
                continue
            if len(self._connections) >= self._limits.max_connections and not self._evict_idlest():
                log.warning("Kafka listener %s: %d connections, all busy (max_connections); refusing %s:%d",
                            self.address, len(self._connections), *peer[:2])
                sock.close()
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            now = time.monotonic()
            conn = _Connection(sock, (peer[0], peer[1]), now, last_activity=now)
            self._connections[sock] = conn
            self._per_ip[ip] += 1
            self._selector.register(sock, selectors.EVENT_READ, None)

    def _evict_idlest(self) -> bool:
        """Close the connection idle longest (nothing in progress), to make room for a new one."""
        idle = [conn for conn in self._connections.values() if conn.idle]
        if not idle:
            return False
        self._close(min(idle, key=lambda conn: conn.last_activity), "closed to make room for a new connection "
                                                                   "(max_connections), the longest idle")
        return True

    def _read(self, conn: _Connection) -> None:
        try:
            data = conn.sock.recv(self._wanted(conn))
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(conn, f"reset: {exc}")
            return
        if not data:
            if conn.received:
                got, of = ((len(conn.received), SIZE.size) if conn.expected is None
                           else (len(conn.received) - SIZE.size, conn.expected))
                self._close(conn, f"the connection closed after {got} of {of} bytes of a request")
            elif conn.waiting:  # closed by the client after requests still being carried out: finish them
                conn.peer_closed, conn.closing = True, "closed by the client"
                self._update_interest(conn)
            else:
                self._close(conn, None)  # closed by the client between requests
            return
        if conn.frame_started is None:
            conn.frame_started = time.monotonic()
        conn.received += data
        try:
            self._take_frames(conn)
        except CloseConnection as exc:
            self._close_after_answers(conn, str(exc))
        self._update_interest(conn)

    def _wanted(self, conn: _Connection) -> int:
        if conn.expected is None:
            return SIZE.size - len(conn.received)
        return min(_RECV_BYTES, conn.expected + SIZE.size - len(conn.received))

    def _take_frames(self, conn: _Connection) -> None:
        while True:
            if conn.expected is None:
                if len(conn.received) < SIZE.size:
                    return
                conn.expected = frame_size(bytes(conn.received[:SIZE.size]), self._limits.socket_request_max_bytes)
            if not conn.reserved and not self._reserve(conn):
                return  # paused by _update_interest until the budget has room
            if len(conn.received) < conn.expected + SIZE.size:
                return
            frame = bytes(conn.received[SIZE.size:SIZE.size + conn.expected])
            del conn.received[:SIZE.size + conn.expected]
            self._buffered -= conn.reserved
            conn.expected, conn.reserved = None, 0
            now = time.monotonic()
            conn.frame_started = now if conn.received else None
            conn.last_activity = now
            decoded = self._dispatcher.decode(frame)
            conn.waiting.append(_Request(decoded, decoded.produce_partitions()))
            self._start_ready(conn)

    def _start_ready(self, conn: _Connection) -> None:
        """Start every waiting request the ordering rules allow, oldest first."""
        running = [r for r in conn.waiting if r.started and not r.answer.done()]
        for request in conn.waiting:
            if request.started:
                continue
            if request.partitions is None:
                if running:
                    return
            elif any(r.partitions is None or r.partitions & request.partitions for r in running):
                return
            request.started = True
            running.append(request)
            self._workers.submit(self._handle, conn, request)
            if request.partitions is None:
                return  # it runs alone

    def _handle(self, conn: _Connection, request: _Request) -> None:
        """On a worker: answer the request (a waiting one completes later, from another thread)."""
        CLIENT_HOST.set(f"/{conn.peer[0]}")
        try:
            pending = self._dispatcher.answer_later(request.decoded)
        except CloseConnection as exc:
            pending = Future()
            pending.set_exception(exc)

        def copy(done: Future[bytes | None]) -> None:
            error = done.exception()
            if error is not None:
                request.answer.set_exception(error)
            else:
                request.answer.set_result(done.result())
            with self._done_lock:
                self._done.append(conn)
            self._wake()

        pending.add_done_callback(copy)

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # a wake is already pending, or the listener is closing

    def _drain_wakes(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def _answered(self) -> None:
        """Move the answers completed since the last pass into their connections' output, in request order."""
        with self._done_lock:
            ready, self._done = self._done, deque()
        for conn in dict.fromkeys(ready):
            if conn.sock not in self._connections:
                continue
            while conn.waiting and conn.waiting[0].answer.done():
                request = conn.waiting.popleft()
                error = request.answer.exception()
                if error is not None:  # answered by closing: nothing after it is sent
                    conn.closing = conn.closing or str(error)
                    conn.waiting.clear()
                    break
                reply = request.answer.result()
                if reply is not None and not conn.peer_closed:
                    conn.unsent += reply
            self._start_ready(conn)
            self._send(conn)

    def _send(self, conn: _Connection) -> None:
        if conn.unsent:
            try:
                sent = conn.sock.send(conn.unsent)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._close(conn, f"reset: {exc}")
                return
            del conn.unsent[:sent]
            if sent:
                conn.last_activity = time.monotonic()
        if conn.closing is not None and not conn.unsent and not conn.waiting:
            self._close(conn, None if conn.peer_closed else conn.closing)
            return
        self._update_interest(conn)

    def _update_interest(self, conn: _Connection) -> None:
        """Read while the connection has room for another request (and, mid-frame, its share of the request
        budget); write while it has unsent answers. A connection that wants neither is paused."""
        if conn.sock not in self._connections:
            return
        reading = (conn.closing is None and len(conn.waiting) < MAX_IN_FLIGHT and len(conn.unsent) < MAX_UNSENT_BYTES
                   and (conn.expected is None or conn.reserved > 0 or self._reserve(conn)))
        events = (selectors.EVENT_READ if reading else 0) | (selectors.EVENT_WRITE if conn.unsent else 0)
        if events == conn.events:
            return
        if conn.events == 0:
            self._selector.register(conn.sock, events, None)
            self._paused.discard(conn)
        elif events == 0:
            self._selector.unregister(conn.sock)
            self._paused.add(conn)
        else:
            self._selector.modify(conn.sock, events, None)
        conn.events = events

    def _reserve(self, conn: _Connection) -> bool:
        """Reserve the budget for the frame being received; False (read it later) when others hold it all."""
        assert conn.expected is not None
        if self._buffered and self._buffered + conn.expected > self._limits.queued_max_request_bytes:
            return False
        conn.reserved = conn.expected
        self._buffered += conn.reserved
        return True

    def _close_after_answers(self, conn: _Connection, reason: str) -> None:
        """Nothing more is read; the answers of earlier requests still leave, then the connection closes."""
        if conn.closing is None:
            conn.closing = reason
        self._send(conn)

    def _close(self, conn: _Connection, reason: str | None) -> None:
        if self._connections.pop(conn.sock, None) is None:
            return
        if reason is not None:
            log.info("Kafka listener %s: closing the connection from %s:%d: %s", self.address, *conn.peer, reason)
        self._per_ip[conn.peer[0]] -= 1
        if self._per_ip[conn.peer[0]] <= 0:
            del self._per_ip[conn.peer[0]]
        self._buffered -= conn.reserved
        conn.reserved = 0
        self._paused.discard(conn)
        if conn.events:
            self._selector.unregister(conn.sock)
            conn.events = 0
        try:
            conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed by the peer
        conn.sock.close()

    # ------------------------------------------------------------ timeouts

    def _next_deadline_s(self) -> float:
        return _EXPIRY_CHECK_S if self._connections else 5.0

    def _expire(self) -> None:
        """Close connections past their deadlines (at most every _EXPIRY_CHECK_S), and let paused ones read
        again if they now may (a request budget freed, answers sent)."""
        for conn in list(self._paused):
            self._update_interest(conn)
        now = time.monotonic()
        if now < self._next_expiry:
            return
        self._next_expiry = now + _EXPIRY_CHECK_S
        idle_s = self._limits.connections_max_idle_ms / 1000
        arrival_s = self._limits.request_arrival_timeout_ms / 1000
        for conn in list(self._connections.values()):
            if conn.frame_started is not None and now - conn.frame_started > arrival_s and conn.closing is None:
                self._close(conn, f"a request took longer than {arrival_s:g} s to arrive "
                                  f"({len(conn.received)} bytes so far): request_arrival_timeout_ms")
            elif conn.idle and now - conn.last_activity > idle_s:
                self._close(conn, f"idle for {idle_s:g} s (connections_max_idle_ms)")
