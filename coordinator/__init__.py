"""The node: gRPC services over the partition logs it owns, the transaction and group coordinators
of the internal shards it owns, topic metadata, placement and producer-id blocks.

Start one with `python -m coordinator.node --data-dir DIR --node-id N` (LocalCluster and
`txnsim cluster start` do this).
"""
