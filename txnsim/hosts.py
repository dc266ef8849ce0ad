"""Hosts of their own on one machine: Linux network namespaces on one bridge, links cut with nftables.

Each host (a node, the ZooKeeper) is a network namespace with its own address on a bridge; nothing but that
network joins them. The process that made them (a test, `txnsim chaos`, a user's script) stays in the
machine's own namespace and reaches every host through the bridge at its own address, as a client on another
machine would: it is the host named "clients".

A fault is a rule in a host's own nftables table (`inet txnsim`): a partition drops the packets between two
hosts, one way or both; loss drops a share of them at random (nftables' numgen). Delay needs the kernel's
netem queueing discipline (`tc qdisc ... netem`), which some kernels lack: then asking for it is an error
that says so. Namespaces, the bridge and the links are named after the process that made them and a count
of its hosts sets (txs<pid as 6 hex digits><count>...), so what a killed run left behind is found and removed
by the next one, and one process may run several clusters at once.
"""
from __future__ import annotations

import ipaddress
import itertools
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from proto.errors import KafkaConfigurationError

log = logging.getLogger(__name__)

#: the machine's own namespace, where the cluster's clients run
CLIENTS = "clients"
#: hosts get 10.213.<n>.<x>/24, n chosen per cluster (free on this machine)
SUBNET_PREFIX = "10.213"
_PREFIX = "txs"
_TABLE = "txnsim"
_made = itertools.count()


