"""The replication model of `txnsim simulate --model replication`: the shipping replication code on
simulated brokers (node.py), idempotent acks=all producers (producer.py), and its invariants (model.py)."""
from txnsim.simulate.replication.model import ReplicationModel

__all__ = ["ReplicationModel"]
