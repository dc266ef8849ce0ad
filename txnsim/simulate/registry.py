"""The models `--model` can select: a plain dict, so adding one is one line."""
from __future__ import annotations

from txnsim.simulate.demo import DemoModel
from txnsim.simulate.model import Model

DEFAULT_MODEL = DemoModel.name

MODELS: dict[str, type[Model]] = {
    DemoModel.name: DemoModel,
    # The cluster (nodes, transaction and group coordinators, partition logs, clients) on the
    # sans-I/O cores goes here as "cluster", and becomes DEFAULT_MODEL:
    #   "cluster": ClusterModel,
}
