"""The `txnsim` command as a user runs it: real subprocesses against a `txnsim cluster start` cluster.

Every command ends with exit code 0, or 1 and a one-line `error:` naming Kafka's error, never a
Python traceback, and never hangs: a wrong address fails within the command's request timeout.
"""
from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from proto.hashing import partition_for
from tests.helpers import wait_until

_SCRIPT = Path(sys.executable).with_name("txnsim")
TXNSIM = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "txnsim.cli.main"]

#: wide and plain, so rich neither wraps table rows nor colours the text the tests read
ENV = dict(os.environ, COLUMNS="200", TERM="dumb", NO_COLOR="1", PYTHONIOENCODING="utf-8")

#: a command that the cluster answers finishes well within this; a hang fails the test instead
COMMAND_TIMEOUT_S = 60


@dataclass
class Result:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("error:")]


def txnsim(*args: str, stdin: str | None = None, timeout_s: float = COMMAND_TIMEOUT_S) -> Result:
    """Run `txnsim ARGS`; whatever happens, no Python traceback may reach the user."""
    started = time.monotonic()
    proc = subprocess.run([*TXNSIM, *args], input=(stdin or "").encode(), capture_output=True, env=ENV,
                          timeout=timeout_s)
    result = Result(args, proc.returncode, proc.stdout.decode(), proc.stderr.decode(),
                    time.monotonic() - started)
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, result
    return result


def ok(*args: str, stdin: str | None = None) -> str:
    result = txnsim(*args, stdin=stdin)
    assert result.returncode == 0, result
    return result.stdout


