"""The two stable hashes of the protocol, identical to Kafka's, never Python's salted hash().

- `partition_for(key, n)`: which __transaction_state / __consumer_offsets shard owns a
  transactional id or group id (Java's String.hashCode, then Utils.abs, then % n).
- `murmur2(key)`: the default partitioner's hash of a record key (seed 0x9747b28c).
"""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=4096)  # the same few ids and topic names are hashed at every request
def java_string_hash(s: str) -> int:
    """Java's String.hashCode: h = 31*h + c over UTF-16 code units, with int32 overflow."""
    h = 0
    raw = s.encode("utf-16-be")
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, n: int) -> int:
    """Kafka's shard of a transactional or group id: Utils.abs(hashCode) % n (abs(MIN_VALUE) = 0)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % n


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit MurmurHash2 (unsigned result), as in org.apache.kafka.common.utils.Utils."""
    length = len(data)
    m = 0x5BD1E995
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The default partitioner for keyed records: toPositive(murmur2(key)) % partitions."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions
