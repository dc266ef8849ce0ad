"""Where a replicated cluster keeps its state in ZooKeeper, and how each znode is encoded: Kafka's own
ZooKeeper layout and JSON (KafkaZkClient's ZkData), so that a reader of Kafka's documentation can read
txnsim's tree.

  /brokers/ids/<id>                          ephemeral: a live broker and its listeners
  /controller                                ephemeral: the elected controller's broker id
  /controller_epoch                          bumped by each newly elected controller
  /brokers/topics/<topic>                    the replica assignment of each partition
  /brokers/topics/<topic>/partitions/<p>/state   leader, leader_epoch, isr, controller_epoch
  /admin/delete_topics/<topic>               a topic being deleted (Kafka's deletion marker)
  /admin/delete_topics/<topic>/<id>          txnsim's: broker <id> has deleted its replicas of it
"""
from __future__ import annotations

import json
from dataclasses import dataclass

BROKER_IDS = "/brokers/ids"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
TOPICS = "/brokers/topics"
DELETE_TOPICS = "/admin/delete_topics"
#: the leader id of a partition with no leader (Kafka's LeaderAndIsr.NoLeader)
NO_LEADER = -1


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def deletion_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def deleted_by_path(topic: str, broker_id: int) -> str:
    return f"{DELETE_TOPICS}/{topic}/{broker_id}"


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: int
    #: the node's gRPC address and its Kafka listener (empty if none)
    address: str
    kafka_address: str = ""

    def encode(self) -> bytes:
        host, port = self.address.rsplit(":", 1)
        endpoints = [f"TXNSIM://{self.address}"] + ([f"PLAINTEXT://{self.kafka_address}"] if self.kafka_address else [])
        return json.dumps({"version": 5, "host": host, "port": int(port), "endpoints": endpoints}).encode()

    @classmethod
    def decode(cls, broker_id: int, data: bytes) -> BrokerInfo:
        fields = json.loads(data)
        endpoints = dict(endpoint.split("://", 1) for endpoint in fields.get("endpoints", []))
        return cls(broker_id, endpoints.get("TXNSIM", f"{fields['host']}:{fields['port']}"),
                   endpoints.get("PLAINTEXT", ""))


def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    return json.dumps({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)}).encode()


def decode_controller(data: bytes) -> int:
    return int(json.loads(data)["brokerid"])


def encode_assignment(replicas: dict[int, tuple[int, ...]]) -> bytes:
    return json.dumps({"version": 2, "partitions": {str(p): list(r) for p, r in sorted(replicas.items())}}).encode()


def decode_assignment(data: bytes) -> dict[int, tuple[int, ...]]:
    return {int(p): tuple(int(b) for b in r) for p, r in json.loads(data)["partitions"].items()}


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition's leadership as the controller last wrote it (Kafka's LeaderIsrAndControllerEpoch)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int

    def encode(self) -> bytes:
        return json.dumps({"controller_epoch": self.controller_epoch, "leader": self.leader, "version": 1,
                           "leader_epoch": self.leader_epoch, "isr": list(self.isr)}).encode()

    @classmethod
    def decode(cls, data: bytes) -> PartitionState:
        fields = json.loads(data)
        return cls(int(fields["leader"]), int(fields["leader_epoch"]), tuple(int(b) for b in fields["isr"]),
                   int(fields["controller_epoch"]))
