"""`txnsim demo orders` as a user runs it: both services as processes on real SQLite files, every
check-back path, and a final check that the orders and the deductions agree row for row.

Besides the demo's own verdict, each test reads the two SQLite files it left behind.
"""
from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

_SCRIPT = Path(sys.executable).with_name("txnsim")
TXNSIM = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "txnsim.cli.main"]
#: wide and plain, so rich neither wraps the lines the tests read nor colours them
ENV = dict(os.environ, COLUMNS="240", TERM="dumb", NO_COLOR="1", PYTHONIOENCODING="utf-8")
CASES = 7


def txnsim(*args: str, timeout_s: float = 180) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*TXNSIM, *args], capture_output=True, env=ENV, timeout=timeout_s, check=False)


def run_demo(data_dir: Path, *options: str) -> str:
    proc = txnsim("demo", "orders", "--data-dir", str(data_dir), *options)
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert "Traceback" not in out + err, out + err
    assert proc.returncode == 0, out + err
    return out


def rows(db: Path, query: str) -> set[tuple]:
    with closing(sqlite3.connect(db)) as con:
        return set(con.execute(query).fetchall())


def assert_files_agree(data_dir: Path) -> None:
    ordered = rows(data_dir / "orders.sqlite", "SELECT order_id, user, points FROM orders")
    deducted = rows(data_dir / "points.sqlite", "SELECT order_id, user, points FROM processed_orders")
    assert ordered == deducted and len(ordered) == CASES - 1, (ordered, deducted)
    assert "o-1004" not in {o for o, _, _ in ordered}, "the failed local transaction left no order"
    statuses = rows(data_dir / "orders.sqlite", "SELECT order_id FROM tx_status")
    assert statuses == {(o,) for o, _, _ in ordered}, "a status row exactly for each committed order"


def assert_story(out: str) -> None:
    for number in range(1, CASES + 1):
        assert f"Case {number}:" in out
    assert re.search(r"final check: equal .* equal, row for row", out), out[-2000:]
    assert re.search(r"o-1002: end of transaction .* LOST", out)
    assert re.search(r"order service +o-1003: check-back.*=> COMMIT", out), "the restarted service answered"
    assert re.search(r"o-1004: SQLite ROLLBACK .*CHECK constraint", out)
    assert len(re.findall(r"o-1005: check-back.*=> (UNKNOW|TRANSACTION_RESOLUTION_UNSPECIFIED)", out)) >= 3
    assert re.search(r"node \d took the shard over and went on with check #3", out)
    assert re.search(r"o-1007\b.*delivered again .*nothing deducted", out)


def test_demo_orders_resolves_every_case_and_the_databases_agree(tmp_path):
    out = run_demo(tmp_path / "demo")
    assert_story(out)
    assert re.search(r"order service +o-1005: check-back #3 ", out), "txnsim's client shows the check count"
    assert_files_agree(tmp_path / "demo")


@pytest.mark.slow
def test_demo_orders_with_the_official_rocketmq_client(tmp_path):
    out = run_demo(tmp_path / "demo", "--client", "rocketmq")
    assert "rocketmq client: Producer with a TransactionChecker" in out and "rocketmq client: SimpleConsumer" in out
    assert_story(out)
    assert_files_agree(tmp_path / "demo")


def test_demo_orders_refuses_a_data_dir_that_is_not_empty(tmp_path):
    (tmp_path / "something").write_text("x")
    proc = txnsim("demo", "orders", "--data-dir", str(tmp_path), timeout_s=60)
    assert proc.returncode == 1 and b"not empty" in proc.stdout + proc.stderr


def test_the_rocketmq_client_applies_to_demo_orders_only():
    proc = txnsim("demo", "--client", "rocketmq", timeout_s=60)
    assert proc.returncode == 1 and b"--client rocketmq applies to `txnsim demo orders` only" in proc.stderr
