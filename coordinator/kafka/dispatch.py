"""From a request frame to a response frame: version checks, decoding, the handler, encoding.

Invariants: every frame gets exactly one outcome (response bytes, None for a Produce with acks=0, or
CloseConnection); an unknown API key, a version not served or bytes that do not decode close the
connection as Kafka does, except an ApiVersions request of an unknown version, answered
UNSUPPORTED_VERSION in v0 so the client retries with a version it finds there.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from kafka.protocol.api_message import ApiMessage

from coordinator.kafka.apis import (
    SERVED,
    ApiKey,
    ServedApi,
    WireError,
    api_versions_response,
)
from coordinator.kafka.error_versions import downgrade
from coordinator.kafka.framing import (
    CloseConnection,
    decode_request,
    encode_response,
    peek_header,
)
from coordinator.later import answered, then

log = logging.getLogger(__name__)

#: the peer of the connection whose request the current thread answers, as Kafka shows it ("/127.0.0.1"):
#: set by the listener's reader thread, which runs every request but Produce (group members' hosts)
CLIENT_HOST: ContextVar[str] = ContextVar("CLIENT_HOST", default="")

#: (decoded request, its version) -> response at that version, or None when the client expects none
Handler = Callable[[ApiMessage, int], ApiMessage | None]
#: the same, for a request that waits (a long-polling Fetch, a held JoinGroup): its response to come
DeferredHandler = Callable[[ApiMessage, int], Future[ApiMessage | None]] | Callable[[ApiMessage, int], Future[Any]]


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
    def __init__(self, handlers: Mapping[ApiKey, Handler],
                 deferred: Mapping[ApiKey, DeferredHandler] | None = None) -> None:
        missing = set(SERVED) - set(handlers)
        if missing:
            raise ValueError(f"no handler for advertised API keys {sorted(missing)}")
        self._handlers = dict(handlers)
        #: the requests answered later, with no thread waiting for them meanwhile
        self._deferred = dict(deferred or {})

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

    def answer_later(self, decoded: Decoded) -> Future[bytes | None]:
        """answer(), as a future: done at once for most requests (handled on the calling thread), later for a
        request that waits. Its exception is CloseConnection, as answer() raises it."""
        deferred = self._deferred.get(decoded.api.key)
        if deferred is None or decoded.request is None:
            try:
                return answered(self.answer(decoded))
            except CloseConnection as exc:
                failed: Future[bytes | None] = Future()
                failed.set_exception(exc)
                return failed
        api, version = decoded.api, decoded.version
        try:
            pending: Future[Any] = deferred(decoded.request, version)
        except Exception as exc:  # a node bug, as in answer()
            pending = Future()
            pending.set_exception(exc)

        def encoded(response: ApiMessage | None) -> bytes | None:
            if response is None:
                return None
            downgrade(response, api.key, version)
            return encode_response(response, decoded.correlation_id)

        out: Future[bytes | None] = Future()

        def finish(done: Future[bytes | None]) -> None:
            error = done.exception()
            if error is None:
                out.set_result(done.result())
            elif isinstance(error, CloseConnection):
                out.set_exception(error)
            else:
                log.error("%s v%d failed", api.key.name, version, exc_info=error)
                out.set_exception(CloseConnection(f"{api.key.name} failed on the node: {type(error).__name__}: "
                                                  f"{error}"))

        then(pending, encoded).add_done_callback(finish)
        return out

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
        downgrade(response, api.key, version)
        return encode_response(response, decoded.correlation_id)
