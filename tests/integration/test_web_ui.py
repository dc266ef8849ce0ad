"""The web view in a real headless chromium against a real cluster: what a user watching the page sees.

Screenshots go to test-artifacts/web-ui/ (CI keeps them; docs/images/ holds copies).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from proto.structs import TopicPartition
from tests.helpers import wait_until
from txnsim import Admin, Consumer, LocalCluster, LocalTransactionState, Producer, TransactionListener
from txnsim.ui.server import BackgroundUI

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = pytest.mark.slow

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "web-ui"
CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PATIENCE_S = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    with LocalCluster(nodes=3, data_dir=tmp_path_factory.mktemp("ui-cluster"), txn_shards=6, offsets_shards=3,
                      half_shards=2, group_min_session_timeout_ms=500, group_initial_rebalance_delay_ms=200,
                      transaction_check_interval_ms=300, transaction_check_max=1000, half_message_timeout_ms=300) as c:
        with Admin(c.bootstrap_servers) as admin:
            admin.create_topic("orders", partitions=3)
        yield c


@pytest.fixture(scope="module")
def page_url(cluster) -> Iterator[str]:
    ui = BackgroundUI(cluster.data_dir, 0, interval_s=0.3).start()
    yield ui.url
    ui.stop()


@pytest.fixture(scope="module")
def browser():
    if not (CHROMEDRIVER and CHROMIUM):
        pytest.skip("chromium and chromium-driver are not installed (scripts/setup.sh installs them as root)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,2200"):
        options.add_argument(arg)
    # the Debian driver, given by path: Selenium Manager would otherwise look for one on the network
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    yield driver
    driver.quit()


def wait_for(browser, condition, what: str):
    """The condition's first truthy value, re-tried while the page redraws; fails with `what` at the deadline."""
    def attempt(driver):
        try:
            return condition(driver)
        except (StaleElementReferenceException, WebDriverException):
            return False
    return WebDriverWait(browser, PATIENCE_S, poll_frequency=0.1).until(attempt, f"the page never showed {what}")


def screenshot(browser, name: str, section: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.find_element(By.ID, section).screenshot(str(ARTIFACTS / f"{name}.png"))


def texts(browser, css: str) -> list[str]:
    """The text of every element `css` finds, read in one go (the page redraws its tables in between calls)."""
    return browser.execute_script("return [...document.querySelectorAll(arguments[0])].map(e => e.innerText)", css)


def attribute(browser, css: str, name: str) -> list[str]:
    return browser.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => e.getAttribute(arguments[1]))", css, name)


def click(browser, css: str) -> None:
    browser.execute_script("document.querySelector(arguments[0]).click()", css)


def test_a_transaction_committing_and_its_timeline_with_a_marker_per_partition(cluster, page_url, browser):
    browser.get(page_url)
    with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="checkout-1") as p:
        p.init_transactions()
        p.begin_transaction()
        for i in range(3):
            p.send("orders", key=f"order-{i}".encode(), value=b"paid", partition=i, headers=[("source", b"web")])
        p.flush()
        row = 'tr[data-transactional-id="checkout-1"]'
        wait_for(browser, lambda b: attribute(b, row, "data-state") == ["Ongoing"],
                 "checkout-1 Ongoing")
        wait_for(browser, lambda b: all("@" in t for t in texts(b, "#partition-table tbody td.txn-open")) and
                 len(texts(b, "#partition-table tbody td.txn-open")) == 3,
                 "the open transaction holding back the LSO of all three partitions")
        screenshot(browser, "partitions-lso-held-back", "partitions")
        p.commit_transaction()
    wait_for(browser, lambda b: attribute(b, row, "data-state") == ["CompleteCommit"], "checkout-1 CompleteCommit")
    click(browser, row)
    wait_for(browser, lambda b: set(attribute(b, '#timeline-table tr[data-kind="Marker"]', "data-lane")) ==
             {"orders-0", "orders-1", "orders-2"}, "a COMMIT marker in each partition's lane")
    kinds = attribute(browser, "#timeline-table tbody tr", "data-kind")
    assert kinds[0] == "InitProducerId" and kinds[-1] == "Complete"
    for step in ("AddPartitions", "Produce", "EndTxn", "Prepare", "MarkerAck"):
        assert step in kinds
    wait_for(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#timeline-chart .scatterlayer .point"),
             "the timeline drawn")
    screenshot(browser, "timeline", "timeline")
    screenshot(browser, "transactions", "transactions")

    browser.find_element(By.ID, "messages-topic").clear()
    browser.find_element(By.ID, "messages-topic").send_keys("orders")
    browser.find_element(By.CSS_SELECTOR, "#messages-form button").click()
    wait_for(browser, lambda b: "committed" in attribute(b, "#message-table tbody tr", "data-transaction"),
             "orders-0's record, committed")
    assert "source=web" in texts(browser, "#message-table tbody tr")[0]
    screenshot(browser, "messages", "messages")


