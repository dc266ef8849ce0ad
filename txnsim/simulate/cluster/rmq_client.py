"""A simulated RocketMQ producer process: a transactional producer of each of two groups (their half messages
live in different shards), each sending a half message, running a local database transaction, sending an end.

It follows RocketMQ's TransactionMQProducer: send the half message (retried under the same message id, so
a lost answer does not store it twice; half of them to a topic stored in place, as a one-message Kafka
transaction, the others to one stored RocketMQ's way), run the local transaction, then send COMMIT or ROLLBACK. Now and
then (seeded) it sends no end at all, or UNKNOWN, or its local transaction is still running when it would
end (a slow one, or one that hangs past every check): the broker's check-back then asks, and it answers from
its local database, which lives in the model and so survives the client - committed: COMMIT, rolled back:
ROLLBACK, not yet: UNKNOWN. Checks reach it through check-back streams it keeps open to one node (another when
that one stops answering); a node that owns a shard but holds no stream of the group passes the check through
one that does (DeliverCheck).
"""
from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from proto import txnsim_pb2 as pb
from proto.structs import HALF_TOPIC
from txnsim.simulate.cluster.shape import RMQ_PARTITIONS, RMQ_TOPICS, shard_of_producer_group
from txnsim.simulate.network import TIMED_OUT, Envelope

if TYPE_CHECKING:
    from txnsim.simulate.cluster.roles import ClientCluster

#: every producer process runs one producer of each group; the two groups' half messages live in different shards
PRODUCER_GROUPS = ("sim-rmq-producers", "sim-rmq-stock")
REQUEST_TIMEOUT_MS = 1_000
#: the check-back stream: the producer keeps it open to one node (another when that one stops answering)
STREAM_KEEPALIVE_MS = 250
RETRY_BACKOFF_MS = 50
END_TRIES = 3
#: the local database's states of a message's transaction
COMMITTED, ROLLED_BACK, RUNNING = "committed", "rolled back", "running"
_ANSWERS: dict[str, pb.TransactionResolution] = {COMMITTED: pb.RESOLUTION_COMMIT, ROLLED_BACK: pb.RESOLUTION_ROLLBACK, RUNNING: pb.RESOLUTION_UNKNOWN}


class RmqProducer:
    def __init__(self, name: str, model: ClientCluster, rng: random.Random) -> None:
        self.name = name
        self.model = model
        self.net = model.network
        self.rng = rng
        self.count = 0
        self.stopped = False
        #: the node its check-back streams are open to
        self.stream_node = self.rng.randrange(len(model.control.nodes()))

    def start(self) -> None:
        self.net.set_timer(self.name, self.rng.randint(50, 200), self.next_message, label="rmq-next")
        self.net.set_timer(self.name, self.rng.randint(1, 50), self.keep_streams, label="rmq-stream")

    def _owner(self, group: str) -> str:
        return f"n{self.model.control.owner_now(HALF_TOPIC, shard_of_producer_group(group))}"

    # ------------------------------------------------------------ the check-back streams

    def keep_streams(self) -> None:
        """Keep one check-back stream per group open to a node (checks of any shard reach it through that node,
        DeliverCheck); if the node does not answer, open them to the next node. Kept after the producer stops
        sending: the checks of what it left undecided still need answers."""
        node = f"n{self.stream_node}"
        for group in PRODUCER_GROUPS:
            def answered(response: Any, node: str = node) -> None:
                if response is TIMED_OUT and node == f"n{self.stream_node}":
                    self.stream_node = (self.stream_node + 1) % len(self.model.control.nodes())

            self.net.call(self.name, node, pb.CheckBackRequest(producer_group=group, client_id=self.name),
                          STREAM_KEEPALIVE_MS, answered)
        self.net.set_timer(self.name, STREAM_KEEPALIVE_MS, self.keep_streams, label="rmq-stream")

    # ------------------------------------------------------------ one message

    def next_message(self) -> None:
        if self.stopped:
            return
        self.count += 1
        message_id = f"{self.name}-{self.count}"
        group = self.rng.choice(PRODUCER_GROUPS)
        topic = self.rng.choice(RMQ_TOPICS)
        partition = self.rng.randrange(RMQ_PARTITIONS)
        self.model.recorder.rmq_message_sent(message_id)
        self.send(group, message_id, topic, partition)

    def send(self, group: str, message_id: str, topic: str, partition: int) -> None:
        request = pb.SendHalfMessageRequest(producer_group=group, message=pb.HalfMessage(
            topic=topic, partition=partition, value=message_id.encode(), message_id=message_id))

        def answered(response: Any) -> None:
            if response is TIMED_OUT or response.error_code:
                # retried under the same id until it is stored (a lost answer must not run the local
                # transaction of a message the broker may not have)
                self.net.set_timer(self.name, RETRY_BACKOFF_MS, self.send, group, message_id, topic, partition,
                                   label="rmq-send")
                return
            self.local_transaction(group, message_id, response.transaction_id)

        self.net.call(self.name, self._owner(group), request, REQUEST_TIMEOUT_MS, answered)

    def local_transaction(self, group: str, message_id: str, tid: str) -> None:
        """The local transaction runs: quick (then the end, or not), slow, or hanging past every check."""
        self.model.rmq_local[message_id] = RUNNING
        commit = self.rng.random() < 0.75
        roll = self.rng.random()
        if roll < 0.05:
            takes_ms = self.rng.randint(3_000, 4_000)     # hangs: its message is discarded (or not quite)
        elif roll < 0.25:
            takes_ms = self.rng.randint(400, 1_500)       # slow: a check-back or two find it running
        else:
            takes_ms = self.rng.randint(5, 50)
        self.net.set_timer(self.name, takes_ms, self.local_done, group, message_id, tid, commit, takes_ms > 100,
                           label="rmq-local")
        self.net.set_timer(self.name, self.rng.randint(100, 300), self.next_message, label="rmq-next")

    def local_done(self, group: str, message_id: str, tid: str, commit: bool, slow: bool) -> None:
        state = COMMITTED if commit else ROLLED_BACK
        self.model.rmq_local[message_id] = state
        end = self.rng.random()
        if slow or end < 0.15:
            return  # no end sent: the check-back finds out
        resolution = pb.RESOLUTION_UNKNOWN if end < 0.3 else _ANSWERS[state]
        self.end(group, message_id, tid, resolution, pb.SOURCE_CLIENT, END_TRIES)

    def end(self, group: str, message_id: str, tid: str, resolution: pb.TransactionResolution,
            source: pb.TransactionSource, tries: int) -> None:
        request = pb.EndHalfTransactionRequest(transaction_id=tid, producer_group=group,
                                               message_id=message_id, resolution=resolution, source=source)

        def answered(response: Any) -> None:
            if (response is TIMED_OUT or response.error_code) and tries > 1:
                self.net.set_timer(self.name, RETRY_BACKOFF_MS, self.end, group, message_id, tid, resolution,
                                   source, tries - 1, label="rmq-end")

        self.net.call(self.name, self._owner(group), request, REQUEST_TIMEOUT_MS, answered)

    # ------------------------------------------------------------ check-back

    def receive(self, env: Envelope) -> None:
        """A check-back, through its stream: answered once from the local database (the broker asks again if the
        answer is lost)."""
        check = env.message
        if not isinstance(check, pb.TransactionCheck):
            return
        state = self.model.rmq_local.get(check.message.message_id, RUNNING)
        self.end(check.producer_group, check.message.message_id, check.transaction_id, _ANSWERS[state],
                 pb.SOURCE_SERVER_CHECK, 1)
