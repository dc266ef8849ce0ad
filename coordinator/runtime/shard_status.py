"""Whether a coordinator shard this node owns is loaded yet: one notion for the transaction, group and
half-message coordinators.

A shard is LOADING from the moment the node takes it over until its log is replayed; meanwhile a request for
it hears COORDINATOR_LOAD_IN_PROGRESS (retriable: the client asks the same node again shortly), not
NOT_COORDINATOR (which sends it looking for another coordinator), as Kafka's coordinators answer.
"""
from __future__ import annotations

import enum

from proto.errors import CoordinatorLoadInProgressError


class ShardStatus(enum.Enum):
    LOADING = "loading"
    SERVING = "serving"


def still_loading(what: str) -> CoordinatorLoadInProgressError:
    """The error for a request to a shard that is still loading (`what`: the shard, as the message names it)."""
    return CoordinatorLoadInProgressError(f"[COORDINATOR_LOAD_IN_PROGRESS] {what} is still loading; retry")
