"""The chaos report from a recorded run: every planned fault with its inject and heal times,
the anomaly table ("none" when clean), and charts whose data match the history's counts."""
from __future__ import annotations

from proto.structs import TopicPartition
from tests.unit.report.html_doc import read_report, trace
from txnsim.chaos.checker import ANOMALIES, check
from txnsim.chaos.history import (
    CommitStarted,
    FaultEvent,
    FinalRead,
    History,
    Observed,
    Outcome,
    Sent,
    TxnBegun,
    TxnEnded,
)
from txnsim.chaos.nemesis import Fault
from txnsim.chaos.runner import ChaosConfig, ChaosRun
from txnsim.ownership import OwnershipChange, owned_over_time
from txnsim.report import chaos_report, write_report
from txnsim.report.chaos import chaos_figures
from txnsim.report.timeline import fault_rows

START = 1000.0  # the history's clock at the start of the run
IN = "chaos-in"


def recorded_run(*, lost: bool = False) -> ChaosRun:
    """Three faults planned, two reached; transactions committed in seconds 0-1 and 5, aborted in 2 and 6."""
    config = ChaosConfig(duration_s=8, seed=4, faults=("kill", "pause"))
    schedule = [Fault(1.0, "kill", 1, 1.5), Fault(4.0, "pause", 2, 2.0), Fault(7.5, "kill", 0, 1.0)]
    history = History()
    final = FinalRead(records={IN: [], "chaos-out": []})
    offsets = iter(range(100))

    def txn(name: str, at: float, outcome: Outcome | None, *, on_purpose: bool = False, value: int = 0) -> None:
        history.append(TxnBegun(name, "p", START + at - 0.1))
        offset = next(offsets)
        history.append(Sent("p", name, IN, 0, value, offset, None, START + at - 0.05))
        if outcome is Outcome.COMMITTED and not (lost and value == 3):
            final.records[IN].append(Observed(IN, 0, offset, value, name))
        if outcome is not Outcome.ABORTED:
            history.append(CommitStarted(name, START + at - 0.01))
        if outcome is not None:
            history.append(TxnEnded(name, outcome, on_purpose, {}, START + at))

    txn("p/1", 0.5, Outcome.COMMITTED, value=1)
    txn("p/2", 0.8, Outcome.COMMITTED, value=2)
    history.append(FaultEvent("kill", 1, "inject", None, START + 1.01))
    txn("p/3", 2.2, Outcome.ABORTED, on_purpose=True, value=9)
    history.append(FaultEvent("kill", 1, "heal", None, START + 2.55))
    history.append(FaultEvent("pause", 2, "inject", None, START + 4.02))
    txn("p/4", 5.5, Outcome.COMMITTED, value=3)
    txn("p/5", 5.7, None, value=5)  # commit asked, never answered: unknown
    history.append(FaultEvent("pause", 2, "heal", None, START + 6.03))
    txn("p/6", 6.5, Outcome.ABORTED, value=6)
    final.committed = {TopicPartition(IN, 0): None}
    run = ChaosRun(config, schedule, history, final, drained=True, started_at=START, started_wall_s=1.7e9)
    run.result = check(history.events(), final)
    run.ownership = [OwnershipChange(-0.5, n, "acquired", "__transaction_state", n, 1, "start") for n in range(3)] + [
        OwnershipChange(1.8, 0, "acquired", "__transaction_state", 1, 2, "node 1 is dead"),
        OwnershipChange(2.9, 0, "released", "__transaction_state", 1, 2, "handover"),
        OwnershipChange(3.0, 1, "acquired", "__transaction_state", 1, 3, "handover"),
    ]
    return run


def test_fault_rows_pair_each_planned_fault_with_its_inject_and_heal():
    run = recorded_run()
    rows = fault_rows(run.schedule, run.history.events(), START)
    assert [(r.injected_at_s, r.healed_at_s, r.status) for r in rows] == [
        (1.01, 2.55, "healed"), (4.02, 6.03, "healed"), (None, None, "not reached (the run ended first)")]


