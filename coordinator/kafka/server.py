"""The Kafka listener of one node: accepts TCP connections on loopback and serves each with its own thread.

Threads, not asyncio: every handler calls the node's blocking logic (appends wait for fsync, fetches
long-poll on a condition), as the gRPC services do from their thread pool; asyncio would hand each
request to a thread anyway. One thread per connection reads a frame, answers it, then reads the next,
so responses leave in request order (Kafka also serves one request per connection at a time).
"""
from __future__ import annotations

import logging
import socket
import threading

from coordinator.kafka.dispatch import Dispatcher
from coordinator.kafka.framing import SIZE, CloseConnection, frame_size

log = logging.getLogger(__name__)

#: connections beyond this are closed at once, so a flood of sockets cannot exhaust the node's threads
MAX_CONNECTIONS = 1000
#: Kafka's connections.max.idle.ms: a connection that sends nothing for this long is closed
IDLE_TIMEOUT_S = 600.0


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

    def _serve(self, conn: socket.socket, peer: tuple) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.settimeout(IDLE_TIMEOUT_S)
        try:
            while not self._stopped.is_set():
                prefix = _read_exactly(conn, SIZE.size)
                if prefix is None:
                    return  # the client closed the connection between requests
                frame = _read_exactly(conn, frame_size(prefix, self._max_request_bytes))
                if frame is None:
                    raise CloseConnection("the connection closed in the middle of a request")
                reply = self._dispatcher.handle(frame)
                if reply is not None:
                    conn.sendall(reply)
        except CloseConnection as exc:
            log.info("Kafka listener %s: closing the connection from %s:%d: %s", self.address, *peer[:2], exc)
        except (OSError, TimeoutError) as exc:  # reset by the peer, idle too long, or closed by stop()
            if not self._stopped.is_set():
                log.debug("Kafka listener %s: connection from %s:%d ended: %s", self.address, *peer[:2], exc)
        finally:
            with self._lock:
                self._connections.discard(conn)
            _close(conn)


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
