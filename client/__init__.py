"""What every txnsim client shares: gRPC channels to nodes (transport) and the metadata cache (cluster).

The producer, the consumer, the admin commands and the nodes' own peer calls use these; proto/ keeps
only the wire contract, and nothing here imports a server package.
"""
