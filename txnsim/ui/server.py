"""Serving the web view with uvicorn, on loopback only: in the foreground (`txnsim ui`) or beside a
cluster in a thread (`txnsim cluster start --ui`)."""
from __future__ import annotations

import errno
import socket
import threading
import time
from pathlib import Path

import uvicorn

from proto.errors import KafkaConfigurationError
from txnsim.ui.app import create_app

HOST = "127.0.0.1"
DEFAULT_PORT = 8080

#: how long uvicorn lets open requests finish when told to stop (the live streams end at once; this bounds a
#: request that does not). Tests tell "ended at once" from "waited this out" with a margin on either side.
GRACEFUL_SHUTDOWN_S = 10


def bind(port: int) -> socket.socket:
    """The listening socket, bound before uvicorn starts so a taken port is one clear line."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise KafkaConfigurationError(f"[INVALID_CONFIG] port {port} on {HOST} is already in use "
                                          "(pass another --port, or 0 for a free one)") from None
        raise KafkaConfigurationError(f"[INVALID_CONFIG] cannot listen on {HOST}:{port}: {exc.strerror}") from None
    sock.listen(64)
    return sock


def url(sock: socket.socket) -> str:
    return f"http://{HOST}:{sock.getsockname()[1]}/"


def _server(data_dir: Path, interval_s: float) -> uvicorn.Server:
    servers: list[uvicorn.Server] = []
    # the live streams end once the server is told to stop (Ctrl-C, SIGTERM, BackgroundUI.stop), so its
    # shutdown does not wait on open browsers; a stream stuck anyway is cancelled after a few seconds
    app = create_app(data_dir, interval_s=interval_s, stopping=lambda: bool(servers) and servers[0].should_exit)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
    servers.append(uvicorn.Server(config))
    return servers[0]


def serve_forever(data_dir: Path, sock: socket.socket, interval_s: float = 1.0) -> None:
    """Serve until Ctrl-C (uvicorn handles SIGINT and SIGTERM)."""
    _server(data_dir, interval_s).run(sockets=[sock])


class BackgroundUI:
    """The web view in a thread of its own, stopped with the cluster."""

    def __init__(self, data_dir: Path, where: int | socket.socket = DEFAULT_PORT, interval_s: float = 1.0) -> None:
        """`where`: a port on loopback, or a socket `bind()` gave."""
        self._sock = bind(where) if isinstance(where, int) else where
        self.url = url(self._sock)
        self._server = _server(data_dir, interval_s)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name="txnsim-ui", daemon=True)

    def start(self, timeout_s: float = 10.0) -> BackgroundUI:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise KafkaConfigurationError(f"[INVALID_CONFIG] the web view did not start on {self.url}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()
