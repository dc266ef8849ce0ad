"""txnsim's error classes under the public package, so kafka-python habits work: `from txnsim.errors import
CommitFailedError` as `from kafka.errors import ...`. One hierarchy, defined in proto/errors.py."""
from proto.errors import *  # noqa: F403 -- the whole hierarchy, re-exported unchanged
