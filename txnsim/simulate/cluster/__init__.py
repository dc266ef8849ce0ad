"""The cluster model of `txnsim simulate`: real cores, simulated network, disk and clock."""
from txnsim.simulate.cluster.model import ClusterModel

__all__ = ["ClusterModel"]
