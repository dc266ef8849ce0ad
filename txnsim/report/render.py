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

from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from plotly.offline import get_plotlyjs

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
