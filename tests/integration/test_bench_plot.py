"""`txnsim bench --plot DIR`: a run of the cheapest benchmark writes its charts, lists them in --json and
links them from the --output section, relative to the markdown file."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_bench_plot_writes_each_tables_chart_and_links_it(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    markdown, images = tmp_path / "docs" / "benchmarks.md", tmp_path / "docs" / "images" / "bench"
    done = subprocess.run([sys.executable, "-m", "txnsim.cli.main", "bench", "peer", "--seconds", "0.3", "--repeat",
                           "1", "--plot", str(images), "--output", str(markdown), "--json"],
                          capture_output=True, text=True, timeout=300, cwd=repo)
    assert done.returncode == 0, done.stderr
    (bench,) = json.loads(done.stdout)["benchmarks"]
    charts = [Path(path) for path in bench["charts"]]
    assert charts == [images / "peer-peer-workload-through-confluent-kafka-and.png"]
    assert bench["tables"][0]["chart"] == str(charts[0])
    assert charts[0].read_bytes().startswith(PNG_SIGNATURE) and charts[0].stat().st_size > 5_000
    assert f"](images/bench/{charts[0].name})" in markdown.read_text()
    assert "wrote 1 chart of peer" in done.stderr


def test_bench_plot_into_a_file_fails_in_one_line_before_running(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    occupied = tmp_path / "a-file"
    occupied.write_text("")
    done = subprocess.run([sys.executable, "-m", "txnsim.cli.main", "bench", "producer", "--plot", str(occupied)],
                          capture_output=True, text=True, timeout=60, cwd=repo)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [f"error: --plot {occupied}: cannot make the directory (File exists)"]
