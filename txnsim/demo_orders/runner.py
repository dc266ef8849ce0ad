"""The orders demo's script: a cluster with short check-back settings, the order and points
services as processes, seven cases that break the path on purpose, then the two SQLite files
compared row for row.

Every wait has a deadline: a case that does not finish in time fails the demo (exit 1) with the
services' log tails; it never hangs. The services stop when the runner closes their stdin.
"""
from __future__ import annotations

import queue
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.rule import Rule

from consumer import read_to_end
from proto.errors import KafkaTimeoutError
from proto.structs import TopicPartition
from txnsim.admin import Admin, HalfMessageListing
from txnsim.cluster import LocalCluster
from txnsim.demo_orders.channel import Event, ServiceProcess
from txnsim.demo_orders.narration import Row, describe, final_table, half_table
from txnsim.demo_orders.store import Order, OrdersDb, PointsDb

TOPIC, PARTITIONS = "points", 3
CHECK_INTERVAL_MS, HALF_TIMEOUT_MS, CHECK_MAX = 1_000, 1_000, 5
CLUSTER_SETTINGS: dict[str, Any] = {
    "txn_shards": 8, "offsets_shards": 4, "half_shards": 4, "group_min_session_timeout_ms": 500,
    "transaction_check_interval_ms": CHECK_INTERVAL_MS, "half_message_timeout_ms": HALF_TIMEOUT_MS,
    "transaction_check_max": CHECK_MAX}
STOCK = {"book": 20, "lamp": 2}
BALANCES = {"alice": 1_000, "bob": 1_000, "carol": 1_000}
#: the longest any one step may take before the demo gives up (each takes a few seconds at most)
STEP_TIMEOUT_S = 30.0

T = TypeVar("T")


class DemoFailed(Exception):
    """A step did not happen within its deadline, or a service died unexpectedly."""


