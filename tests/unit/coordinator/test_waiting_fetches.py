"""WaitingFetches: a long-poll fetch is woken by writes to its own partitions, and by no others."""
from __future__ import annotations

import threading

from coordinator.partition_service import WaitingFetches


def test_a_write_wakes_the_fetches_of_its_partitions_only():
    waiting = WaitingFetches()
    orders, payments = threading.Event(), threading.Event()
    waiting.add({("orders", 0), ("orders", 1)}, orders.set)
    waiting.add({("payments", 0)}, payments.set)

    waiting.wake([("payments", 1), ("orders", 2)])
    assert not orders.is_set() and not payments.is_set()
    waiting.wake([("orders", 1)])
    assert orders.is_set() and not payments.is_set()


def test_a_fetch_that_stopped_waiting_is_not_woken_and_leaves_nothing_behind():
    waiting = WaitingFetches()
    done, still = threading.Event(), threading.Event()
    waiting.add({("orders", 0)}, done.set)
    waiting.add({("orders", 0)}, still.set)
    waiting.remove({("orders", 0)}, done.set)
    waiting.wake([("orders", 0)])
    assert still.is_set() and not done.is_set()
    waiting.remove({("orders", 0)}, still.set)
    assert waiting._by_partition == {}  # no entry per partition ever fetched is kept
