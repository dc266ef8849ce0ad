"""The runner <-> service channel: commands as JSON lines on a service's stdin, events as JSON
lines on its stdout, the service's own log on stderr (a file).

A service stops when its stdin closes, so services never outlive the runner that started them.
"""
from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

log = logging.getLogger(__name__)


# ------------------------------------------------------------ service side


class EventWriter:
    """Writes one JSON line per event to stdout; safe from any thread."""

    def __init__(self, service: str, out: TextIO = sys.stdout) -> None:
        self.service = service
        self._out = out
        self._lock = threading.Lock()

    def emit(self, name: str, **fields: Any) -> None:
        line = json.dumps({"service": self.service, "event": name, "pid": os.getpid(), "at": time.time(), **fields})
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()


def read_commands(handle: Callable[[dict[str, Any]], None], on_eof: Callable[[], None],
                  source: TextIO = sys.stdin) -> threading.Thread:
    """A daemon thread handing each command line to `handle`, then calling `on_eof` when stdin closes."""
    def run() -> None:
        for line in source:
            if line.strip():
                try:
                    handle(json.loads(line))
                except Exception:  # a bad command must not kill the reader: the runner would hang
                    log.exception("command %r failed", line.strip())
        on_eof()
    thread = threading.Thread(target=run, name="commands", daemon=True)
    thread.start()
    return thread


# ------------------------------------------------------------ runner side


@dataclass(frozen=True)
class Event:
    service: str
    name: str
    pid: int
    at: float
    fields: dict[str, Any] = field(default_factory=dict)

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)


class ServiceProcess:
    """One service as an OS process (`python -m MODULE ARGS`); its events go to a shared queue."""

    def __init__(self, name: str, module: str, args: list[str], log_file: Path, events: queue.Queue[Event],
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        self._command = [sys.executable, "-m", module, *args]
        self._log_file = log_file
        self._events = events
        self._env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc: subprocess.Popen[str] | None = None
        self.starts = 0

    def start(self) -> None:
        with open(self._log_file, "a") as stderr:
            self.proc = subprocess.Popen(self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                         text=True, env=self._env, start_new_session=True)
        self.starts += 1
        threading.Thread(target=self._read, args=(self.proc,), name=f"{self.name}-events", daemon=True).start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                raw = json.loads(line)
            except json.JSONDecodeError:
                continue
            self._events.put(Event(raw.pop("service"), raw.pop("event"), raw.pop("pid"), raw.pop("at"), raw))

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def returncode(self) -> int | None:
        """The exit status once the process has exited and been waited for, else None."""
        return self.proc.returncode if self.proc is not None else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def send(self, command: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        if self.running():
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def wait_exit(self, timeout_s: float) -> int | None:
        """The exit code once the process ended (None if it still runs after `timeout_s`)."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout_s: float = 10.0) -> None:
        """Close its stdin (the signal to stop), then SIGKILL it if it has not stopped within `timeout_s`."""
        if self.proc is None:
            return
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        if self.wait_exit(timeout_s) is None:
            log.warning("%s did not stop within %.0f s; killing it", self.name, timeout_s)
            self.kill()

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self._log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"
