"""The pipeline report from a recorded result: the crashes, income per minute (a wrong minute
shows as WRONG), and charts carrying the order transactions and micro-batches as recorded."""
from __future__ import annotations

from tests.unit.report.html_doc import read_report, trace
from txnsim.ownership import OwnershipChange
from txnsim.pipeline.runner import PipelineConfig, PipelineResult
from txnsim.report import pipeline_report

MINUTE = 1_767_258_000_000  # 2026-01-01T09:00:00Z


def recorded_result(*, twice: bool = False) -> PipelineResult:
    expected = {MINUTE: (12_345, 10), MINUTE + 60_000: (20_000, 12)}
    read_back = {MINUTE: [(12_345, 10)], MINUTE + 60_000: [(20_000, 12)] * (2 if twice else 1)}
    events = [(0.4, "cluster of 3 nodes up"), (6.0, "Spark driver SIGKILLed while tasks were writing a micro-batch"),
              (6.5, "Spark driver restarted from its checkpoint"),
              (12.0, "txnsim node 2 (the query's transaction coordinator) SIGKILLed mid-batch")]
    order_txns = [(1.2, "committed", 20), (1.4, "committed", 2), (12.3, "aborted and retried", 20),
                  (13.1, "committed", 20)]
    batches = [(3.0, 1, 22), (5.0, 1, 0), (9.0, 2, 20), (15.0, 2, 1)]
    ownership = [OwnershipChange(12.8, 0, "acquired", "__transaction_state", 7, 2, "node 2 is dead")]
    return PipelineResult(expected, read_back, events, 16.0, order_txns, batches, ownership)


def test_the_report_shows_the_crashes_and_each_minute_checked():
    doc = read_report(pipeline_report(PipelineConfig(orders=22, minutes=2), recorded_result()))
    assert doc.column("events", "what")[1] == "Spark driver SIGKILLed while tasks were writing a micro-batch"
    assert doc.column("events", "at")[3] == "t+12.0 s"
    assert doc.tables["income-per-minute"] == [["09:00", "10", "123.45", "123.45", "1x", "ok"],
                                               ["09:01", "12", "200.00", "200.00", "1x", "ok"]]
    assert doc.texts["verdict"].startswith("exactly once: 2 minutes")
    assert doc.column("ownership-changes", "log") == ["txn shard 7"]


def test_a_minute_written_twice_is_wrong_in_the_report():
    doc = read_report(pipeline_report(PipelineConfig(orders=22, minutes=2), recorded_result(twice=True)))
    assert doc.tables["income-per-minute"][1][-2:] == ["2x", "WRONG"]
    assert doc.texts["verdict"].startswith("MISMATCH")


def test_the_charts_carry_the_recorded_transactions_batches_and_income():
    doc = read_report(pipeline_report(PipelineConfig(orders=22, minutes=2), recorded_result()))
    committed = trace(doc, "order-txns", "committed")
    assert sum(committed["y"]) == 3 and sum(trace(doc, "order-txns", "aborted and retried")["y"]) == 1
    assert dict(zip((int(x) for x in committed["x"]), committed["y"]))[1] == 2
    assert trace(doc, "micro-batches", "driver run 2")["x"] == [9.0, 15.0]
    assert trace(doc, "micro-batches", "driver run 1")["y"] == [22, 0]
    assert trace(doc, "income", "from the orders")["y"] == [123.45, 200.0]
    assert trace(doc, "income", "read back (read_committed)")["x"] == ["09:00", "09:01"]
    kills = [s["x0"] for s in doc.figures["micro-batches"]["layout"]["shapes"]]
    assert kills == [6.0, 6.5, 12.0], "a dashed line per crash and restart"