def fails_cleanly(result: Result, *names: str) -> str:
    """Exit code 1 and exactly one `error:` line on stderr, naming one of `names`."""
    assert result.returncode == 1, result
    assert len(result.error_lines) == 1, result
    line = result.error_lines[0]
    assert any(name in line for name in names), result
    return line


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the rich tables in `text`, as lists of stripped cells."""
    rows = []
    for line in text.splitlines():
        if line.startswith(("│", "|")):
            rows.append([cell.strip() for cell in re.split(r"[│|]", line)[1:-1]])
    return rows


def process_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


# ------------------------------------------------------------ the cluster, started from the shell


@dataclass
class CliCluster:
    data_dir: Path
    process: subprocess.Popen
    output: Path

    def cluster_args(self) -> tuple[str, ...]:
        return ("--data-dir", str(self.data_dir))

    def start_output(self) -> str:
        return self.output.read_text(errors="replace")

    def node_pids(self) -> dict[int, int]:
        """node id -> pid, from the table that `cluster start` prints."""
        pids = {}
        for cells in table_rows(self.start_output()):
            if len(cells) == 4 and cells[0].isdigit() and cells[2].isdigit():
                pids[int(cells[0])] = int(cells[2])
        return pids


@pytest.fixture(scope="module")
def cli_cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    data_dir, output = root / "data", root / "cluster-start.out"
    with open(output, "wb") as out:
        # --kafka-port 0: free ports, so neither a Kafka on 9092 nor a second run on this machine gets in the way
        process = subprocess.Popen([*TXNSIM, "cluster", "start", "--nodes", "3", "--data-dir", str(data_dir),
                                    "--kafka-port", "0"],
                                   stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=ENV)
    cluster = CliCluster(data_dir, process, output)
    try:
        def ready() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"`txnsim cluster start` exited with {process.returncode}:\n"
                                     f"{cluster.start_output()}")
            status = subprocess.run([*TXNSIM, "cluster", "status", "--data-dir", str(data_dir),
                                     "--request-timeout-ms", "2000"], capture_output=True, env=ENV, timeout=30)
            return status.returncode == 0 and len(cluster.node_pids()) == 3
        wait_until(ready, timeout_s=60, what="`txnsim cluster status` to succeed")
        yield cluster
    finally:
        pids = cluster.node_pids()
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # Ctrl-C
        try:
            returncode = process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise AssertionError(f"`txnsim cluster start` ignored Ctrl-C for 20 s:\n{cluster.start_output()}")
        text = cluster.start_output()
        assert returncode == 0, text
        assert "stopped" in text and "Traceback" not in text, text
        wait_until(lambda: not any(process_running(pid) for pid in pids.values()), timeout_s=10,
                   what=f"node processes {sorted(pids.values())} to exit after Ctrl-C")


@pytest.fixture(scope="module")
def orders(cli_cluster):
    """A 3-partition topic holding a committed transaction (a, b, c) and an aborted one (x, y)."""
    out = ok("topics", "create", "orders", "--partitions", "3", *cli_cluster.cluster_args())
    assert "created topic orders with 3 partition(s)" in out
    assert "committed 3 record(s)" in ok("produce", "orders", "--transactional-id", "tx-orders",
                                         *cli_cluster.cluster_args(), stdin="a\nb\nc\n")
    assert "aborted 2 record(s)" in ok("produce", "orders", "--transactional-id", "tx-orders", "--abort",
                                       *cli_cluster.cluster_args(), stdin="x\ny\n")
    return "orders"


@pytest.fixture(scope="module")
def ledger(cli_cluster):
    """One partition, so that one log holds the data batches and both markers of 'tx-ledger'."""
    ok("topics", "create", "ledger", "--partitions", "1", *cli_cluster.cluster_args())
    ok("produce", "ledger", "--transactional-id", "tx-ledger", *cli_cluster.cluster_args(), stdin="l1\nl2\n")
    ok("produce", "ledger", "--transactional-id", "tx-ledger", "--abort", *cli_cluster.cluster_args(),
       stdin="l3\n")
    return "ledger"


def consumed_values(stdout: str) -> list[str]:
    """`consume` prints PARTITION:OFFSET<TAB>[KEY<TAB>]VALUE per record."""
    return [line.split("\t")[-1] for line in stdout.splitlines() if re.match(r"^\d+:\d+\t", line)]


# ------------------------------------------------------------ cluster start / status


def test_cluster_start_prints_its_nodes_and_bootstrap_servers(cli_cluster):
    text = cli_cluster.start_output()
    match = re.search(r"bootstrap servers: (\S+)", text)
    assert match, text
    servers = match.group(1).split(",")
    assert len(servers) == 3 and all(re.fullmatch(r"127\.0\.0\.1:\d+", s) for s in servers)
    assert sorted(cli_cluster.node_pids()) == [0, 1, 2]
    assert all(process_running(pid) for pid in cli_cluster.node_pids().values())
    # the printed servers are a working --bootstrap-servers
    status = ok("cluster", "status", "--bootstrap-servers", match.group(1))
    assert all(server in status for server in servers), status


def test_cluster_status_lists_three_alive_nodes(cli_cluster):
    out = ok("cluster", "status", *cli_cluster.cluster_args())
    nodes = [cells for cells in table_rows(out)
             if len(cells) >= 3 and re.fullmatch(r"127\.0\.0\.1:\d+", cells[1]) and cells[2] in ("yes", "no")]
    assert [(cells[0], cells[2]) for cells in nodes] == [("0", "yes"), ("1", "yes"), ("2", "yes")], out


def test_cluster_start_refuses_a_data_dir_whose_cluster_runs(cli_cluster):
    result = txnsim("cluster", "start", "--nodes", "3", *cli_cluster.cluster_args(), timeout_s=30)
    assert fails_cleanly(result, "already running")
    assert all(process_running(pid) for pid in cli_cluster.node_pids().values())


# ------------------------------------------------------------ topics


def test_topics_create_list_describe(cli_cluster, orders):
    listed = ok("topics", "list", *cli_cluster.cluster_args())
    assert "orders\t3" in listed.splitlines()
    assert "__transaction_state" not in listed
    assert "__transaction_state" in ok("topics", "list", "--internal", *cli_cluster.cluster_args())
    described = ok("topics", "describe", "orders", *cli_cluster.cluster_args())
    rows = [cells for cells in table_rows(described) if len(cells) == 8]
    assert [cells[0] for cells in rows] == ["0", "1", "2"], described
    assert all(cells[2] == cells[3] == cells[1] and cells[4] == "-" for cells in rows), described  # one copy each
    # 3 committed and 2 aborted records, and a marker on each partition each transaction wrote to (each line
    # is sent as it is read, so the sticky partitioner may spread them); nothing undecided
    assert 5 + 2 <= sum(int(cells[6]) for cells in rows) <= 5 + 3 + 2, described
    assert all(cells[6] == cells[7] for cells in rows), described  # high watermark == last stable offset
    fails_cleanly(txnsim("topics", "create", "orders", "--partitions", "3", *cli_cluster.cluster_args()),
                  "TOPIC_ALREADY_EXISTS", "TopicAlreadyExists")
    line = fails_cleanly(txnsim("topics", "create", "bad/name", *cli_cluster.cluster_args()), "InvalidTopic")
    assert "(invalid-config: fix the setting or the request" in line  # KIP-1050's class, and what to do


def test_topics_alter_grows_a_topic_and_changes_its_settings_then_delete_removes_it(cli_cluster):
    args = cli_cluster.cluster_args()
    ok("topics", "create", "grown", *args)
    ok("produce", "grown", *args, stdin="before\n")
    assert "3 partition(s)" in ok("topics", "alter", "grown", "--partitions", "3", "--config",
                                  "message.type=NORMAL", *args)
    described = json.loads(ok("topics", "describe", "grown", "--json", *args))
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    assert described["configs"] == {"message.type": "NORMAL"}
    assert described["partitions"][0]["high_watermark"] == 1  # the old partition kept its log
    ok("produce", "grown", "--partition", "2", *args, stdin="after\n")
    out = ok("consume", "grown", "--partition", "2", "--offset", "earliest", "--timeout-ms", "1500", *args)
    assert consumed_values(out) == ["after"], out
    fails_cleanly(txnsim("topics", "alter", "grown", "--partitions", "2", *args), "INVALID_PARTITIONS")
    fails_cleanly(txnsim("topics", "alter", "grown", "--config", "half.message.storage=kafka", *args),
                  "INVALID_CONFIG")
    fails_cleanly(txnsim("topics", "alter", "grown", *args), "INVALID_REQUEST")
    fails_cleanly(txnsim("topics", "alter", "no-such-topic", "--partitions", "4", *args),
                  "UNKNOWN_TOPIC_OR_PARTITION")
    ok("topics", "alter", "grown", "--delete-config", "message.type", *args)
    assert json.loads(ok("topics", "describe", "grown", "--json", *args))["configs"] == {}
    assert "deleted topic grown (3 partition(s))" in ok("topics", "delete", "grown", *args)
    assert "grown" not in [t["topic"] for t in json.loads(ok("topics", "list", "--json", *args))]
    fails_cleanly(txnsim("topics", "delete", "grown", *args), "UNKNOWN_TOPIC_OR_PARTITION")


# ------------------------------------------------------------ produce / consume


def test_read_committed_sees_committed_lines_only(cli_cluster, orders):
    out = ok("consume", "orders", "--from-beginning", "--isolation-level", "read_committed",
             "--timeout-ms", "1500", *cli_cluster.cluster_args())
    assert sorted(consumed_values(out)) == ["a", "b", "c"], out


def test_read_uncommitted_sees_aborted_lines_too(cli_cluster, orders):
    out = ok("consume", "orders", "--from-beginning", "--isolation-level", "read_uncommitted",
             "--timeout-ms", "1500", *cli_cluster.cluster_args())
    assert sorted(consumed_values(out)) == ["a", "b", "c", "x", "y"], out


def test_consume_with_a_group_subscribes_and_resumes_from_committed_offsets(cli_cluster):
    ok("topics", "create", "grouped", "--partitions", "2", *cli_cluster.cluster_args())
    ok("produce", "grouped", "--transactional-id", "tx-grouped", *cli_cluster.cluster_args(), stdin="g1\ng2\n")
    first = ok("consume", "grouped", "--group", "cli-group", "--from-beginning", "--max-messages", "2",
               "--timeout-ms", "10000", *cli_cluster.cluster_args())
    assert sorted(consumed_values(first)) == ["g1", "g2"], first
    ok("produce", "grouped", "--transactional-id", "tx-grouped", *cli_cluster.cluster_args(), stdin="g3\n")
    second = ok("consume", "grouped", "--group", "cli-group", "--from-beginning", "--max-messages", "1",
                "--timeout-ms", "10000", *cli_cluster.cluster_args())
    assert consumed_values(second) == ["g3"], second  # the group's offsets, not the beginning


def test_produce_without_transactional_id_sends_idempotently(cli_cluster):
    ok("topics", "create", "plain", "--partitions", "1", *cli_cluster.cluster_args())
    assert "sent 2 record(s)" in ok("produce", "plain", *cli_cluster.cluster_args(), stdin="p1\np2\n")
    dump = ok("dump-log", "plain", "0", *cli_cluster.cluster_args())
    batches = [line for line in dump.splitlines() if line.startswith("baseOffset:")]
    assert len(batches) == 2, dump  # each line sent as it was read, one batch each
    for sequence, batch in enumerate(batches):  # a real producer id, sequences in order
        assert re.search(rf"producerId: \d+ producerEpoch: \d+ baseSequence: {sequence} ", batch), dump
    assert "isTransactional: false" in batches[0] and "endTxnMarker" not in dump
    out = ok("consume", "plain", "--from-beginning", "--timeout-ms", "1500", *cli_cluster.cluster_args())
    assert consumed_values(out) == ["p1", "p2"]
    fails_cleanly(txnsim("produce", "plain", "--abort", *cli_cluster.cluster_args(), stdin="p3\n"),
                  "--transactional-id")


def test_produce_sends_each_line_as_it_is_typed(cli_cluster):
    """Like kafka-console-producer: a line is on the log (read_uncommitted sees it) before the next is typed."""
    ok("topics", "create", "typed", *cli_cluster.cluster_args())
    producer = subprocess.Popen([*TXNSIM, "produce", "typed", "--transactional-id", "tx-typed",
                                 *cli_cluster.cluster_args()], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=ENV)
    try:
        assert producer.stdin is not None
        producer.stdin.write(b"first\n")
        producer.stdin.flush()

        def uncommitted() -> list[str]:
            return consumed_values(ok("consume", "typed", "--from-beginning", "--isolation-level",
                                      "read_uncommitted", "--timeout-ms", "300", *cli_cluster.cluster_args()))
        assert wait_until(uncommitted, timeout_s=30, what="the first line on the log") == ["first"]
        committed = ok("consume", "typed", "--from-beginning", "--timeout-ms", "300", *cli_cluster.cluster_args())
        assert consumed_values(committed) == []  # still in the open transaction
        out, err = producer.communicate(b"second\n", timeout=COMMAND_TIMEOUT_S)
    finally:
        if producer.poll() is None:
            producer.kill()
    assert producer.returncode == 0 and b"committed 2 record(s)" in out, (out, err)


def test_produce_keys_headers_and_a_transaction_left_open_then_consume_shows_them(cli_cluster):
    args = cli_cluster.cluster_args()
    ok("topics", "create", "shown", *args)
    ok("produce", "shown", "--transactional-id", "tx-shown", "--property", "parse.key=true", "--property",
       "key.separator=:", "--property", "parse.headers=true", *args, stdin="h1:a,h2:b\tk1:v1\n")
    ok("produce", "shown", "--transactional-id", "tx-shown", "--abort", "--header", "src=cli", *args,
       stdin="gone\n")
    left = ok("produce", "shown", "--transactional-id", "tx-left", "--leave-open", "--transaction-timeout-ms",
              "600000", *args, stdin="pending\n")
    assert "left the transaction of tx-left open" in left, left
    out = ok("consume", "shown", "--from-beginning", "--isolation-level", "read_uncommitted", "--print-key",
             "--print-headers", "--print-timestamp", "--print-txn-status", "--timeout-ms", "1500", *args)
    lines = [line.split("\t") for line in out.splitlines()]
    assert [(f[2], f[3], f[4], f[5]) for f in lines] == [
        ("committed", "h1:a,h2:b", "k1", "v1"), ("aborted", "src:cli", "null", "gone"),
        ("open", "NO_HEADERS", "null", "pending")], out
    assert all(re.fullmatch(r"CreateTime:\d{13}", f[1]) for f in lines), out
    records = [json.loads(line) for line in ok("consume", "shown", "--partition", "0", "--offset", "2",
                                                 "--isolation-level", "read_uncommitted", "--json",
                                                 "--timeout-ms", "1500", *args).splitlines()]
    assert [(r["offset"], r["value"], r["headers"]) for r in records] == [(2, "gone", {"src": "cli"}),
                                                                         (4, "pending", {})], records
    # the open transaction holds read_committed back, and it is not hanging: its coordinator knows it
    assert consumed_values(ok("consume", "shown", "--from-beginning", "--timeout-ms", "1000", *args)) == ["v1"]
    assert json.loads(ok("transactions", "find-hanging", "--topic", "shown", "--json", *args)) == []
    described = json.loads(ok("transactions", "describe", "tx-left", "--json", *args))
    assert described["TransactionState"] == "Ongoing" and described["TransactionTimeoutMs"] == 600000
    fails_cleanly(txnsim("consume", "shown", "--offset", "1", *args), "INVALID_REQUEST")
    fails_cleanly(txnsim("consume", "shown", "--partition", "3", *args), "UNKNOWN_TOPIC_OR_PARTITION")
    fails_cleanly(txnsim("produce", "shown", "--property", "no.such=1", *args, stdin="x\n"), "INVALID_CONFIG")


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_consume_follow_prints_records_produced_later(cli_cluster):
    args = cli_cluster.cluster_args()
    ok("topics", "create", "followed", *args)
    ok("produce", "followed", *args, stdin="early\n")
    # started with SIGINT ignored, as a shell's background job (`txnsim consume ... --follow &`) has it:
    # Ctrl-C (here SIGINT) must still end it
    follower = subprocess.Popen([*TXNSIM, "consume", "followed", "--from-beginning", "--follow", "--timeout-ms",
                                 "100", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV,
                                preexec_fn=_ignore_sigint)

    def next_value() -> str:
        assert follower.stdout is not None
        ready, _, _ = select.select([follower.stdout], [], [], COMMAND_TIMEOUT_S)
        assert ready, "consume --follow printed nothing"
        return follower.stdout.readline().decode().rstrip("\n").split("\t")[-1]

    try:
        assert next_value() == "early"
        # producing takes far longer than --timeout-ms: without --follow the consumer would be gone by now
        ok("produce", "followed", *args, stdin="late\n")
        assert next_value() == "late"
        assert follower.poll() is None
    finally:
        follower.send_signal(signal.SIGINT)
        try:
            follower.wait(timeout=20)
        except subprocess.TimeoutExpired:
            follower.kill()  # never left behind by a failing test
            follower.wait()
            raise AssertionError("consume --follow did not stop at SIGINT") from None
    assert follower.returncode == 0, follower.stderr.read() if follower.stderr else None


def test_record_text_is_printed_literally_not_as_markup(cli_cluster):
    ok("topics", "create", "literal", *cli_cluster.cluster_args())
    lines = ["[/x] closing tag", "[bold]not bold[/bold]", ":smile:", "k:v"]
    ok("produce", "literal", "--transactional-id", "tx-[literal]", *cli_cluster.cluster_args(),
       stdin="\n".join(lines) + "\n")
    out = ok("consume", "literal", "--from-beginning", "--timeout-ms", "1500", *cli_cluster.cluster_args())
    assert consumed_values(out) == lines, out
    assert "tx-[literal]" in ok("transactions", "list", *cli_cluster.cluster_args())
    assert "tx-[literal]" in ok("transactions", "describe", "tx-[literal]", *cli_cluster.cluster_args())
    fails_cleanly(txnsim("transactions", "describe", "[/nope]", *cli_cluster.cluster_args()),
                  "TRANSACTIONAL_ID_NOT_FOUND")


# ------------------------------------------------------------ transactions (kafka-transactions.sh's verbs)


def test_transactions_list_and_describe(cli_cluster, orders):
    rows = table_rows(ok("transactions", "list", *cli_cluster.cluster_args()))
    listed = {cells[0]: cells for cells in rows if len(cells) == 3}
    assert "tx-orders" in listed
    producer_id = listed["tx-orders"][1]
    described = ok("transactions", "describe", "tx-orders", *cli_cluster.cluster_args())
    assert "TransactionState" in described and "ProducerEpoch" in described
    fields = {cells[0]: cells[1] for cells in table_rows(described) if len(cells) == 2}
    assert fields["TransactionalId"] == "tx-orders" and fields["ProducerId"] == producer_id, described
    assert fields["TransactionState"] in ("Empty", "CompleteCommit", "CompleteAbort"), described  # not Ongoing
    assert fields["TransactionTimeoutMs"] == "60000"
    as_json = json.loads(ok("transactions", "describe", "tx-orders", "--json", *cli_cluster.cluster_args()))
    assert as_json["ProducerId"] == int(producer_id) and as_json["TransactionTimeoutMs"] == 60000
    # which node coordinates it, and through which __transaction_state shard
    assert as_json["CoordinatorShard"] == partition_for("tx-orders", 50), as_json
    status = json.loads(ok("cluster", "status", "--json", *cli_cluster.cluster_args()))
    owner = next(n for n in status["nodes"] if n["node"] == as_json["CoordinatorId"])
    assert owner["address"] == as_json["CoordinatorAddress"], (owner, as_json)
    assert f"shard {as_json['CoordinatorShard']}" in described
    fails_cleanly(txnsim("transactions", "describe", "no-such-id", *cli_cluster.cluster_args()),
                  "TRANSACTIONAL_ID_NOT_FOUND")


def test_transactions_describe_producers(cli_cluster, ledger):
    listed = {cells[0]: cells for cells in table_rows(ok("transactions", "list", *cli_cluster.cluster_args()))
              if len(cells) == 3}
    out = ok("transactions", "describe-producers", "ledger", "0", *cli_cluster.cluster_args())
    rows = [cells for cells in table_rows(out) if len(cells) == 6]
    assert listed["tx-ledger"][1] in [cells[0] for cells in rows], out
    assert all(cells[5] == "None" for cells in rows), out  # no open transaction on the partition


def test_find_hanging_finds_none_and_abort_rejects_a_bad_start_offset(cli_cluster, orders, ledger):
    assert "no hanging transactions" in ok("transactions", "find-hanging", *cli_cluster.cluster_args())
    assert "no hanging transactions" in ok("transactions", "find-hanging", "--topic", "orders",
                                           *cli_cluster.cluster_args())
    result = txnsim("transactions", "abort", "--topic", "ledger", "--partition", "0", "--start-offset", "17",
                    *cli_cluster.cluster_args())
    line = fails_cleanly(result, "INVALID_REQUEST")
    assert "offset 17" in line and "ledger-0" in line


# ------------------------------------------------------------ --json, and tables that are never cut


def test_every_table_command_prints_json_that_parses(cli_cluster, orders, ledger):
    args = cli_cluster.cluster_args()
    assert {"topic": "orders", "partitions": 3} in json.loads(ok("topics", "list", "--json", *args))
    described = json.loads(ok("topics", "describe", "orders", "--json", *args))
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    assert 7 <= sum(p["high_watermark"] for p in described["partitions"]) <= 10  # 5 records, 2 to 5 markers
    every = json.loads(ok("topics", "describe", "--json", *args))
    assert {"orders", "ledger"} <= {t["topic"] for t in every} and "__transaction_state" not in str(every)
    listed = json.loads(ok("transactions", "list", "--json", *args))
    ledger_pid = next(t["ProducerId"] for t in listed if t["TransactionalId"] == "tx-ledger")
    producers = json.loads(ok("transactions", "describe-producers", "ledger", "0", "--json", *args))
    assert ledger_pid in [p["ProducerId"] for p in producers]
    assert json.loads(ok("transactions", "find-hanging", "--json", *args)) == []
    assert json.loads(ok("transactions", "list", "--half", "--json", *args)) is not None
    assert isinstance(json.loads(ok("consumer-groups", "list", "--json", *args)), list)
    status = json.loads(ok("cluster", "status", "--json", *args))
    assert [(n["node"], n["alive"], n["not_yet_opened"]) for n in status["nodes"]] == \
        [(0, True, []), (1, True, []), (2, True, []), ]
    assert sum(n["txn_shards"] for n in status["nodes"]) == 50


def test_a_narrow_terminal_wraps_table_cells_instead_of_cutting_them(cli_cluster, orders):
    long_id = "tx-" + "a-rather-long-transactional-id-" * 2
    ok("produce", "orders", "--transactional-id", long_id, *cli_cluster.cluster_args(), stdin="n\n")
    narrow = dict(ENV, COLUMNS="40")
    for command in (("transactions", "list"), ("transactions", "describe", long_id), ("cluster", "status")):
        proc = subprocess.run([*TXNSIM, *command, *cli_cluster.cluster_args()], capture_output=True, env=narrow,
                              timeout=COMMAND_TIMEOUT_S)
        out = proc.stdout.decode()
        assert proc.returncode == 0 and "…" not in out, out
        assert all(len(line) <= 40 for line in out.splitlines()), out
        if command[0] == "transactions":  # the id is all there, folded over several lines of its cell
            cells = "".join(cells[0] if command[1] == "list" else cells[-1] for cells in table_rows(out) if cells)
            assert long_id in cells, out


# ------------------------------------------------------------ dump-log


def test_dump_log_shows_producer_fields_and_both_markers(cli_cluster, ledger):
    out = ok("dump-log", "ledger", "0", *cli_cluster.cluster_args())
    data = [line for line in out.splitlines() if line.startswith("baseOffset:") and "isControl: false" in line]
    assert len(data) == 3, out  # l1, l2 (committed), l3 (aborted): a batch per line
    for line in data:
        for field in ("producerId:", "producerEpoch:", "baseSequence:", "isTransactional: true"):
            assert field in line, line
    markers = re.findall(r"endTxnMarker: (\w+)", out)
    assert markers == ["COMMIT", "ABORT"], out
    with_records = ok("dump-log", "ledger", "0", "--print-records", *cli_cluster.cluster_args())
    assert re.findall(r"payload: (\S+)", with_records) == ["l1", "l2", "l3"]


def test_dump_log_decodes_the_transaction_log_and_the_offsets_log(cli_cluster, ledger):
    """kafka-dump-log's --transaction-log-decoder and --offsets-decoder, for txnsim's record formats."""
    from coordinator.layout import ClusterLayout, read_cluster_spec
    args = cli_cluster.cluster_args()
    config = read_cluster_spec(ClusterLayout(cli_cluster.data_dir)).config
    shard = partition_for("tx-ledger", config.txn_shards)
    out = ok("dump-log", "__transaction_state", str(shard), "--transaction-log-decoder", *args)
    states = re.findall(r"transactionalId=tx-ledger payload: producerId:\d+,producerEpoch:\d+,state=(\w+)", out)
    assert "Ongoing" in states and "CompleteCommit" in states and "CompleteAbort" in states, out
    ok("topics", "create", "offsets-dumped", *args)
    ok("produce", "offsets-dumped", *args, stdin="o1\no2\n")
    ok("consume", "offsets-dumped", "--group", "dumped-group", "--from-beginning", "--max-messages", "2",
       "--timeout-ms", "10000", *args)
    group_shard = partition_for("dumped-group", config.offsets_shards)
    out = ok("dump-log", "__consumer_offsets", str(group_shard), "--offsets-decoder", *args)
    assert re.search(r"key: offset_commit::group=dumped-group,partition=offsets-dumped-0 payload: offset=2 ", out), out
    assert "key: group_metadata::group=dumped-group payload: {protocolType:consumer" in out, out


def test_half_messages_are_listed_and_their_system_topics_decoded(cli_cluster):
    """An undecided RocketMQ-style message (its end lost) shows in `transactions list --half`, and
    `dump-log` decodes the half-message shard it sits in."""
    from coordinator.layout import ClusterLayout, read_cluster_spec
    from proto.hashing import partition_for
    from txnsim import LocalTransactionState, Producer, TransactionListener

    class Undecided(TransactionListener):
        def execute_local_transaction(self, msg, arg):
            return LocalTransactionState.COMMIT_MESSAGE

        def check_local_transaction(self, msg):
            return LocalTransactionState.UNKNOW

    spec = read_cluster_spec(ClusterLayout(cli_cluster.data_dir))
    ok("topics", "create", "rmq-points", "--partitions", "1", "--config", "message.type=TRANSACTION",
       *cli_cluster.cluster_args())
    with Producer(bootstrap_servers=spec.bootstrap_servers, producer_group="cli-orders",
                  transaction_listener=Undecided()) as p:
        p.faults.lose_ends = True
        sent = p.send_message_in_transaction("rmq-points", value=b"order-7", key=b"7", arg=None)
    listed = table_rows(ok("transactions", "list", "--half", *cli_cluster.cluster_args()))
    row = next(cells for cells in listed if cells and cells[0] == sent.transaction_id)
    assert row[1:4] == ["cli-orders", "rmq-points", "0"] and row[6] == "0", row
    shard = partition_for("cli-orders", spec.config.half_shards)
    dumped = ok("dump-log", "RMQ_SYS_TRANS_HALF_TOPIC", str(shard), *cli_cluster.cluster_args())
    assert f"halfMessage: transactionId: {sent.transaction_id} producerGroup: cli-orders realTopic: rmq-points" \
        in dumped and "payload: order-7" in dumped, dumped
    bad = txnsim("topics", "create", "rmq-bad", "--config", "message.type=SOMETIMES", *cli_cluster.cluster_args())
    fails_cleanly(bad, "INVALID_CONFIG")


# ------------------------------------------------------------ bad input


@pytest.mark.parametrize("command", [
    ("produce", "no-such-topic", "--transactional-id", "tx-unknown"),
    ("produce", "no-such-topic"),
    ("consume", "no-such-topic", "--from-beginning"),
    ("consume", "no-such-topic", "--group", "g-unknown"),
    ("topics", "describe", "no-such-topic"),
    ("transactions", "describe-producers", "no-such-topic", "0"),
    ("transactions", "find-hanging", "--topic", "no-such-topic"),
    ("dump-log", "no-such-topic", "0"),
], ids=lambda c: "-".join(c[:2]) + ("-" + c[-2].strip("-") if c[-2].startswith("--") else ""))
def test_unknown_topic_is_one_clean_error_line(cli_cluster, command):
    result = txnsim(*command, *cli_cluster.cluster_args(), stdin="v\n", timeout_s=30)
    fails_cleanly(result, "UNKNOWN_TOPIC_OR_PARTITION")
    assert result.stderr.strip() == result.error_lines[0], result  # nothing else on stderr either
    assert result.seconds < 10, result  # the cluster says so at once; no metadata wait


@pytest.mark.parametrize("command, usage, name", [
    (("transactions", "abort", "--topic", "t", "--partition", "0", "--start-offset", "-1"),
     "txnsim transactions abort", "INVALID_REQUEST"),
    (("transactions", "abort", "--topic", "t", "--partition", "-2", "--start-offset", "0"),
     "txnsim transactions abort", "UNKNOWN_TOPIC_OR_PARTITION"),
    (("topics", "create", "t", "--partitions", "0"), "txnsim topics create", "INVALID_PARTITIONS"),
    (("consume", "t", "--max-messages", "x"), "txnsim consume", "INVALID_REQUEST"),
    (("consume", "t", "--timeout-ms", "-5"), "txnsim consume", "INVALID_REQUEST"),
    (("consumer-groups", "reset-offsets", "g", "--topic", "t", "--to-offset", "-3"), "txnsim consumer-groups",
     "INVALID_REQUEST"),
    (("dump-log", "t", "-1"), "txnsim dump-log", "UNKNOWN_TOPIC_OR_PARTITION"),
    (("cluster", "start", "--nodes", "0"), "txnsim cluster start", "INVALID_REQUEST"),
    (("cluster", "start", "--kafka-port", "70000"), "txnsim cluster start", "INVALID_REQUEST"),
    (("--log-level", "loud", "topics", "list"), "txnsim [-h]", "INVALID_CONFIG"),
    (("topics", "list", "--no-such-flag"), "txnsim topics list", "unrecognized arguments: --no-such-flag"),
    (("chaos", "--duration", "-1"), "txnsim chaos", "INVALID_REQUEST"),
    (("chaos", "--workers", "0"), "txnsim chaos", "INVALID_REQUEST"),
    (("pipeline", "--rate", "nan"), "txnsim pipeline", "INVALID_REQUEST"),
    (("pipeline", "--orders", "0"), "txnsim pipeline", "INVALID_REQUEST"),
], ids=lambda v: "-".join(v) if isinstance(v, tuple) else None)
def test_bad_arguments_show_the_commands_own_usage_and_one_error_line(command, usage, name):
    result = txnsim(*command, "--bootstrap-servers", "127.0.0.1:1") if command[0] != "--log-level" \
        else txnsim(*command)
    assert result.returncode == 2, result
    assert result.stderr.startswith(f"usage: {usage}"), result
    assert len(result.error_lines) == 1 and name in result.error_lines[0], result


def test_a_data_dir_that_is_a_file_or_cannot_be_created_is_a_storage_error(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("not a directory")
    for data_dir, why in ((a_file, "is a file"), (a_file / "below", "cannot create")):
        line = fails_cleanly(txnsim("cluster", "start", "--data-dir", str(data_dir), "--kafka-port", "0"),
                             "KAFKA_STORAGE_ERROR")
        assert why in line and str(data_dir) in line, line


def test_a_taken_kafka_port_is_named_at_start_up(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = fails_cleanly(txnsim("cluster", "start", "--data-dir", str(tmp_path / "d"), "--kafka-port", str(port),
                                    timeout_s=30), "KafkaConfigurationError")
    assert f"port {port}" in line and "taken" in line, line


def test_environment_variables_stand_in_for_data_dir_and_bootstrap_servers(cli_cluster, orders):
    env = {k: v for k, v in ENV.items() if not k.startswith("TXNSIM_")}
    for name, value in (("TXNSIM_DATA_DIR", str(cli_cluster.data_dir)),
                        ("TXNSIM_BOOTSTRAP_SERVERS", cli_cluster_bootstrap_servers(cli_cluster))):
        proc = subprocess.run([*TXNSIM, "topics", "list", "--json"], capture_output=True, timeout=COMMAND_TIMEOUT_S,
                              env=dict(env, **{name: value}), cwd=cli_cluster.data_dir.parent)
        assert proc.returncode == 0, proc
        assert {"topic": "orders", "partitions": 3} in json.loads(proc.stdout), proc


def cli_cluster_bootstrap_servers(cluster: CliCluster) -> str:
    match = re.search(r"bootstrap servers: (\S+)", cluster.start_output())
    assert match, cluster.start_output()
    return match.group(1)


def test_tab_completion_offers_subcommands_and_flags():
    """argcomplete's protocol, as bash's completion function drives it."""
    def complete(line: str) -> list[str]:
        read, write = os.pipe()
        env = dict(ENV, _ARGCOMPLETE="1", _ARGCOMPLETE_IFS="\n", COMP_LINE=line, COMP_POINT=str(len(line)),
                   _ARGCOMPLETE_STDOUT_FILENAME=f"/dev/fd/{write}")
        subprocess.run([*TXNSIM], env=env, pass_fds=(write,), capture_output=True, timeout=COMMAND_TIMEOUT_S)
        os.close(write)
        with os.fdopen(read) as out:
            return out.read().split("\n")
    assert {"topics", "transactions", "consume"} <= set(complete("txnsim "))
    assert "--transaction-timeout-ms" in {word.strip() for word in complete("txnsim produce t --trans")}


def test_version():
    result = txnsim("--version")
    assert result.returncode == 0 and re.fullmatch(r"txnsim \S+\n", result.stdout), result


def test_unknown_partition_is_one_clean_error_line(cli_cluster, orders):
    fails_cleanly(txnsim("transactions", "describe-producers", "orders", "9", *cli_cluster.cluster_args()),
                  "UNKNOWN_TOPIC_OR_PARTITION")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_address_nobody_listens_on_fails_fast_with_a_clear_error():
    """Every command gives up within its request timeout (10 s unless --request-timeout-ms says less)."""
    servers = f"127.0.0.1:{_closed_port()}"
    short = ("--bootstrap-servers", servers, "--request-timeout-ms", "2000")
    commands = [
        ("topics", "list", *short), ("topics", "create", "t", *short), ("topics", "describe", "t", *short),
        ("produce", "t", "--transactional-id", "tx", *short), ("produce", "t", *short),
        ("consume", "t", "--from-beginning", *short), ("consume", "t", "--group", "g", *short),
        ("transactions", "list", *short), ("transactions", "describe", "tx", *short),
        ("transactions", "describe-producers", "t", "0", *short), ("transactions", "find-hanging", *short),
        ("transactions", "abort", "--topic", "t", "--partition", "0", "--start-offset", "0", *short),
        ("cluster", "status", *short),
        # the default timeout, on the command whose retries once doubled it
        ("transactions", "describe", "tx", "--bootstrap-servers", servers),
    ]
    # a few at a time: the module stays quick, and 14 interpreters starting at once on 2 cores would measure
    # the machine's load instead of the commands' timeouts
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda c: txnsim(*c, stdin="v\n", timeout_s=40), commands + [("--version",)] * 4))
    # `txnsim --version`, run among them, is what starting the interpreter costs at the moment (it imports no
    # command; seconds on a busy 2-core machine): the limits give that back, never less than 10 s and 20 s
    start_up_s = max(r.seconds for r in results[len(commands):])
    for result in results[:len(commands)]:
        limit_s = max(10, start_up_s + 6) if "--request-timeout-ms" in result.args else max(20, start_up_s + 15)
        line = fails_cleanly(result, "KafkaConnectionError", "KafkaTimeoutError")
        assert "is a cluster running" in line, result
        assert result.seconds < limit_s, (result, start_up_s)


def test_no_cluster_at_the_data_dir_is_a_clear_message(tmp_path):
    result = txnsim("topics", "list", "--data-dir", str(tmp_path / "nothing-here"), timeout_s=30)
    assert result.returncode == 1 and "no cluster at" in result.stderr and "txnsim cluster start" in result.stderr
    assert result.seconds < 10


def test_a_stopped_cluster_at_the_data_dir_is_a_clear_message(cli_cluster, tmp_path):
    stopped = tmp_path / "stopped"
    stopped.mkdir()
    (stopped / "cluster.json").write_text((cli_cluster.data_dir / "cluster.json").read_text())
    result = txnsim("consume", "orders", "--data-dir", str(stopped), timeout_s=30)
    assert result.returncode == 1 and "is not running" in result.stderr, result
    assert result.seconds < 10, result


# ------------------------------------------------------------ demo


@pytest.mark.slow
def test_demo_runs_every_scene_to_completion():
    source = (Path(__file__).parents[2] / "txnsim" / "cli" / "demo_cmd.py").read_text()
    scenes = re.findall(r'scene\((\d+), "([^"]+)"', source)
    assert len(scenes) >= 5
    result = txnsim("demo", timeout_s=180)
    assert result.returncode == 0, result
    for number, title in scenes:
        assert f"Scene {number}: {title}" in result.stdout, title
    assert "ProducerFencedError" in result.stdout


@pytest.mark.slow
def test_demo_through_confluent_kafka_runs_every_scene_with_librdkafka():
    source = (Path(__file__).parents[2] / "txnsim" / "cli" / "demo_confluent.py").read_text()
    scenes = re.findall(r'_scene\((\d+), "([^"]+)"', source)
    assert len(scenes) == 5
    result = txnsim("demo", "--client", "confluent-kafka", timeout_s=180)
    assert result.returncode == 0, result
    for number, title in scenes:
        assert f"Scene {number}: {title}" in result.stdout, title
    assert "_FENCED (fatal=True)" in result.stdout  # the zombie's commit, as librdkafka reports it
    assert "all there, once" in result.stdout
    assert "%0|" not in result.stdout + result.stderr, "librdkafka's own log lines leaked into the demo"
    refused = txnsim("demo", "orders", "--client", "confluent-kafka")
    assert refused.returncode != 0 and "--client native or rocketmq" in refused.stderr, refused
