"""CPU time and resident memory of other processes, read from /proc: how the benchmarks see what the node
processes (and client processes they start) cost, without instrumenting them."""
from __future__ import annotations

import os
from collections.abc import Iterable


def process_cpu_s(pid: int) -> float:
    """utime + stime of a process from /proc, all its threads (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()  # the command name may hold spaces: split after it
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def total_cpu_s(pids: Iterable[int]) -> float:
    return sum(process_cpu_s(pid) for pid in pids)


def process_rss_bytes(pid: int) -> int:
    """Resident set size of a process (VmRSS of /proc/PID/status), 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024  # the kernel reports kB
    except OSError:
        pass
    return 0
