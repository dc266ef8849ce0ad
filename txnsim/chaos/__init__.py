"""`txnsim chaos`: a read-process-write workload under a nemesis, checked with Jepsen's names.

history (what happened), workload (generator and copy workers), nemesis (the seeded fault
schedule), runner (one run, start to verdict), checker (pure: history -> anomalies), report
(the terminal view). The checker imports no client and no cluster, so it runs on any history.
"""
from txnsim.chaos.checker import ANOMALIES, CheckResult, Finding, check
from txnsim.chaos.history import FinalRead, History, Outcome
from txnsim.chaos.nemesis import FAULT_KINDS, Fault, plan_faults
from txnsim.chaos.runner import ChaosConfig, ChaosRun, run_chaos

__all__ = ["ANOMALIES", "FAULT_KINDS", "ChaosConfig", "ChaosRun", "CheckResult", "Fault", "FinalRead", "Finding",
           "History", "Outcome", "check", "plan_faults", "run_chaos"]
