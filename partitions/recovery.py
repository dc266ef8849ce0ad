"""Crash recovery of a log directory: keep the longest good prefix of the segments, cut the rest.

Sealed segments whose saved index still describes them are loaded from it (segment.py); only
the others, and always the newest, are scanned: recovery verifies the tail, not the history.
First, files a cut-off leader created after a later epoch took over are deleted whole (their
name says their epoch, leader_epochs.py says where each epoch had to stop). Then every segment
is scanned in offset order; at the first bad batch (torn, corrupt, or written by a cut-off
leader past its limit) its segment is truncated there (fsynced). Scanning goes on with the
next segment only if it starts exactly where the cut left the log (a later epoch's file after
an old leader's torn or fenced tail); otherwise every later segment is deleted. Each cut is
reported in words and logged. Invariant: what survives is a gap-free run of CRC-valid batches,
each written by the epoch that owned its offset, and all of it is durable.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from partitions.leader_epochs import EpochLimits
from partitions.segment import INDEX_SUFFIX, Segment, delete_segment_files, fsync_directory, segment_files

logger = logging.getLogger(__name__)


@dataclass
class RecoveredLog:
    """The surviving segments (oldest first), one line per cut, and how they were indexed."""

    segments: list[Segment]
    report: list[str] = field(default_factory=list)
    scanned_segments: int = 0
    indexed_segments: int = 0


def recover_segments(directory: Path, limits: EpochLimits = EpochLimits()) -> RecoveredLog:
    """Index every segment of `directory` (from its saved index if sealed and intact, else by a scan
    that checks every batch's CRC) and cut what is damaged or was written by a fenced leader.

    Producer state is rebuilt afterwards from a snapshot and the tail (producer_state_recovery.py).
    The newest surviving segment is fsynced: its last writer may have died before its own fsync.
    """
    _delete_orphan_indexes(directory)
    files = [((base, epoch), path) for base, epoch, path in segment_files(directory)]
    recovered = RecoveredLog([])
    files = _drop_fenced_files(files, limits, recovered)
    expected: int | None = None
    for i, ((base, epoch), path) in enumerate(files):
        if expected is not None and base != expected:
            _delete(files[i:], recovered, f"it starts at offset {base} but the log before it ends at {expected}")
            break
        limit = limits.limit(epoch)
        segment = Segment.open_indexed(path, base, epoch) if i < len(files) - 1 else None
        if segment is not None and limit is not None and segment.next_offset > limit:
            segment.close()  # indexed by a leader that wrote past its limit: scan and cut
            segment = None
        problem = None
        if segment is None:
            segment = Segment.open_existing(path, base, epoch)
            problem = segment.scan(base, lambda _batch: None, limit)
            recovered.scanned_segments += 1
            if problem is None and i < len(files) - 1:
                _save_index(segment)
        else:
            recovered.indexed_segments += 1
        recovered.segments.append(segment)
        expected = segment.next_offset
        if problem is not None:
            segment.truncate(problem.position)
            _note(recovered, f"{_where(path)}: truncated at byte {problem.position}, cutting "
                             f"{problem.cut_bytes} bytes ({problem.reason})")
    _drop_emptied(recovered)
    if recovered.segments:
        recovered.segments[-1].sync()
    return recovered


def _save_index(segment: Segment) -> None:
    """A sealed segment that had to be scanned is indexed for the next open (best effort)."""
    try:
        segment.write_index()
    except OSError as error:
        logger.warning("log recovery: cannot save the index of %s: %s", _where(segment.path), error)


def _delete_orphan_indexes(directory: Path) -> None:
    for path in directory.glob(f"*{INDEX_SUFFIX}*"):
        segment = path.with_name(path.name.split(INDEX_SUFFIX)[0] + ".log")
        if path.name.endswith(".tmp") or not segment.exists():
            path.unlink(missing_ok=True)


def _drop_emptied(recovered: RecoveredLog) -> None:
    """An empty segment with a successor at the same offset goes: an earlier leader's file that it
    never wrote to, or that the cuts emptied. Losing it loses nothing, so it is not reported."""
    kept = []
    for segment, successor in zip(recovered.segments, recovered.segments[1:] + [None]):
        if successor is not None and segment.size == 0:
            segment.close()
            delete_segment_files(segment.path)
            logger.info("log recovery: %s: deleted, an empty segment with a successor", _where(segment.path))
        else:
            kept.append(segment)
    recovered.segments = kept


def _drop_fenced_files(files: list[tuple[tuple[int, int | None], Path]], limits: EpochLimits,
                       recovered: RecoveredLog) -> list[tuple[tuple[int, int | None], Path]]:
    """Delete the files an epoch created at or past the offset where a later epoch took over."""
    kept, fenced = [], []
    for (base, epoch), path in files:
        limit = limits.limit(epoch)
        (fenced if epoch is not None and limit is not None and base >= limit else kept).append(((base, epoch), path))
    for (base, epoch), path in fenced:
        size = path.stat().st_size
        delete_segment_files(path)
        _note(recovered, f"{_where(path)}: deleted the whole segment ({size} bytes): epoch {epoch} created it "
                         f"after a later epoch took over at offset {limits.limit(epoch)} (never acknowledged)")
    if fenced:
        fsync_directory(fenced[0][1].parent)
    return kept


def _delete(files: list[tuple[tuple[int, int | None], Path]], recovered: RecoveredLog, why: str) -> None:
    if not files:
        return
    for _base, path in files:
        size = path.stat().st_size
        delete_segment_files(path)
        _note(recovered, f"{_where(path)}: deleted the whole segment ({size} bytes): {why}")
    fsync_directory(files[0][1].parent)


def _note(recovered: RecoveredLog, line: str) -> None:
    recovered.report.append(line)
    logger.warning("log recovery: %s", line)


def _where(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"
