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
from partitions.storage import FILE_STORAGE, Storage
from proto.errors import KafkaStorageError, NotLeaderOrFollowerError

EPOCHS_DIR = "epochs"
_VOID = "void"
_LEGACY_EPOCH_FILE = "leader-epoch"  # before claims, a log kept only its last epoch here


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
        self.directory = log_dir / EPOCHS_DIR
        self.storage = storage
        self._legacy_file = log_dir / _LEGACY_EPOCH_FILE
        #: epoch -> the claim file that supersedes it: superseded() runs at every fsync and node tick, and
        #: building the path took more time than the stat() itself
        self._successor_claims: dict[int, PurePath] = {}

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
        """True once a later epoch has been claimed: the leader of `epoch` must not acknowledge anything."""
        successor = self._successor_claims.get(epoch)
        if successor is None:
            successor = self._successor_claims[epoch] = self._path(epoch + 1, "claim")
        return self.storage.exists(successor)

    # ------------------------------------------------------------ writing

    def claim(self, node_id: int, after: Claim | None) -> int:
        """Claim the epoch right after `after` (the newest claim the caller checked) for `node_id`,
        durably; NOT_LEADER_OR_FOLLOWER if another node claimed it first."""
        self.storage.mkdir(self.directory)
        epoch = after.epoch + 1 if after is not None else self._legacy_epoch() + 1
        if not create_exclusively(self._path(epoch, "claim"), f"node {node_id}\n", self.storage):
            raise NotLeaderOrFollowerError(
                f"[NOT_LEADER_OR_FOLLOWER] epoch {epoch} of {self.directory.parent.name} was just claimed "
                "by another node; retry")
        self.storage.fsync_directory(self.directory)
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
