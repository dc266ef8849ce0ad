"""The wire contract: gRPC messages and services (generated), record batches, hashes, errors.

Nothing here does I/O or holds state; nodes and clients both build on it.
"""