class OrdersDemo:
    def __init__(self, data_dir: Path, client: str, console: Console) -> None:
        self.data_dir = data_dir
        self.client = client
        self.console = console
        self.orders_db = OrdersDb(data_dir / "orders.sqlite")
        self.points_db = PointsDb(data_dir / "points.sqlite")
        # with the official client the producer group is the topic's name
        self.group = "order-service" if client == "native" else TOPIC
        self.events: queue.Queue[Event] = queue.Queue()
        self.seen: list[Event] = []
        self.case_of: dict[str, str] = {}   # order id -> the case it belongs to
        self.order_of: dict[str, str] = {}  # transaction id -> order id
        self.started = time.monotonic()
        self.cluster: LocalCluster | None = None
        self.admin: Admin | None = None
        self.order_service: ServiceProcess | None = None
        self.points_service: ServiceProcess | None = None
        self.expected_down: set[str] = set()

    # ------------------------------------------------------------ the whole run

    def run(self) -> bool:
        self.orders_db.create(STOCK)
        self.points_db.create(BALANCES)
        with self.console.status("starting a 3-node cluster (check-back every 1 s, first check after 1 s, "
                                 f"at most {CHECK_MAX} checks) ..."):
            self.cluster = LocalCluster(nodes=3, data_dir=self.data_dir / "cluster", **CLUSTER_SETTINGS).start()
        try:
            self.admin = Admin(self.cluster.bootstrap_servers, request_timeout_ms=10_000)
            self.admin.create_topic(TOPIC, partitions=PARTITIONS, configs={"message.type": "TRANSACTION"})
            self.say(f"cluster up: {self.cluster.bootstrap_servers}; topic '{TOPIC}' ({PARTITIONS} partitions, "
                     "message.type TRANSACTION)")
            self.order_service = self._service("order_service", self.orders_db.path,
                                               ["--group", self.group] if self.client == "native" else [])
            self.points_service = self._service("points_service", self.points_db.path, ["--group", "points-service"])
            self.wait_for(lambda: self.find("order", "ready") and self.find("points", "ready"),
                          "both services to start")
            for case in (self.case_normal, self.case_lost_end, self.case_killed_after_commit,
                         self.case_failed_local_transaction, self.case_slow_local_transaction,
                         self.case_half_owner_killed, self.case_redelivery):
                case()
            return self.final_check()
        finally:
            for service in (self.order_service, self.points_service):
                if service is not None:
                    service.stop()
            if self.admin is not None:
                self.admin.close()
            self.cluster.stop()

    def _service(self, module: str, db: Path, extra: list[str]) -> ServiceProcess:
        assert self.cluster is not None
        address = (["--bootstrap-servers", self.cluster.bootstrap_servers] if self.client == "native"
                   else ["--endpoints", self.cluster.rocketmq_endpoints])
        name = module.replace("_", "-")
        service = ServiceProcess(name, f"txnsim.demo_orders.{module}",
                                 ["--db", str(db), "--client", self.client, *address, *extra],
                                 self.data_dir / f"{name}.log", self.events)
        service.start()
        return service

    # ------------------------------------------------------------ narration and waiting

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def say(self, text: str) -> None:
        self.console.print(f"[dim]t+{self.elapsed():5.1f} s[/]  {text}")

    def cluster_says(self, text: str) -> None:
        self.say(f"[yellow]cluster       [/] {text}")

    def case(self, number: int, title: str, text: str) -> None:
        self.console.print()
        self.console.print(Panel(" ".join(text.split()), title=f"[bold]Case {number}: {title}[/bold]",
                                 border_style="cyan"))

    def order(self, case: str, order_id: str, user: str, item: str, quantity: int, points: int,
              fault: str | None = None) -> None:
        assert self.order_service is not None
        self.case_of[order_id] = case
        self.say(f"[bold]{order_id}[/]: {user} orders {quantity} x {item} for {points} points"
                 + (f" [red](fault: {fault})[/]" if fault else ""))
        self.order_service.send({"cmd": "order", "fault": fault, "order": {
            "order_id": order_id, "user": user, "item": item, "quantity": quantity, "points": points}})

    def pump(self, timeout_s: float) -> None:
        """Narrate every event that arrived, waiting up to `timeout_s` for the first."""
        try:
            event = self.events.get(timeout=timeout_s) if timeout_s > 0 else self.events.get_nowait()
        except queue.Empty:
            return
        while True:
            self.seen.append(event)
            if event.name == "half-stored":
                self.order_of[event.get("transaction_id")] = event.get("order_id")
            line = describe(event)
            if line is not None:
                self.say(line)
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                return

    def wait_for(self, condition: Callable[[], T], what: str, timeout_s: float = STEP_TIMEOUT_S) -> T:
        deadline = time.monotonic() + timeout_s
        announced = False
        while True:
            self.pump(0)
            value = condition()
            if value:
                return value
            if not announced:
                self.console.print(f"[dim]t+{self.elapsed():5.1f} s  ... waiting for {escape(what)}[/]")
                announced = True
            if time.monotonic() > deadline:
                raise DemoFailed(f"timed out after {timeout_s:.0f} s waiting for {what}")
            for service in (self.order_service, self.points_service):
                if service is not None and not service.running() and service.name not in self.expected_down:
                    raise DemoFailed(f"the {service.name} (pid {service.pid}) died unexpectedly while waiting for "
                                     f"{what}; its log ends with:\n{service.log_tail()}")
            self.pump(0.1)

    def find(self, service: str, name: str, order_id: str | None = None, pid: int | None = None) -> list[Event]:
        return [e for e in self.seen if e.service == service and e.name == name
                and (order_id is None or e.get("order_id") == order_id) and (pid is None or e.pid == pid)]

    def pending(self, order_id: str | None = None) -> list[HalfMessageListing]:
        assert self.admin is not None
        return [m for m in self.admin.list_half_messages(self.group)
                if order_id is None or self.order_of.get(m.transaction_id) == order_id]

    def show_half(self, title: str) -> list[HalfMessageListing]:
        messages = self.pending()
        self.console.print(half_table(messages, self.order_of, f"Admin.list_half_messages('{self.group}'): {title}"))
        return messages

    def transaction_of(self, order_id: str) -> str:
        transaction_id: str = next(e.get("transaction_id") for e in self.find("order", "half-stored", order_id))
        return transaction_id

    def wait_committed_and_deducted(self, order_id: str) -> None:
        self.wait_for(lambda: self.find("order", "half-stored", order_id), f"the half message of {order_id}")
        self.wait_for(lambda: not self.pending(order_id),
                      f"the node to decide {order_id} (it leaves the half-message listing)")
        self.cluster_says(f"{order_id}: decided — OP record written; COMMIT copied it to '{TOPIC}' once")
        self.wait_for(lambda: self.find("points", "acked", order_id), f"the points service to process {order_id}")

    # ------------------------------------------------------------ the cases

    def case_normal(self) -> None:
        self.case(1, "a normal order", "The half message is stored (invisible), the local transaction inserts the "
                  "order row and its status row in one SQLite transaction and commits, the end says COMMIT: the "
                  "message reaches 'points' and the points service deducts.")
        self.order("1. normal", "o-1001", "alice", "book", 1, 30)
        self.wait_for(lambda: self.find("order", "end", "o-1001"), "the end of the transaction")
        self.wait_committed_and_deducted("o-1001")

    def case_lost_end(self) -> None:
        self.case(2, "the end of the transaction is lost", "The local transaction commits but its COMMIT never "
                  "reaches the node (the end is one-way). The half message stays undecided until the node checks "
                  "back; the order service answers from its status table: COMMIT.")
        self.order("2. end lost", "o-1002", "bob", "book", 1, 45, fault="lose-end")
        self.wait_for(lambda: self.find("order", "end", "o-1002"), "the end of the transaction")
        self.show_half("o-1002 waits for its first check")
        self.wait_for(lambda: self.find("order", "check", "o-1002"),
                      f"the node's check-back (first once the message is {HALF_TIMEOUT_MS} ms old)")
        self.wait_committed_and_deducted("o-1002")

    def case_killed_after_commit(self) -> None:
        service = self.order_service
        assert service is not None
        self.case(3, "the order service is killed after its local commit", "The order service SIGKILLs itself "
                  "right after the SQLite COMMIT, before it ends the transaction. The node cannot ask anyone: "
                  "with no live producer of the group a check is not counted. The service restarts, "
                  "connects, is asked, and answers from its table: COMMIT.")
        self.expected_down.add(service.name)
        self.order("3. service killed", "o-1003", "carol", "book", 2, 60, fault="kill-after-commit")
        self.wait_for(lambda: service.wait_exit(0) is not None, "the order service to die")
        self.say(f"order service (pid {service.pid}) is gone: exit status {service.returncode}")
        self.show_half("o-1003 is undecided and its producer is dead")
        self.wait_for(lambda: any(m.unanswered_checks for m in self.pending("o-1003")),
                      "a check of o-1003 that finds no producer of the group")
        self.show_half("the check found nobody to ask: a pass with no producer, not a check")
        service.start()
        self.expected_down.discard(service.name)
        self.say(f"order service restarted (pid {service.pid})")
        self.wait_for(lambda: self.find("order", "check", "o-1003", pid=service.pid),
                      "the restarted service to be asked about o-1003")
        self.wait_committed_and_deducted("o-1003")

    def case_failed_local_transaction(self) -> None:
        self.case(4, "the local transaction fails", f"Only {STOCK['lamp']} lamps are in stock; an order of 5 "
                  "violates the stock table's CHECK constraint, so the SQLite transaction rolls back and the end "
                  "says ROLLBACK. The message is never delivered, no points are deducted.")
        self.order("4. local rollback", "o-1004", "alice", "lamp", 5, 80)
        self.wait_for(lambda: self.find("order", "end", "o-1004"), "the end of the transaction")
        self.wait_for(lambda: self.find("order", "half-stored", "o-1004") and not self.pending("o-1004"),
                      "the node to drop o-1004")
        self.cluster_says("o-1004: decided — OP record ROLLBACK; the half message is never copied anywhere "
                          "(the final check reads 'points' read_uncommitted to prove it)")

    def case_slow_local_transaction(self) -> None:
        assert self.order_service is not None
        self.case(5, "a slow local transaction", "The local transaction holds its COMMIT for several check "
                  "intervals. Each check finds no status row, and the service answers UNKNOW: the node asks "
                  "again, one check per interval, each counted. Then the transaction commits and its end decides.")
        self.order("5. slow local transaction", "o-1005", "bob", "book", 1, 25, fault="hold")
        self.wait_for(lambda: len(self.find("order", "check", "o-1005")) >= 3, "three check-backs of o-1005")
        self.show_half("o-1005 after three UNKNOW answers")
        self.say("the local transaction of o-1005 finishes now")
        self.order_service.send({"cmd": "release", "order_id": "o-1005"})
        self.wait_for(lambda: self.find("order", "end", "o-1005"), "the end of the transaction")
        self.wait_committed_and_deducted("o-1005")

    def case_half_owner_killed(self) -> None:
        assert self.order_service is not None and self.cluster is not None
        self.case(6, "the node owning the half messages is killed", "While o-1006's slow local transaction "
                  "keeps it undecided, the node that owns the group's half-message shard gets SIGKILL. Another "
                  "node takes the shard over from its log and goes on counting checks from where they were "
                  "(not from 0, not repeating one); then the transaction commits and the node restarts.")
        self.order("6. half owner killed", "o-1006", "carol", "book", 1, 50, fault="hold")
        self.wait_for(lambda: len(self.find("order", "check", "o-1006")) >= 2, "two check-backs of o-1006")
        [before] = self.show_half("o-1006 after two checks")
        victim = before.node_id
        self.cluster_says(f"[red bold]SIGKILL node {victim}[/] (pid {self.cluster.pid(victim)}), owner of the "
                          f"shard of '{self.group}'")
        self.cluster.kill(victim)
        self.wait_for(lambda: len(self.find("order", "check", "o-1006")) >= 3, "the next check, from the new owner")
        after = self.show_half(f"o-1006 on its new owner (node {victim} is dead)")
        counts = [e.get("check_times") for e in self.find("order", "check", "o-1006")]
        listed = after[0].check_times if after else None
        if after and after[0].node_id != victim and (listed == len(counts) and counts in ([1, 2, 3], [None] * 3)):
            self.cluster_says(f"node {after[0].node_id} took the shard over and went on with check #{listed}: "
                              "the counts came back from the half log")
        else:
            self.cluster_says(f"[red]unexpected: checks seen {counts}, listed {after}[/]")
        self.say("the local transaction of o-1006 finishes now")
        self.order_service.send({"cmd": "release", "order_id": "o-1006"})
        self.wait_for(lambda: self.find("order", "end", "o-1006"), "the end of the transaction")
        self.wait_committed_and_deducted("o-1006")
        self.cluster.restart(victim)
        self.cluster_says(f"node {victim} restarted (pid {self.cluster.pid(victim)})")

    def case_redelivery(self) -> None:
        service = self.points_service
        assert service is not None
        self.case(7, "the points service is killed before its offset commit", "A normal order; the points "
                  "service commits the deduction to SQLite, then gets SIGKILL before it commits its offset. "
                  "Restarted, it is given the same message again: its processed_orders row is there, so "
                  "nothing is deducted twice.")
        service.send({"cmd": "kill-after-next-deduction"})
        self.expected_down.add(service.name)
        self.order("7. redelivered", "o-1007", "alice", "book", 1, 20)
        self.wait_for(lambda: service.wait_exit(0) is not None, "the points service to die")
        self.say(f"points service (pid {service.pid}) is gone: exit status "
                 f"{service.returncode}")
        service.start()
        self.expected_down.discard(service.name)
        self.say(f"points service restarted (pid {service.pid})")
        self.wait_for(lambda: self.find("points", "duplicate", "o-1007"), "o-1007 to be delivered again")
        self.wait_for(lambda: self.find("points", "acked", "o-1007"), "its offset commit")

    # ------------------------------------------------------------ the check

    def final_check(self) -> bool:
        self.console.print()
        self.console.print(Rule("final check"))
        self.wait_for(lambda: set(self.orders_db.orders()) <= set(self.points_db.processed()),
                      "every committed order to be processed")
        for service in (self.order_service, self.points_service):
            assert service is not None
            service.stop()
        assert self.cluster is not None
        ordered, deducted = self.orders_db.orders(), self.points_db.processed()
        messages = messages_per_order(self.cluster.bootstrap_servers)
        rows = [Row(o, self.case_of.get(o, "?"), ordered.get(o), deducted.get(o), messages.get(o, 0))
                for o in sorted(set(self.case_of) | set(ordered) | set(deducted) | set(messages))]
        self.console.print(final_table(rows))
        balances = self.points_db.balances()
        spent: Counter[str] = Counter()
        for user, points in deducted.values():
            spent[user] += points
        balances_ok = all(balances.get(u, 0) == BALANCES.get(u, 0) - spent[u] for u in set(balances) | set(spent))
        self.say("balances in points.sqlite: " + ", ".join(f"{u} {b}" for u, b in sorted(balances.items()))
                 + (" (= starting balances minus the deductions)" if balances_ok else " [red](WRONG)[/]"))
        return all(r.ok for r in rows) and balances_ok and ordered == deducted


