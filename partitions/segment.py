"""One segment file of a partition log: its bytes, an in-memory index of its batches, its scan.

A segment holds v2 batches back to back, each carrying the offset the log assigned; the index
keeps (base offset, last offset, byte position, largest timestamp so far) per batch, so a read is
a bisect and a pread, and so is finding the first batch reaching a timestamp (Kafka's time index).
The scan on recovery accepts the longest prefix of well-formed, CRC-valid, contiguous batches
and says where and why it stopped; the caller decides to cut there.

When a segment is sealed (fsynced at a roll) its index is saved beside it as `<name>.index`
(CRC-32C, the file size it describes). Opening the log then loads sealed segments from their
index instead of scanning them, so recovery reads only the tail, as Kafka's recovery point
does. The index is a cache: missing, damaged, or describing another file size, it is ignored
and the segment scanned.
"""
from __future__ import annotations

import logging
import struct
import sys
from array import array
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePath
from typing import TypeVar

import crc32c

from partitions.file_names import log_order, offset_epoch_name, parse_offset_epoch_name
from partitions.storage import FILE_STORAGE, Storage, StorageFile
from proto import records
from proto.errors import CorruptMessageError
from proto.records import HEADER_SIZE, RecordBatch

logger = logging.getLogger(__name__)

SUFFIX = ".log"
INDEX_SUFFIX = ".index"
_READ_AHEAD = 1 << 20
_INDEX_HEADER = struct.Struct(">4sIqqI")  # magic, crc of the rest, described file size, base offset, batches
_INDEX_MAGIC = b"TXI2"  # TXI1 had no timestamps: such an index is ignored and its segment scanned once
#: where a batch header keeps its max timestamp (baseOffset, batchLength, epoch, magic, crc, attributes,
#: lastOffsetDelta, baseTimestamp come first)
_MAX_TIMESTAMP = struct.Struct(">q")
_MAX_TIMESTAMP_AT = 35
_INDEX_ARRAYS = 4
#: a Path for the real disk (callers open what segment_files finds), any PurePath for a simulated one
PathT = TypeVar("PathT", bound=PurePath)


def segment_name(base_offset: int, epoch: int) -> str:
    """`<base offset>-e<leader epoch>.log`: each leader writes only files named with its own epoch."""
    return offset_epoch_name(base_offset, epoch, SUFFIX)


def parse_segment_name(name: str) -> tuple[int, int | None] | None:
    """(base offset, leader epoch) of a segment file name (epoch None for an older unnamed one), or None."""
    return parse_offset_epoch_name(name, SUFFIX)


def segment_files(directory: PathT, storage: Storage = FILE_STORAGE) -> list[tuple[int, int | None, PathT]]:
    """(base offset, epoch, path) of every segment file in `directory`, in log order."""
    found = [(*parsed, directory / name) for name in storage.list_dir(directory)
             if (parsed := parse_segment_name(name)) is not None and not storage.is_dir(directory / name)]
    return sorted(found, key=lambda item: log_order(item[0], item[1]))


def index_path(segment_path: PurePath) -> PurePath:
    return segment_path.with_name(segment_path.name[:-len(SUFFIX)] + INDEX_SUFFIX)


def delete_segment_files(segment_path: PurePath, storage: Storage = FILE_STORAGE) -> None:
    """A segment file and its saved index."""
    storage.delete(segment_path)
    storage.delete(index_path(segment_path))


def fsync_directory(directory: PurePath) -> None:
    """Make file creations, renames and deletions in `directory` of the real disk durable."""
    FILE_STORAGE.fsync_directory(directory)


@dataclass(frozen=True, slots=True)
class ScanProblem:
    """Where a segment's good prefix ends and why."""

    position: int
    cut_bytes: int
    reason: str


class _ReadAhead:
    """Sequential reads of a file in 1 MiB windows (a scan would otherwise pread twice per batch)."""

    def __init__(self, file: StorageFile) -> None:
        self._file = file
        self._start = 0
        self._buffer = b""

    def read(self, position: int, length: int) -> bytes:
        offset = position - self._start
        if offset < 0 or offset + length > len(self._buffer):
            self._buffer = self._file.pread(max(length, _READ_AHEAD), position)
            self._start, offset = position, 0
        return self._buffer[offset:offset + length]