def namespaces_unavailable() -> str | None:
    """Why hosts cannot be made here (one line), or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"{tool} is missing (apt-get install {package})"
    problem = _fails_in_a_probe(["nft", "add", "table", "inet", _TABLE])
    return f"cannot make a network namespace with an nftables table here: {problem}" if problem else None


def netem_unavailable() -> str | None:
    """Why `tc ... netem` (delay) does not work here, or None."""
    problem = _fails_in_a_probe(["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"])
    return f"this kernel cannot delay packets (tc netem: {problem})" if problem else None


def _fails_in_a_probe(argv: list[str]) -> str | None:
    """How `argv` fails in a new, empty namespace (removed afterwards), or None if it works."""
    probe = f"{_tag()}-probe"
    try:
        _run("ip", "netns", "add", probe)
        _run("ip", "netns", "exec", probe, *argv)
    except KafkaConfigurationError as exc:
        return str(exc)
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


@dataclass(frozen=True)
class Host:
    """One namespace: its label ("node-0", "zookeeper"), its name for `ip netns`, and its address."""

    label: str
    namespace: str
    address: str


class NetworkHosts:
    """A bridge and one namespace per label, made by `create` and removed by `destroy`."""

    def __init__(self, labels: Sequence[str], subnet: int | None = None) -> None:
        """`subnet`: n of 10.213.n.0/24 (None: the first free one from this process's id)."""
        self._tag = _tag()
        self.subnet = subnet
        self.labels = list(labels)
        self.hosts: dict[str, Host] = {}
        self.faults: list[str] = []  # what is broken now, in words
        self._delayed: set[str] = set()

    @property
    def bridge(self) -> str:
        return f"{self._tag}b"

    @property
    def clients_address(self) -> str:
        return f"{SUBNET_PREFIX}.{self.subnet}.1"

    def address(self, label: str) -> str:
        return self.clients_address if label == CLIENTS else self.hosts[label].address

    def command(self, label: str, argv: Sequence[str]) -> list[str]:
        """`argv` run on that host (`ip netns exec` execs it: the process is the command itself)."""
        return ["ip", "netns", "exec", self.hosts[label].namespace, *argv]

    # ------------------------------------------------------------ life cycle

    def create(self) -> NetworkHosts:
        remove_leftovers()
        if self.subnet is None or not self._subnet_free(self.subnet):
            self.subnet = self._free_subnet()
        try:
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            _run("ip", "addr", "add", f"{self.clients_address}/24", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")
            for index, label in enumerate(self.labels):
                self._add_host(index, label)
        except BaseException:
            self.destroy()
            raise
        log.info("hosts on %s.%d.0/24: %s", SUBNET_PREFIX, self.subnet,
                 ", ".join(f"{h.label} {h.address}" for h in self.hosts.values()))
        return self

    def destroy(self) -> None:
        for host in self.hosts.values():
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True, check=False)
        for index in range(len(self.labels)):
            subprocess.run(["ip", "link", "del", self._veth(index)], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)
        self.hosts.clear()
        self.faults.clear()

    # ------------------------------------------------------------ faults

    def partition(self, *groups: Iterable[str], one_way: bool = False) -> None:
        """Cut every link between hosts of different groups (labels, or CLIENTS); `one_way`: only the packets
        from the first group to the others are dropped (TCP then fails both ways: replies are lost)."""
        sets = [list(dict.fromkeys(g)) for g in groups]
        if len(sets) < 2 or any(not g for g in sets):
            raise KafkaConfigurationError("a partition needs at least two groups of hosts, none empty")
        for label in (label for g in sets for label in g):
            self._check(label)
        for i, first in enumerate(sets):
            for j, second in enumerate(sets):
                if i == j or (one_way and i != 0):
                    continue
                for a in first:
                    for b in second:
                        self._drop(a, b)
        arrow = " -> " if one_way else " | "
        self.faults.append("partition " + arrow.join(",".join(g) for g in sets))

    def lose(self, label: str, percent: int, toward: str | None = None) -> None:
        """Drop `percent` of the packets that reach `label` (from `toward` only, if given), at random."""
        self._check(label)
        if not 0 < percent <= 100:
            raise KafkaConfigurationError(f"packet loss is a percentage, 1..100, not {percent}")
        source = [] if toward is None else ["ip", "saddr", self.address(toward)]
        share = [] if percent == 100 else ["numgen", "random", "mod", "100", "<", str(percent)]  # < 100: nft's range
        self._rule(label, "input", [*source, *share, "drop"])
        self.faults.append(f"{percent}% of packets to {label}" + (f" from {toward}" if toward else "") + " lost")

    def delay(self, label: str, delay_ms: int) -> None:
        """Delay every packet `label` sends by `delay_ms` (tc netem; KafkaConfigurationError where the kernel
        lacks it)."""
        self._check(label)
        problem = netem_unavailable()
        if problem:
            raise KafkaConfigurationError(problem)
        _run(*self.command(label, ["tc", "qdisc", "replace", "dev", "eth0", "root", "netem", "delay",
                                   f"{delay_ms}ms"]))
        self._delayed.add(label)
        self.faults.append(f"packets from {label} delayed {delay_ms} ms")

    def heal(self) -> None:
        """Every link whole again: the drop rules and delays go."""
        for label, host in self.hosts.items():
            for chain in ("input", "output"):
                _run("ip", "netns", "exec", host.namespace, "nft", "flush", "chain", "inet", _TABLE, chain)
            if label in self._delayed:
                subprocess.run(self.command(label, ["tc", "qdisc", "del", "dev", "eth0", "root"]),
                               capture_output=True, check=False)
        self._delayed.clear()
        self.faults.clear()

    # ------------------------------------------------------------ internals

    def _veth(self, index: int) -> str:
        return f"{self._tag}v{index}"

    def _add_host(self, index: int, label: str) -> None:
        namespace = f"{self._tag}-{label}"
        address = f"{SUBNET_PREFIX}.{self.subnet}.{10 + index}"
        _run("ip", "netns", "add", namespace)
        self.hosts[label] = Host(label, namespace, address)
        veth = self._veth(index)
        _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        _run("ip", "link", "set", veth, "master", self.bridge)
        _run("ip", "link", "set", veth, "up")
        in_ns = ["ip", "netns", "exec", namespace]
        _run(*in_ns, "ip", "addr", "add", f"{address}/24", "dev", "eth0")
        _run(*in_ns, "ip", "link", "set", "eth0", "up")
        _run(*in_ns, "ip", "link", "set", "lo", "up")
        _run(*in_ns, "nft", "add", "table", "inet", _TABLE)
        for chain in ("input", "output"):
            _run(*in_ns, "nft", "add", "chain", "inet", _TABLE, chain,
                 f"{{ type filter hook {chain} priority 0; policy accept; }}")

    def _check(self, label: str) -> None:
        if label != CLIENTS and label not in self.hosts:
            raise KafkaConfigurationError(f"no host {label!r}; the hosts are {', '.join([*self.hosts, CLIENTS])}")

    def _drop(self, source: str, target: str) -> None:
        """Packets from `source` to `target` are lost: a rule at the target's input, or (when the target is the
        machine's own namespace, left alone) at the source's output."""
        if source == target:
            return
        if target != CLIENTS:
            self._rule(target, "input", ["ip", "saddr", self.address(source), "drop"])
        elif source != CLIENTS:
            self._rule(source, "output", ["ip", "daddr", self.address(target), "drop"])

    def _rule(self, label: str, chain: str, rule: list[str]) -> None:
        _run("ip", "netns", "exec", self.hosts[label].namespace, "nft", "add", "rule", "inet", _TABLE, chain, *rule)

    def _subnet_free(self, n: int) -> bool:
        network = ipaddress.ip_network(f"{SUBNET_PREFIX}.{n}.0/24")
        taken = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=False).stdout
        return not any(ipaddress.ip_address(a) in network for a in re.findall(r"inet (\S+)/", taken))

    def _free_subnet(self) -> int:
        start = os.getpid() % 250
        for step in range(250):
            n = (start + step) % 250 + 1
            if self._subnet_free(n):
                return n
        raise KafkaConfigurationError(f"no free subnet {SUBNET_PREFIX}.n.0/24 for the hosts")


def remove_leftovers() -> None:
    """Remove the namespaces and links of runs whose process is gone (a run killed before it cleaned up)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=False).stdout
    for name, pid in re.findall(rf"^({_PREFIX}([0-9a-f]{{6}})[0-9a-f]+-\S+)", listed, re.MULTILINE):
        if not _alive(int(pid, 16)):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
    for name, pid in re.findall(rf"^\d+: ({_PREFIX}([0-9a-f]{{6}})[0-9a-f](?:b|v\d+))[@:]", links, re.MULTILINE):
        if not _alive(int(pid, 16)):
            subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)


def _tag() -> str:
    """A name no other hosts set on this machine has: this process's id and its count of sets (a link name
    must stay within 15 characters: txs + 6 + 1 + "v" + 2)."""
    return f"{_PREFIX}{os.getpid():06x}{next(_made) % 16:x}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _run(*argv: str) -> None:
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise KafkaConfigurationError(f"`{' '.join(argv)}` failed: {result.stderr.strip() or result.returncode}")
