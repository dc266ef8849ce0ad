"""The simulator's planted bugs: each switches off one protection, so that a run shows what the protection
is for (`txnsim simulate --bug NAME`, docs/simulator.md's table of what finds each).

One enumeration for all of them. A protocol core that must hold a switch takes one typed parameter
(`LogConfig.planted_bug`, `TxnCoordinatorCore(planted_bug=)`, `GroupCoordinator(planted_bug=)`,
`HalfMessageCoordinator(planted_bug=)`), never read from the environment or a file; the ones about
acknowledging before an fsync live in the simulator's I/O (txnsim/simulate/cluster/sim_io.py). A node, the clients and every
command but `simulate` never pass one.
"""
from __future__ import annotations

import enum


class PlantedBug(enum.Enum):
    # the partition log (partitions/log.py)
    LSO_IGNORES_OPEN_TRANSACTIONS = "lso-ignores-open-transactions"
    NO_FENCING = "no-fencing"
    ACCEPT_LATE_MARKERS = "accept-late-markers"
    STALE_READS = "stale-reads"
    TRUST_SAVED_INDEX = "trust-saved-index"
    READ_PAST_HW = "read-past-hw"
    # the transaction coordinator (coordinator/txn/core.py)
    NO_EPOCH_BUMP = "no-epoch-bump"
    COMMIT_EVERY_ATTEMPT = "commit-every-attempt"
    # the group coordinator (coordinator/group/)
    NO_JOIN_BARRIER = "no-join-barrier"
    NO_GENERATION_FENCE = "no-generation-fence"
    UNSTABLE_OFFSET_FETCH = "unstable-offset-fetch"
    # the simulated I/O: acknowledged before the fsync
    ACK_BEFORE_FSYNC = "ack-before-fsync"
    ACK_GROUP_BEFORE_FSYNC = "ack-group-before-fsync"
    HALF_ACK_BEFORE_FSYNC = "half-ack-before-fsync"
    # the half-message coordinator (coordinator/rocketmq/)
    CHECK_COUNT_IN_MEMORY = "check-count-in-memory"
    IN_PLACE_RETRY_UNWRITTEN = "in-place-retry-unwritten"
    # replication (partitions/leader_replicas.py, follower_fetch.py, coordinator/replication/, the controller)
    UNCLEAN_ELECTION = "unclean-election"
    HW_FROM_LEADER_ALONE = "hw-from-leader-alone"
    NO_FOLLOWER_TRUNCATION = "no-follower-truncation"
    ACKS_BEFORE_ISR = "acks-before-isr"


#: the planted bugs of replication, which the simulator's replication model offers (the others, its cluster model)
REPLICATION_BUGS = frozenset({PlantedBug.UNCLEAN_ELECTION, PlantedBug.HW_FROM_LEADER_ALONE,
                              PlantedBug.NO_FOLLOWER_TRUNCATION, PlantedBug.ACKS_BEFORE_ISR})


#: what each switches off, as `txnsim simulate --list-bugs` prints it
DESCRIPTIONS: dict[PlantedBug, str] = {
    PlantedBug.LSO_IGNORES_OPEN_TRANSACTIONS: "the last stable offset is the high watermark: read_committed sees "
                                              "undecided records",
    PlantedBug.NO_EPOCH_BUMP: "EndTxn (V2) keeps the producer epoch, so a late write of the last transaction is "
                              "not fenced",
    PlantedBug.NO_FENCING: "a log opened by a new leader does not fence the old one: a paused owner keeps writing",
    PlantedBug.ACK_BEFORE_FSYNC: "a write to a data partition (a produce, a marker) is acknowledged as soon as it "
                                 "is written, before its fsync: a power loss in between loses acknowledged records",
    PlantedBug.ACK_GROUP_BEFORE_FSYNC: "the group coordinator answers before its writes are durable: a new "
                                       "assignment is handed out, or offsets acknowledged, before the fsync; a "
                                       "crash in between takes them back",
    PlantedBug.NO_GENERATION_FENCE: "TxnOffsetCommit skips the member and generation check (KIP-447): a copier "
                                    "whose generation is over still commits what the partition's next owner copies "
                                    "again",
    PlantedBug.UNSTABLE_OFFSET_FETCH: "OffsetFetch ignores require_stable: a copier starts from an offset a pending "
                                      "transactional commit is about to move",
    PlantedBug.COMMIT_EVERY_ATTEMPT: "EndBatchTxn commits every attempt that joined the batch, not only the winners "
                                     "the driver named",
    PlantedBug.ACCEPT_LATE_MARKERS: "a V2 marker at the epoch of an open transaction's data ends it, though it is a "
                                    "late copy from the previous transaction (KAFKA-19446)",
    PlantedBug.STALE_READS: "a node woken from a pause answers reads from the logs it held before the takeover (no "
                            "claim check after a read): a consumer is told a partition ends before where it was told "
                            "it ended",
    PlantedBug.CHECK_COUNT_IN_MEMORY: "a half message's check count moves on in memory only (not appended again): "
                                      "after a crash or a failover it starts again, so the message is checked too "
                                      "often",
    PlantedBug.HALF_ACK_BEFORE_FSYNC: "a half message is answered as soon as it is written, before its fsync: a "
                                      "power loss in between loses a message whose local transaction then commits",
    PlantedBug.NO_JOIN_BARRIER: "a rebalance completes as soon as one member rejoins, without waiting for the "
                                "others: their partitions go to a new owner while they still consume them",
    PlantedBug.TRUST_SAVED_INDEX: "a sealed segment's saved index is used without checking its CRC-32C: after a bit "
                                  "flips in it, reads of that segment find batches where there are none",
    PlantedBug.READ_PAST_HW: "read_uncommitted fetches read to the log end, past the high watermark: a consumer is "
                             "handed records before they are durable, which a power loss then takes",
    PlantedBug.UNCLEAN_ELECTION: "the controller lets a replica outside the ISR lead when no ISR member is alive "
                                 "(Kafka's unclean.leader.election.enable): writes acknowledged to acks=all are lost",
    PlantedBug.HW_FROM_LEADER_ALONE: "the leader's high watermark is its own log end, not the ISR's lowest: acks=all "
                                     "is answered, and consumers read, before any follower has the write",
    PlantedBug.NO_FOLLOWER_TRUNCATION: "a follower told where its log parts from its new leader's keeps its own tail "
                                       "and fetches on after it (pre-KIP-101): replicas hold different records at the "
                                       "same offsets",
    PlantedBug.ACKS_BEFORE_ISR: "acks=all is answered once the leader has fsynced the write, before the ISR has it "
                                "(acks=1 in disguise): a leader lost right after takes the write with it",
    PlantedBug.IN_PLACE_RETRY_UNWRITTEN: "a retried send of a message stored in place is answered from the "
                                         "registration alone: if the shard's owner died before writing the message "
                                         "to its partition, a commit then delivers nothing",
}