class Segment:
    """One open segment file. Not thread-safe: the owning PartitionLog serialises access."""

    def __init__(self, path: PurePath, base_offset: int, file: StorageFile, epoch: int | None = None,
                 storage: Storage = FILE_STORAGE) -> None:
        self.path = path
        self.base_offset = base_offset
        #: the leader epoch that created (and alone writes) this file; None for files of older versions
        self.epoch = epoch
        self._file: StorageFile | None = file
        self._storage = storage
        self._size = 0
        self._synced_size = 0
        self._bases = array("q")
        self._lasts = array("q")
        self._positions = array("q")
        #: per batch, the largest max timestamp of the batches up to it: never decreasing, so bisectable
        self._max_timestamps = array("q")
        #: how many batches from the first were checked against their bytes (CRC, base offset, length): all
        #: of a scanned or new segment; none of one loaded from its saved index until reads check them
        self._checked = 0

    @classmethod
    def create(cls, directory: PurePath, base_offset: int, epoch: int, storage: Storage = FILE_STORAGE) -> Segment:
        """A new empty segment of leader epoch `epoch`, its directory entry made durable."""
        path = directory / segment_name(base_offset, epoch)
        file = storage.create_file(path)
        storage.fsync_directory(directory)
        return cls(path, base_offset, file, epoch, storage)

    @classmethod
    def open_existing(cls, path: PurePath, base_offset: int, epoch: int | None,
                      storage: Storage = FILE_STORAGE) -> Segment:
        """An existing segment with an empty index; call scan() to index it."""
        return cls(path, base_offset, storage.open_file(path), epoch, storage)

    @classmethod
    def open_indexed(cls, path: PurePath, base_offset: int, epoch: int | None,
                     storage: Storage = FILE_STORAGE, *, check_crc: bool = True) -> Segment | None:
        """An existing sealed segment indexed from its saved index, or None if that index cannot be trusted
        (`check_crc=False` only for the simulator's planted bug: the index's CRC-32C is not checked)."""
        try:
            data = storage.read_bytes(index_path(path))
        except OSError:
            return None
        if len(data) < _INDEX_HEADER.size:
            return None
        magic, crc, size, base, count = _INDEX_HEADER.unpack_from(data)
        body = data[_INDEX_HEADER.size:]
        if (magic != _INDEX_MAGIC or base != base_offset or len(body) != 8 * _INDEX_ARRAYS * count
                or (check_crc and crc != crc32c.crc32c(data[8:]))):
            return None
        file = storage.open_file(path)
        if file.size() != size:  # cut or appended to since: scan it
            file.close()
            return None
        segment = cls(path, base_offset, file, epoch, storage)
        for target, start in ((segment._bases, 0), (segment._lasts, 8 * count), (segment._positions, 16 * count),
                              (segment._max_timestamps, 24 * count)):
            target.frombytes(body[start:start + 8 * count])
            if sys.byteorder != "little":
                target.byteswap()
        if count and segment._bases[0] != base_offset:
            segment.close()
            return None
        segment._size = segment._synced_size = size
        return segment

    def save_index(self) -> None:
        """Save the index of this sealed, fsynced segment, best effort: a failure is logged (the next
        open then scans the segment). Temp file and rename; a cache, so not fsynced."""
        try:
            self._write_index()
        except OSError as error:
            logger.warning("cannot save the index of %s/%s (%s); the next open scans it",
                           self.path.parent.name, self.path.name, error)

    def _write_index(self) -> None:
        arrays = []
        for source in (self._bases, self._lasts, self._positions, self._max_timestamps):
            copy = array("q", source)
            if sys.byteorder != "little":
                copy.byteswap()
            arrays.append(copy.tobytes())
        rest = struct.pack(">qqI", self._size, self.base_offset, len(self._bases)) + b"".join(arrays)
        data = _INDEX_MAGIC + struct.pack(">I", crc32c.crc32c(rest)) + rest
        self._storage.replace_atomically(index_path(self.path), data, fsync=False)

    # ------------------------------------------------------------ state

    @property
    def size(self) -> int:
        return self._size

    @property
    def synced_size(self) -> int:
        return self._synced_size

    @property
    def next_offset(self) -> int:
        """The offset after this segment's last batch (its base offset when empty)."""
        return self._lasts[-1] + 1 if self._lasts else self.base_offset

    @property
    def batch_count(self) -> int:
        return len(self._bases)

    def batch_reaching(self, offset: int) -> tuple[int, int]:
        """(byte position, base offset) of the first batch that holds `offset` or lies past it; (size, next
        offset) when none does: where a cut keeping only the offsets before `offset` goes."""
        i = bisect_left(self._lasts, offset)
        if i == len(self._lasts):
            return self._size, self.next_offset
        return self._positions[i], self._bases[i]

    def has_batch_at(self, offset: int) -> bool:
        """Whether a batch of this segment starts at `offset`."""
        i = bisect_left(self._bases, offset)
        return i < len(self._bases) and self._bases[i] == offset

    # ------------------------------------------------------------ writing

    def append(self, data: bytes, batches: list[tuple[int, int, int]]) -> None:
        """Write `data` at the end, all or nothing: whole batches, (base offset, last offset, size) each."""
        file = self._open_file()
        try:
            file.append(data)
        except OSError:
            file.truncate(self._size)  # a partial batch must not stay behind
            raise
        position, start = self._size, 0
        all_checked = self._checked == len(self._bases)
        for base, last, size in batches:
            self._index(base, last, position, _MAX_TIMESTAMP.unpack_from(data, start + _MAX_TIMESTAMP_AT)[0])
            position += size
            start += size
        self._size += len(data)
        if all_checked:  # written by this log from checked batches
            self._checked = len(self._bases)

    def _index(self, base_offset: int, last_offset: int, position: int, max_timestamp: int) -> None:
        self._bases.append(base_offset)
        self._lasts.append(last_offset)
        self._positions.append(position)
        so_far = self._max_timestamps[-1] if self._max_timestamps else max_timestamp
        self._max_timestamps.append(max(so_far, max_timestamp))

    def sync(self) -> None:
        self._open_file().fsync()

    def mark_synced(self, size: int) -> None:
        self._synced_size = max(self._synced_size, size)

    def truncate(self, size: int) -> None:
        """Cut the file to `size` bytes (a batch boundary) durably, and forget the batches past it."""
        file = self._open_file()
        file.truncate(size)
        file.fsync()
        keep = bisect_left(self._positions, size)
        del self._bases[keep:], self._lasts[keep:], self._positions[keep:], self._max_timestamps[keep:]
        self._checked = min(self._checked, keep)
        self._size = self._synced_size = size

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _open_file(self) -> StorageFile:
        if self._file is None:
            raise OSError(f"segment {self.path.name} is closed")
        return self._file

    # ------------------------------------------------------------ reading

    def span(self, offset: int, upper_bound: int, max_bytes: float, take_one: bool) -> tuple[int, int, int]:
        """Byte range (start, end) of whole batches from the one holding `offset`, and the offset after them.

        Batches reaching `upper_bound` are left out; so are batches past `max_bytes`, except that
        the first batch is taken regardless when `take_one` is set. An empty range has start == end.
        """
        i = bisect_left(self._lasts, offset)
        if i == len(self._lasts):
            return self._size, self._size, offset
        start = end = self._positions[i]
        next_offset = offset
        while i < len(self._lasts) and self._lasts[i] < upper_bound:
            batch_end = self._positions[i + 1] if i + 1 < len(self._positions) else self._size
            if end - start + batch_end - self._positions[i] > max_bytes and not (take_one and end == start):
                break
            end, next_offset = batch_end, self._lasts[i] + 1
            i += 1
        return start, end, next_offset

    def read(self, start: int, end: int) -> bytes:
        return self._open_file().pread(end - start, start)

    def damage_in(self, start: int, data: bytes) -> tuple[int, str] | None:
        """(byte position, what is wrong) of the first batch of `data` (read from byte `start`) whose bytes do
        not match this segment's index or fail their CRC, or None. A saved index is trusted for where batches
        lie, not for what they hold: each batch is checked the first time it is read, then remembered as
        checked (a flipped byte in a sealed segment is found by its first reader, not served)."""
        i = bisect_left(self._positions, start)
        end = start + len(data)
        count = len(self._positions)
        while i < count and self._positions[i] < end:
            if i >= self._checked:
                position = self._positions[i]
                size = (self._positions[i + 1] if i + 1 < count else self._size) - position
                problem = _indexed_batch_problem(data, position - start, size, self._bases[i], self._lasts[i])
                if problem is not None:
                    return position, problem
                if i == self._checked:
                    self._checked = i + 1
            i += 1
        return None

    def verify(self) -> tuple[int, int, str] | None:
        """Check every batch no reader has checked yet, reading them once in runs of about a megabyte: the first
        damaged one as (base offset, byte position, what is wrong), or None."""
        i = self._checked
        while i < len(self._positions):
            start = self._positions[i]
            j = bisect_left(self._positions, start + _READ_AHEAD, lo=i + 1)
            end = self._positions[j] if j < len(self._positions) else self._size
            damage = self.damage_in(start, self.read(start, end))
            if damage is not None:
                position, problem = damage
                return self._bases[bisect_left(self._positions, position)], position, problem
            i = j
        return None

    @property
    def max_timestamp(self) -> int:
        """The largest batch max timestamp in this segment (-1 when empty)."""
        return self._max_timestamps[-1] if self._max_timestamps else -1

    def first_batch_reaching(self, timestamp: int) -> int:
        """Index of the first batch whose max timestamp is >= `timestamp` (batch_count if none): the
        running maxima first reach it at exactly that batch."""
        return bisect_left(self._max_timestamps, timestamp)

    def batch_at_index(self, i: int) -> RecordBatch:
        """The whole batch at index position `i`."""
        end = self._positions[i + 1] if i + 1 < len(self._positions) else self._size
        raw = self.read(self._positions[i], end)
        return RecordBatch(records.read_header(raw), raw)

    def iter_batches(self, start: int, end: int) -> Iterator[RecordBatch]:
        """The batches in bytes [start, end), which must be batch boundaries below the durable end; each one not
        yet checked is checked as damage_in() does (CORRUPT_MESSAGE naming the file and byte if it fails)."""
        reader = _ReadAhead(self._open_file())
        position, i = start, bisect_left(self._positions, start)
        while position < end:
            if i >= self._checked:
                damage = self.damage_in(position, reader.read(position, self._batch_size(i)))
                if damage is not None:
                    raise CorruptMessageError(f"[CORRUPT_MESSAGE] {self.path} is damaged at byte {position}: "
                                              f"{damage[1]}")
            header = records.read_header(reader.read(position, HEADER_SIZE))
            yield RecordBatch(header, reader.read(position, header.size))
            position += header.size
            i += 1

    def _batch_size(self, i: int) -> int:
        return (self._positions[i + 1] if i + 1 < len(self._positions) else self._size) - self._positions[i]

    # ------------------------------------------------------------ recovery

    def scan(self, expected_offset: int, limit: int | None = None) -> ScanProblem | None:
        """Index the good prefix of the file (reading only; the caller decides whether to cut).

        A batch is good if its header parses with magic 2, it fits in the file, its CRC-32C
        matches, its base offset is the one expected, a marker's control record parses, and it
        starts below `limit` (where a later leader epoch took over: past it this file's leader
        had been cut off, so nothing it wrote there was acknowledged).
        """
        file = self._open_file()
        file_size = file.size()
        reader = _ReadAhead(file)
        position, expected, problem = 0, expected_offset, None
        while position < file_size and problem is None:
            remaining = file_size - position
            if remaining < HEADER_SIZE:
                problem = f"torn tail: {remaining} of {HEADER_SIZE} header bytes"
                break
            try:
                header = records.read_header(reader.read(position, HEADER_SIZE))
            except CorruptMessageError as error:
                problem = f"unreadable batch header: {error}"
                break
            if header.size > remaining:
                problem = f"torn tail: {remaining} of {header.size} bytes"
                break
            if limit is not None and header.base_offset >= limit:
                problem = (f"written at offset {header.base_offset} by epoch {self.epoch} after a later "
                           f"epoch took over at offset {limit} (never acknowledged)")
                break
            batch = RecordBatch(header, reader.read(position, header.size))
            problem = _batch_problem(batch, expected)
            if problem is None:
                self._index(header.base_offset, header.last_offset, position, header.max_timestamp)
                position += header.size
                expected = header.next_offset
        self._size = self._synced_size = position
        self._checked = len(self._bases)
        if problem is None:
            return None
        return ScanProblem(position, file_size - position, problem)


def _indexed_batch_problem(data: bytes, at: int, size: int, base_offset: int, last_offset: int) -> str | None:
    """What makes the batch at `data[at:at + size]` differ from what the index says of it, or None."""
    try:
        header = records.read_header(data, at)
    except CorruptMessageError as error:
        return f"unreadable batch header where offset {base_offset} should be: {error}"
    if header.base_offset != base_offset or header.last_offset != last_offset or header.size != size:
        return (f"the batch of offsets {base_offset}-{last_offset} ({size} bytes) reads as offsets "
                f"{header.base_offset}-{header.last_offset} ({header.size} bytes)")
    if not RecordBatch(header, data[at:at + size]).crc_ok():
        return f"CRC mismatch at offset {base_offset}"
    return None


def _batch_problem(batch: RecordBatch, expected_offset: int) -> str | None:
    header = batch.header
    if not batch.crc_ok():
        return f"CRC mismatch at offset {header.base_offset}"
    if header.base_offset != expected_offset:
        return f"offset gap: expected a batch at offset {expected_offset}, found {header.base_offset}"
    if header.is_control:
        try:
            batch.control_record()
        except CorruptMessageError as error:
            return f"unreadable transaction marker at offset {header.base_offset}: {error}"
    return None
