"""What the page asks on demand, as plain JSON-ready dicts: transactions, groups, half messages, records,
a timeline. Each is one call through the admin API or a read of the cluster's files."""
from __future__ import annotations

import base64
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from proto.errors import KafkaError
from proto.structs import TopicPartition
from txnsim.admin import Admin
from txnsim.observe.group_timeline import beside_transactions, last_generations
from txnsim.observe.log_reader import (
    TransactionPicture,
    browse,
    files_signature,
    group_signature,
    group_timeline_of,
    partition_signature,
    read_timeline,
)
from txnsim.observe.timeline import KINDS, TimelineEvent, lanes, last_transactions

#: the page lists at most this many transactional ids (describing each is one request)
MAX_TRANSACTIONS = 200


def transactions(admin: Admin) -> list[dict[str, Any]]:
    now = int(time.time() * 1000)
    listed = admin.list_transactions()[:MAX_TRANSACTIONS]
    out = []
    for d in admin.describe_transactions([t.transactional_id for t in listed]) if listed else []:
        out.append({"transactional_id": d.transactional_id, "state": str(d.state), "producer_id": d.producer_id,
                    "producer_epoch": d.producer_epoch, "coordinator_id": d.coordinator_id,
                    "partitions": sorted(f"{tp.topic}-{tp.partition}" for tp in d.partitions),
                    "age_ms": max(0, now - d.start_time_ms) if d.start_time_ms >= 0 else None,
                    "idle_ms": max(0, now - d.last_update_time_ms) if d.last_update_time_ms >= 0 else None})
    return out


def groups(admin: Admin) -> list[dict[str, Any]]:
    listed = admin.list_consumer_groups()
    out = []
    for g in admin.describe_consumer_groups([g.group_id for g in listed]) if listed else []:
        committed = admin.list_consumer_group_offsets(g.group_id)
        try:
            ends = admin.last_stable_offsets(committed) if committed else {}
        except KafkaError:
            ends = {}
        offsets = [{"partition": f"{tp.topic}-{tp.partition}", "committed": o.offset,
                    "lag": max(0, ends[tp] - o.offset) if tp in ends else None}
                   for tp, o in sorted(committed.items())]
        members = [{"member_id": m.member_id, "client_id": m.client_id, "host": m.client_host,
                    "assignment": [f"{tp.topic}-{tp.partition}" for tp in m.assignment]} for m in g.members]
        out.append({"group_id": g.group_id, "state": g.state, "generation": g.generation_id,
                    "protocol": g.protocol, "coordinator_id": g.coordinator_id, "members": members,
                    "offsets": offsets})
    return out


def half_messages(admin: Admin) -> list[dict[str, Any]]:
    now = int(time.time() * 1000)
    return [{**asdict(m), "age_ms": now - m.store_time_ms} for m in admin.list_half_messages()]


def _text(data: bytes | None) -> str | None:
    """Bytes for the page: UTF-8 when they are, else base64 marked as such."""
    if data is None:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode()


class Messages:
    """The message browser's pages, read again only when the partition's files changed."""

    def __init__(self, data_dir: Path) -> None:
        self._data_dir = data_dir
        self._last: tuple[tuple[object, ...], list[dict[str, Any]]] | None = None

    def __call__(self, topic: str, partition: int, offset: int, limit: int) -> list[dict[str, Any]]:
        tp = TopicPartition(topic, partition)
        signature = (topic, partition, offset, limit, partition_signature(self._data_dir, tp))  # before reading
        if self._last is not None and self._last[0] == signature:
            return self._last[1]
        found = messages(self._data_dir, topic, partition, offset, limit)
        self._last = (signature, found)
        return found


def messages(data_dir: Path, topic: str, partition: int, offset: int, limit: int) -> list[dict[str, Any]]:
    return [{"offset": r.offset, "timestamp_ms": r.timestamp_ms, "key": _text(r.key), "value": _text(r.value),
             "headers": [[k, _text(v)] for k, v in r.headers], "producer_id": r.producer_id,
             "transaction": r.transaction}
            for r in browse(data_dir, TopicPartition(topic, partition), offset, limit)]


