"""Crash recovery of a log directory in two steps: find the good prefix, then clean up behind it.

1. `scan_segments` only reads. Files a cut-off leader created past the start of a later epoch
   are left out (their name says their epoch, leader_epochs.py where each epoch had to stop).
   Sealed segments whose saved index still describes them are loaded from it (segment.py);
   the others, and always the newest, are scanned batch by batch, stopping at the first torn
   or corrupt batch or at the epoch's limit. The next segment is used only if it starts
   exactly where the previous one stopped. The newest segment is fsynced (its last writer may
   have died before its own fsync). The result is the log's end.
2. The caller records that end as its epoch's start (durably, exclusively), and only then
   `clean_up` truncates and deletes, and only bytes that the recorded starts put beyond every
   epoch's limit: nothing any leader acknowledged or adopted, whatever it was doing meanwhile.
   A claimant that was itself superseded while scanning fails to record its start and never
   gets to step 2, so a stale view can never cut a newer leader's files.
Each cut is reported in words and logged.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePath

from partitions.leader_epochs import EpochLimits
from partitions.segment import INDEX_SUFFIX, SUFFIX, ScanProblem, Segment, delete_segment_files, segment_files
from partitions.storage import FILE_STORAGE, Storage

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Cut:
    """Where the scan of one segment file stopped short of its end, and why."""

    path: PurePath
    epoch: int | None
    problem: ScanProblem
    #: the offset after the last good batch: every byte past the cut is at or beyond it
    stop_offset: int


@dataclass
class ScannedLog:
    """The good prefix of a log directory as segments (oldest first), and what lies outside it."""

    segments: list[Segment]
    cuts: list[Cut] = field(default_factory=list)
    #: files left out: past their epoch's limit, or not continuing the log
    left_out: list[tuple[PurePath, str]] = field(default_factory=list)
    #: segments indexed by a scan (the others came from their saved index)
    scanned: list[Segment] = field(default_factory=list)

    @property
    def end_offset(self) -> int:
        return self.segments[-1].next_offset if self.segments else 0


def scan_segments(directory: PurePath, limits: EpochLimits = EpochLimits(),
                  storage: Storage = FILE_STORAGE, *, check_saved_indexes: bool = True) -> ScannedLog:
    """Index the good prefix of the segments of `directory` without changing any file.

    `check_saved_indexes=False` is the simulator's planted bug TRUST_SAVED_INDEX (a saved index used
    without its CRC-32C check); a real node never sets it."""
    _delete_orphan_indexes(directory, storage)
    files = segment_files(directory, storage)
    result = ScannedLog([])
    expected: int | None = None
    for i, (base, epoch, path) in enumerate(files):
        limit = limits.limit(epoch)
        if epoch is not None and limit is not None and base >= limit:
            result.left_out.append((path, f"epoch {epoch} created it after a later epoch took over at offset "
                                          f"{limit} (never acknowledged)"))
            continue
        if expected is not None and base != expected:
            result.left_out.append((path, f"it starts at offset {base} but the log before it ends at {expected}"))
            continue
        segment = (Segment.open_indexed(path, base, epoch, storage, check_crc=check_saved_indexes)
                   if i < len(files) - 1 else None)
        if segment is not None and limit is not None and segment.next_offset > limit:
            segment.close()  # indexed by a leader that wrote past its limit: scan instead
            segment = None
        if segment is None:
            segment = Segment.open_existing(path, base, epoch, storage)
            problem = segment.scan(base, limit)
            result.scanned.append(segment)
            if problem is not None:
                result.cuts.append(Cut(path, epoch, problem, segment.next_offset))
        result.segments.append(segment)
        expected = segment.next_offset
    _leave_out_empty(result)
    if result.segments:
        result.segments[-1].sync()
    return result


def clean_up(directory: PurePath, scanned: ScannedLog, limits: EpochLimits,
             older: Callable[[int | None], bool], sole_writer: bool = False,
             storage: Storage = FILE_STORAGE) -> list[str]:
    """Truncate and delete what `limits` (read after this epoch's start was recorded) put past the
    end for good, in files of epochs `older` than the caller's; returns one line per change.

    Safe from any process at any time: an epoch's limit never moves once a later start exists,
    and no leader acknowledges or adopts bytes of an epoch at or past its limit. A `sole_writer`
    (a log opened without claims) also cuts damage in the middle of the log.
    """
    report: list[str] = []
    for cut in scanned.cuts:
        limit = limits.limit(cut.epoch)
        if sole_writer or (older(cut.epoch) and limit is not None and cut.stop_offset >= limit):
            _truncate(storage, cut.path, cut.problem.position)  # the in-memory index already stops there
            _note(report, f"{_where(cut.path)}: truncated at byte {cut.problem.position}, cutting "
                          f"{cut.problem.cut_bytes} bytes ({cut.problem.reason})")
        else:
            _note(report, f"{_where(cut.path)}: ignoring {cut.problem.cut_bytes} bytes from byte "
                          f"{cut.problem.position} ({cut.problem.reason})")
    kept = {segment.path for segment in scanned.segments}
    reasons = dict(scanned.left_out)
    doomed = [(path, limit) for _base, epoch, path in segment_files(directory, storage)
              if path not in kept and older(epoch) and (limit := limits.limit(epoch)) is not None
              and _base >= limit]
    for path, limit in doomed:
        why = reasons.get(path, f"it lies past offset {limit}, where a later epoch started")
        _note(report, f"{_where(path)}: deleted the whole segment ({storage.size(path)} bytes): {why}")
        delete_segment_files(path, storage)
    if doomed:
        storage.fsync_directory(directory)
    for path, why in scanned.left_out:
        if path not in {doomed_path for doomed_path, _ in doomed}:
            _note(report, f"{_where(path)}: left out of the log, not deleted: {why}")
    cut_paths = {cut.path for cut in scanned.cuts}
    for segment in scanned.scanned:
        sealed = segment is not scanned.segments[-1] and segment.path in kept
        if sealed and segment.path not in cut_paths and older(segment.epoch):
            segment.save_index()  # scanned this time; the next open need not
    return report


def _truncate(storage: Storage, path: PurePath, size: int) -> None:
    file = storage.open_file(path)
    try:
        file.truncate(size)
        file.fsync()
    finally:
        file.close()


def _delete_orphan_indexes(directory: PurePath, storage: Storage) -> None:
    for name in storage.list_dir(directory):
        if name.endswith(INDEX_SUFFIX) and not storage.exists(directory / (name[:-len(INDEX_SUFFIX)] + SUFFIX)):
            storage.delete(directory / name)


def _leave_out_empty(scanned: ScannedLog) -> None:
    """An empty segment followed by another (an earlier leader's file it never wrote to, or one a
    cut emptied) is left out of the in-memory log; the file stays (it may not be ours to delete)."""
    kept = []
    for segment, successor in zip(scanned.segments, scanned.segments[1:] + [None]):
        if successor is not None and segment.size == 0:
            segment.close()
        else:
            kept.append(segment)
    scanned.segments = kept
    scanned.scanned = [segment for segment in scanned.scanned if segment in kept]


def _note(report: list[str], line: str) -> None:
    report.append(line)
    logger.warning("log recovery: %s", line)


def _where(path: PurePath) -> str:
    return f"{path.parent.name}/{path.name}"
