"""The simulated network: latency, drop, duplicate, reorder, partitions, paused and crashed actors."""
from __future__ import annotations

import pytest

from proto import txnsim_pb2
from txnsim.simulate.actors import Actors
from txnsim.simulate.network import ANY, TIMED_OUT, Envelope, LinkRule, Network
from txnsim.simulate.trace import Trace
from txnsim.simulate.world import World


class Echo:
    """A server that answers every request with its own message, and remembers what it got."""

    def __init__(self, network: Network, name: str) -> None:
        self.network = network
        self.received: list[object] = []
        network.register(name, self.receive)

    def receive(self, env: Envelope) -> None:
        self.received.append(env.message)
        if env.call_id:
            self.network.reply(env, ("echo", env.message))


class Rig:
    """A client c0 and an echo server n0 on a network of seed 42, with the trace kept."""

    def __init__(self) -> None:
        self.world = World(seed=42)
        self.trace = Trace(keep=True)
        self.network = Network(self.world, Actors(self.world, self.trace), self.trace)
        self.echo = Echo(self.network, "n0")
        self.network.register("c0", lambda env: None)


@pytest.fixture()
def rig() -> Rig:
    return Rig()


def replies_of(network: Network, request: object, timeout_ms: int = 100) -> list[object]:
    replies: list[object] = []
    network.call("c0", "n0", request, timeout_ms, replies.append)
    return replies


def test_a_protobuf_request_gets_its_reply_after_a_latency_from_the_seed(rig: Rig):
    request = txnsim_pb2.EndTxnRequest(transactional_id="tx-1", producer_id=7, committed=True)
    replies = replies_of(rig.network, request)
    rig.network.world.run()
    assert replies == [("echo", request)]
    assert 2 <= rig.network.world.now_ms <= 10
    assert any("EndTxnRequest{" in line and "transactional_id:'tx-1'" in line for line in rig.trace.lines)


def test_a_dropped_request_is_never_delivered_and_the_caller_times_out_once(rig: Rig):
    rig.network.add_rule(LinkRule("drop", "c0", ANY, per_mille=1000))
    replies = replies_of(rig.network, "lost")
    rig.network.world.run()
    assert rig.echo.received == [] and replies == [TIMED_OUT]
    assert rig.network.counters["messages dropped"] == 1


def test_a_duplicated_request_is_handled_twice_but_on_reply_fires_once(rig: Rig):
    rig.network.add_rule(LinkRule("dup", ANY, ANY, per_mille=1000))
    replies = replies_of(rig.network, "twice")
    rig.network.world.run()
    assert rig.echo.received == ["twice", "twice"]
    assert replies == [("echo", "twice")]
    assert any(" late " in line for line in rig.trace.lines)


def test_links_are_fifo_until_a_reorder_spike_lets_messages_overtake(rig: Rig):
    for i in range(20):
        rig.network.send("c0", "n0", i)
    rig.network.world.run()
    assert rig.echo.received == list(range(20))
    rig.network.add_rule(LinkRule("reorder", ANY, ANY, per_mille=500, extra_ms=50))
    for i in range(20):
        rig.network.send("c0", "n0", 100 + i)
    rig.network.world.run()
    later = rig.echo.received[20:]
    assert sorted(later) == [100 + i for i in range(20)] and later != sorted(later)


def test_a_partition_blocks_messages_until_it_heals(rig: Rig):
    rig.network.cut("c0", "n0")
    blocked = replies_of(rig.network, "during")
    rig.network.world.run()
    assert blocked == [TIMED_OUT] and rig.echo.received == []
    rig.network.heal("c0", "n0")
    healed = replies_of(rig.network, "after")
    rig.network.world.run()
    assert healed == [("echo", "after")]


def test_a_one_way_partition_lets_requests_through_but_not_replies(rig: Rig):
    rig.network.cut("n0", "c0")
    replies = replies_of(rig.network, "one-way")
    rig.network.world.run()
    assert rig.echo.received == ["one-way"] and replies == [TIMED_OUT]


def test_a_paused_actor_gets_its_queued_messages_in_order_on_resume(rig: Rig):
    rig.network.actors.pause("n0")
    for i in range(3):
        rig.network.send("c0", "n0", i)
    rig.network.world.run(until_ms=500)
    assert rig.echo.received == []
    rig.network.actors.resume("n0")
    rig.network.world.run()
    assert rig.echo.received == [0, 1, 2]


def test_a_crashed_actor_loses_its_messages_and_timers(rig: Rig):
    fired: list[str] = []
    rig.network.set_timer("n0", 50, fired.append, "timer")
    rig.network.actors.crash("n0")
    rig.network.send("c0", "n0", "lost")
    rig.network.world.run()
    assert rig.echo.received == [] and fired == []
    rig.network.actors.restart("n0")
    rig.network.send("c0", "n0", "after restart")
    rig.network.world.run()
    assert rig.echo.received == ["after restart"]


def test_a_message_with_an_unstable_repr_is_refused_because_it_would_break_the_hash(rig: Rig):
    with pytest.raises(ValueError, match="no stable repr"):
        rig.network.send("c0", "n0", object())
