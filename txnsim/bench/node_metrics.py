"""The nodes' own Prometheus histograms, scraped over loopback before and after a run: how long the node side
of a step took, so a benchmark can split a client's wait into what the nodes spent and what they did not."""
from __future__ import annotations

import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

SCRAPE_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class HistogramTotal:
    sum_s: float
    count: int

    def __sub__(self, earlier: HistogramTotal) -> HistogramTotal:
        return HistogramTotal(self.sum_s - earlier.sum_s, self.count - earlier.count)

    @property
    def mean_s(self) -> float:
        return self.sum_s / self.count if self.count else float("nan")


def histogram_total(urls: Iterable[str], name: str, labels: dict[str, str] | None = None) -> HistogramTotal:
    """`name`'s _sum and _count added over every node (those of series carrying `labels`)."""
    total_s, count = 0.0, 0
    for url in urls:
        with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            if family.name != name:
                continue
            for sample in family.samples:
                if labels and any(sample.labels.get(k) != v for k, v in labels.items()):
                    continue
                if sample.name == f"{name}_sum":
                    total_s += sample.value
                elif sample.name == f"{name}_count":
                    count += int(sample.value)
    return HistogramTotal(total_s, count)
