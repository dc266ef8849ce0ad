"""Kafka frames: a 4-byte size, a request header (v1, or v2 with tagged fields), a body; sans-I/O.

kafka-python's `kafka.protocol` classes do every encoding; this module only checks sizes, reads the
fixed header prefix (api key, version, correlation id) and turns any decoding failure into
CloseConnection, so bad bytes cost their own connection and nothing else.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from kafka.protocol.api_message import ApiMessage

SIZE = struct.Struct(">i")
#: api_key int16, api_version int16, correlation_id int32: the same in every request header version
HEADER_PREFIX = struct.Struct(">hhi")


class CloseConnection(Exception):
    """The peer sent something Kafka answers by closing the connection; `str(self)` says what."""


@dataclass(frozen=True, slots=True)
class HeaderPrefix:
    api_key: int
    api_version: int
    correlation_id: int


def frame_size(prefix: bytes, max_bytes: int) -> int:
    """The size announced by a frame's first 4 bytes, refused if it cannot hold a header or exceeds `max_bytes`."""
    size: int = SIZE.unpack(prefix)[0]
    if size < HEADER_PREFIX.size:
        raise CloseConnection(f"a frame of {size} bytes cannot hold a request header")
    if size > max_bytes:
        raise CloseConnection(f"a frame of {size} bytes exceeds the node's limit of {max_bytes} bytes")
    return size


def peek_header(frame: bytes) -> HeaderPrefix:
    if len(frame) < HEADER_PREFIX.size:
        raise CloseConnection(f"a frame of {len(frame)} bytes cannot hold a request header")
    return HeaderPrefix(*HEADER_PREFIX.unpack_from(frame))


def decode_request(frame: bytes, request_class: type[ApiMessage], version: int) -> ApiMessage:
    """Header and body of `frame` as `request_class` at `version`; CloseConnection if the bytes do not parse."""
    try:
        request = request_class.decode(frame, version=version, header=True)
    except Exception as exc:  # the decoder raises whatever the bytes provoke: struct.error, ValueError, ...
        raise CloseConnection(f"malformed {request_class.__name__} v{version}: {type(exc).__name__}: {exc}") from exc
    if request is None or request.header is None:
        raise CloseConnection(f"malformed {request_class.__name__} v{version}: no header")
    check_nulls(request, version, f"{request_class.__name__} v{version}: ")
    return request


def check_nulls(message: ApiMessage, version: int, where: str = "") -> None:
    """CloseConnection naming the field when a request carries null where its version allows none (an array or
    a string that is not nullable): the decoder lets those through, and a handler would take them for a bug."""
    for name, field in type(message).fields.items():
        spec = getattr(field, "_json", {})
        if not _in_versions(spec.get("versions", "0+"), version):
            continue
        value = getattr(message, name, None)
        kind = spec.get("type", "")
        if value is None and (kind.startswith("[]") or kind in ("string", "bytes")) \
                and not _in_versions(spec.get("nullableVersions", "none"), version):
            raise CloseConnection(f"malformed request: {where}{spec.get('name', name)} is null, which v{version} "
                                  f"does not allow")
        if isinstance(value, list):
            if kind in ("[]string", "[]bytes") and any(item is None for item in value):
                raise CloseConnection(f"malformed request: {where}{spec.get('name', name)} holds a null element")
            for item in value:
                if hasattr(type(item), "fields"):
                    check_nulls(item, version, f"{where}{spec.get('name', name)}[].")
        elif value is not None and hasattr(type(value), "fields"):
            check_nulls(value, version, f"{where}{spec.get('name', name)}.")


def _in_versions(spec: str, version: int) -> bool:
    """Whether `version` is in one of Kafka's version ranges ("0+", "3-5", "none")."""
    if spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    low, _, high = spec.partition("-")
    return int(low) <= version <= int(high or low)


def encode_response(response: ApiMessage, correlation_id: int) -> bytes:
    """A framed response echoing `correlation_id`; the header version follows the response class and version
    (ApiVersionsResponse always uses header v0, which its kafka-python class enforces)."""
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))
