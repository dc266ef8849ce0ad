"""Leadership claims of one log: who may write it, from which offset, and who has been cut off.

DATA/logs/<topic>-<partition>/epochs/ holds one file per claim, never rewritten or deleted:
  0000000007.claim     "node 2": node 2 leads at epoch 7 (created with link(), so exclusively)
  0000000007.start     "1234": epoch 7's first offset, or "void": epoch 7 never wrote. Created
                       exclusively too: by epoch 7 once it has read the log, before it writes,
                       or by a later claimant for an epoch that has none yet (so an epoch that
                       was superseded while opening can never start later and move the limits)
  0000000007.released  epoch 7's leader closed the log cleanly (a graceful handover)

Why this is safe without trusting the old leader to stop (fencing, not leases):
- Epochs are claimed one at a time: a claimant links `<n>.claim` for exactly the n after the
  claim it checked, and loses if it exists.
- A leader writes only to segment files named with its own epoch, so it never shares a file
  with a later leader, and acknowledges a write only after its fsync AND a check that
  `<epoch+1>.claim` does not exist (`superseded`).
- The new leader claims first and reads the log after. So every write the old leader
  acknowledged (written, fsynced, then checked before the claim appeared) is in what the new
  leader reads, and becomes part of its log below `<n>.start`. (Unacknowledged writes that
  landed before that read are adopted too, as a write whose answer was lost.)
- Anything an old leader writes after the new leader's read lies at or past `<n>.start`; it is
  never acknowledged, and recovery drops it: batches of epoch e at or past the start of the
  first later epoch that started (`EpochLimits`) are cut. Once a later start exists, an
  epoch's limit never moves again.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

from partitions.durable_files import create_exclusively, write_durably
from partitions.file_names import parse_offset_epoch_name
from partitions.storage import FILE_STORAGE, Storage
from proto.errors import KafkaStorageError, NotLeaderOrFollowerError

EPOCHS_DIR = "epochs"
_VOID = "void"
_LEGACY_EPOCH_FILE = "leader-epoch"  # before claims, a log kept only its last epoch here
#: files whose names carry the epoch of the leader that wrote them (segments, producer snapshots)
_EPOCH_NAMED_SUFFIXES = (".log", ".snapshot")


@dataclass(frozen=True, slots=True)
class Claim:
    epoch: int
    node_id: int
    #: None until the claimant has read the log (or forever, if it died, was superseded or voided first)
    start_offset: int | None
    released: bool


@dataclass(frozen=True, slots=True)
class EpochLimits:
    """Where each epoch's writes must end: at the first offset of a later epoch that started."""

    starts: tuple[tuple[int, int], ...] = ()  # (epoch, start offset), epochs ascending

    def limit(self, epoch: int | None) -> int | None:
        """The first offset epoch `epoch` may not have written (None: no later epoch started)."""
        for later, start in self.starts:
            if epoch is None or later > epoch:
                return start
        return None


