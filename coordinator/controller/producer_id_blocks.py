"""Producer ids of a replicated cluster, claimed in blocks from the coordination store as Kafka's brokers
claimed them from ZooKeeper (ZkProducerIdManager): the znode /latest_producer_id_block holds the last block
handed out ({"version": 1, "broker": B, "block_start": "S", "block_end": "E"}, ids as strings, as Kafka
writes them); a broker claims the next one with a write conditional on the version it read, and reads again
when another broker's write came first. No id is handed out twice, and a broker that dies holding a block
only wastes it (KIP-730).

`ProducerIdBlocks.claim` takes a callback, as the store does; `StoreProducerIds` is the blocking allocator a
node's coordinators call (the shared-directory node's is coordinator/producer_ids.py).
"""
from __future__ import annotations

import json
import logging
from collections.abc import Callable

from coordinator.controller.store import BadVersionError, CoordinationStore, NodeExistsError, NoNodeError, Znode
from coordinator.producer_ids import BlockAllocator
from coordinator.runtime.io import wait_for
from proto.errors import CoordinatorLoadInProgressError, KafkaError

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK = "/latest_producer_id_block"
#: Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
BLOCK_SIZE = 1000
_LAST_ID = (1 << 63) - 1


def encode_block(broker_id: int, first: int, last: int) -> bytes:
    return json.dumps({"version": 1, "broker": broker_id, "block_start": str(first),
                       "block_end": str(last)}).encode()


def decode_block(data: bytes) -> tuple[int, int]:
    """(first, last) of a block, both inclusive."""
    fields = json.loads(data)
    return int(fields["block_start"]), int(fields["block_end"])


class ProducerIdBlocks:
    """One broker's claims of producer-id blocks."""

    def __init__(self, store: CoordinationStore, broker_id: int, block_size: int = BLOCK_SIZE) -> None:
        if block_size < 1:
            raise ValueError(f"a producer-id block holds at least one id, not {block_size}")
        self._store = store
        self.broker_id = broker_id
        self.block_size = block_size

    def claim(self, done: Callable[[object], None]) -> None:
        """done((first, end)) for ids first..end-1, written to the store before any is used; done(error)
        with COORDINATOR_LOAD_IN_PROGRESS (retriable) while the store cannot be reached."""
        def read(outcome: object) -> None:
            if isinstance(outcome, NoNodeError):
                self._store.create(PRODUCER_ID_BLOCK, encode_block(self.broker_id, 0, self.block_size - 1),
                                   lambda created: written(created, 0))
            elif isinstance(outcome, Znode):
                first = decode_block(outcome.data)[1] + 1 if outcome.data else 0
                if first > _LAST_ID - self.block_size:
                    done(KafkaError("producer ids are exhausted"))
                    return
                self._store.set(PRODUCER_ID_BLOCK, encode_block(self.broker_id, first, first + self.block_size - 1),
                                lambda result: written(result, first), version=outcome.version)
            else:
                done(_unavailable(outcome))

        def written(outcome: object, first: int) -> None:
            if isinstance(outcome, (BadVersionError, NodeExistsError)):  # another broker claimed first: read again
                self._store.get(PRODUCER_ID_BLOCK, read)
            elif isinstance(outcome, BaseException):
                done(_unavailable(outcome))
            else:
                log.info("broker %d claimed producer ids %d to %d", self.broker_id, first, first + self.block_size - 1)
                done((first, first + self.block_size))
        self._store.get(PRODUCER_ID_BLOCK, read)


def _unavailable(error: object) -> KafkaError:
    return CoordinatorLoadInProgressError(
        f"[COORDINATOR_LOAD_IN_PROGRESS] no producer-id block can be claimed: the coordination service cannot be "
        f"reached ({error}); retry")


class StoreProducerIds(BlockAllocator):
    """A node's producer-id allocator over the store. Claiming blocks the calling thread (the real world's
    coordinators call it from their own threads)."""

    def __init__(self, blocks: ProducerIdBlocks) -> None:
        super().__init__()
        self._blocks = blocks

    def _take_block(self) -> tuple[int, int]:
        claimed: tuple[int, int] = wait_for(self._blocks.claim)
        return claimed
