"""The two services' SQLite databases: orders.sqlite (stock, orders, the transaction-status table)
and points.sqlite (balances, the processed-order table).

Invariants: an order row and its status row are written in one SQLite transaction, so a status
row exists exactly when the order committed; a processed-order row and its deduction likewise,
so a message delivered twice deducts once.
"""
from __future__ import annotations

import enum
import json
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import asdict, dataclass
from pathlib import Path

#: a local transaction may commit only this long after its order started; past it, it rolls back
LOCAL_TXN_TIMEOUT_MS = 30_000
#: a check answers ROLLBACK for an order without rows only this long after its start: the deadline
#: plus a margin for a COMMIT already under way when the deadline passed
ROLLBACK_AFTER_MS = LOCAL_TXN_TIMEOUT_MS + 5_000


class Decision(enum.Enum):
    """What the order service's table says about an order, in either client's terms later."""

    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True, slots=True)
class Order:
    order_id: str
    user: str
    item: str
    quantity: int
    points: int
    #: when the order service began it (epoch ms): the local transaction's deadline counts from here
    started_ms: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> Order:
        return cls(**json.loads(text))


def now_ms() -> int:
    return int(time.time() * 1000)


def connect(path: Path) -> sqlite3.Connection:
    """A connection in autocommit mode: every transaction is an explicit BEGIN ... COMMIT."""
    con = sqlite3.connect(path, timeout=30, isolation_level=None)
    con.execute("PRAGMA synchronous=FULL")  # a COMMIT that returned survives a crash of the process or machine
    return con


class OrdersDb:
    """The order service's database. One connection per call: the local transaction and the
    check-back answers run on different threads."""

    SCHEMA = """
        PRAGMA journal_mode=WAL;
        CREATE TABLE stock (item TEXT PRIMARY KEY, quantity INTEGER NOT NULL CHECK (quantity >= 0));
        CREATE TABLE orders (order_id TEXT PRIMARY KEY, user TEXT NOT NULL, item TEXT NOT NULL,
                             quantity INTEGER NOT NULL, points INTEGER NOT NULL, created_ms INTEGER NOT NULL);
        -- the articles' transaction-status table: a row exactly when the order committed
        CREATE TABLE tx_status (order_id TEXT PRIMARY KEY, transaction_id TEXT NOT NULL, message_id TEXT NOT NULL,
                                committed_ms INTEGER NOT NULL);
        -- written after a rollback, so that a check can tell 'failed' from 'still running'
        CREATE TABLE failed_orders (order_id TEXT PRIMARY KEY, reason TEXT NOT NULL, failed_ms INTEGER NOT NULL);
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def create(self, stock: dict[str, int]) -> None:
        with closing(connect(self.path)) as con:
            con.executescript(self.SCHEMA)
            con.executemany("INSERT INTO stock VALUES (?, ?)", stock.items())

    def place(self, order: Order, transaction_id: str, message_id: str,
              before_commit: Callable[[], None] = lambda: None) -> tuple[bool, str]:
        """The local transaction: the order row, the stock, the status row, one COMMIT.

        Returns (committed, why). A constraint violation (too little stock) or the deadline rolls
        it back, and the failure is recorded afterwards for check-backs."""
        with closing(connect(self.path)) as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                con.execute("INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?)",
                            (order.order_id, order.user, order.item, order.quantity, order.points, now_ms()))
                updated = con.execute("UPDATE stock SET quantity = quantity - ? WHERE item = ?",
                                      (order.quantity, order.item)).rowcount
                if updated != 1:
                    raise sqlite3.IntegrityError(f"no such item {order.item!r}")
                con.execute("INSERT INTO tx_status VALUES (?, ?, ?, ?)",
                            (order.order_id, transaction_id, message_id, now_ms()))
                before_commit()
                if now_ms() - order.started_ms > LOCAL_TXN_TIMEOUT_MS:
                    raise TimeoutError(f"past the local transaction's deadline of {LOCAL_TXN_TIMEOUT_MS} ms")
            except (sqlite3.IntegrityError, TimeoutError) as exc:
                con.execute("ROLLBACK")
                reason = f"{type(exc).__name__}: {exc}"
                con.execute("INSERT OR IGNORE INTO failed_orders VALUES (?, ?, ?)", (order.order_id, reason, now_ms()))
                return False, reason
            con.execute("COMMIT")
            return True, "order row, stock and status row committed together"

    def decision(self, order_id: str, started_ms: int) -> tuple[Decision, str]:
        """The check-back's answer, from the tables alone (any instance of the service can give it)."""
        with closing(connect(self.path)) as con:
            if con.execute("SELECT 1 FROM tx_status WHERE order_id = ?", (order_id,)).fetchone():
                return Decision.COMMIT, "its status row is there"
            failed = con.execute("SELECT reason FROM failed_orders WHERE order_id = ?", (order_id,)).fetchone()
            if failed:
                return Decision.ROLLBACK, f"it failed ({failed[0]})"
            if now_ms() - started_ms > ROLLBACK_AFTER_MS:
                return Decision.ROLLBACK, "no status row, and it is past its deadline: it can never commit"
            return Decision.UNKNOWN, "no status row yet: its local transaction may still be running"

    def orders(self) -> dict[str, tuple[str, int]]:
        """order id -> (user, points) of every committed order."""
        with closing(connect(self.path)) as con:
            return {o: (u, p) for o, u, p in con.execute("SELECT order_id, user, points FROM orders")}

    def stock(self) -> dict[str, int]:
        with closing(connect(self.path)) as con:
            return dict(con.execute("SELECT item, quantity FROM stock").fetchall())


