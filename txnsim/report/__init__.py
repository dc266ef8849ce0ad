"""HTML reports of a finished `txnsim chaos` or `txnsim pipeline` run, to look at afterwards.

timeline (pure: a run's records -> series on one time axis), figures (series -> Plotly
figures), chaos and pipeline (one run -> one HTML string), render (Jinja2 templates, the
inlined plotly.js, writing the file). Nothing here changes a run or talks to a cluster.
"""
from txnsim.report.chaos import chaos_report
from txnsim.report.pipeline import pipeline_report
from txnsim.report.render import report_path, write_report

__all__ = ["chaos_report", "pipeline_report", "report_path", "write_report"]
