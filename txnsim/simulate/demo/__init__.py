"""The built-in demo model: a toy of Kafka's transactions that proves the simulator works.

One coordinator (n0) decides transactions and writes their markers to two partitions (n1,
n2); two transactional producers (c0, c1) and a read_committed consumer (c2) run against
them. Planted bugs (`DemoModel.BUGS`) switch off one protection each, and the simulator must
find, shrink and replay the violation. The cluster model replaces it once the cores are
sans-I/O.
"""
from txnsim.simulate.demo.model import DemoModel

__all__ = ["DemoModel"]
