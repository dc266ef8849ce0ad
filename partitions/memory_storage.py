"""A simulated disk in memory that knows, at every moment, what a power loss would keep.

Each file (an inode) has its bytes and how much of them an fsync made durable; each directory
has its current entries and the entries its last directory fsync made durable. `crash()` turns
the disk into exactly what survives: the durable entries, each file cut to its synced bytes.
Many PartitionLogs share one MemoryStorage in one process; nothing reads the wall clock or the
global random, and every listing is sorted, so identical operations give identical bytes.
Simplification: directories themselves are durable as soon as they are made.
"""
from __future__ import annotations

import errno
import itertools
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import PurePath

from partitions.storage import TMP_SUFFIX, Storage, StorageFile


@dataclass(eq=False)
class Inode:
    """One file's bytes. data[:synced_size] is durable, unless a truncate cut into the synced bytes
    before the next fsync: then `synced` holds what a crash brings back."""

    data: bytearray = field(default_factory=bytearray)
    synced_size: int = 0
    synced: bytes | None = None

    def append(self, data: bytes) -> None:
        self.data += data

    def truncate(self, size: int) -> None:
        if size < self.synced_size and self.synced is None:
            self.synced = bytes(self.data[:self.synced_size])
        del self.data[size:]

    def fsync(self) -> None:
        self.synced_size, self.synced = len(self.data), None

    def unsynced_tail(self) -> bytes | None:
        """The bytes written since the last fsync, or None if the file no longer starts with its synced bytes."""
        return None if self.synced is not None else bytes(self.data[self.synced_size:])

    def lose_unsynced(self, keep_tail: int) -> None:
        """What a crash leaves: the synced bytes plus the first `keep_tail` unsynced ones."""
        if self.synced is not None:
            self.data = bytearray(self.synced)
        else:
            del self.data[self.synced_size + keep_tail:]
        self.fsync()


class _MemoryFile(StorageFile):
    """An open file; unusable after a crash (the process that opened it is gone)."""

    def __init__(self, storage: MemoryStorage, inode: Inode, path: str) -> None:
        self._storage = storage
        self._inode = inode
        self._path = path
        self._generation = storage.generation
        self._closed = False
        #: set by a power loss of a part of the disk this file is in (crash(under=...))
        self.lost = False
        storage.opened(self)

    @property
    def path(self) -> str:
        return self._path

    def _check(self) -> Inode:
        if self._closed:
            raise OSError(errno.EBADF, "file is closed", self._path)
        if self._generation != self._storage.generation or self.lost:
            raise OSError(errno.ESTALE, "file was opened before a crash", self._path)
        return self._inode

    def append(self, data: bytes) -> None:
        with self._storage.lock:
            self._storage.written(self._check(), self._path, data)

    def pread(self, length: int, position: int) -> bytes:
        with self._storage.lock:
            return bytes(self._check().data[position:position + length])

    def size(self) -> int:
        with self._storage.lock:
            return len(self._check().data)

    def truncate(self, size: int) -> None:
        with self._storage.lock:
            self._check().truncate(size)

    def fsync(self) -> None:
        with self._storage.lock:
            inode = self._check()
            self._storage.before_fsync(self._path)
            inode.fsync()

    def close(self) -> None:
        self._closed = True


