"""A report's HTML read back with the standard library's parser: its tables, figures and ids."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any


@dataclass
class ReportDoc:
    #: table id -> header cells and body rows (cell texts, whitespace collapsed)
    headers: dict[str, list[str]] = field(default_factory=dict)
    tables: dict[str, list[list[str]]] = field(default_factory=dict)
    #: data-figure id -> the Plotly figure (data, layout)
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)
    ids: set[str] = field(default_factory=set)
    texts: dict[str, str] = field(default_factory=dict)
    #: inline scripts that are JavaScript (plotly.js, the loader), by length
    scripts: list[int] = field(default_factory=list)
    #: every src= and href= (a report that opens offline has none)
    links: list[str] = field(default_factory=list)

    def column(self, table: str, name: str) -> list[str]:
        i = self.headers[table].index(name)
        return [row[i] for row in self.tables[table]]


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.doc = ReportDoc()
        self._table: str | None = None
        self._in_head = False
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._script: dict[str, str | None] | None = None
        self._script_text: list[str] = []
        self._text_of: list[tuple[str, list[str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.doc.links.extend(str(a[k]) for k in ("src", "href") if a.get(k))
        if a.get("id"):
            self.doc.ids.add(str(a["id"]))
            if tag in ("p", "dl"):
                self._text_of.append((str(a["id"]), []))
        if tag == "table":
            self._table = a.get("id") or f"table-{len(self.doc.tables)}"
            self.doc.tables[self._table] = []
        elif tag == "thead":
            self._in_head = True
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "script":
            self._script, self._script_text = a, []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table is not None:
            if self._in_head:
                self.doc.headers[self._table] = self._row
            else:
                self.doc.tables[self._table].append(self._row)
            self._row = None
        elif tag == "thead":
            self._in_head = False
        elif tag == "table":
            self._table = None
        elif tag == "script" and self._script is not None:
            text = "".join(self._script_text)
            if self._script.get("type") == "application/json":
                self.doc.figures[str(self._script["data-figure"])] = json.loads(text)
            else:
                self.doc.scripts.append(len(text))
            self._script = None
        elif tag in ("p", "dl") and self._text_of:
            name, parts = self._text_of.pop()
            self.doc.texts[name] = " ".join(" ".join(parts).split())

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            self._script_text.append(data)
            return
        if self._cell is not None:
            self._cell.append(data)
        for _, parts in self._text_of:
            parts.append(data)


def read_report(source: str | Path) -> ReportDoc:
    reader = _Reader()
    reader.feed(Path(source).read_text(encoding="utf-8") if isinstance(source, Path) else source)
    reader.close()
    return reader.doc


def trace(doc: ReportDoc, figure: str, name: str) -> dict[str, Any]:
    """The trace called `name` of a figure."""
    return next(t for t in doc.figures[figure]["data"] if t.get("name") == name)
