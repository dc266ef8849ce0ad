"""The simulated network: messages between named actors, late, lost, doubled or cut off.

Each link is FIFO like a TCP connection: a message takes a latency drawn from the seed and
never overtakes an earlier one on the same link, unless a reorder fault gives it a delay
spike. Drop, duplicate, delay and reorder faults are rules over a set of links for a window
of time; a partition cuts links (a message is lost if its link is cut when it is sent or
when it would arrive). `call` pairs a request with its response: `on_reply` runs exactly
once, with the response or `TIMED_OUT`, however many copies of the response arrive.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from txnsim.simulate.actors import Actors
from txnsim.simulate.trace import Trace, summarize
from txnsim.simulate.world import Timer, World

#: any link: a rule's src or dst that matches every actor
ANY = "*"


class TimedOut:
    """The response a `call` gets when none arrived in time; compare with `is TIMED_OUT`."""

    def __repr__(self) -> str:
        return "TIMED_OUT"


TIMED_OUT = TimedOut()


@dataclass(frozen=True, slots=True)
class Envelope:
    """A message on the wire. `call_id` > 0: a request awaiting a reply; `reply_to` > 0: a reply."""

    src: str
    dst: str
    message: object
    call_id: int = 0
    reply_to: int = 0


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    min_latency_ms: int = 1
    max_latency_ms: int = 5


@dataclass(eq=False, slots=True)
class LinkRule:
    """A fault on the links from `src` to `dst` (either may be ANY) while it is installed.

    kind: "drop" or "dup" (with `per_mille`), "delay" (adds `extra_ms`), "reorder" (with
    `per_mille` of messages getting a spike of up to `extra_ms`), "late" (`per_mille` of the messages of
    `message_type` arrive exactly `extra_ms` late, overtaken by everything sent after them)."""

    kind: str
    src: str
    dst: str
    per_mille: int = 0
    extra_ms: int = 0
    #: "late" rules hold back only messages of this type (by class name)
    message_type: str = ""

    def matches(self, src: str, dst: str) -> bool:
        return (self.src == ANY or self.src == src) and (self.dst == ANY or self.dst == dst)


Handler = Callable[[Envelope], None]
ReplyHandler = Callable[[object], None]


@dataclass(slots=True)
class _PendingCall:
    src: str
    incarnation: int
    on_reply: ReplyHandler
    timer: Timer


class Network:
    """Delivers envelopes to each actor's handler; counts what it did for the summary."""

    def __init__(self, world: World, actors: Actors, trace: Trace, config: NetworkConfig | None = None) -> None:
        self.world = world
        self.actors = actors
        self._trace = trace
        self.config = config or NetworkConfig()
        self._handlers: dict[str, Handler] = {}
        self._latency = world.rng("network.latency")
        self._fault_rng = {kind: world.rng(f"network.{kind}") for kind in ("drop", "dup", "reorder", "late")}
        self._link_free_at: dict[tuple[str, str], int] = {}
        self._rules: list[LinkRule] = []
        self._cuts: Counter[tuple[str, str]] = Counter()
        self._calls: dict[int, _PendingCall] = {}
        self._next_call_id = 0
        self.counters: Counter[str] = Counter()

    # ------------------------------------------------------------ actors

    def register(self, name: str, handler: Handler) -> None:
        """Add an actor whose `handler(envelope)` receives its requests and one-way messages."""
        self.actors.add(name)
        self._handlers[name] = handler

    def now(self, name: str) -> int:
        return self.actors.now(name)

    def set_timer(self, name: str, delay_ms: int, work: Callable[..., None], *args: object,
                  label: str | None = None) -> Timer:
        return self.actors.set_timer(name, delay_ms, work, *args, label=label)

    # ------------------------------------------------------------ sending

    def send(self, src: str, dst: str, message: object) -> None:
        """A one-way message."""
        self._transmit(Envelope(src, dst, message))

    def call(self, src: str, dst: str, request: object, timeout_ms: int, on_reply: ReplyHandler) -> int:
        """Send `request`; `on_reply(response or TIMED_OUT)` runs once as `src`. Returns the call id."""
        self._next_call_id += 1
        call_id = self._next_call_id
        timer = self.actors.set_timer(src, timeout_ms, self._time_out, call_id, label=f"timeout#{call_id}")
        self._calls[call_id] = _PendingCall(src, self.actors.incarnation(src), on_reply, timer)
        self._transmit(Envelope(src, dst, request, call_id=call_id))
        return call_id

    def reply(self, request: Envelope, response: object) -> None:
        """Answer a request received through `call` (a one-way message has nobody waiting)."""
        if request.call_id == 0:
            raise ValueError(f"{request.src}->{request.dst} {type(request.message).__name__} was sent without call();"
                             f" there is nobody to reply to")
        self._transmit(Envelope(request.dst, request.src, response, reply_to=request.call_id))

    def _time_out(self, call_id: int) -> None:
        pending = self._calls.pop(call_id, None)
        if pending is not None:
            self.counters["timeouts"] += 1
            pending.on_reply(TIMED_OUT)

    def _transmit(self, env: Envelope) -> None:
        now = self.world.now_ms
        trace = self._trace
        self.counters["messages sent"] += 1
        link = (env.src, env.dst)
        if not self.actors.is_up(env.src):
            return self._drop(env, "sender-down")
        if self._cuts and link in self._cuts:
            return self._drop(env, "partitioned")
        at = now + self._latency.randint(self.config.min_latency_ms, self.config.max_latency_ms)
        copies = 1
        spike = 0
        if self._rules:
            for rule in self._rules:
                if not rule.matches(env.src, env.dst):
                    continue
                if rule.kind == "delay":
                    at += rule.extra_ms
                elif rule.kind == "drop" and self._fault_rng["drop"].randrange(1000) < rule.per_mille:
                    return self._drop(env, "dropped")
                elif rule.kind == "dup" and self._fault_rng["dup"].randrange(1000) < rule.per_mille:
                    copies = 2
                elif rule.kind == "reorder" and self._fault_rng["reorder"].randrange(1000) < rule.per_mille:
                    spike = self._fault_rng["reorder"].randint(1, max(1, rule.extra_ms))
                elif (rule.kind == "late" and type(env.message).__name__ == rule.message_type
                      and self._fault_rng["late"].randrange(1000) < rule.per_mille):
                    spike = rule.extra_ms
        if spike:
            at += spike  # a spike ignores the link's order: this message may overtake or be overtaken
        else:
            at = max(at, self._link_free_at.get(link, 0))
            self._link_free_at[link] = at
        summary = summarize(env.message)
        route_kind = "reply" if env.reply_to else "send"
        trace.record(now, route_kind, env.src, env.dst, f"@{at} {_tag(env)}{summary}")
        self.world.schedule(at, self._arrive, env)
        if copies == 2:
            self.counters["messages duplicated"] += 1
            trace.record(now, "dup", env.src, env.dst, f"@{at + 1} {_tag(env)}{summary}")
            self.world.schedule(at + 1, self._arrive, env)

    def _drop(self, env: Envelope, reason: str) -> None:
        self.counters["messages dropped"] += 1
        self._trace.record(self.world.now_ms, "drop", env.src, env.dst, f"{reason} {_tag(env)}{summarize(env.message)}")

    # ------------------------------------------------------------ receiving

    def _arrive(self, env: Envelope) -> None:
        if self._cuts and (env.src, env.dst) in self._cuts:
            return self._drop(env, "partitioned")
        if not self.actors.run_as(env.dst, self._deliver, env):
            self._drop(env, "receiver-down")

    def _deliver(self, env: Envelope) -> None:
        self.counters["messages delivered"] += 1
        if env.reply_to:
            pending = self._calls.get(env.reply_to)
            if pending is None or pending.incarnation != self.actors.incarnation(env.dst):
                self._trace.record(self.world.now_ms, "late", env.src, env.dst, f"{_tag(env)}ignored")
                return
            del self._calls[env.reply_to]
            pending.timer.cancel()
            pending.on_reply(env.message)
            return
        handler = self._handlers.get(env.dst)
        if handler is not None:
            handler(env)

    # ------------------------------------------------------------ faults (the injector calls these)

    def add_rule(self, rule: LinkRule) -> None:
        self._rules.append(rule)

    def remove_rule(self, rule: LinkRule) -> None:
        self._rules = [r for r in self._rules if r is not rule]

    def cut(self, src: str, dst: str) -> None:
        """Cut the link src -> dst until `heal`; cuts nest, so overlapping partitions heal one by one."""
        self._cuts[(src, dst)] += 1

    def is_cut(self, src: str, dst: str) -> bool:
        """Whether messages from `src` to `dst` are dropped by a partition now."""
        return (src, dst) in self._cuts

    def heal(self, src: str, dst: str) -> None:
        link = (src, dst)
        if self._cuts[link] <= 1:
            del self._cuts[link]
        else:
            self._cuts[link] -= 1

    def forget_calls_of(self, name: str) -> None:
        """A crashed caller waits for nothing: its pending calls end without a callback."""
        for call_id in [c for c, pending in self._calls.items() if pending.src == name]:
            self._calls.pop(call_id).timer.cancel()

    def heal_all(self) -> None:
        self._rules.clear()
        self._cuts.clear()


def _tag(env: Envelope) -> str:
    if env.call_id:
        return f"#{env.call_id} "
    if env.reply_to:
        return f"re#{env.reply_to} "
    return ""