def test_the_report_lists_every_planned_fault_and_when_it_was_applied(tmp_path):
    path = write_report(chaos_report(recorded_run()), tmp_path / "sub" / "chaos-report.html")
    doc = read_report(path)

    assert doc.column("fault-schedule", "fault") == ["kill", "pause", "kill"]
    assert doc.column("fault-schedule", "node") == ["1", "2", "0"]
    assert doc.column("fault-schedule", "planned at") == ["t+1.00 s", "t+4.00 s", "t+7.50 s"]
    assert doc.column("fault-schedule", "injected at") == ["t+1.01 s", "t+4.02 s", "-"]
    assert doc.column("fault-schedule", "healed at") == ["t+2.55 s", "t+6.03 s", "-"]
    assert "seed 4" in doc.texts["run"] and "no anomalies" in doc.texts["verdict"]


def test_a_clean_run_has_a_none_row_for_every_anomaly():
    doc = read_report(chaos_report(recorded_run()))
    assert doc.column("anomalies", "anomaly") == list(ANOMALIES)
    assert set(doc.column("anomalies", "count")) == {"0"}
    assert set(doc.column("anomalies", "example")) == {"none"}


def test_an_anomaly_is_counted_with_its_example():
    run = recorded_run(lost=True)
    assert run.result is not None and not run.result.valid
    doc = read_report(chaos_report(run))
    rows = {row[0]: row for row in doc.tables["anomalies"]}
    assert rows["unseen"][1] == "1" and "p/4" in rows["unseen"][2]
    assert rows["duplicate"][1:3] == ["0", "none"]
    assert "anomalies; rerun with --seed 4" in doc.texts["verdict"]


def test_the_transactions_chart_counts_each_outcome_in_its_second():
    doc = read_report(chaos_report(recorded_run()))
    committed = trace(doc, "txn-outcomes", "committed")
    by_second = dict(zip((int(x) for x in committed["x"]), committed["y"]))
    assert by_second[0] == 2 and by_second[5] == 1 and sum(committed["y"]) == 3
    assert sum(trace(doc, "txn-outcomes", "aborted on purpose")["y"]) == 1
    assert sum(trace(doc, "txn-outcomes", "aborted after an error")["y"]) == 1
    assert sum(trace(doc, "txn-outcomes", "unknown")["y"]) == 1
    shaded = [(s["x0"], s["x1"]) for s in doc.figures["txn-outcomes"]["layout"]["shapes"]]
    assert shaded == [(1.01, 2.55), (4.02, 6.03)]


def test_the_chart_totals_match_the_checkers_totals():
    run = recorded_run()
    assert run.result is not None
    bars = chaos_figures(run)["txn-outcomes"]
    committed = sum(next(t for t in bars.data if t.name == "committed").y)
    assert committed == sum(n for what, n in run.result.totals.items() if what.endswith("transactions committed"))


def test_ownership_changes_are_listed_and_drawn_per_node():
    run = recorded_run()
    doc = read_report(chaos_report(run))
    assert doc.column("ownership-changes", "log")[-3:] == ["txn shard 1"] * 3
    assert doc.column("ownership-changes", "action")[-3:] == ["acquired", "released", "acquired"]
    node0 = trace(doc, "ownership", "node 0")
    assert list(zip(node0["x"], node0["y"])) == [(-0.5, 1), (1.8, 2), (2.9, 1), (8, 1)]
    assert owned_over_time(run.ownership)[1] == [(-0.5, 1), (1.8, 0), (3.0, 1)]


def test_the_report_carries_plotly_js_once_and_opens_offline():
    html = chaos_report(recorded_run())
    doc = read_report(html)
    assert max(doc.scripts) > 1_000_000 and sum(1 for n in doc.scripts if n > 1_000_000) == 1
    assert {"txn-outcomes", "ownership"} <= doc.ids
    assert doc.links == [], "nothing is fetched from elsewhere"