def messages_per_order(bootstrap_servers: str, timeout_s: float = STEP_TIMEOUT_S) -> Counter[str]:
    """How many messages each order has on 'points', read_uncommitted (so even an open transaction counts)."""
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    try:
        return Counter(Order.from_json(r.value or b"{}").order_id
                       for r in read_to_end(bootstrap_servers, tps, isolation_level="read_uncommitted",
                                            timeout_s=timeout_s))
    except KafkaTimeoutError as exc:
        raise DemoFailed(f"could not read '{TOPIC}' to its end: {exc}") from None


def run_orders_demo(data_dir: Path | None, client: str, console: Console) -> int:
    """`txnsim demo orders`: 0 when orders.sqlite and points.sqlite agree row for row, else 1."""
    if data_dir is not None and data_dir.exists() and any(data_dir.iterdir()):
        raise ValueError(f"--data-dir {data_dir} is not empty; give a new or empty directory")
    data_dir = data_dir or Path(tempfile.mkdtemp(prefix="txnsim-demo-orders-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    console.print(f"[bold]txnsim demo orders[/] ({client} client): an order service and a points service, each "
                  f"its own process with its own SQLite file, in {escape(str(data_dir))}")
    demo = OrdersDemo(data_dir, client, console)
    try:
        equal = demo.run()
    except DemoFailed as exc:
        console.print(f"[red bold]demo failed:[/] {escape(str(exc))}")
        equal = None
    console.print(f"files: {escape(str(data_dir))} — orders.sqlite, points.sqlite, order-service.log, "
                  "points-service.log, cluster/ (the nodes' logs and data)")
    if equal is None:
        return 1
    took = f"{demo.elapsed():.0f} s"
    if equal:
        console.print(f"[green bold]final check: equal[/] — the orders created and the points deducted are equal, "
                      f"row for row ({len(demo.orders_db.orders())} orders; {took})")
        return 0
    console.print(f"[red bold]final check: DIFFERENT[/] — the orders created and the points deducted differ "
                  f"(see the table; {took})")
    return 1
