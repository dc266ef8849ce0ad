"""Crash recovery of a log directory: keep the longest good prefix of the segments, cut the rest.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from partitions.leader_epochs import EpochLimits
from partitions.segment import Segment, fsync_directory, segment_files
from proto.records import RecordBatch

logger = logging.getLogger(__name__)


@dataclass
class RecoveredLog:
    """The surviving segments (oldest first) and one line per cut."""

    segments: list[Segment]
    report: list[str] = field(default_factory=list)


def recover_segments(directory: Path, on_batch: Callable[[RecordBatch], None] = lambda _batch: None,
                     limits: EpochLimits = EpochLimits()) -> RecoveredLog:
    """Scan every segment of `directory`, feeding each surviving batch to `on_batch` in offset order.

    The scan checks every batch's CRC and builds the in-memory index; producer state is rebuilt
    afterwards from a snapshot and the tail (producer_state_recovery.py), not from this callback.
    The newest surviving segment is fsynced: its last writer may have died before its own fsync.
    """
    files = [((base, epoch), path) for base, epoch, path in segment_files(directory)]
    recovered = RecoveredLog([])
    files = _drop_fenced_files(files, limits, recovered)
    expected: int | None = None
    for i, ((base, epoch), path) in enumerate(files):
        if expected is not None and base != expected:
            _delete(files[i:], recovered, f"it starts at offset {base} but the log before it ends at {expected}")
            break
        segment = Segment.open_existing(path, base, epoch)
        recovered.segments.append(segment)
        problem = segment.scan(base, on_batch, limits.limit(epoch))
        expected = segment.next_offset
        if problem is not None:
            segment.truncate(problem.position)
            _note(recovered, f"{_where(path)}: truncated at byte {problem.position}, cutting "
                             f"{problem.cut_bytes} bytes ({problem.reason})")
    _drop_emptied(recovered)
    if recovered.segments:
        recovered.segments[-1].sync()
    return recovered


def _drop_emptied(recovered: RecoveredLog) -> None:
    """An empty segment with a successor at the same offset goes: an earlier leader's file that it
    never wrote to, or that the cuts emptied. Losing it loses nothing, so it is not reported."""
    kept = []
    for segment, successor in zip(recovered.segments, recovered.segments[1:] + [None]):
        if successor is not None and segment.size == 0:
            segment.close()
            segment.path.unlink()
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
        path.unlink()
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
        path.unlink()
        _note(recovered, f"{_where(path)}: deleted the whole segment ({size} bytes): {why}")
    fsync_directory(files[0][1].parent)


def _note(recovered: RecoveredLog, line: str) -> None:
    recovered.report.append(line)
    logger.warning("log recovery: %s", line)


def _where(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"