def test_a_node_killed_and_its_shards_moving(cluster, page_url, browser):
    browser.get(page_url)
    victim = cluster.coordinator_for("checkout-1")
    cell = f'#ownership td[data-owner="{victim}"]'
    wait_for(browser, lambda b: attribute(b, cell, "data-log"), f"node {victim} owning logs")
    cluster.kill(victim)
    node = f'.node[data-node="{victim}"]'
    wait_for(browser, lambda b: attribute(b, node, "data-state") == ["dead"], f"node {victim} dead")
    wait_for(browser, lambda b: not attribute(b, cell, "data-log") and
             not attribute(b, '#ownership td[data-owner="-1"]', "data-log"),
             f"every log of node {victim} owned by another node")
    acquired = texts(browser, '#changes tbody tr[data-action="acquired"]')
    assert any(f"node {victim}" not in row for row in acquired)
    screenshot(browser, "node-killed", "cluster")
    cluster.restart(victim)
    wait_for(browser, lambda b: attribute(b, node, "data-state") == ["up"], f"node {victim} up again")


class Member(threading.Thread):
    """A consumer in a group, polling and committing until stopped (as an application would)."""

    def __init__(self, cluster: LocalCluster, group: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(bootstrap_servers=cluster.bootstrap_servers, group_id=group,
                                 auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=3000,
                                 heartbeat_interval_ms=200)
        self.consumer.subscribe(["orders"])
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            if self.consumer.poll(timeout_ms=100):
                self.consumer.commit()

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=10)
        self.consumer.close()


def test_a_group_rebalancing(cluster, page_url, browser):
    browser.get(page_url)
    group = 'div.group[data-group-id="billing"]'
    with Producer(bootstrap_servers=cluster.bootstrap_servers) as p:
        for i in range(3):
            p.send("orders", value=b"invoice", partition=i)
    first = Member(cluster, "billing")
    first.start()
    second = None
    try:
        wait_for(browser, lambda b: attribute(b, group, "data-members") == ["1"]
                 and "Stable" in "".join(texts(b, f"{group} h3")), "billing stable with one member")
        generation = int(attribute(browser, group, "data-generation")[0])
        wait_for(browser, lambda b: "orders-0" in "".join(texts(b, f"{group} .offsets")), "billing's committed offsets")
        # a copier: its transaction commits billing's offsets (TxnOffsetCommit), so billing's rebalances join its picture
        with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="billing-copier") as copier:
            copier.init_transactions()
            copier.begin_transaction()
            copier.send("orders", value=b"copied", partition=0)
            copier.send_offsets_to_transaction({TopicPartition("orders", 0): 1}, "billing")
            copier.commit_transaction()
        second = Member(cluster, "billing")
        second.start()
        wait_for(browser, lambda b: attribute(b, group, "data-members") == ["2"]
                 and int(attribute(b, group, "data-generation")[0]) > generation
                 and "Stable" in "".join(texts(b, f"{group} h3")),
                 "billing rebalanced to two members in a later generation")
        assert int(attribute(browser, group, "data-rebalances")[0]) >= 2, "both generations on the group's chart"
        screenshot(browser, "group-rebalanced", "groups")
        latest = int(attribute(browser, group, "data-generation")[0])

        click(browser, f"{group} a.group-timeline")
        rebalances = '#timeline-table tr[data-kind="Rebalance"]'
        wait_for(browser, lambda b: {generation, latest} <= {int(g) for g in attribute(b, rebalances, "data-generation")},
                 "billing's first generation and the rebalance to the latest on the group's timeline")
        assigned = f'#timeline-table tr[data-kind="Assignment"][data-generation="{latest}"]'
        wait_for(browser, lambda b: len(set(attribute(b, assigned, "data-lane"))) == 2,
                 f"generation {latest}'s assignment in two members' lanes")
        assert all(lane.startswith("billing: ") for lane in attribute(browser, assigned, "data-lane"))
        assert sorted(p.strip(",") for row in texts(browser, assigned) for p in row.split() if p.startswith("orders-")) == [
            "orders-0", "orders-1", "orders-2"], "the three partitions split between the two members"
        wait_for(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#timeline-chart .scatterlayer .point"),
                 "the group's timeline drawn")
        screenshot(browser, "group-timeline", "timeline")

        browser.execute_script("showTimeline('billing-copier')")
        wait_for(browser, lambda b: "Complete" in attribute(b, "#timeline-table tbody tr", "data-kind") and
                 latest in {int(g) for g in attribute(b, rebalances, "data-generation")},
                 "the copier's commit beside billing's rebalance")
        screenshot(browser, "copier-timeline-with-rebalance", "timeline")
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_a_node_paused_then_resumed(cluster, page_url, browser):
    browser.get(page_url)
    victim = cluster.node_ids[-1]
    node = f'.node[data-node="{victim}"]'
    cluster.pause(victim)
    try:
        wait_for(browser, lambda b: attribute(b, node, "data-state") == ["paused"], f"node {victim} paused")
        wait_for(browser, lambda b: not attribute(b, f'#ownership td[data-owner="{victim}"]', "data-log"),
                 f"node {victim}'s logs taken over while it is paused")
        screenshot(browser, "node-paused", "cluster")
    finally:
        cluster.resume(victim)
    wait_for(browser, lambda b: attribute(b, node, "data-state") == ["up"], f"node {victim} up after resuming")