class PointsDb:
    """The points service's database: balances and the processed-order table that makes it idempotent."""

    SCHEMA = """
        PRAGMA journal_mode=WAL;
        CREATE TABLE accounts (user TEXT PRIMARY KEY, points INTEGER NOT NULL);
        CREATE TABLE processed_orders (order_id TEXT PRIMARY KEY, user TEXT NOT NULL, points INTEGER NOT NULL,
                                       message_id TEXT NOT NULL, partition INTEGER NOT NULL,
                                       "offset" INTEGER NOT NULL, processed_ms INTEGER NOT NULL);
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def create(self, balances: dict[str, int]) -> None:
        with closing(connect(self.path)) as con:
            con.executescript(self.SCHEMA)
            con.executemany("INSERT INTO accounts VALUES (?, ?)", balances.items())

    def deduct(self, order_id: str, user: str, points: int, message_id: str, partition: int,
               offset: int) -> int | None:
        """Deduct once per order: the new balance, or None if this order was processed before."""
        with closing(connect(self.path)) as con:
            con.execute("BEGIN IMMEDIATE")
            if con.execute("SELECT 1 FROM processed_orders WHERE order_id = ?", (order_id,)).fetchone():
                con.execute("ROLLBACK")
                return None
            con.execute("INSERT INTO processed_orders VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (order_id, user, points, message_id, partition, offset, now_ms()))
            con.execute("INSERT OR IGNORE INTO accounts VALUES (?, 0)", (user,))
            con.execute("UPDATE accounts SET points = points - ? WHERE user = ?", (points, user))
            balance = con.execute("SELECT points FROM accounts WHERE user = ?", (user,)).fetchone()[0]
            con.execute("COMMIT")
            return int(balance)

    def processed(self) -> dict[str, tuple[str, int]]:
        """order id -> (user, points) of every deduction."""
        with closing(connect(self.path)) as con:
            return {o: (u, p) for o, u, p in con.execute("SELECT order_id, user, points FROM processed_orders")}

    def balances(self) -> dict[str, int]:
        with closing(connect(self.path)) as con:
            return dict(con.execute("SELECT user, points FROM accounts").fetchall())