class LeaderEpochs:
    """The claims directory of one log. Safe to use from several processes at once."""

    def __init__(self, log_dir: PurePath, storage: Storage = FILE_STORAGE) -> None:
        self.log_dir = log_dir
        self.directory = log_dir / EPOCHS_DIR
        self.storage = storage
        self._legacy_file = log_dir / _LEGACY_EPOCH_FILE
        #: epoch -> the claim file that supersedes it: superseded() runs at every fsync and node tick, and
        #: building the path took more time than the stat() itself
        self._successor_claims: dict[int, PurePath] = {}
        #: the claims directory's inode when this claimant made its claim: a directory removed (or removed and
        #: made again) since holds no record of that claim, so a later claimant could not know to fence it
        self._claimed_in: int | None = None

    def _path(self, epoch: int, kind: str) -> PurePath:
        return self.directory / f"{epoch:010d}.{kind}"

    # ------------------------------------------------------------ reading

    def claims(self) -> list[Claim]:
        """Every claim, oldest first."""
        names = self._names()
        return [self._claim(epoch, names) for epoch in self._epochs(names)]

    def latest(self) -> Claim | None:
        """The newest claim (reads only its files: the directory keeps every claim ever made)."""
        names = self._names()
        epochs = self._epochs(names)
        return self._claim(epochs[-1], names) if epochs else None

    def limits(self) -> EpochLimits:
        return EpochLimits(tuple((c.epoch, c.start_offset) for c in self.claims() if c.start_offset is not None))

    def superseded(self, epoch: int) -> bool:
        """True once a later epoch has been claimed, or once the claims directory this leader claimed in is
        gone: the leader of `epoch` must not acknowledge anything."""
        successor = self._successor_claims.get(epoch)
        if successor is None:
            successor = self._successor_claims[epoch] = self._path(epoch + 1, "claim")
        if self.storage.exists(successor):
            return True
        if self._claimed_in is None:
            return False
        try:
            return self.storage.directory_id(self.directory) != self._claimed_in
        except FileNotFoundError:
            return True

    def newest_epoch_on_disk(self) -> int | None:
        """The newest leader epoch a segment or snapshot file name in the log directory carries, or None."""
        newest = None
        try:
            names = self.storage.list_dir(self.log_dir)
        except FileNotFoundError:
            return None
        for name in names:
            for suffix in _EPOCH_NAMED_SUFFIXES:
                parsed = parse_offset_epoch_name(name, suffix)
                if parsed is not None and parsed[1] is not None and (newest is None or parsed[1] > newest):
                    newest = parsed[1]
        return newest

    def check_not_lost(self) -> None:
        """KAFKA_STORAGE_ERROR if the claims directory is missing beside files that leaders of known epochs wrote:
        claiming afresh could reuse an epoch a leader still holds, which nothing would then fence."""
        newest = self.newest_epoch_on_disk()
        if newest is not None and not self.storage.is_dir(self.directory):
            raise KafkaStorageError(
                f"[KAFKA_STORAGE_ERROR] {self.directory} is missing, beside files written by leader epochs up to "
                f"{newest}: the claims that fence earlier leaders are gone, so no new leader may claim this log. "
                f"Restore the directory, or make it again empty (mkdir {self.directory}) once every node that "
                f"led this log is stopped: new claims then start above epoch {newest}")

    # ------------------------------------------------------------ writing

    def claim(self, node_id: int, after: Claim | None) -> int:
        """Claim the epoch right after `after` (the newest claim the caller checked) for `node_id`,
        durably; NOT_LEADER_OR_FOLLOWER if another node claimed it first."""
        self.storage.mkdir(self.directory)
        first = (after.epoch if after is not None else self._legacy_epoch()) + 1
        on_disk = self.newest_epoch_on_disk()
        epoch = first if on_disk is None else max(first, on_disk + 1)  # never one a file already carries
        # epochs skipped because their claims are missing are claimed too, never to start: a leader still
        # holding one of them then finds the claim after its own, as fencing needs
        for skipped in range(first, epoch + 1):
            if not create_exclusively(self._path(skipped, "claim"), f"node {node_id}\n", self.storage):
                raise NotLeaderOrFollowerError(
                    f"[NOT_LEADER_OR_FOLLOWER] epoch {skipped} of {self.directory.parent.name} was just claimed "
                    "by another node; retry")
            if skipped < epoch:
                create_exclusively(self._path(skipped, "start"), _VOID + "\n", self.storage)
        self.storage.fsync_directory(self.directory)
        self._claimed_in = self.storage.directory_id(self.directory)
        return epoch

    def void_unstarted(self, before: int) -> None:
        """Mark every earlier claim that has not started as never starting (done right after a claim)."""
        names = self._names()
        for epoch in self._epochs(names):
            if epoch < before and f"{epoch:010d}.start" not in names:
                create_exclusively(self._path(epoch, "start"), _VOID + "\n", self.storage)
        self.storage.fsync_directory(self.directory)

    def record_start(self, epoch: int, offset: int) -> None:
        """Durably record where `epoch` starts writing; from then on earlier epochs end there.
        NOT_LEADER_OR_FOLLOWER if a later claimant voided it first (it was superseded while opening)."""
        if not create_exclusively(self._path(epoch, "start"), f"{offset}\n", self.storage):
            raise NotLeaderOrFollowerError(
                f"[NOT_LEADER_OR_FOLLOWER] epoch {epoch} of {self.directory.parent.name} was superseded "
                "while it opened the log; retry")
        self.storage.fsync_directory(self.directory)

    def release(self, epoch: int) -> None:
        """Say that `epoch`'s leader closed the log after its last durable write."""
        write_durably(self._path(epoch, "released"), "", self.storage)
        self.storage.fsync_directory(self.directory)

    # ------------------------------------------------------------ helpers

    def _names(self) -> set[str]:
        try:
            return set(self.storage.list_dir(self.directory))
        except FileNotFoundError:
            return set()

    @staticmethod
    def _epochs(names: set[str]) -> list[int]:
        return sorted(int(name[:10]) for name in names if name.endswith(".claim") and name[:10].isdigit())

    def _claim(self, epoch: int, names: set[str]) -> Claim:
        start = None
        if f"{epoch:010d}.start" in names:
            path = self._path(epoch, "start")
            text = self._read_text(path)
            start = None if text.strip() == _VOID else _parse_int(path, text, "")
        return Claim(epoch, self._read_int(self._path(epoch, "claim"), "node "), start,
                     f"{epoch:010d}.released" in names)

    def _legacy_epoch(self) -> int:
        try:
            return int(self._read_text(self._legacy_file).strip())
        except (FileNotFoundError, ValueError):
            return -1

    def _read_text(self, path: PurePath) -> str:
        return self.storage.read_bytes(path).decode()

    def _read_int(self, path: PurePath, prefix: str) -> int:
        return _parse_int(path, self._read_text(path), prefix)


def _parse_int(path: PurePath, text: str, prefix: str) -> int:
    """The number after `prefix` in `text` (read from `path`), or KAFKA_STORAGE_ERROR naming the file."""
    if not text.startswith(prefix):
        raise KafkaStorageError(f"{path} holds {text!r}; expected {prefix!r} and a number")
    try:
        return int(text[len(prefix):].strip())
    except ValueError:
        raise KafkaStorageError(f"{path} holds {text!r}; expected {prefix!r} and a number") from None