#: how many of an id's transactions the page's timeline shows (the command line's --last shows any number)
TIMELINE_TRANSACTIONS = 10


class Timelines:
    """Timelines as the page polls them: read again only when one of the files they come from changed
    (a busy id's partitions are megabytes, and the page asks every second)."""

    def __init__(self, data_dir: Path, keep: int = 20) -> None:
        self._data_dir = data_dir
        self._keep = keep
        self._lock = threading.Lock()
        #: transactional id -> (signature of its files, what was read from them)
        self._cache: dict[str, tuple[tuple[object, ...], TransactionPicture]] = {}

    def __call__(self, transactional_id: str, last: int = TIMELINE_TRANSACTIONS) -> dict[str, Any]:
        """The id's last `last` transactions (all when negative), with the rebalances of the groups it
        committed offsets for from the first of them on."""
        picture = self._picture(transactional_id)
        every = picture.events
        events = last_transactions(every, last) if last >= 0 else every
        shown = beside_transactions(events, picture.groups)
        return {"transactional_id": transactional_id, "groups": sorted(picture.groups), "lanes": lanes(shown),
                "kinds": list(KINDS), "events": [e.as_dict() for e in shown], "left_out": len(every) - len(events)}

    def _picture(self, transactional_id: str) -> TransactionPicture:
        cached = self._cache.get(transactional_id)
        # taken before reading, so a write landing during the read makes the next poll read again
        signature = files_signature(self._data_dir, transactional_id, cached[1].partitions if cached else [])
        if cached and cached[0] == signature:
            return cached[1]
        picture = read_timeline(self._data_dir, transactional_id)
        # a signature over other partitions than these never matches the next one: that poll reads again
        # (the groups' records are in the offsets shards among the partitions, so they count too)
        with self._lock:  # the endpoints run in a thread pool
            self._cache[transactional_id] = (signature, picture)
            while len(self._cache) > self._keep:
                self._cache.pop(next(iter(self._cache)))
        return picture


#: how many of a group's generations the page's group timeline shows
GROUP_GENERATIONS = 10


class GroupTimelines:
    """A consumer group's generations from its durable membership records, read again only when its
    offsets shard (or the ownership log) changed."""

    def __init__(self, data_dir: Path, keep: int = 20) -> None:
        self._data_dir = data_dir
        self._keep = keep
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[tuple[object, ...], list[TimelineEvent]]] = {}

    def __call__(self, group_id: str, last: int = GROUP_GENERATIONS) -> dict[str, Any]:
        """The group's last `last` generations (all when negative)."""
        signature = group_signature(self._data_dir, group_id)
        cached = self._cache.get(group_id)
        if cached and cached[0] == signature:
            every = cached[1]
        else:
            every = group_timeline_of(self._data_dir, group_id)
            with self._lock:
                self._cache[group_id] = (signature, every)
                while len(self._cache) > self._keep:
                    self._cache.pop(next(iter(self._cache)))
        events = last_generations(every, last)
        return {"group_id": group_id, "lanes": lanes(events), "kinds": list(KINDS),
                "events": [e.as_dict() for e in events], "left_out": len(every) - len(events)}


class RebalanceHistory:
    """Each group's generations as this server's describes saw them (every poll and every live stream
    feeds it): a rebalance is a new generation. The coordinator keeps only the current one, so what happened
    before the view started is not shown here (the group's timeline, read from its log, has it all).

    Streams and polls call observe() from several threads at once, and a slow describe may answer after a
    faster, newer one: one lock, and a generation lower than the last seen is taken for that late answer
    unless the group was emptied or recreated (its generation then starts over at 0 or 1)."""

    def __init__(self, limit: int = 50) -> None:
        self._limit = limit
        self._seen: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def observe(self, described: list[dict[str, Any]]) -> None:
        now = int(time.time() * 1000)
        with self._lock:
            for g in described:
                history = self._seen.setdefault(g["group_id"], [])
                last = history[-1]["generation"] if history else None
                late = last is not None and 1 < g["generation"] < last
                if not late and last != g["generation"]:
                    history.append({"time_ms": now, "generation": g["generation"], "state": g["state"],
                                    "members": len(g["members"])})
                    del history[:-self._limit]
                g["rebalances"] = list(history)
