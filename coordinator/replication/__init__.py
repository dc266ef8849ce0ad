"""Replication of partition logs between nodes, driven over the node's I/O (coordinator/runtime/io.py): the
partition leader's side (leader.py), the follower's fetches (follower.py), every replica of a node
(manager.py) and the leader's ISR writes to the coordination store (isr_writes.py). The decisions are the
sans-I/O cores in partitions/ (leader_replicas.py, follower_fetch.py); the logs are ReplicaLogs.
"""
