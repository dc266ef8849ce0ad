"""Jinja2 templates to HTML, and the report file on disk.

plotly.js (about 4.8 MB) is inlined once per report rather than written beside it
(`include_plotlyjs="directory"`): a report is one self-contained file that opens offline
wherever it is copied (a CI artifact, an attachment, a run's directory moved elsewhere),
and each run's directory holds a single report anyway, so nothing would be shared.
Each figure travels as JSON in a `<script type="application/json" data-figure=ID>` block
that one small loader hands to Plotly.newPlot, so the charts' data stay readable by a
program (the tests parse them) as well as drawn in the browser.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from plotly.offline import get_plotlyjs

from proto.errors import KafkaConfigurationError

_env = Environment(loader=PackageLoader("txnsim.report", "templates"), autoescape=select_autoescape(["j2", "html"]),
                   undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def figure_json(figure: go.Figure) -> str:
    """The figure as JSON that is safe inside a <script> element (no `<` can end it early)."""
    return str(figure.to_json()).replace("<", "\\u003c")  # `<` only occurs inside JSON strings


def render(template: str, **context: Any) -> str:
    """`template` with `context`; `figures` (id -> Figure) become the JSON blocks the page draws."""
    figures = {name: figure_json(fig) for name, fig in context.pop("figures", {}).items()}
    return _env.get_template(template).render(figures=figures, plotly_js=get_plotlyjs(), **context)


def write_report(html: str, path: Path) -> Path:
    """Write the report (creating its directory) and return its absolute path."""
    path = Path(path).absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html, encoding="utf-8")
    return path


def report_path(explicit: Path | None, data_dir: Path | None, name: str) -> Path:
    """Where a run's report goes, checked before the run so a bad path fails in a second, not after it.

    `--report PATH` if given; else `name` in the run's data dir (beside the cluster's files); else in a
    new temporary directory that is kept (the run's own temporary data dir is deleted at the end).
    """
    if explicit is None:
        folder = Path(data_dir) if data_dir is not None else Path(tempfile.mkdtemp(prefix="txnsim-report-"))
        explicit = folder / name
    path = Path(explicit).absolute()
    if path.is_dir():
        raise KafkaConfigurationError(f"--report {explicit} is a directory; give a file name such as {name}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KafkaConfigurationError(f"cannot create {path.parent} for the report: {exc.strerror}") from None
    if not os.access(path.parent, os.W_OK):
        raise KafkaConfigurationError(f"cannot write the report in {path.parent}: permission denied")
    return path
