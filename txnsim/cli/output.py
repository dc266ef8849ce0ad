"""How commands print what they found: a rich table for people, or one JSON document for scripts.

Tables never cut a value: every column folds (wraps mid-word if it must) instead of ending in an
ellipsis, so a narrow terminal or a pipe (80 columns unless COLUMNS says otherwise) still shows
every id and offset in full.
"""
from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import JustifyMethod
from rich.table import Table


def new_table(title: str, *columns: str, justify: JustifyMethod = "left") -> Table:
    table = Table(title=title)
    for column in columns:
        table.add_column(column, overflow="fold", justify=justify)
    return table


def print_json(document: Any) -> None:
    """`document` as JSON on stdout: keys as the table's columns say them, numbers as numbers."""
    sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")
    sys.stdout.flush()