class Undecided(TransactionListener):
    """A local transaction that never finds out: every check-back answers UNKNOW, so the half message waits."""

    def execute_local_transaction(self, msg, arg):
        return LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg):
        return LocalTransactionState.UNKNOW


def test_half_messages_awaiting_check_back_with_their_check_counts(cluster, page_url, browser):
    browser.get(page_url)
    with Producer(bootstrap_servers=cluster.bootstrap_servers, producer_group="points-service",
                  transaction_listener=Undecided()) as p:
        assert p.wait_for_check_backs(10), "the producer never registered for check-backs"
        sent = p.send_message_in_transaction("orders", value=b"-10", key=b"order-7")
        row = f'#half-table tr[data-transaction-id="{sent.transaction_id}"]'
        wait_for(browser, lambda b: [int(n) for n in attribute(b, row, "data-check-times")] >= [2],
                 "the half message checked back twice and still waiting")
        screenshot(browser, "half-messages", "half")


def pushed_events(url: str, names: set[str], timeout_s: float = PATIENCE_S) -> dict[str, dict]:
    """The first event of each section in `names` read from the live stream at `url` (then it is closed)."""
    found: dict[str, dict] = {}
    with urllib.request.urlopen(url + "api/live", timeout=timeout_s) as stream:
        assert stream.headers["Content-Type"].startswith("text/event-stream")
        name = None
        for raw in stream:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: ") and name is not None:
                found.setdefault(name, json.loads(line.removeprefix("data: ")))
            if names <= found.keys():
                return found
    raise AssertionError(f"the stream ended before sending {sorted(names - found.keys())}")


def test_the_live_sections_are_pushed_and_polled_when_the_push_is_missing(cluster, page_url, browser):
    pushed = pushed_events(page_url, {"cluster", "partitions", "transactions", "groups", "half-messages"})
    assert [n["state"] for n in pushed["cluster"]["nodes"]] == ["up"] * 3
    assert "orders" in {p["topic"] for p in pushed["partitions"]["partitions"]}
    browser.get(page_url)
    wait_for(browser, lambda b: b.find_element(By.TAG_NAME, "body").get_attribute("data-live") == "push" and
             attribute(b, ".node", "data-state") == ["up"] * 3, "the nodes drawn from the push")
    # a browser without EventSource (or a stream that stays quiet): the page polls the same sections
    script = browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": "delete window.EventSource"})
    try:
        browser.get(page_url)
        wait_for(browser, lambda b: b.find_element(By.TAG_NAME, "body").get_attribute("data-live") == "poll" and
                 attribute(b, ".node", "data-state") == ["up"] * 3 and
                 "(polled)" in b.find_element(By.ID, "updated").text, "the nodes drawn from polling")
    finally:
        browser.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": script["identifier"]})


def test_stopping_the_view_ends_its_open_streams_at_once(cluster):
    ui = BackgroundUI(cluster.data_dir, 0, interval_s=0.3).start()
    stopped = threading.Event()
    try:
        with urllib.request.urlopen(ui.url + "api/live", timeout=PATIENCE_S) as stream:
            assert stream.readline().startswith(b"retry: ")
            threading.Thread(target=lambda: (ui.stop(), stopped.set()), daemon=True).start()
            assert stopped.wait(6), "the web view waited on a browser's open stream to stop"
            stream.read()  # the server ended the response: no hang
    finally:
        if not stopped.is_set():
            ui.stop()


