"""Ports to listen on for the processes txnsim starts on one machine (nodes, their Kafka listeners and
/metrics, ZooKeeper)."""
from __future__ import annotations

import random
import socket
from pathlib import Path

#: listening ports are picked at or above this, below the kernel's ephemeral range
_LISTEN_PORTS_FROM = 10_000
#: every port this process has handed out: a picked port is not bound until its node starts, so without this
#: record two picks for one cluster (a node's gRPC port and another's Kafka port) could be the same port
_handed_out: set[tuple[str, int]] = set()


def _ephemeral_start(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> int:
    """The lowest port the kernel hands outgoing connections (Linux's default when it cannot say)."""
    try:
        low, _high = (int(field) for field in path.read_text().split())
    except (OSError, ValueError):
        return 32768
    return low


def free_port(host: str = "127.0.0.1") -> int:
    """A port free to listen on, below the ephemeral range when it leaves room, and never one this process
    handed out before. A port that bind(0) picks is an ephemeral one, which any outgoing connection (a client,
    another node) may take as its local port before the node that was given it binds it; and a port is only
    free until someone binds it, so a cluster picking its nodes' ports one by one could get one port twice.
    CI saw a node die with "Address already in use" both ways."""
    low = _ephemeral_start()
    if low - _LISTEN_PORTS_FROM >= 1000:
        for port in random.sample(range(_LISTEN_PORTS_FROM, low), 50):
            if (host, port) in _handed_out:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue  # someone listens there (or still holds it): try another
            _handed_out.add((host, port))
            return port
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            picked: int = s.getsockname()[1]
        if (host, picked) not in _handed_out:
            _handed_out.add((host, picked))
            return picked
