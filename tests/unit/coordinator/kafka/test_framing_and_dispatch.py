"""The Kafka listener's framing and dispatch without sockets: every frame ends in a response, no response
(acks=0) or CloseConnection, whatever its bytes."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import ProduceRequest

from coordinator.kafka.apis import SERVED, ApiKey, WireError
from coordinator.kafka.dispatch import Dispatcher
from coordinator.kafka.framing import (
    CloseConnection,
    frame_size,
    peek_header,
)
from coordinator.kafka.server import ListenerLimits


def request_frame(request, correlation_id: int = 7) -> bytes:
    """The frame a client sends, without its 4-byte size prefix."""
    request.with_header(correlation_id=correlation_id, client_id="unit")
    return bytes(request.encode(header=True, framed=False))


def response_of(response_class, data: bytes, version: int):
    (size,) = struct.unpack_from(">i", data)
    assert size == len(data) - 4
    return response_class.decode(data[4:], version=version, header=True)


def answering(overrides: dict | None = None) -> Dispatcher:
    """A dispatcher whose handlers answer ApiVersions for real and fail the test for anything not overridden."""
    from coordinator.kafka.cluster_apis import ClusterApis

    def unexpected(request, version):
        raise AssertionError(f"unexpected {type(request).__name__}")
    handlers = {key: unexpected for key in SERVED}
    handlers[ApiKey.API_VERSIONS] = ClusterApis(cluster=None, init_producer_id=None,
                                                kafka_address_of=lambda n: None).api_versions
    handlers.update(overrides or {})
    return Dispatcher(handlers)


# ------------------------------------------------------------ framing


def test_frame_size_refuses_frames_too_small_for_a_header_or_over_the_limit():
    limit = ListenerLimits().socket_request_max_bytes
    assert frame_size(struct.pack(">i", 100), limit) == 100
    assert frame_size(struct.pack(">i", limit), limit) == limit
    for size in (-1, 0, 7, limit + 1, 2**31 - 1):
        with pytest.raises(CloseConnection):
            frame_size(struct.pack(">i", size), limit)


def test_the_limit_is_kafkas_socket_request_max_bytes_so_a_large_produce_is_answered_not_cut_off():
    assert ListenerLimits().socket_request_max_bytes == 104_857_600


def test_a_short_frame_closes_the_connection():
    with pytest.raises(CloseConnection):
        peek_header(b"\x00\x12\x00")


# ------------------------------------------------------------ ApiVersions


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_answers_in_header_v0_echoing_the_correlation_id(version):
    request = ApiVersionsRequest(version=version, client_software_name="unit", client_software_version="1")
    data = answering().handle(request_frame(request, correlation_id=4242))
    assert struct.unpack_from(">i", data, 4)[0] == 4242
    # header v0 is the correlation id alone: the body's error code follows at once
    assert struct.unpack_from(">h", data, 8)[0] == 0
    response = ApiVersionsResponse.decode(data[4:], version=version, header=True)
    advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert advertised == {int(api.key): (api.min_version, api.max_version) for api in SERVED.values()}


def test_librdkafka_sees_produce_3_and_fetch_4_so_it_writes_v2_batches():
    produce, fetch = SERVED[ApiKey.PRODUCE], SERVED[ApiKey.FETCH]
    assert produce.advertises(3) and produce.serves(3)
    assert fetch.advertises(4) and fetch.serves(4)


def test_an_api_versions_request_of_an_unknown_version_gets_unsupported_version_in_v0():
    frame = bytearray(request_frame(ApiVersionsRequest(version=3, client_software_name="x",
                                                       client_software_version="1"), correlation_id=9))
    struct.pack_into(">h", frame, 2, 77)  # a version from the future, whose body nobody here can parse
    data = answering().handle(bytes(frame))
    response = ApiVersionsResponse.decode(data[4:], version=0, header=True)
    assert response.header.correlation_id == 9
    assert response.error_code == WireError.UNSUPPORTED_VERSION
    assert (18, 0, 4) in [(k.api_key, k.min_version, k.max_version) for k in response.api_keys]


# ------------------------------------------------------------ refusals


def test_an_unknown_api_key_closes_the_connection():
    frame = bytearray(request_frame(MetadataRequest(version=1, topics=None)))
    struct.pack_into(">h", frame, 0, 999)
    with pytest.raises(CloseConnection, match="unknown API key 999"):
        answering().handle(bytes(frame))


def test_a_version_not_served_closes_the_connection():
    produce_v2 = ProduceRequest(version=2, acks=1, timeout_ms=100, topic_data=[])
    with pytest.raises(CloseConnection, match="PRODUCE v2 is not served"):
        answering().handle(request_frame(produce_v2))
    frame = bytearray(request_frame(MetadataRequest(version=9, topics=None)))
    struct.pack_into(">h", frame, 2, 10)  # Metadata v10 carries topic ids: not served
    with pytest.raises(CloseConnection, match="METADATA v10"):
        answering().handle(bytes(frame))


def test_a_truncated_body_closes_the_connection():
    frame = request_frame(MetadataRequest(version=9, topics=[MetadataRequest.MetadataRequestTopic(name="orders")]))
    with pytest.raises(CloseConnection, match="malformed"):
        answering({ApiKey.METADATA: lambda r, v: MetadataResponse(version=v, brokers=[], topics=[])}).handle(
            frame[:-6])


def test_a_handler_bug_closes_only_that_connection():
    def broken(request, version):
        raise ZeroDivisionError("a bug")
    with pytest.raises(CloseConnection, match="ZeroDivisionError"):
        answering({ApiKey.METADATA: broken}).handle(request_frame(MetadataRequest(version=1, topics=None)))


def test_a_produce_with_acks_0_gets_no_response():
    produce = ProduceRequest(version=9, transactional_id=None, acks=0, timeout_ms=100, topic_data=[])
    assert answering({ApiKey.PRODUCE: lambda r, v: None}).handle(request_frame(produce)) is None


@settings(max_examples=300, deadline=None)
@given(api_key=st.sampled_from(sorted(SERVED) + [-1, 4, 999]), version=st.integers(-2, 20),
       body=st.binary(max_size=300))
def test_random_bytes_after_a_header_prefix_never_escape_as_anything_but_close_connection(api_key, version, body):
    frame = struct.pack(">hhi", api_key, version, 1) + body
    try:
        answering({key: (lambda r, v: None) for key in SERVED if key != ApiKey.API_VERSIONS}).handle(frame)
    except CloseConnection:
        pass  # the expected refusal


@pytest.mark.parametrize("api_key, version, body", [
    (3, 1, struct.pack(">i", 2**31 - 1)),                                   # Metadata: 2^31-1 topics, none sent
    (3, 9, b"\xff\xff\xff\xff\x07"),                                        # the same as a compact array
    (1, 12, struct.pack(">iiiibii", -1, 500, 1, 100, 0, 0, -1) + b"\xff\xff\xff\xff\x07"),  # Fetch: 2^32 topics
])
def test_a_huge_announced_array_closes_the_connection_without_allocating_it(api_key, version, body):
    flexible_header_end = b"\x00" if version >= 9 else b""
    frame = struct.pack(">hhih", api_key, version, 1, 1) + b"x" + flexible_header_end + body
    with pytest.raises(CloseConnection, match="malformed"):
        answering({key: (lambda r, v: None) for key in SERVED if key != ApiKey.API_VERSIONS}).handle(frame)
