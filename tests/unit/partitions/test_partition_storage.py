"""The log on a simulated disk: the Storage contract, crashes that lose unsynced bytes, torn writes,
flipped bits, and determinism from a seed (what a simulator relies on)."""
from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from partitions import LogConfig, LogManager, PartitionLog
from partitions.faulty_storage import FaultyStorage
from partitions.memory_storage import MemoryStorage
from partitions.storage import FILE_STORAGE, Storage
from proto import records
from proto.errors import KafkaStorageError
from proto.records import HEADER_SIZE
from proto.structs import IsolationLevel

COMMITTED, UNCOMMITTED = IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED
SIM_DIR = Path("/sim/node-1/logs/orders-0")  # never touched on the real disk
FIRST_SEGMENT = SIM_DIR / "00000000000000000000-e0.log"


class PowerLoss(Exception):
    """Raised by an on_fsync hook: the simulated node dies at that fsync, before it takes effect."""


class HalfTearing(random.Random):
    """A crash keeps exactly half of every unsynced tail."""

    def randint(self, a: int, b: int) -> int:
        return (a + b) // 2


def data(*values: bytes, pid: int = -1, epoch: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    return records.encode_batch([(1000, None, v, ()) for v in values],
                                producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn)


def values(log: PartitionLog) -> list[bytes]:
    return [record.value or b"" for batch in log.batches() for record in batch.records()
            if not batch.header.is_control]


def open_sim(storage: Storage, epoch: int = 0, **config: object) -> PartitionLog:
    return PartitionLog.open(SIM_DIR, "orders", 0, leader_epoch=epoch, config=LogConfig(**config), storage=storage,
                             now_ms=lambda: 1_000_000)


def crash_at_next_fsync(storage: MemoryStorage) -> None:
    def lose_power(_path: str) -> None:
        raise PowerLoss

    storage.on_fsync = lose_power


# ------------------------------------------------------------ the Storage contract


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_both_storages_keep_the_same_contract(kind, tmp_path):
    storage: Storage = FILE_STORAGE if kind == "file" else MemoryStorage()
    directory = tmp_path / "t-0"
    storage.mkdir(directory / "epochs")
    storage.mkdir(directory)  # existing is fine
    file = storage.create_file(directory / "a.log")
    with pytest.raises(FileExistsError):
        storage.create_file(directory / "a.log")
    file.append(b"hello world")
    file.fsync()
    file.truncate(5)
    file.append(b"!")
    assert (file.size(), file.pread(100, 2), storage.size(directory / "a.log")) == (6, b"llo!", 6)
    file.close()
    file.close()
    storage.write_file(directory / "b.txt", b"one", fsync=True)
    storage.write_file(directory / "b.txt", b"2", fsync=False)
    assert storage.create_exclusively(directory / "c.claim", b"node 1\n")
    assert not storage.create_exclusively(directory / "c.claim", b"node 2\n")
    storage.replace_atomically(directory / "d.snapshot", b"old", fsync=True)
    storage.replace_atomically(directory / "d.snapshot", b"new", fsync=False)
    storage.fsync_directory(directory)
    assert storage.list_dir(directory) == ["a.log", "b.txt", "c.claim", "d.snapshot", "epochs"]
    assert [storage.read_bytes(directory / n) for n in ("b.txt", "c.claim", "d.snapshot")] == [b"2", b"node 1\n", b"new"]
    storage.delete(directory / "b.txt")
    storage.delete(directory / "b.txt")  # missing is fine
    assert not storage.exists(directory / "b.txt") and storage.exists(directory / "a.log")
    assert storage.is_dir(directory / "epochs") and not storage.is_dir(directory / "a.log")
    assert storage.directory_id(directory) == storage.directory_id(directory) != storage.directory_id(tmp_path)
    with pytest.raises(FileNotFoundError):
        storage.list_dir(directory / "missing")
    with pytest.raises(FileNotFoundError):
        storage.open_file(directory / "missing.log")


# ------------------------------------------------------------ what a crash keeps


def test_a_crash_keeps_synced_bytes_and_names_whose_directory_was_fsynced():
    storage = MemoryStorage()
    storage.mkdir(SIM_DIR)
    kept = storage.create_file(SIM_DIR / "kept.log")
    storage.fsync_directory(SIM_DIR)
    kept.append(b"durable")
    kept.fsync()
    kept.append(b" lost")
    storage.create_exclusively(SIM_DIR / "undurable.claim", b"node 1\n")  # its bytes synced, its name not
    report = storage.crash()
    assert storage.files() == {str(SIM_DIR / "kept.log"): b"durable"}
    assert report == [f"{SIM_DIR}/undurable.claim: vanished (directory not fsynced)",
                      f"{SIM_DIR}/kept.log: lost 5 of 5 unsynced bytes"]
    with pytest.raises(OSError, match="before a crash"):
        kept.append(b"from a dead process")


def test_a_power_loss_under_some_directories_leaves_the_others_and_their_open_files_alone():
    """One node's power loss (the simulator's crash): its own logs lose their unsynced bytes and its open
    files die; another node's log, unsynced bytes and open file included, carries on."""
    storage = MemoryStorage()
    mine, theirs = SIM_DIR, SIM_DIR.parent / "orders-1"
    files = {}
    for directory in (mine, theirs):
        storage.mkdir(directory)
        files[directory] = storage.create_file(directory / "a.log")
        storage.fsync_directory(directory)
        files[directory].append(b"synced")
        files[directory].fsync()
        files[directory].append(b" unsynced")
    report = storage.crash(under=[mine])
    assert report == [f"{mine}/a.log: lost 9 of 9 unsynced bytes"]
    assert storage.read_bytes(mine / "a.log") == b"synced"
    assert storage.read_bytes(theirs / "a.log") == b"synced unsynced"
    with pytest.raises(OSError, match="before a crash"):
        files[mine].append(b"from a dead process")
    files[theirs].append(b", more")
    files[theirs].fsync()
    assert storage.read_bytes(theirs / "a.log") == b"synced unsynced, more"


def test_an_undurable_rename_reverts_and_an_undurable_delete_comes_back():
    storage = MemoryStorage()
    storage.mkdir(SIM_DIR)
    storage.replace_atomically(SIM_DIR / "state", b"v1", fsync=True)
    storage.write_file(SIM_DIR / "doomed", b"x", fsync=True)
    storage.fsync_directory(SIM_DIR)
    storage.replace_atomically(SIM_DIR / "state", b"v2", fsync=True)
    storage.delete(SIM_DIR / "doomed")
    storage.crash()
    assert storage.files() == {str(SIM_DIR / "doomed"): b"x", str(SIM_DIR / "state"): b"v1"}


def test_a_truncate_into_synced_bytes_is_undone_by_a_crash_unless_fsynced():
    storage = MemoryStorage()
    storage.mkdir(SIM_DIR)
    file = storage.create_file(SIM_DIR / "a.log")
    storage.fsync_directory(SIM_DIR)
    file.append(b"abcdef")
    file.fsync()
    file.truncate(2)
    file.append(b"XY")
    storage.crash()
    assert storage.read_bytes(SIM_DIR / "a.log") == b"abcdef"


def test_a_flipped_bit_is_damage_at_rest_and_survives_a_crash():
    storage = FaultyStorage(random.Random(3))
    storage.mkdir(SIM_DIR)
    storage.write_file(SIM_DIR / "a", b"\x00\x00", fsync=True)
    storage.fsync_directory(SIM_DIR)
    assert storage.flip_bit(SIM_DIR / "a", position=1, bit=0) == 1
    storage.crash()
    assert storage.read_bytes(SIM_DIR / "a") == b"\x00\x01"
    assert storage.faults == [f"{SIM_DIR}/a: bit 0 of byte 1 flipped"]


def test_with_bit_flip_probability_one_every_write_is_stored_damaged_and_logged():
    storage = FaultyStorage(random.Random(9), bit_flip_probability=1.0)
    storage.mkdir(SIM_DIR)
    for name in ("a", "b"):
        storage.write_file(SIM_DIR / name, b"\x00" * 8, fsync=True)
    assert all(sum(byte.bit_count() for byte in stored) == 1 for stored in storage.files().values())
    assert [fault.split(":")[0] for fault in storage.faults] == [f"{SIM_DIR}/a", f"{SIM_DIR}/b"]
    with pytest.raises(ValueError, match="bit_flip_probability"):
        FaultyStorage(random.Random(9), bit_flip_probability=1.5)


# ------------------------------------------------------------ a PartitionLog on a simulated disk


def test_a_log_on_memory_storage_appends_reads_and_holds_the_lso_at_open_transactions():
    storage = MemoryStorage()
    log = open_sim(storage, segment_bytes=300)
    log.append(data(b"plain"))                                                                        # 0
    log.append(data(b"t1", pid=1, epoch=0, seq=0, txn=True), verified_producer_ids=frozenset({1}))  # 1
    log.append(data(b"t2", pid=2, epoch=0, seq=0, txn=True), verified_producer_ids=frozenset({2}))  # 2
    assert (log.high_watermark, log.last_stable_offset) == (3, 1)
    log.append_marker(producer_id=1, producer_epoch=1, committed=True, coordinator_epoch=0)          # 3
    assert log.last_stable_offset == 2
    log.append_marker(producer_id=2, producer_epoch=1, committed=False, coordinator_epoch=0)         # 4
    assert log.last_stable_offset == log.high_watermark == 5
    fetched = log.read(0, 1 << 20, COMMITTED)
    assert fetched.aborted_transactions == [(2, 2)]
    assert values(log) == [b"plain", b"t1", b"t2"]
    assert all(path.startswith(str(SIM_DIR)) for path in storage.files())
    assert storage.fsync_count > 0 and log.fsync_count > 0
    log.close()
    reopened = open_sim(storage, epoch=1)
    assert reopened.recovery_report == [] and reopened.aborted_transactions() == log.aborted_transactions()
    assert reopened.read(0, 1 << 20, COMMITTED).records == fetched.records
    reopened.close()


def test_marker_timestamps_come_from_the_injected_clock_so_a_run_repeats_byte_for_byte():
    def run() -> dict[str, bytes]:
        storage = MemoryStorage()
        clock = iter(range(10_000, 20_000, 7))
        log = PartitionLog.open(SIM_DIR, "orders", 0, leader_epoch=0, storage=storage, now_ms=lambda: next(clock))
        log.append(data(b"t", pid=1, epoch=0, seq=0, txn=True), verified_producer_ids=frozenset({1}))
        log.append_marker(producer_id=1, producer_epoch=1, committed=True, coordinator_epoch=0)
        (marker,) = [b for b in log.batches() if b.header.is_control]
        assert marker.header.max_timestamp == 10_000
        log.close()
        return storage.files()

    assert run() == run()


def test_one_thread_drives_a_log_without_ever_blocking():
    """A simulator calls append, append_marker, read and close from one thread: each append fsyncs
    on its caller's own turn, and a zero-timeout wait answers at once."""
    storage = MemoryStorage()
    log = open_sim(storage)
    assert not log.wait_for_data(0, UNCOMMITTED, 0.0)
    for i in range(20):
        assert log.append(data(b"v%d" % i)).base_offset == i
        assert log.high_watermark == i + 1  # durable on return: nobody else to wait for
    assert log.wait_for_data(19, UNCOMMITTED, 0.0)
    log.close()


def segment_faults(report: list[str]) -> list[str]:
    """A crash's report without the recovery point's lines: it is never fsynced, so a power loss always takes
    some of it (which only makes recovery less strict)."""
    return [line for line in report if "/recovery-point:" not in line]


def test_everything_acknowledged_survives_a_crash_and_the_in_flight_append_is_gone():
    storage = FaultyStorage(random.Random(1), torn_writes=False)
    log = open_sim(storage)
    for i in range(5):
        log.append(data(b"acked-%d" % i))
    crash_at_next_fsync(storage)
    with pytest.raises(PowerLoss):
        log.append(data(b"written, never fsynced"))
    assert log.high_watermark == 5  # never acknowledged
    storage.on_fsync = None
    report = storage.crash()
    size = len(data(b"written, never fsynced"))
    assert segment_faults(report) == [f"{FIRST_SEGMENT}: lost {size} of {size} unsynced bytes"]
    reopened = open_sim(storage, epoch=1)
    assert reopened.recovery_report == []
    assert values(reopened) == [b"acked-%d" % i for i in range(5)]
    reopened.close()


def test_an_append_not_yet_made_durable_is_unacknowledged_and_a_power_loss_takes_it():
    """wait_durable=False (a driver that charges the fsync's time itself): written, not durable, not below
    the high watermark, until make_durable(); a power loss in between loses exactly that append."""
    storage = FaultyStorage(random.Random(1), torn_writes=False)
    log = open_sim(storage)
    log.append(data(b"acked"))
    pending = log.append(data(b"in flight"), wait_durable=False)
    assert (pending.base_offset, log.log_end_offset, log.high_watermark) == (1, 2, 1)
    assert len(list(records.iter_batches(log.read(0, 1 << 20, UNCOMMITTED).records))) == 1  # readers: up to the HW
    late = log.append(data(b"made durable"), wait_durable=False)
    log.make_durable(late.last_offset + 1)  # one fsync covers both
    assert log.high_watermark == 3
    lost = log.append(data(b"lost"), wait_durable=False)
    storage.crash(under=[SIM_DIR])
    with pytest.raises(KafkaStorageError):
        log.make_durable(lost.last_offset + 1)
    reopened = open_sim(storage, epoch=1)
    assert values(reopened) == [b"acked", b"in flight", b"made durable"]
    reopened.close()


def test_unsynced_appends_of_a_log_without_fsync_are_lost_by_a_crash():
    storage = FaultyStorage(random.Random(1), torn_writes=False)
    log = open_sim(storage, fsync=False)
    for i in range(3):
        log.append(data(b"fast-%d" % i))  # acknowledged without an fsync: a benchmark's trade
    storage.crash()
    reopened = open_sim(storage, epoch=1)
    assert reopened.log_end_offset == 0 and values(reopened) == []
    reopened.close()


def test_a_torn_tail_is_truncated_on_reopen_and_the_report_says_so():
    storage = FaultyStorage(HalfTearing(0), torn_writes=True)
    log = open_sim(storage)
    for i in range(3):
        log.append(data(b"acked-%d" % i))
    clean_size = storage.size(FIRST_SEGMENT)
    in_flight = data(b"torn in half" * 10)
    crash_at_next_fsync(storage)
    with pytest.raises(PowerLoss):
        log.append(in_flight)
    storage.on_fsync = None
    storage.crash()
    half = len(in_flight) // 2
    assert segment_faults(storage.faults) == [
        f"{FIRST_SEGMENT}: torn write, {half} of {len(in_flight)} unsynced bytes kept"]
    assert storage.size(FIRST_SEGMENT) == clean_size + half
    reopened = open_sim(storage, epoch=1)
    (line,) = reopened.recovery_report
    assert FIRST_SEGMENT.name in line and f"truncated at byte {clean_size}" in line
    assert f"torn tail: {half} of {len(in_flight)} bytes" in line
    assert storage.size(FIRST_SEGMENT) == clean_size
    assert values(reopened) == [b"acked-%d" % i for i in range(3)]
    assert reopened.append(data(b"next")).base_offset == 3
    reopened.close()


def give_up_from(storage: Storage, offset: int) -> None:
    """What an operator does to accept losing a damaged log's offsets from `offset` on."""
    storage.write_file(SIM_DIR / "accept-loss-from", b"%d\n" % offset, fsync=True)


def test_a_flipped_bit_in_a_segment_fails_the_crc_and_recovery_cuts_from_that_batch_once_given_up():
    storage = FaultyStorage(random.Random(0))
    log = open_sim(storage)
    positions = []
    for i in range(5):
        positions.append(storage.size(FIRST_SEGMENT))
        log.append(data(b"value-%d" % i))
    log.close()
    storage.flip_bit(FIRST_SEGMENT, position=positions[2] + HEADER_SIZE + 3, bit=2)
    with pytest.raises(KafkaStorageError, match="offset 2 .CRC mismatch at offset 2., below offset 5"):
        open_sim(storage, epoch=1)  # fsynced, so maybe acknowledged: never cut without being told to
    give_up_from(storage, 2)
    reopened = open_sim(storage, epoch=1)
    (line,) = reopened.recovery_report
    assert "CRC mismatch at offset 2" in line and f"truncated at byte {positions[2]}" in line
    assert storage.size(FIRST_SEGMENT) == positions[2]
    assert values(reopened) == [b"value-0", b"value-1"]
    reopened.close()


@pytest.mark.parametrize("seed", range(5))
def test_a_random_flipped_bit_cuts_the_log_back_to_the_batches_before_it_once_given_up(seed):
    storage = FaultyStorage(random.Random(seed))
    log = open_sim(storage)
    positions = []
    for i in range(6):
        positions.append(storage.size(FIRST_SEGMENT))
        log.append(data(b"value-%d" % i))
    log.close()
    position = storage.flip_bit(FIRST_SEGMENT)
    damaged = max(i for i, start in enumerate(positions) if start <= position)
    with pytest.raises(KafkaStorageError, match=f"offset {damaged} "):
        open_sim(storage, epoch=1)
    give_up_from(storage, damaged)
    reopened = open_sim(storage, epoch=1)
    (line,) = reopened.recovery_report
    assert f"truncated at byte {positions[damaged]}" in line
    assert values(reopened) == [b"value-%d" % i for i in range(damaged)]
    reopened.close()


def power_lost_at(storage: MemoryStorage, fsync_number: int) -> Callable[[str], None]:
    """An on_fsync hook that loses power at the `fsync_number`th fsync of `storage`."""
    def maybe_lose_power(_path: str) -> None:
        if storage.fsync_count >= fsync_number:
            raise PowerLoss

    return maybe_lose_power


def simulate(seed: int, rounds: int = 6) -> tuple[dict[str, bytes], list[str], list[bytes]]:
    """Appends, markers and rolls on a faulty disk, with power lost at a random fsync each round;
    checks after each reopen that every acknowledged record is still there, in order."""
    choices, storage = random.Random(seed), FaultyStorage(random.Random(seed), torn_writes=True)
    acknowledged: list[bytes] = []
    counter = iter(range(1_000_000))
    for epoch in range(rounds):
        try:
            log = open_sim(storage, epoch, segment_bytes=400)
            survivors = values(log)
            assert survivors[:len(acknowledged)] == acknowledged, f"seed {seed}, epoch {epoch}: acked data lost"
            acknowledged = survivors  # an unacknowledged write that survived whole is adopted
            storage.on_fsync = power_lost_at(storage, storage.fsync_count + choices.randint(1, 40))
            while True:
                value = b"r%d" % next(counter)
                log.append(data(value))
                acknowledged.append(value)
        except PowerLoss:
            pass
        storage.on_fsync = None
        storage.crash()
    return storage.files(), storage.faults, acknowledged


@pytest.mark.parametrize("seed", range(4))
def test_acknowledged_records_survive_every_crash_of_a_seeded_run(seed):
    _files, faults, acknowledged = simulate(seed)
    assert len(acknowledged) > 20
    assert any("torn write" in fault for fault in faults)


def test_the_same_seed_gives_identical_stored_bytes_and_faults():
    assert simulate(11) == simulate(11)
    assert simulate(11)[0] != simulate(12)[0]


def test_log_manager_claims_on_a_simulated_disk_survive_a_crash():
    storage = FaultyStorage(random.Random(5))
    root = Path("/sim/logs")
    first = LogManager(root, node_id=1, storage=storage)
    log = first.open_as_leader("orders", 0)
    log.append(data(b"acked"))
    storage.crash()  # node 1 dies without releasing its claim
    second = LogManager(root, node_id=2, storage=storage)
    taken = second.open_as_leader("orders", 0, may_cut_off=lambda node_id: node_id == 1)
    assert taken.leader_epoch == log.leader_epoch + 1 and values(taken) == [b"acked"]
    assert second.get("orders", 0) is taken
    second.close_all()
