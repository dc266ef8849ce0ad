"""Producer-id blocks claimed from the simulator's ZooKeeper: brokers racing for blocks never get the same
ids, the znode is Kafka's, and a store out of reach is a retriable COORDINATOR_LOAD_IN_PROGRESS."""
from __future__ import annotations

from collections.abc import Callable

import pytest

from coordinator.controller.producer_id_blocks import (
    PRODUCER_ID_BLOCK,
    ProducerIdBlocks,
    StoreProducerIds,
    decode_block,
)
from coordinator.runtime.io import wait_for
from proto.errors import CoordinatorLoadInProgressError
from txnsim.simulate.coordination import SimStore, ZnodeTree


def test_racing_brokers_claim_disjoint_blocks_and_the_last_is_in_the_znode() -> None:
    tree = ZnodeTree()
    pending: list[Callable[[], None]] = []
    # answers are held and released interleaved, so every claim reads before the others write
    stores = [SimStore(tree, timeout_ms=1_000, now_ms=lambda: 0, deliver=pending.append) for _ in range(3)]
    claims = [ProducerIdBlocks(store, broker_id, block_size=10) for broker_id, store in enumerate(stores)]
    got: list[object] = []
    for _round in range(4):
        for claim in claims:
            claim.claim(got.append)
    while pending:
        pending.pop(0)()
    blocks = sorted(got)  # type: ignore[type-var]
    assert len(blocks) == 12 and all(end - first == 10 for first, end in blocks)  # type: ignore[misc]
    ids = [i for first, end in blocks for i in range(first, end)]  # type: ignore[misc]
    assert len(ids) == len(set(ids)) == 120
    assert decode_block(tree.get(PRODUCER_ID_BLOCK, None).data) == (110, 119)


def test_an_allocator_hands_out_ids_from_its_block_and_the_store_out_of_reach_is_retriable() -> None:
    tree = ZnodeTree()
    reachable = [True]
    store = SimStore(tree, timeout_ms=1_000, now_ms=lambda: 0, reachable=lambda: reachable[0])
    other = ProducerIdBlocks(SimStore(tree, timeout_ms=1_000, now_ms=lambda: 0), 2, block_size=5)
    ids = StoreProducerIds(ProducerIdBlocks(store, 1, block_size=5))
    assert [ids.allocate() for _ in range(3)] == [0, 1, 2]
    assert wait_for(other.claim) == (5, 10)
    assert [ids.allocate() for _ in range(3)] == [3, 4, 10]  # its block used up, the next free one
    reachable[0] = False
    with pytest.raises(CoordinatorLoadInProgressError, match="cannot be reached"):
        ids.reserve_block()
