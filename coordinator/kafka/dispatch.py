"""From a request frame to a response frame: version checks, decoding, the handler, encoding.

Invariants: every frame gets exactly one outcome (response bytes, None for a Produce with acks=0, or
CloseConnection); an unknown API key, a version not served or bytes that do not decode close the
connection as Kafka does, except an ApiVersions request of an unknown version, answered
UNSUPPORTED_VERSION in v0 so the client retries with a version it finds there.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass

from kafka.protocol.api_message import ApiMessage

from coordinator.kafka.apis import (
    SERVED,
    ApiKey,
    ServedApi,
    WireError,
    api_versions_response,
)
from coordinator.kafka.framing import (
    CloseConnection,
    decode_request,
    encode_response,
    peek_header,
)

log = logging.getLogger(__name__)

#: the peer of the connection whose request the current thread answers, as Kafka shows it ("/127.0.0.1"):
#: set by the listener's reader thread, which runs every request but Produce (group members' hosts)
CLIENT_HOST: ContextVar[str] = ContextVar("CLIENT_HOST", default="")

#: (decoded request, its version) -> response at that version, or None when the client expects none
Handler = Callable[[ApiMessage, int], ApiMessage | None]


@dataclass(frozen=True, slots=True)
class Decoded:
    """A request frame checked and decoded, not yet answered; `immediate` is an answer needing no handler."""

    api: ServedApi
    version: int
    correlation_id: int
    request: ApiMessage | None
    immediate: bytes | None = None

    def produce_partitions(self) -> frozenset[tuple[str, int]] | None:
        """The partitions a Produce request writes (it may run beside requests for other partitions); None for
        every other request, which runs alone, in order."""
        if self.api.key != ApiKey.PRODUCE or self.request is None:
            return None
        return frozenset((topic.name, part.index) for topic in self.request.topic_data
                         for part in topic.partition_data)


class Dispatcher:
    def __init__(self, handlers: Mapping[ApiKey, Handler]) -> None:
        missing = set(SERVED) - set(handlers)
        if missing:
            raise ValueError(f"no handler for advertised API keys {sorted(missing)}")
        self._handlers = dict(handlers)

    def handle(self, frame: bytes) -> bytes | None:
        return self.answer(self.decode(frame))

    def decode(self, frame: bytes) -> Decoded:
        header = peek_header(frame)
        api = SERVED.get(header.api_key)
        if api is None:
            raise CloseConnection(f"unknown API key {header.api_key}")
        if api.key == ApiKey.API_VERSIONS and not api.advertises(header.api_version):
            return Decoded(api, header.api_version, header.correlation_id, None, immediate=encode_response(
                api_versions_response(0, WireError.UNSUPPORTED_VERSION), header.correlation_id))
        if not api.serves(header.api_version):
            raise CloseConnection(f"{api.key.name} v{header.api_version} is not served "
                                  f"(v{api.lowest_served}-{api.max_version} are)")
        return Decoded(api, header.api_version, header.correlation_id,
                       decode_request(frame, api.request, header.api_version))

    def answer(self, decoded: Decoded) -> bytes | None:
        """The response frame, None when the client expects none (Produce with acks=0), or CloseConnection."""
        if decoded.immediate is not None or decoded.request is None:
            return decoded.immediate
        api, version = decoded.api, decoded.version
        try:
            response = self._handlers[api.key](decoded.request, version)
        except CloseConnection:
            raise
        except Exception as exc:  # a node bug: this connection goes, the node and every other one stay
            log.exception("%s v%d failed", api.key.name, version)
            raise CloseConnection(f"{api.key.name} failed on the node: {type(exc).__name__}: {exc}") from exc
        if response is None:
            return None
        return encode_response(response, decoded.correlation_id)