class MemoryStorage(Storage):
    """A disk in memory, keyed by str(path). Thread-safe (one lock), so threaded tests can use it too.

    `on_fsync(path)` is called at every file and directory fsync, before it takes effect, so a
    simulator can charge simulated time for it, or raise to crash the node at that instant (the
    fsync then does not happen); `fsync_count` counts them.
    """

    def __init__(self, on_fsync: Callable[[str], None] | None = None) -> None:
        self.lock = threading.RLock()
        self.on_fsync = on_fsync
        self.fsync_count = 0
        #: bumped by a crash: files opened before it are dead
        self.generation = 0
        self._directory_ids = itertools.count(1)
        self._directories: dict[str, int] = {"/": 0, ".": 0, "": 0}
        #: directory -> the names of its subdirectories (list_dir without a scan of every directory)
        self._subdirectories: dict[str, set[str]] = {}
        #: directory -> name -> inode, now and as of that directory's last fsync
        self._entries: dict[str, dict[str, Inode]] = {}
        self._durable: dict[str, dict[str, Inode]] = {}
        #: files opened and not yet garbage (closed ones too: a power loss marking them lost changes nothing)
        self._open_files: weakref.WeakSet[_MemoryFile] = weakref.WeakSet()

    # ------------------------------------------------------------ hooks for subclasses

    def opened(self, file: _MemoryFile) -> None:
        self._open_files.add(file)

    def written(self, inode: Inode, path: str, data: bytes) -> None:
        """Every write lands here (a FaultyStorage may damage it)."""
        inode.append(data)

    def before_fsync(self, path: str) -> None:
        self.fsync_count += 1
        if self.on_fsync is not None:
            self.on_fsync(path)

    # ------------------------------------------------------------ lookup

    def _split(self, path: PurePath) -> tuple[str, str]:
        parent, name = str(path.parent), path.name
        if parent not in self._directories:
            raise FileNotFoundError(errno.ENOENT, "no such directory", parent)
        return parent, name

    def _inode(self, path: PurePath) -> Inode:
        parent, name = self._split(path)
        inode = self._entries.get(parent, {}).get(name)
        if inode is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
        return inode

    def _link(self, path: PurePath, inode: Inode) -> None:
        parent, name = self._split(path)
        if str(path) in self._directories:
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        self._entries.setdefault(parent, {})[name] = inode

    # ------------------------------------------------------------ Storage

    def mkdir(self, directory: PurePath) -> None:
        with self.lock:
            for path in reversed([directory, *directory.parents]):
                key = str(path)
                if key not in self._directories:
                    if path.name in self._entries.get(str(path.parent), {}):
                        raise FileExistsError(errno.EEXIST, "a file has that name", key)
                    self._directories[key] = next(self._directory_ids)
                    if key != str(path.parent):
                        self._subdirectories.setdefault(str(path.parent), set()).add(path.name)

    def list_dir(self, directory: PurePath) -> list[str]:
        with self.lock:
            key = str(directory)
            if key not in self._directories:
                raise FileNotFoundError(errno.ENOENT, "no such directory", key)
            names = set(self._entries.get(key, {}))
            names.update(self._subdirectories.get(key, ()))
            return sorted(names)

    def exists(self, path: PurePath) -> bool:
        with self.lock:
            return self.is_dir(path) or path.name in self._entries.get(str(path.parent), {})

    def is_dir(self, path: PurePath) -> bool:
        with self.lock:
            return str(path) in self._directories

    def directory_id(self, directory: PurePath) -> int:
        with self.lock:
            try:
                return self._directories[str(directory)]
            except KeyError:
                raise FileNotFoundError(errno.ENOENT, "no such directory", str(directory)) from None

    def size(self, path: PurePath) -> int:
        with self.lock:
            return len(self._inode(path).data)

    def read_bytes(self, path: PurePath) -> bytes:
        with self.lock:
            return bytes(self._inode(path).data)

    def create_file(self, path: PurePath) -> StorageFile:
        with self.lock:
            if self.exists(path):
                raise FileExistsError(errno.EEXIST, "file exists", str(path))
            inode = Inode()
            self._link(path, inode)
            return _MemoryFile(self, inode, str(path))

    def open_file(self, path: PurePath) -> StorageFile:
        with self.lock:
            return _MemoryFile(self, self._inode(path), str(path))

    def write_file(self, path: PurePath, data: bytes, *, fsync: bool) -> None:
        with self.lock:
            try:
                inode = self._inode(path)
                inode.truncate(0)
            except FileNotFoundError:
                inode = Inode()
                self._link(path, inode)
            self.written(inode, str(path), data)
            if fsync:
                self.before_fsync(str(path))
                inode.fsync()

    def create_exclusively(self, path: PurePath, data: bytes) -> bool:
        with self.lock:
            if self.exists(path):
                return False
            inode = Inode()
            self.written(inode, str(path), data)
            self.before_fsync(str(path))
            inode.fsync()
            self._link(path, inode)
            return True

    def replace_atomically(self, path: PurePath, data: bytes, *, fsync: bool) -> None:
        with self.lock:
            tmp = path.with_name(path.name + TMP_SUFFIX)
            self.write_file(tmp, data, fsync=fsync)
            parent, name = self._split(tmp)
            self._link(path, self._entries[parent].pop(name))

    def delete(self, path: PurePath) -> None:
        with self.lock:
            self._entries.get(str(path.parent), {}).pop(path.name, None)

    def fsync_directory(self, directory: PurePath) -> None:
        with self.lock:
            key = str(directory)
            if key not in self._directories:
                raise FileNotFoundError(errno.ENOENT, "no such directory", key)
            self.before_fsync(key)
            self._durable[key] = dict(self._entries.get(key, {}))

    # ------------------------------------------------------------ the simulator's view

    def files(self) -> dict[str, bytes]:
        """Every file's current bytes by path, sorted (to compare two runs)."""
        with self.lock:
            return {path: bytes(inode.data) for path, inode in self._named_inodes()}

    def crash(self, under: Iterable[PurePath] | None = None) -> list[str]:
        """Power loss: undurable directory entries vanish (renames revert), every file keeps only
        its synced bytes (see `unsynced_bytes_kept` for torn writes), open files die.

        `under`: only the files and directory entries below these directories (one node's own logs,
        as if each node had a disk of its own); files opened elsewhere live on. Returns one line per
        change, in path order."""
        with self.lock:
            roots = None if under is None else sorted({str(PurePath(d)) for d in under})

            def hit(path: str) -> bool:
                return roots is None or any(path == r or path.startswith(r + "/") for r in roots)

            if roots is None:
                self.generation += 1
            else:
                for file in list(self._open_files):
                    if hit(file.path):
                        file.lost = True
            report: list[str] = []
            for directory in sorted(d for d in set(self._entries) | set(self._durable) if hit(d)):
                now, durable = self._entries.get(directory, {}), self._durable.get(directory, {})
                for name in sorted(set(now) | set(durable)):
                    if now.get(name) is not durable.get(name):
                        what = "vanished" if name not in durable else ("came back" if name not in now else "reverted")
                        report.append(f"{_join(directory, name)}: {what} (directory not fsynced)")
                self._entries[directory] = dict(durable)
            for path, inode in self._live_inodes():
                if not hit(path):
                    continue
                tail = inode.unsynced_tail()
                if tail is None:
                    report.append(f"{path}: truncate lost, back to {inode.synced_size} synced bytes")
                    inode.lose_unsynced(0)
                elif tail:
                    kept = self.unsynced_bytes_kept(path, len(tail))
                    report.append(f"{path}: lost {len(tail) - kept} of {len(tail)} unsynced bytes")
                    inode.lose_unsynced(kept)
            return report

    def unsynced_bytes_kept(self, path: str, unsynced: int) -> int:
        """How many of a file's `unsynced` bytes a crash keeps: none here (FaultyStorage may tear)."""
        return 0

    def _named_inodes(self) -> list[tuple[str, Inode]]:
        """(path, inode) of every file name, in path order."""
        return [(_join(directory, name), inode) for directory in sorted(self._entries)
                for name, inode in sorted(self._entries[directory].items())]

    def _live_inodes(self) -> list[tuple[str, Inode]]:
        """Each inode reachable by a name once (by its first name in path order)."""
        seen: set[int] = set()
        found = []
        for path, inode in self._named_inodes():
            if id(inode) not in seen:
                seen.add(id(inode))
                found.append((path, inode))
        return found


def _join(directory: str, name: str) -> str:
    return str(PurePath(directory) / name)
