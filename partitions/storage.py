"""The disk under a partition log, as an interface: every file operation partitions/ makes.

The log, its recovery, snapshots, indexes and leader claims reach files only through a
`Storage`, so the same code runs on the real disk (`FileStorage`, byte-for-byte what the
node has always written, with the same fsync points) and on a simulated one
(memory_storage.py, faulty_storage.py) that loses unsynced bytes and undurable directory
entries at a crash. Contract: file bytes survive a crash only once fsynced; a creation,
rename or deletion survives only once its directory is fsynced.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path, PurePath
from typing import Protocol

#: the suffix of the temporary file behind replace_atomically (recovery deletes strays by it)
TMP_SUFFIX = ".tmp"


class StorageFile(Protocol):
    """An open file of a Storage: written only at its end, read anywhere."""

    def append(self, data: bytes) -> None:
        """Write all of `data` at the end of the file (partially on error: the caller truncates)."""

    def pread(self, length: int, position: int) -> bytes:
        """Up to `length` bytes at `position`; shorter only at the end of the file."""

    def size(self) -> int:
        """The current size of the file, synced or not."""

    def truncate(self, size: int) -> None:
        """Cut the file to `size` bytes (durable only after fsync)."""

    def fsync(self) -> None:
        """Make the file's bytes durable (not its directory entry: see Storage.fsync_directory)."""

    def close(self) -> None:
        """Release the file; closing twice is harmless."""


class Storage(Protocol):
    """Files and directories of one disk, addressed by path. Paths are `PurePath`s; only their
    names and parents matter, so a simulated disk may use paths that exist nowhere."""

    def mkdir(self, directory: PurePath) -> None:
        """Create `directory` and its parents; existing is fine."""

    def list_dir(self, directory: PurePath) -> list[str]:
        """The names in `directory` (files and subdirectories), sorted; FileNotFoundError if missing."""

    def exists(self, path: PurePath) -> bool: ...

    def is_dir(self, path: PurePath) -> bool: ...

    def directory_id(self, directory: PurePath) -> int:
        """An identity that changes when the directory is removed and made again (the inode)."""

    def size(self, path: PurePath) -> int: ...

    def read_bytes(self, path: PurePath) -> bytes: ...

    def create_file(self, path: PurePath) -> StorageFile:
        """A new empty file, opened; FileExistsError if `path` exists (O_EXCL)."""

    def open_file(self, path: PurePath) -> StorageFile:
        """An existing file, opened for appends and reads."""

    def write_file(self, path: PurePath, data: bytes, *, fsync: bool) -> None:
        """Create or truncate `path` and write `data`, fsyncing it when asked."""

    def create_exclusively(self, path: PurePath, data: bytes) -> bool:
        """Create `path` holding `data`, whole and fsynced the moment its name appears, unless it
        exists (False). Of racing creators exactly one wins; the caller fsyncs the directory."""

    def replace_atomically(self, path: PurePath, data: bytes, *, fsync: bool) -> None:
        """Write `data` to `<name>.tmp` (fsynced when asked) and rename it over `path`: readers see
        the old file or the new one, never a mix. The caller fsyncs the directory."""

    def delete(self, path: PurePath) -> None:
        """Remove a file; missing is fine. Durable once its directory is fsynced."""

    def fsync_directory(self, directory: PurePath) -> None:
        """Make the creations, renames and deletions in `directory` durable."""


class _OsFile(StorageFile):
    """A file descriptor opened O_APPEND: writes go to the end, reads use pread."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def append(self, data: bytes) -> None:
        view, written = memoryview(data), 0
        while written < len(data):
            written += os.write(self._fd, view[written:])

    def pread(self, length: int, position: int) -> bytes:
        parts = []
        while length > 0:
            chunk = os.pread(self._fd, length, position)
            if not chunk:
                break
            parts.append(chunk)
            length -= len(chunk)
            position += len(chunk)
        return b"".join(parts)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)

    def fsync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class FileStorage(Storage):
    """The real disk, through os calls. Stateless: one instance serves every log of a process."""

    def mkdir(self, directory: PurePath) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)

    def list_dir(self, directory: PurePath) -> list[str]:
        return sorted(os.listdir(directory))

    def exists(self, path: PurePath) -> bool:
        # access() answers a missing file without raising: os.path.exists() builds and drops a
        # FileNotFoundError, 3x the cost, and a leader asks after every fsync whether it was superseded
        return os.access(path, os.F_OK)

    def is_dir(self, path: PurePath) -> bool:
        return os.path.isdir(path)

    def directory_id(self, directory: PurePath) -> int:
        return os.stat(directory).st_ino

    def size(self, path: PurePath) -> int:
        return os.stat(path).st_size

    def read_bytes(self, path: PurePath) -> bytes:
        return Path(path).read_bytes()

    def create_file(self, path: PurePath) -> StorageFile:
        return _OsFile(os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644))

    def open_file(self, path: PurePath) -> StorageFile:
        return _OsFile(os.open(path, os.O_RDWR | os.O_APPEND))

    def write_file(self, path: PurePath, data: bytes, *, fsync: bool) -> None:
        file = _OsFile(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        try:
            file.append(data)
            if fsync:
                file.fsync()
        finally:
            file.close()

    def create_exclusively(self, path: PurePath, data: bytes) -> bool:
        # a private temporary file, then link(): atomic and exclusive, never seen half-written
        tmp = path.parent / f".{path.name}.{os.getpid()}.{threading.get_ident()}{TMP_SUFFIX}"
        self.write_file(tmp, data, fsync=True)
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        finally:
            Path(tmp).unlink(missing_ok=True)

    def replace_atomically(self, path: PurePath, data: bytes, *, fsync: bool) -> None:
        tmp = path.with_name(path.name + TMP_SUFFIX)
        self.write_file(tmp, data, fsync=fsync)
        os.replace(tmp, path)

    def delete(self, path: PurePath) -> None:
        Path(path).unlink(missing_ok=True)

    def fsync_directory(self, directory: PurePath) -> None:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


#: the default of every log: the real disk
FILE_STORAGE: Storage = FileStorage()
