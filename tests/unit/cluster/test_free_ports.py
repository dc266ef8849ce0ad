"""Ports LocalCluster hands its nodes are outside the kernel's ephemeral range, where no outgoing connection
can take one between the pick and the node's bind."""
from __future__ import annotations

import socket

from txnsim import ports
from txnsim.ports import free_port


def test_a_picked_port_is_below_the_ephemeral_range_and_can_be_listened_on():
    low = ports._ephemeral_start()
    for _ in range(20):
        port = free_port()
        assert 10_000 <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
            s.listen()


def test_a_port_someone_listens_on_is_never_picked(monkeypatch):
    taken = [socket.socket() for _ in range(5)]
    try:
        for s in taken:
            s.bind(("127.0.0.1", free_port()))
            s.listen()
        listening = {s.getsockname()[1] for s in taken}
        spare = next(port for port in range(20_000, 30_000) if port not in listening and _bindable(port))
        # every candidate but the last is taken: the pick must skip them
        monkeypatch.setattr(ports.random, "sample", lambda population, k: [*sorted(listening), spare])
        assert free_port() == spare
    finally:
        for s in taken:
            s.close()


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_a_port_is_handed_out_once_though_nobody_bound_it_yet():
    """A cluster picks its nodes' gRPC, Kafka and /metrics ports before any node binds one: two picks must
    still differ (among 22,000 candidates, 2,000 random picks repeat one almost surely)."""
    picked = [free_port() for _ in range(2000)]
    assert len(set(picked)) == len(picked)


def test_without_room_below_the_ephemeral_range_the_kernel_picks(monkeypatch):
    monkeypatch.setattr(ports, "_ephemeral_start", lambda: 10_500)
    port = free_port()
    assert 10_500 <= port <= 60_999
