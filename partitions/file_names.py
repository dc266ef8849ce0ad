"""Names of the files a leader writes into a log directory: `<offset:020d>-e<leader epoch><suffix>`.

Segments (.log) and producer snapshots (.snapshot) carry the epoch of the leader that wrote
them, so two leaders never write one file and a cut-off leader's late file is recognisable.
Names without `-e<epoch>` are from versions before leader claims; they parse with epoch None.
"""
from __future__ import annotations


def offset_epoch_name(offset: int, epoch: int, suffix: str) -> str:
    return f"{offset:020d}-e{epoch}{suffix}"


def parse_offset_epoch_name(name: str, suffix: str) -> tuple[int, int | None] | None:
    """(offset, leader epoch) of a file name ending in `suffix` (epoch None for an older name), or None."""
    if not name.endswith(suffix):
        return None
    offset, separator, epoch = name[:-len(suffix)].partition("-e")
    if len(offset) != 20 or not offset.isdigit():
        return None
    if not separator:
        return int(offset), None
    return (int(offset), int(epoch)) if epoch.isdigit() else None


def log_order(offset: int, epoch: int | None) -> tuple[int, int]:
    """Sort key: by offset, and at one offset an older epoch (or an unnamed file) first."""
    return offset, -1 if epoch is None else epoch
