"""The trace: one canonical text line per thing that happened, and the hash that proves a replay.

A line is `time kind from->to summary`, with the time in simulated milliseconds. The trace
hash is sha256 over the lines (each followed by a newline), so two runs are the same run
exactly when their hashes are equal. Lines are only kept (for a file or the timeline) when
asked; the hash is always computed. A trace file is JSON lines: a header (seed, options,
fault schedule, bug, hash, violation), then one JSON string per trace line.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from rich.console import Console
from rich.markup import escape

#: the first key of a trace file's header, with the format's version
FORMAT_KEY = "txnsim-simulate-trace"
FORMAT_VERSION = 1
SUMMARY_LIMIT = 160


def summarize(message: object) -> str:
    """A short summary of a message that is the same on every machine and every run.

    Protobuf messages print their fields on one line; other objects need a stable repr
    (dataclasses, tuples, str) or a `trace_summary()` method. A repr with a memory address
    would make the trace hash differ from run to run, so it is refused."""
    if isinstance(message, Message):  # the common case first: a protobuf message has no trace_summary()
        out: list[str] = [type(message).__name__, "{"]
        _compact(message, out, [SUMMARY_LIMIT])
        out.append("}")
        text = "".join(out)
    else:
        custom = getattr(message, "trace_summary", None)
        if custom is not None:
            text = str(custom())
        else:
            text = repr(message)
            if " at 0x" in text:
                raise ValueError(f"{type(message).__name__} has no stable repr ({text[:60]}); make it a dataclass or "
                                 f"give it a trace_summary() method")
    return text if len(text) <= SUMMARY_LIMIT else text[:SUMMARY_LIMIT - 3] + "..."


#: how a field prints: its " name" prefix, whether it repeats, and whether its values are messages or bytes;
#: kept per field descriptor, since a run summarizes the same few dozen fields a hundred thousand times
_FIELD_SHAPES: dict[FieldDescriptor, tuple[str, bool, bool, bool]] = {}


def _field_shape(field: FieldDescriptor) -> tuple[str, bool, bool, bool]:
    shape = _FIELD_SHAPES.get(field)
    if shape is None:
        entry = field.message_type
        nested = entry is not None and not entry.GetOptions().map_entry
        shape = _FIELD_SHAPES[field] = (f" {field.name}", field.is_repeated, nested,
                                        field.type == FieldDescriptor.TYPE_BYTES)  # a map prints its keys
    return shape


def _compact(message: Message, out: list[str], budget: list[int]) -> None:
    """The set fields of `message`, one line, stopping once `budget` characters are spent (text_format
    prints everything and costs a quarter of a simulated run); bytes show as their length."""
    for field, value in message.ListFields():
        if budget[0] <= 0:
            return
        prefix, repeated, nested, raw = _FIELD_SHAPES.get(field) or _field_shape(field)
        out.append(prefix)
        budget[0] -= len(prefix)
        for item in (value if repeated else (value,)):
            if budget[0] <= 0:
                return
            if nested:
                out.append("{")
                _compact(item, out, budget)
                out.append("}")
                budget[0] -= 2
            else:
                text = f"<{len(item)}B>" if raw else repr(item)
                out.append(":" + text)
                budget[0] -= len(text) + 1


class Trace:
    """Appends lines, hashing each; keeps them only when `keep` is true."""

    __slots__ = ("_hash", "_unhashed", "count", "keep", "lines")

    def __init__(self, keep: bool = False) -> None:
        self._hash = hashlib.sha256()
        self.keep = keep
        self.lines: list[str] = []
        self.count = 0
        #: lines not hashed yet: hashed a thousand at a time, which gives the same digest for less work
        self._unhashed: list[str] = []

    def record(self, at_ms: int, kind: str, src: str, dst: str, summary: str) -> None:
        line = f"{at_ms:09d} {kind} {src}->{dst} {summary}"
        self.count += 1
        unhashed = self._unhashed
        unhashed.append(line)
        if len(unhashed) >= 1_000:
            self._hash_pending()
        if self.keep:
            self.lines.append(line)

    def _hash_pending(self) -> None:
        if self._unhashed:
            self._hash.update(("\n".join(self._unhashed) + "\n").encode())
            self._unhashed.clear()

    @property
    def hexdigest(self) -> str:
        self._hash_pending()
        return self._hash.hexdigest()


def hash_lines(lines: Iterable[str]) -> str:
    """The trace hash of saved lines, to check a file against its header."""
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode())
        digest.update(b"\n")
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class TraceFile:
    header: dict[str, Any]
    lines: list[str]


def save_trace(path: Path, header: dict[str, Any], lines: Iterable[str]) -> None:
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps({FORMAT_KEY: FORMAT_VERSION, **header}, sort_keys=False) + "\n")
        for line in lines:
            out.write(json.dumps(line) + "\n")


def load_trace(path: Path) -> TraceFile:
    """Raises ValueError with a one-line reason when the file is not a simulator trace."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read trace file {path}: {exc.strerror}") from None
    rows = text.splitlines()
    try:
        header = json.loads(rows[0]) if rows else None
        lines = [json.loads(row) for row in rows[1:]]
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not a simulator trace (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(header, dict) or header.get(FORMAT_KEY) != FORMAT_VERSION:
        raise ValueError(f"{path} is not a simulator trace (no {FORMAT_KEY} header of version {FORMAT_VERSION})")
    return TraceFile(header, [str(line) for line in lines])


_KIND_STYLES = {"send": "cyan", "drop": "red", "dup": "yellow", "fault": "bold magenta", "heal": "magenta",
                "timer": "dim", "held": "yellow", "late": "dim", "violation": "bold red", "effect": "green"}


def print_timeline(console: Console, lines: Iterable[str]) -> None:
    """Every line of a trace, one per row: seconds.milliseconds, kind, route and summary."""
    for line in lines:
        at, kind, route, summary = (line.split(" ", 3) + ["", "", ""])[:4]
        style = _KIND_STYLES.get(kind, "white")
        seconds = f"{int(at) / 1000:10.3f}s" if at.isdigit() else at
        console.print(f"[dim]{seconds}[/dim] [{style}]{kind:<9}[/{style}] {escape(route):<12} {escape(summary)}",
                      soft_wrap=True)
