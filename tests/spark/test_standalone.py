"""The shipped copy job on a Spark standalone cluster (a master and two workers on loopback), not local mode.

pip's pyspark has no start-master.sh, but bin/spark-class runs the Master and Worker classes directly.
The driver is `python -m spark.jobs` with --master spark://...; its tasks run in the workers' executors.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import wait_until
from tests.integration.test_transactions import read_values
from tests.spark.test_driver_crash import produce
from txnsim.cluster import free_port

pytestmark = pytest.mark.slow

RECORDS = 4000
#: loopback only: an http_proxy in the environment must not catch the master's UI
_no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


@dataclass
class Standalone:
    """A running standalone cluster: where to submit, where to look, and how to stop it."""

    master_url: str
    webui_url: str
    worker_dirs: list[Path]
    processes: list[subprocess.Popen]
    logs: list[Path]

    def state(self) -> dict:
        """The master's view (workers, active and completed applications) from its JSON UI."""
        with _no_proxy.open(self.webui_url + "/json/", timeout=5) as response:
            return json.load(response)

    def status(self) -> str:
        try:
            return self.state()["status"]
        except (OSError, ValueError):  # the UI is not listening yet, or answers before it has a page (no JSON)
            return "DOWN"

    def alive_workers(self) -> int:
        return self.state()["aliveworkers"]

    def log_tails(self) -> str:
        return "\n".join(f"--- {log.name}\n{_tail(log)}" for log in self.logs)

    def stop(self) -> None:
        for proc in self.processes:
            _signal_group(proc, signal.SIGTERM)
        for proc in self.processes:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc, signal.SIGKILL)  # also reaps executors a worker left behind
            proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """A Spark standalone master and two 1-core, 1 GB workers on 127.0.0.1, each in its own process group.

    The workers start only once the master is leader: a worker that connects earlier is refused, or
    registers with a master still in standby that never answers, and retries only 5-15 s later.
    """
    import pyspark

    root = tmp_path_factory.mktemp("standalone")
    spark_home = Path(pyspark.__file__).parent
    spark_class = str(spark_home / "bin" / "spark-class")
    env = dict(os.environ, SPARK_HOME=str(spark_home), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               # the REST submission server would take the fixed port 6066; spark-submit is not used here
               SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")
    port, webui = free_port(), free_port()
    cluster = Standalone(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{webui}", [], [], [])

    def launch(name: str, main_class: str, *args: str, **extra_env: str) -> None:
        log = root / f"{name}.log"
        cluster.logs.append(log)
        with open(log, "wb") as out:
            cluster.processes.append(subprocess.Popen(
                [spark_class, main_class, *args], env={**env, **extra_env}, cwd=root, stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))

    def wait_for(condition, what: str) -> None:
        try:
            wait_until(lambda: condition() or any(p.poll() is not None for p in cluster.processes),
                       timeout_s=60, what=what)
        except AssertionError:
            raise AssertionError(f"{what}: timed out\n{cluster.log_tails()}") from None
        assert all(p.poll() is None for p in cluster.processes), f"{what}: a process exited\n{cluster.log_tails()}"

    try:
        launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
               "--webui-port", str(webui))
        wait_for(lambda: cluster.status() == "ALIVE", "the standalone master to become leader")
        for n in (1, 2):
            work_dir = root / f"worker{n}"
            work_dir.mkdir()
            cluster.worker_dirs.append(work_dir)
            launch(f"worker{n}", "org.apache.spark.deploy.worker.Worker", cluster.master_url, "--host", "127.0.0.1",
                   "--cores", "1", "--memory", "1g", "--webui-port", str(free_port()),
                   SPARK_WORKER_DIR=str(work_dir))
        wait_for(lambda: cluster.alive_workers() == 2, "two workers registered with the master")
        yield cluster
    finally:
        cluster.stop()


def test_copy_job_on_a_standalone_cluster_copies_exactly_once(standalone, cluster, admin, topic, tmp_path):
    bs = cluster.bootstrap_servers
    source = topic + "-in"
    admin.create_topic(source, partitions=2)
    inputs = [f"r{i}".encode() for i in range(RECORDS)]
    produce(bs, source, inputs)

    stdout, stderr = tmp_path / "driver.out", tmp_path / "driver.err"
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        driver = subprocess.Popen(
            [sys.executable, "-m", "spark.jobs", "copy", "--master", standalone.master_url,
             "--bootstrap-servers", bs, "--input", source, "--output", topic,
             "--checkpoint", str(tmp_path / "ckpt"), "--max-offsets-per-trigger", "1000", "--available-now"],
            stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: driver.poll() is not None, timeout_s=180, what="the available-now copy to finish")
    finally:
        _signal_group(driver, signal.SIGKILL)
        driver.wait()
    assert driver.returncode == 0, f"driver exited {driver.returncode}:\n{_tail(stdout)}\n{_tail(stderr)}"

    output = read_values(bs, topic, "read_committed", partitions=2)
    assert len(output) == len(inputs), f"{len(output)} records copied, expected {len(inputs)}"
    assert sorted(output) == sorted(inputs)  # each input once: no loss, no duplicate

    # It ran on the standalone cluster, not in a local-mode driver: the master lists the application
    # as finished, each 1-core worker launched one of its executors (<work dir>/<app id>/<executor id>/),
    # and the executors' logs show the tasks of every micro-batch (two input partitions, two tasks each).
    apps = standalone.state()["completedapps"]
    assert [(a["name"], a["state"]) for a in apps] == [("txnsim-copy", "FINISHED")], apps
    executor_logs = {d.name: sorted(d.glob(f"{apps[0]['id']}/*/stderr")) for d in standalone.worker_dirs}
    assert all(executor_logs.values()), f"a worker launched no executor: {executor_logs}"
    finished = {worker: sum(log.read_text(errors="replace").count("Finished task") for log in logs)
                for worker, logs in executor_logs.items()}
    batches = RECORDS // 1000
    assert sum(finished.values()) >= 2 * batches, f"tasks finished per worker: {finished}"
