"""A standalone ZooKeeper server for a cluster on one machine: the coordination service a replicated
cluster's controller keeps its state in, started and stopped as a child process.

It runs the ZooKeeper the machine has (Debian's `zookeeper` package, or a release under ZOOKEEPER_HOME) on
the machine's Java, listening on loopback; its data directory is the caller's, so a restart on the same
directory keeps every persistent znode, as a real ensemble member would. Hosts of their own run their own
ZooKeeper instead and give the nodes its address.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from proto.errors import KafkaConfigurationError
from txnsim.ports import free_port

#: where Debian's package puts the server's jar (its manifest names the libraries it needs)
DEBIAN_JAR = Path("/usr/share/java/zookeeper.jar")
DEBIAN_CONF = Path("/etc/zookeeper/conf")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
#: ZooKeeper's tick: sessions may be as short as 2 ticks, so a one-machine cluster can use short ones
TICK_MS = 200


def zookeeper_classpath() -> str:
    """The server's class path, or a KafkaConfigurationError that says how to install it."""
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        jars = sorted(str(jar) for jar in Path(home, "lib").glob("*.jar"))
        if jars:
            return os.pathsep.join([str(Path(home, "conf")), *jars])
        raise KafkaConfigurationError(f"ZOOKEEPER_HOME={home} holds no lib/*.jar; point it at an unpacked "
                                      "ZooKeeper release")
    if DEBIAN_JAR.exists():
        return os.pathsep.join([str(DEBIAN_CONF), str(DEBIAN_JAR)])
    raise KafkaConfigurationError("ZooKeeper is not installed: apt-get install zookeeper (as root), or set "
                                  "ZOOKEEPER_HOME to an unpacked ZooKeeper release")


def zookeeper_available() -> str | None:
    """None if a ZooKeeper server can be started here, else why not."""
    if shutil.which("java") is None:
        return "no java on PATH (ZooKeeper runs on Java 11 or later)"
    try:
        zookeeper_classpath()
    except KafkaConfigurationError as exc:
        return str(exc)
    return None


def four_letter_word(address: str, word: str, timeout_s: float = 1.0) -> str:
    """ZooKeeper's four-letter admin commands (`ruok`, `srvr`, `mntr`), over its client port."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as conn:
        conn.sendall(word.encode())
        chunks = []
        while chunk := conn.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


class ZooKeeperServer:
    """One standalone ZooKeeper server on loopback, its data in `data_dir`."""

    def __init__(self, data_dir: Path, *, port: int = 0, host: str = "127.0.0.1",
                 max_session_timeout_ms: int = 60_000, launcher: Sequence[str] = ()) -> None:
        """`launcher`: what the java command runs under, as `ip netns exec NS` puts it on a host of its own."""
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        self.max_session_timeout_ms = max_session_timeout_ms
        self.launcher = list(launcher)
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout_s: float = 30.0) -> None:
        """Start the server and wait until it answers `ruok`; a port of 0 picks a free one (kept on restarts)."""
        if self.running:
            return
        classpath = zookeeper_classpath()
        if not self.port:
            self.port = free_port(self.host)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "zoo.cfg"
        config.write_text("\n".join([
            f"tickTime={TICK_MS}",
            f"dataDir={self.data_dir / 'data'}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            f"minSessionTimeout={2 * TICK_MS}",
            f"maxSessionTimeout={self.max_session_timeout_ms}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,mntr",
            "",
        ]))
        log = open(self.data_dir / "zookeeper.log", "ab")
        try:
            self._proc = subprocess.Popen(
                [*self.launcher, "java", "-Xmx256m", "-cp", classpath, f"-Dzookeeper.log.dir={self.data_dir}", MAIN_CLASS,
                 str(config)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise KafkaConfigurationError(
                    f"ZooKeeper exited with {self._proc.returncode} at its start; see {self.data_dir / 'zookeeper.log'}")
            try:
                if four_letter_word(self.address, "ruok", timeout_s=0.5) == "imok":
                    return
            except OSError:
                pass
            time.sleep(0.05)
        self.kill()
        raise KafkaConfigurationError(f"ZooKeeper did not answer on {self.address} within {timeout_s:.0f} s; "
                                      f"see {self.data_dir / 'zookeeper.log'}")

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM and wait (ZooKeeper's own shutdown), SIGKILL if it hangs."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        self._proc = None

    def kill(self) -> None:
        """kill -9: the service is gone at once, sessions and all (a test's outage)."""
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
        self._proc = None

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

