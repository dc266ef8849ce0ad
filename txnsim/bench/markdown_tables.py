"""The generated sections of a benchmarks markdown file read back into ResultTables, so the charts of a
published run can be drawn again without running it again. Reads what `report.to_markdown` writes: a
bold title line, a pipe table, then note paragraphs (chart image lines are skipped).
"""
from __future__ import annotations

import re
from collections.abc import Sequence

from txnsim.bench.report import ResultTable

_SECTION = re.compile(r"<!-- bench:([\w-]+):begin -->\n(.*?)<!-- bench:\1:end -->", re.DOTALL)
_TITLE = re.compile(r"^\*\*(.+)\*\*$")
_UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


def sections(document: str) -> dict[str, str]:
    """Each generated section's body, by benchmark name."""
    return {match.group(1): match.group(2) for match in _SECTION.finditer(document)}


def _cells(line: str) -> tuple[str, ...]:
    inner = line.strip()[1:-1]
    return tuple(cell.strip().replace("\\|", "|") for cell in _UNESCAPED_PIPE.split(inner))


def tables(body: str) -> tuple[ResultTable, ...]:
    """The tables of one section body, in order."""
    lines = body.splitlines()
    found: list[ResultTable] = []
    index = 0
    while index < len(lines):
        title = _TITLE.match(lines[index].strip())
        table_at = index + 2
        if not (title and table_at + 1 < len(lines) and lines[table_at].startswith("|")):
            index += 1
            continue
        columns = _cells(lines[table_at])
        rows: list[tuple[str, ...]] = []
        index = table_at + 2  # past the header and the alignment line
        while index < len(lines) and lines[index].startswith("|"):
            rows.append(_cells(lines[index]))
            index += 1
        found.append(ResultTable(title.group(1), columns, tuple(rows), _notes(lines, index)))
    return tuple(found)


def _notes(lines: Sequence[str], start: int) -> tuple[str, ...]:
    notes = []
    for line in lines[start:]:
        text = line.strip()
        if _TITLE.match(text) or text.startswith("- "):
            break
        if text and not text.startswith("!["):
            notes.append(text)
    return tuple(notes)
