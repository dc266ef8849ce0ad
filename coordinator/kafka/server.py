"""The Kafka listener of one node: accepts TCP connections on loopback and serves each with its own threads.

Threads, not asyncio: every handler calls the node's blocking logic (appends wait for fsync, fetches
long-poll on a condition), as the gRPC services do from their thread pool; asyncio would hand each
request to a thread anyway.

Per connection, a reader thread decodes frames and a writer thread sends the responses, always in request
order. Produce requests run concurrently (a shared pool) as long as they write disjoint partitions: a
client pipelines one request per partition (librdkafka up to 5 in flight), and each waits for its fsync, so
serving them one at a time would add the fsyncs up. A produce request for a partition an earlier request
still writes waits for it (per-partition order keeps idempotent sequences in order); every other request
waits for all earlier ones and runs alone, as Kafka serves a connection.
"""
from __future__ import annotations

import logging
import queue
import socket
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait

from coordinator.kafka.dispatch import CLIENT_HOST, Decoded, Dispatcher
from coordinator.kafka.framing import SIZE, CloseConnection, frame_size

log = logging.getLogger(__name__)

#: connections beyond this are closed at once, so a flood of sockets cannot exhaust the node's threads
MAX_CONNECTIONS = 1000
#: Kafka's connections.max.idle.ms: a connection that sends nothing for this long is closed
IDLE_TIMEOUT_S = 600.0
#: requests of one connection being handled or waiting to be sent (librdkafka pipelines up to 5 produces);
#: the reader stops reading while this many are outstanding
MAX_IN_FLIGHT = 8
#: threads handling produce requests beside their connections' readers, shared by every connection
PRODUCE_THREADS = 32

#: a client's address as accept() gives it: (host, port), with flow info and scope id on IPv6
Peer = tuple[str, int] | tuple[str, int, int, int]
#: a request being answered: the partitions it writes (None: it runs alone) and its answer frame to come
InFlight = tuple[frozenset[tuple[str, int]] | None, Future[bytes | None]]


class KafkaListener:
    def __init__(self, address: str, dispatcher: Dispatcher, *, max_request_bytes: int) -> None:
        host, port = address.rsplit(":", 1)
        self.address = address
        self._dispatcher = dispatcher
        self._max_request_bytes = max_request_bytes
        self._socket = socket.create_server((host, int(port)), reuse_port=False, backlog=128)
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._acceptor = threading.Thread(target=self._accept_loop, name=f"kafka-accept-{port}", daemon=True)
        self._producing = ThreadPoolExecutor(max_workers=PRODUCE_THREADS, thread_name_prefix=f"kafka-produce-{port}")

    def start(self) -> None:
        self._acceptor.start()

    def stop(self) -> None:
        """Stop accepting and close every connection; a request being handled finishes into a closed socket."""
        self._stopped.set()
        try:
            self._socket.shutdown(socket.SHUT_RDWR)  # wakes accept() on Linux
        except OSError:
            pass  # never connected or already shut: closing below is all that is left
        self._socket.close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            _close(conn)
        self._acceptor.join(timeout=2)
        self._producing.shutdown(wait=False, cancel_futures=True)

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, peer = self._socket.accept()
            except OSError:
                if self._stopped.is_set():
                    return
                log.warning("Kafka listener %s: accept failed; retrying", self.address, exc_info=True)
                self._stopped.wait(0.05)
                continue
            with self._lock:
                if len(self._connections) >= MAX_CONNECTIONS:
                    log.warning("Kafka listener %s: %d connections open; refusing %s", self.address,
                                len(self._connections), peer)
                    _close(conn)
                    continue
                self._connections.add(conn)
            threading.Thread(target=self._serve, args=(conn, peer), name=f"kafka-conn-{peer[1]}", daemon=True).start()

    def _serve(self, conn: socket.socket, peer: Peer) -> None:
        """The reader: decode each frame and start answering it; the writer sends the answers in order."""
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.settimeout(IDLE_TIMEOUT_S)
        CLIENT_HOST.set(f"/{peer[0]}")
        answers: queue.Queue[Future[bytes | None] | None] = queue.Queue()
        writer = threading.Thread(target=self._write_answers, args=(conn, peer, answers),
                                  name=f"kafka-write-{peer[1]}", daemon=True)
        writer.start()
        in_flight: list[InFlight] = []
        try:
            while not self._stopped.is_set():
                prefix = _read_exactly(conn, SIZE.size)
                if prefix is None:
                    return  # the client closed the connection between requests
                frame = _read_exactly(conn, frame_size(prefix, self._max_request_bytes))
                if frame is None:
                    raise CloseConnection("the connection closed in the middle of a request")
                decoded = self._dispatcher.decode(frame)
                in_flight = [(keys, f) for keys, f in in_flight if not f.done()]
                answers.put(self._start(decoded, in_flight))
        except CloseConnection as exc:
            failed: Future[bytes | None] = Future()
            failed.set_exception(exc)
            answers.put(failed)  # after every earlier answer: those still leave first
        except (OSError, TimeoutError) as exc:  # reset by the peer, idle too long, or closed by stop()
            if not self._stopped.is_set():
                log.debug("Kafka listener %s: connection from %s:%d ended: %s", self.address, *peer[:2], exc)
        finally:
            answers.put(None)
            writer.join()
            with self._lock:
                self._connections.discard(conn)
            _close(conn)

    def _start(self, decoded: Decoded, in_flight: list[InFlight]) -> Future[bytes | None]:
        """Answer `decoded` once the earlier requests it must follow are done; returns its answer's future."""
        partitions = decoded.produce_partitions()
        if partitions is None:  # alone and in order: after everything before it, on the reader's thread
            wait([f for _keys, f in in_flight])
            answer: Future[bytes | None] = Future()
            try:
                answer.set_result(self._dispatcher.answer(decoded))
            except CloseConnection as exc:
                answer.set_exception(exc)
            return answer
        wait([f for keys, f in in_flight if keys is None or keys & partitions])
        if len(in_flight) >= MAX_IN_FLIGHT:
            wait([f for _keys, f in in_flight[:len(in_flight) - MAX_IN_FLIGHT + 1]])
        answer = self._producing.submit(self._dispatcher.answer, decoded)
        in_flight.append((partitions, answer))
        return answer

    def _write_answers(self, conn: socket.socket, peer: Peer,
                       answers: queue.Queue[Future[bytes | None] | None]) -> None:
        """The writer: each answer in request order; a request answered by closing closes the connection."""
        try:
            while (answer := answers.get()) is not None:
                reply = answer.result()
                if reply is not None:
                    conn.sendall(reply)
        except CloseConnection as exc:
            log.info("Kafka listener %s: closing the connection from %s:%d: %s", self.address, *peer[:2], exc)
        except (OSError, TimeoutError) as exc:
            if not self._stopped.is_set():
                log.debug("Kafka listener %s: connection to %s:%d ended: %s", self.address, *peer[:2], exc)
        else:
            return
        try:  # wake the reader, which may be blocked in recv, so the connection's threads end
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed
        while answers.get() is not None:  # let the reader finish putting; nothing more is sent
            pass


def _read_exactly(conn: socket.socket, size: int) -> bytes | None:
    """`size` bytes, or None if the peer closed the connection before the first byte."""
    chunks = bytearray()
    while len(chunks) < size:
        chunk = conn.recv(min(size - len(chunks), 1 << 20))
        if not chunk:
            if chunks:
                raise CloseConnection(f"the connection closed after {len(chunks)} of {size} bytes")
            return None
        chunks += chunk
    return bytes(chunks)


def _close(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed by the peer: close() below releases the descriptor
    conn.close()
