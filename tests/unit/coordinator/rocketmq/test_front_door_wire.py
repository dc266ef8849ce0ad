"""The front door's pieces without a server: the status table, conversions, and the Telemetry session
as a check channel."""
from __future__ import annotations

import gzip
import hashlib

import pytest

from coordinator.rocketmq import rmq_messages
from coordinator.rocketmq.producers import ProducerRegistry
from coordinator.rocketmq.rmq_wire import code_for, rmq, rmq_service
from coordinator.rocketmq.telemetry import TelemetrySession
from proto import errors, records
from proto import errors as rmq_errors
from proto import txnsim_pb2 as pb


@pytest.mark.parametrize("error, code", [
    (errors.InvalidTransactionIdError("x"), rmq.INVALID_TRANSACTION_ID),
    (errors.MessagePropertyConflictWithTypeError("x"), rmq.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    (errors.IllegalMessagePropertyKeyError("x"), rmq.ILLEGAL_MESSAGE_PROPERTY_KEY),
    (errors.TopicNotFoundError("x"), rmq.TOPIC_NOT_FOUND),
    (errors.UnknownTopicOrPartitionError("x"), rmq.TOPIC_NOT_FOUND),
    (errors.InvalidRequestError("x"), rmq.BAD_REQUEST),
    (errors.InvalidRecordError("x"), rmq.BAD_REQUEST),
    (errors.RecordTooLargeError("x"), rmq.MESSAGE_BODY_TOO_LARGE),
    (errors.KafkaTimeoutError("x"), rmq.PROXY_TIMEOUT),
    (errors.RequestTimedOutError("x"), rmq.PROXY_TIMEOUT),
    (errors.NotCoordinatorError("x"), rmq.INTERNAL_ERROR),
    (RuntimeError("a bug"), rmq.INTERNAL_ERROR),
])
def test_every_error_maps_to_a_rocketmq_code(error, code):
    assert code_for(error) == code


@pytest.mark.parametrize("error_type", [rmq_errors.InvalidReceiptHandleError, rmq_errors.IllegalInvisibleTimeError,
                                        rmq_errors.MessageNotFoundError, rmq_errors.UnsupportedError])
def test_the_front_doors_own_errors_carry_rocketmqs_codes(error_type):
    assert error_type.errno == rmq.Code.Value(error_type.name)
    assert code_for(error_type("x")) == error_type.errno


def test_accepted_types_follow_the_topics_message_type():
    assert rmq_messages.accepted_types({}) == rmq_messages.accepted_types({"message.type": "MIXED"})
    assert set(rmq_messages.accepted_types({})) == {rmq.NORMAL, rmq.FIFO, rmq.DELAY, rmq.TRANSACTION}
    assert rmq_messages.accepted_types({"message.type": "TRANSACTION"}) == (rmq.TRANSACTION,)
    assert rmq_messages.accepted_types({"message.type": "NORMAL"}) == (rmq.NORMAL,)


def sent(body: bytes = b"body", **props: str) -> rmq.Message:
    msg = rmq.Message(topic=rmq.Resource(name="points"), body=body, user_properties=props,
                      system_properties=rmq.SystemProperties(message_id="01AB", message_type=rmq.NORMAL,
                                                             body_encoding=rmq.IDENTITY, tag="T", keys=["k1", "k2"]))
    msg.system_properties.born_timestamp.FromMilliseconds(1234)
    return msg


def test_a_stored_message_reads_back_with_its_id_tag_keys_and_properties():
    timestamp, key, value, headers = rmq_messages.record_of(sent(order="7"), now_ms=5000)
    record = records.Record(offset=42, timestamp=timestamp, key=key, value=value, headers=tuple(headers))
    back = rmq_messages.message_of_record("points", 2, record)
    assert back.body == b"body" and dict(back.user_properties) == {"order": "7"}
    props = back.system_properties
    assert (props.message_id, props.tag, list(props.keys)) == ("01AB", "T", ["k1", "k2"])
    assert props.born_timestamp.ToMilliseconds() == 1234 and props.body_encoding == rmq.IDENTITY
    assert (props.queue_id, props.queue_offset) == (2, 42)


@pytest.mark.parametrize("broken", [
    lambda m: m.topic.ClearField("name"), lambda m: m.ClearField("body"),
    lambda m: m.system_properties.ClearField("message_id"), lambda m: m.user_properties.update({"UNIQ_KEY": "x"}),
])
def test_garbage_messages_are_refused_with_bad_request_codes(broken):
    msg = sent()
    broken(msg)
    with pytest.raises(errors.KafkaError) as caught:
        rmq_messages.validate(msg)
    assert 40000 <= code_for(caught.value) <= 40020


def test_a_check_back_is_a_recover_orphaned_transaction_command_the_client_can_decode():
    check = pb.TransactionCheck(transaction_id="TX-1-5", producer_group="points", check_times=1, message=pb.HalfMessage(
        topic="points", value=b"v", message_id="01AB", tag="T", keys="k1 k2", born_timestamp_ms=1234,
        headers=[pb.MessageHeader(key="order", value=b"7")]))
    command = rmq_messages.check_command(check).recover_orphaned_transaction_command
    assert command.transaction_id == "TX-1-5"
    props = command.message.system_properties
    assert props.body_encoding == rmq.IDENTITY and props.message_type == rmq.TRANSACTION
    assert (props.message_id, props.tag, list(props.keys)) == ("01AB", "T", ["k1", "k2"])
    assert command.message.topic.name == "points" and dict(command.message.user_properties) == {"order": "7"}


def test_a_tag_filter_matches_any_of_its_tags():
    def record(tag):
        return records.Record(offset=0, timestamp=0, key=None, value=b"",
                              headers=(("TAGS", tag.encode()),) if tag else ())
    everything = rmq_messages.tag_filter(rmq.FilterExpression(type=rmq.TAG, expression="*"))
    some = rmq_messages.tag_filter(rmq.FilterExpression(type=rmq.TAG, expression="a || b"))
    assert everything(record("")) and everything(record("z"))
    assert some(record("a")) and some(record("b")) and not some(record("c")) and not some(record(""))
    with pytest.raises(rmq_errors.UnsupportedError):
        rmq_messages.tag_filter(rmq.FilterExpression(type=rmq.SQL, expression="a > 1"))


def producer_settings(*topics: str) -> rmq_service.TelemetryCommand:
    settings = rmq.Settings(client_type=rmq.PRODUCER,
                            publishing=rmq.Publishing(topics=[rmq.Resource(name=t) for t in topics]))
    return rmq_service.TelemetryCommand(settings=settings)


def test_a_producers_telemetry_stream_is_its_check_channel_under_each_topic_once():
    registry = ProducerRegistry()
    session = TelemetrySession("client-1", registry, max_body_bytes=1000)
    session.received(producer_settings("a", "b"))
    session.received(producer_settings("a", "b"))  # sent again at +1 s and every 300 s
    assert registry.groups() == {"a": 1, "b": 1}
    reply = session.next(0)
    assert reply.status.code == rmq.OK and reply.settings.publishing.max_body_size == 1000
    assert reply.settings.publishing.validate_message_type and not reply.settings.metric.on
    session.received(producer_settings("b"))
    assert registry.groups() == {"b": 1}
    assert registry.deliver(pb.TransactionCheck(transaction_id="TX-0-1", producer_group="b",
                                                message=pb.HalfMessage(topic="b", message_id="01")))
    commands = [session.next(0) for _ in range(3)]
    assert commands[-1].recover_orphaned_transaction_command.transaction_id == "TX-0-1"
    session.close()
    assert registry.groups() == {} and not session.offer(pb.TransactionCheck(producer_group="b"))


def test_a_consumers_settings_are_answered_without_registering_it():
    registry = ProducerRegistry()
    session = TelemetrySession("client-2", registry, max_body_bytes=1000)
    session.received(rmq_service.TelemetryCommand(settings=rmq.Settings(
        client_type=rmq.SIMPLE_CONSUMER, subscription=rmq.Subscription(group=rmq.Resource(name="g")))))
    assert registry.groups() == {}
    assert session.next(0).settings.subscription.group.name == "g"


def gzip_message(body: bytes) -> rmq.Message:
    return rmq.Message(topic=rmq.Resource(name="points"), body=body, system_properties=rmq.SystemProperties(
        message_id="01GZ", message_type=rmq.NORMAL, body_encoding=rmq.GZIP))


def test_a_gzip_body_inflates_only_up_to_the_limit():
    assert rmq_messages.body_of(gzip_message(gzip.compress(b"-10" * 100)), max_bytes=300) == b"-10" * 100
    bomb = gzip.compress(bytes(50 << 20))  # 50 KiB that would become 50 MiB in the node
    with pytest.raises(errors.RecordTooLargeError, match="MESSAGE_BODY_TOO_LARGE.*past 1048588"):
        rmq_messages.body_of(gzip_message(bomb))
    assert code_for(errors.RecordTooLargeError("x")) == rmq.MESSAGE_BODY_TOO_LARGE
    with pytest.raises(errors.InvalidRequestError, match="not valid GZIP"):
        rmq_messages.body_of(gzip_message(gzip.compress(b"cut short")[:-6]))
    with pytest.raises(errors.InvalidRequestError, match="not valid GZIP"):
        rmq_messages.body_of(gzip_message(b"not gzip at all"))


def test_settings_carry_what_the_proxy_fills_in_so_every_client_can_start():
    """The Node.js client dies at start-up without a producer's backoff policy (TypeError 'getStrategyCase')."""
    session = TelemetrySession("c1", ProducerRegistry(), max_body_bytes=4096)
    session.received(rmq_service.TelemetryCommand(settings=rmq.Settings(
        client_type=rmq.PRODUCER, publishing=rmq.Publishing(topics=[rmq.Resource(name="points")]))))
    reply = session.next(1.0)
    assert reply is not None
    policy = reply.settings.backoff_policy
    assert policy.max_attempts == 3 and policy.exponential_backoff.multiplier == 2.0
    assert policy.exponential_backoff.initial.ToMilliseconds() == 10
    assert reply.settings.publishing.max_body_size == 4096
    consumer = TelemetrySession("c2", ProducerRegistry(), max_body_bytes=4096)
    consumer.received(rmq_service.TelemetryCommand(settings=rmq.Settings(
        client_type=rmq.SIMPLE_CONSUMER, subscription=rmq.Subscription(group=rmq.Resource(name="readers")))))
    answer = consumer.next(1.0)
    assert answer is not None and len(answer.settings.backoff_policy.customized_backoff.next) == 18
    assert answer.settings.subscription.receive_batch_size == 32


def test_a_goodbye_unregisters_the_producer_but_leaves_its_stream_open():
    registry = ProducerRegistry()
    session = TelemetrySession("c1", registry, max_body_bytes=4096)
    session.received(rmq_service.TelemetryCommand(settings=rmq.Settings(
        client_type=rmq.PRODUCER, publishing=rmq.Publishing(topics=[rmq.Resource(name="points")]))))
    session.next(1.0)
    assert registry.pick("points") is session
    session.retire()
    assert registry.pick("points") is None  # no check-back goes to a client that said goodbye
    assert not session.closed  # the client closes it; a stream the server ends, the Node.js client reopens
    session.received(rmq_service.TelemetryCommand(settings=rmq.Settings(
        client_type=rmq.PRODUCER, publishing=rmq.Publishing(topics=[rmq.Resource(name="points")]))))
    assert registry.pick("points") is None


def test_delivered_and_checked_messages_carry_the_md5_of_their_body():
    record = records.Record(3, 1000, None, b"-10", ())
    message = rmq_messages.message_of_record("points", 0, record)
    assert message.system_properties.body_digest.type == rmq.MD5
    assert message.system_properties.body_digest.checksum == hashlib.md5(b"-10").hexdigest().upper()
    check = rmq_messages.check_command(pb.TransactionCheck(transaction_id="TX-0-1", message=pb.HalfMessage(
        topic="points", value=b"-10", message_id="01A")))
    digest = check.recover_orphaned_transaction_command.message.system_properties.body_digest
    assert digest.checksum == hashlib.md5(b"-10").hexdigest().upper()
