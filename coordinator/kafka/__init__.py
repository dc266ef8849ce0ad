"""Kafka's own wire protocol on every node: a second front door to the same node logic.

`server` owns sockets and threads, `framing` turns frames into kafka-python request objects and
responses back into frames, `dispatch` picks the handler, and `cluster_apis` / `partition_apis`
convert between Kafka's messages and txnsim's protobuf requests. docs/kafka-wire.md lists what is served.
"""
