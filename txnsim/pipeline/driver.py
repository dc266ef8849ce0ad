"""A Spark driver in a process of its own (`python -m spark.jobs ...`), so it can be SIGKILLed.

The driver runs in a new process group: SIGKILL of the group takes its JVM (and in local
mode its executors) down with it, as a machine losing its driver would. The job prints
JSON lines ({"started": query id}, {"batch": N, "rows": R}) that are read here, each stamped
with the time.monotonic() it arrived at ("received_at") for the run's report.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any


class SparkDriver:
    def __init__(self, job: str, *, bootstrap_servers: str, input_topic: str, output_topic: str,
                 checkpoint: Path, master: str = "local[2]", extra: tuple[str, ...] = (),
                 log_file: Path | None = None, env: dict[str, str] | None = None) -> None:
        args = [sys.executable, "-m", "spark.jobs", job, "--bootstrap-servers", bootstrap_servers,
                "--input", input_topic, "--output", output_topic, "--checkpoint", str(checkpoint),
                "--master", master, *extra]
        with open(log_file, "ab") if log_file is not None else contextlib.nullcontext(subprocess.DEVNULL) as stderr:
            self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                         start_new_session=True, env={**os.environ, **(env or {})})
        #: the job's JSON lines, each with "received_at"
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True, name="spark-driver-stdout")
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                try:
                    self.events.append({**json.loads(line), "received_at": time.monotonic()})
                except json.JSONDecodeError:
                    continue

    @property
    def query_id(self) -> str | None:
        return next((e["started"] for e in self.events if "started" in e), None)

    def batches_done(self) -> int:
        return sum(1 for e in list(self.events) if "batch" in e)

    def failure(self) -> str | None:
        return next((e["failed"] for e in list(self.events) if "failed" in e), None)

    def running(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the driver and its JVM: no shutdown hook, no abort, no commit runs."""
        if self.running():
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self, timeout_s: float = 60.0) -> int:
        """Stop gracefully (SIGTERM: the query stops between batches); SIGKILL after `timeout_s`."""
        if self.running():
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        self._reader.join(5)
        return self.proc.returncode

    def wait(self, timeout_s: float) -> int:
        """For --available-now runs: the exit code once the input present at start is copied."""
        self.proc.wait(timeout_s)
        self._reader.join(5)
        return self.proc.returncode
