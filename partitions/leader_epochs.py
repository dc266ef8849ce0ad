"""Leadership claims of one log: who may write it, from which offset, and who has been cut off.

DATA/logs/<topic>-<partition>/epochs/ holds one file per claim, never rewritten or deleted:
  0000000007.claim     "node 2": node 2 leads at epoch 7 (created with link(), so exclusively)
  0000000007.start     "1234": epoch 7's first offset; recorded before epoch 7 writes anything
  0000000007.released  epoch 7's leader closed the log cleanly (a graceful handover)

Why this is safe without trusting the old leader to stop (fencing, not leases):
- Epochs are claimed one at a time: a claimant links `<latest+1>.claim` and loses if it exists.
- A leader writes only to segment files named with its own epoch, so it never shares a file
  with a later leader, and acknowledges a write only after its fsync AND a check that
  `<epoch+1>.claim` does not exist (`superseded`).
- The new leader claims first and reads the log after. So every write the old leader
  acknowledged (written, fsynced, then checked before the claim appeared) is in what the new
  leader reads, and becomes part of its log below `<epoch+1>.start`.
- Anything an old leader writes after the claim is never acknowledged, and recovery drops it:
  batches of epoch e at or past the start of the first later epoch (`EpochLimits`) are cut.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from partitions.segment import fsync_directory
from proto.errors import KafkaStorageError, NotLeaderOrFollowerError

EPOCHS_DIR = "epochs"
_LEGACY_EPOCH_FILE = "leader-epoch"  # before claims, a log kept only its last epoch here


@dataclass(frozen=True, slots=True)
class Claim:
    epoch: int
    node_id: int
    start_offset: int | None  # None: the claimant died before it could write anything
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

    def __init__(self, log_dir: Path) -> None:
        self.directory = log_dir / EPOCHS_DIR
        self._legacy_file = log_dir / _LEGACY_EPOCH_FILE

    def _path(self, epoch: int, kind: str) -> Path:
        return self.directory / f"{epoch:010d}.{kind}"

    # ------------------------------------------------------------ reading

    def claims(self) -> list[Claim]:
        """Every claim, oldest first."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        epochs = sorted(int(name[:10]) for name in names if name.endswith(".claim") and name[:10].isdigit())
        present = set(names)
        return [Claim(epoch, self._read_int(self._path(epoch, "claim"), "node "),
                      self._read_int(self._path(epoch, "start"), "") if f"{epoch:010d}.start" in present else None,
                      f"{epoch:010d}.released" in present)
                for epoch in epochs]

    def latest(self) -> Claim | None:
        claims = self.claims()
        return claims[-1] if claims else None

    def limits(self) -> EpochLimits:
        return EpochLimits(tuple((c.epoch, c.start_offset) for c in self.claims() if c.start_offset is not None))

    def superseded(self, epoch: int) -> bool:
        """True once a later epoch has been claimed: the leader of `epoch` must not acknowledge anything."""
        return os.path.exists(self._path(epoch + 1, "claim"))

    # ------------------------------------------------------------ writing

    def claim(self, node_id: int) -> int:
        """Claim the next epoch for `node_id`, durably; NOT_LEADER_OR_FOLLOWER if another node got it first."""
        self.directory.mkdir(parents=True, exist_ok=True)
        latest = self.latest()
        epoch = latest.epoch + 1 if latest is not None else self._legacy_epoch() + 1
        tmp = self.directory / f".claim-{node_id}-{os.getpid()}.tmp"
        _write_durably(tmp, f"node {node_id}\n")
        try:
            os.link(tmp, self._path(epoch, "claim"))  # atomic and exclusive: exactly one claimant wins
        except FileExistsError:
            raise NotLeaderOrFollowerError(
                f"[NOT_LEADER_OR_FOLLOWER] epoch {epoch} of {self.directory.parent.name} was just claimed "
                "by another node; retry") from None
        finally:
            tmp.unlink(missing_ok=True)
        fsync_directory(self.directory)
        return epoch

    def record_start(self, epoch: int, offset: int) -> None:
        """Durably record where `epoch` starts writing; from then on earlier epochs end there."""
        path = self._path(epoch, "start")
        tmp = path.with_name(path.name + ".tmp")
        _write_durably(tmp, f"{offset}\n")
        os.replace(tmp, path)
        fsync_directory(self.directory)

    def release(self, epoch: int) -> None:
        """Say that `epoch`'s leader closed the log after its last durable write."""
        _write_durably(self._path(epoch, "released"), "")
        fsync_directory(self.directory)

    # ------------------------------------------------------------ helpers

    def _legacy_epoch(self) -> int:
        try:
            return int(self._legacy_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return -1

    @staticmethod
    def _read_int(path: Path, prefix: str) -> int:
        text = path.read_text()
        if not text.startswith(prefix):
            raise KafkaStorageError(f"{path} holds {text!r}; expected {prefix!r} and a number")
        try:
            return int(text[len(prefix):].strip())
        except ValueError:
            raise KafkaStorageError(f"{path} holds {text!r}; expected {prefix!r} and a number") from None


def _write_durably(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
