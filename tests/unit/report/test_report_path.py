"""Where a report goes, and a bad --report refused in one line before any run starts."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from proto.errors import KafkaConfigurationError
from txnsim.report import report_path


def test_the_report_goes_into_the_data_dir_or_where_asked(tmp_path):
    assert report_path(None, tmp_path / "run", "chaos-report.html") == tmp_path / "run" / "chaos-report.html"
    assert report_path(tmp_path / "a" / "r.html", tmp_path / "run", "chaos-report.html") == tmp_path / "a" / "r.html"
    kept = report_path(None, None, "chaos-report.html")
    assert kept.name == "chaos-report.html" and kept.parent.is_dir()
    kept.parent.rmdir()


def test_a_directory_or_an_uncreatable_place_is_refused(tmp_path):
    with pytest.raises(KafkaConfigurationError, match="is a directory"):
        report_path(tmp_path, None, "chaos-report.html")
    (tmp_path / "file").write_text("x")
    with pytest.raises(KafkaConfigurationError, match="cannot create"):
        report_path(tmp_path / "file" / "r.html", None, "chaos-report.html")


@pytest.mark.parametrize("command", ["chaos", "pipeline"])
def test_the_commands_refuse_a_bad_report_path_in_one_line(tmp_path, command):
    run = subprocess.run([sys.executable, "-m", "txnsim.cli.main", command, "--report", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [f"error: KafkaConfigurationError: --report {tmp_path} is a directory; "
                                               f"give a file name such as {command}-report.html"]
