"""The models `--model` can select: a plain dict, so adding one is one line."""
from __future__ import annotations

from txnsim.simulate.cluster import ClusterModel
from txnsim.simulate.demo import DemoModel
from txnsim.simulate.model import Model
from txnsim.simulate.replication import ReplicationModel

DEFAULT_MODEL = ClusterModel.name

MODELS: dict[str, type[Model]] = {
    ClusterModel.name: ClusterModel,
    DemoModel.name: DemoModel,
    ReplicationModel.name: ReplicationModel,
}
