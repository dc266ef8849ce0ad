"""Crash recovery of a log directory: keep the longest good prefix of the segments, cut the rest.

Every segment is scanned in offset order; at the first bad batch its segment is truncated
there (fsynced) and every later segment deleted, each cut reported in words and logged.
Invariant: what survives is a gap-free run of CRC-valid batches, and all of it is durable.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from partitions.segment import Segment, fsync_directory, parse_segment_name
from proto.records import RecordBatch

logger = logging.getLogger(__name__)


@dataclass
class RecoveredLog:
    """The surviving segments (oldest first) and one line per cut."""

    segments: list[Segment]
    report: list[str] = field(default_factory=list)


def recover_segments(directory: Path, on_batch: Callable[[RecordBatch], None] = lambda _batch: None
                     ) -> RecoveredLog:
    """Scan every segment of `directory`, feeding each surviving batch to `on_batch` in offset order.

    The scan checks every batch's CRC and builds the in-memory index; producer state is rebuilt
    afterwards from a snapshot and the tail (producer_state_recovery.py), not from this callback.
    """
    files = sorted((base, path) for path in directory.iterdir()
                   if path.is_file() and (base := parse_segment_name(path.name)) is not None)
    recovered = RecoveredLog([])
    expected: int | None = None
    for i, (base, path) in enumerate(files):
        if expected is not None and base != expected:
            _delete(files[i:], recovered, f"it starts at offset {base} but the log before it ends at {expected}")
            break
        segment = Segment.open_existing(path, base)
        recovered.segments.append(segment)
        problem = segment.scan(base, on_batch)
        expected = segment.next_offset
        if problem is not None:
            segment.truncate(problem.position)
            _note(recovered, f"{_where(path)}: truncated at byte {problem.position}, cutting "
                             f"{problem.cut_bytes} bytes ({problem.reason})")
            _delete(files[i + 1:], recovered, f"it follows the damaged {path.name}")
            break
    return recovered


def _delete(files: list[tuple[int, Path]], recovered: RecoveredLog, why: str) -> None:
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
