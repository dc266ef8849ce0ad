"""What machine a benchmark ran on (CPU count, CPU model, Python, OS, whether the nodes' record framing
check is the compiled build), and how busy other processes kept it meanwhile, for the published tables."""
from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

from partitions.validation import FRAMING_COMPILED
from proto.records import RECORD_DECODING_COMPILED


@dataclass(frozen=True, slots=True)
class Machine:
    cpus: int
    cpu_model: str
    python: str
    system: str
    #: partitions.validation.FRAMING_COMPILED: the nodes check produced records about 30x faster when it is
    framing_compiled: bool = True
    #: proto.records.RECORD_DECODING_COMPILED: every reader decodes records several times faster when it is
    decoding_compiled: bool = True

    def describe(self) -> str:
        framing = "" if self.framing_compiled else "; record framing check interpreted (no mypyc build: slower produce)"
        decoding = "" if self.decoding_compiled else "; record decoding interpreted (no mypyc build: slower reads)"
        return f"{self.cpus} CPUs ({self.cpu_model}), Python {self.python}, {self.system}{framing}{decoding}"


def busy_seconds_from_proc_stat(text: str, ticks_per_second: int) -> float:
    """CPU-seconds all CPUs spent busy since boot: the `cpu` line of /proc/stat less idle and iowait."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            ticks = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
            return (sum(ticks) - ticks[3] - ticks[4]) / ticks_per_second
    raise ValueError("no aggregate cpu line in /proc/stat")


class CpuShare:
    """How much CPU other processes took while a benchmark ran: the machine's busy time less this
    process's and its reaped children's (the node processes, once the cluster has stopped)."""

    def __init__(self) -> None:
        self._machine = self._machine_busy()
        self._own = self._own_cpu()
        self._wall = time.monotonic()

    @staticmethod
    def _machine_busy() -> float | None:
        try:
            return busy_seconds_from_proc_stat(Path("/proc/stat").read_text(), os.sysconf("SC_CLK_TCK"))
        except (OSError, ValueError):
            return None

    @staticmethod
    def _own_cpu() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def measure(self) -> tuple[float, float, float] | None:
        """(wall seconds, CPU-s of this process and its reaped children, CPU-s of everything else) so far."""
        machine = self._machine_busy()
        if machine is None or self._machine is None:
            return None
        own = self._own_cpu() - self._own
        return time.monotonic() - self._wall, own, max(0.0, (machine - self._machine) - own)

    def others_share(self, cpus: int) -> float | None:
        """The share of the machine other processes used so far (0..1)."""
        measured = self.measure()
        if measured is None or measured[0] <= 0:
            return None
        wall, _own, others = measured
        return others / (wall * cpus)

    def describe(self, cpus: int) -> str | None:
        measured = self.measure()
        if measured is None:
            return None
        wall, own, others = measured
        return (f"{wall:.0f} s wall on {cpus} CPUs: this benchmark (client and nodes) used {own:.0f} CPU-s, "
                f"other processes {others:.0f} CPU-s ({others / (wall * cpus):.0%} of the machine)")


def cpu_model_from_cpuinfo(text: str) -> str:
    """The first `model name` (x86) or `Hardware`/`Processor` (ARM) line of /proc/cpuinfo."""
    for key in ("model name", "hardware", "processor"):
        for line in text.splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip().lower() == key and value.strip() and not value.strip().isdigit():
                return value.strip()
    return "unknown CPU"


def this_machine() -> Machine:
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        cpuinfo = ""
    model = cpu_model_from_cpuinfo(cpuinfo) if cpuinfo else (platform.processor() or "unknown CPU")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 0)
    return Machine(cpus=cpus, cpu_model=model, python=platform.python_version(),
                   system=f"{platform.system()} {platform.release()}", framing_compiled=FRAMING_COMPILED,
                   decoding_compiled=RECORD_DECODING_COMPILED)