def test_the_ui_command_serves_the_page_and_names_a_taken_port(cluster, tmp_path):
    log = tmp_path / "ui.out"
    with log.open("w") as out:
        ui = subprocess.Popen([sys.executable, "-m", "txnsim.cli.main", "ui", "--data-dir", str(cluster.data_dir),
                               "--port", "0"], stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "200"}, cwd=Path(__file__).resolve().parents[2])
    try:
        line = wait_until(lambda: next((w for w in log.read_text().split() if w.startswith("http://127.0.0.1:")), None),
                          30, "txnsim ui printing its address")
        with urllib.request.urlopen(line, timeout=10) as response:
            assert "txnsim" in response.read().decode()
        with urllib.request.urlopen(line + "api/cluster", timeout=10) as response:
            assert '"state":"up"' in response.read().decode()
        port = line.rstrip("/").rsplit(":", 1)[1]
        taken = subprocess.run([sys.executable, "-m", "txnsim.cli.main", "ui", "--data-dir", str(cluster.data_dir),
                                "--port", port], capture_output=True, text=True, timeout=60,
                               cwd=Path(__file__).resolve().parents[2])
        assert taken.returncode == 1 and taken.stderr.strip().splitlines() == [
            f"error: KafkaConfigurationError: [INVALID_CONFIG] port {port} on 127.0.0.1 is already in use "
            "(pass another --port, or 0 for a free one)"]
        with urllib.request.urlopen(line + "api/live", timeout=10) as stream:  # a browser still watching
            assert stream.readline().startswith(b"retry: ")
            ui.terminate()
            # uvicorn shuts down, then re-raises the signal: the exit status is SIGTERM's, and it comes at once
            assert ui.wait(timeout=6) == -signal.SIGTERM, "txnsim ui waited on an open stream to stop"
    finally:
        ui.terminate()
        ui.wait(timeout=20)


def test_cluster_start_with_ui_serves_the_view_of_the_cluster_it_started(tmp_path):
    repo = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-m", "txnsim.cli.main", "cluster", "start", "--nodes", "1", "--kafka-port", "0",
               "--data-dir", str(tmp_path / "data")]
    log = tmp_path / "start.out"
    with log.open("w") as out:
        started = subprocess.Popen([*command, "--ui", "0"], stdout=out, stderr=subprocess.STDOUT, cwd=repo,
                                   env={**os.environ, "COLUMNS": "200"})
    try:
        address = wait_until(lambda: next((line.split()[-1] for line in log.read_text().splitlines()
                                           if line.startswith("web view: http://127.0.0.1:")), None),
                             60, "cluster start printing the web view's address")
        with urllib.request.urlopen(address + "api/cluster", timeout=10) as response:
            assert [n["state"] for n in json.loads(response.read())["nodes"]] == ["up"]
        port = address.rstrip("/").rsplit(":", 1)[1]
        taken = subprocess.run([*command[:-1], str(tmp_path / "other"), "--ui", port], capture_output=True,
                               text=True, timeout=60, cwd=repo)
        assert taken.returncode == 1 and f"port {port} on 127.0.0.1 is already in use" in taken.stderr
        assert len(taken.stderr.strip().splitlines()) == 1 and not (tmp_path / "other" / "cluster.json").exists()
    finally:
        started.terminate()  # SIGTERM: the nodes stop cleanly
        assert started.wait(timeout=30) == 0, log.read_text()


def http_status(url: str) -> tuple[int, dict]:
    """(status, JSON body) of a GET, errors included."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_hostile_query_parameters_get_a_clear_400_and_read_nothing_outside_the_logs(cluster, page_url):
    outside = cluster.data_dir.parent / "secret-0"
    outside.mkdir(exist_ok=True)
    for topic in ("../../secret", "..", "orders/../../x", "a" * 300):
        status, body = http_status(page_url + "api/messages?" + urllib.parse.urlencode({"topic": topic}))
        assert status == 400 and body["error"].startswith("INVALID_TOPIC_EXCEPTION"), (topic, body)
    status, body = http_status(page_url + "api/transactions/x/timeline?last=" + "9" * 5000)
    assert status == 400 and "whole number" in body["error"]
    status, body = http_status(page_url + "api/messages?topic=orders&offset=" + "9" * 5000)
    assert status == 400 and "whole numbers" in body["error"]
    assert http_status(page_url + "api/messages?topic=orders")[0] == 200


def test_an_id_that_holds_html_is_shown_as_text_never_as_markup(cluster, page_url, browser):
    hostile = '<a href="https://example.invalid/">click</a>'
    with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=hostile) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send("orders", value=b"x", partition=0)
        p.commit_transaction()
    browser.get(page_url)
    browser.find_element(By.ID, "timeline-id").send_keys(hostile)
    browser.find_element(By.CSS_SELECTOR, "#timeline-form button").click()
    wait_for(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#timeline-chart .gtitle"), "the timeline's title")
    title = browser.find_element(By.CSS_SELECTOR, "#timeline-chart .gtitle")
    assert hostile in title.text
    assert not browser.find_elements(By.CSS_SELECTOR, "#timeline-chart a")  # no live link anywhere in the chart
