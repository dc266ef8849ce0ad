"""kafka-python's names and shapes in txnsim's error hierarchy and structs, so its users' code ports."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

import kafka.errors as kafka_errors
import kafka.structs as kafka_structs
import pytest

import txnsim
from proto import errors
from proto.structs import OffsetAndMetadata, TopicPartition


def test_every_wire_error_is_a_class_statement_in_one_hierarchy() -> None:
    for code, cls in errors.ERRORS_BY_CODE.items():
        assert cls.errno == code
        assert issubclass(cls, errors.BrokerResponseError) and issubclass(cls, errors.KafkaError)
        assert cls.__module__ == "proto.errors"
        assert cls.__doc__, cls
        assert getattr(errors, cls.__name__) is cls  # go-to-definition finds it by its name


def test_kafka_python_names_are_the_same_classes_with_the_same_codes() -> None:
    for name in ("CorruptRecordError", "NotLeaderForPartitionError", "MessageSizeTooLargeError",
                 "OutOfOrderSequenceNumberError", "DuplicateSequenceNumberError", "InvalidConfigurationError",
                 "UnknownError", "InvalidFetchRequestError"):
        ours, theirs = getattr(errors, name), getattr(kafka_errors, name)
        assert ours.errno == theirs.errno, name
    assert errors.NotLeaderForPartitionError is errors.NotLeaderOrFollowerError
    assert errors.MessageSizeTooLargeError is errors.RecordTooLargeError


@pytest.mark.parametrize("name", [
    "CommitFailedError", "NoBrokersAvailable", "KafkaTimeoutError", "IllegalStateError", "ProducerFencedError",
    "KafkaConnectionError", "KafkaConfigurationError", "IllegalArgumentError", "RetriableError",
    "InvalidMetadataError", "NoOffsetForPartitionError", "TransactionAbortedError", "KafkaError",
    "TopicAuthorizationFailedError", "UnsupportedVersionError", "LeaderNotAvailableError",
])
def test_kafka_python_error_names_import_from_txnsim(name: str) -> None:
    cls = getattr(errors, name)
    assert issubclass(cls, errors.KafkaError)
    assert getattr(txnsim.errors, name) is cls


def test_top_level_exports_the_common_errors() -> None:
    assert txnsim.CommitFailedError is errors.CommitFailedError
    assert txnsim.NoBrokersAvailable is errors.KafkaConnectionError
    assert txnsim.ProducerFencedError is errors.ProducerFencedError


def test_retriable_errors_derive_from_retriable_error_as_in_kafka_python() -> None:
    for cls in errors.ERRORS_BY_CODE.values():
        assert issubclass(cls, errors.RetriableError) == cls.retriable, cls
        assert issubclass(cls, errors.InvalidMetadataError) == cls.invalid_metadata, cls
    assert errors.KafkaTimeoutError.retriable and issubclass(errors.KafkaTimeoutError, errors.RetriableError)
    assert errors.ProducerFencedError.fatal and not errors.ProducerFencedError.retriable


def test_unknown_codes_still_become_unknown_server_error() -> None:
    assert type(errors.for_code(31_999)) is errors.UnknownServerError


def test_topic_partition_is_kafka_pythons_named_tuple() -> None:
    tp = TopicPartition("orders", 2)
    topic, partition = tp
    assert (topic, partition) == ("orders", 2)
    assert tp == kafka_structs.TopicPartition("orders", 2) and hash(tp) == hash(("orders", 2))
    assert {tp: 1}[kafka_structs.TopicPartition("orders", 2)] == 1
    assert sorted([TopicPartition("b", 0), TopicPartition("a", 3), TopicPartition("a", 1)]) == [
        TopicPartition("a", 1), TopicPartition("a", 3), TopicPartition("b", 0)]
    assert str(tp) == "orders-2" and tp._fields == ("topic", "partition")
    copy = pickle.loads(pickle.dumps(tp))
    assert type(copy) is TopicPartition and copy == tp


def test_offset_and_metadata_has_kafka_pythons_fields_and_defaults() -> None:
    om = OffsetAndMetadata(42)
    assert om == (42, "", -1) and om.leader_epoch == -1
    assert OffsetAndMetadata._fields == kafka_structs.OffsetAndMetadata._fields
    assert OffsetAndMetadata(42, "m", 3) == kafka_structs.OffsetAndMetadata(42, "m", 3)
    assert type(pickle.loads(pickle.dumps(om))) is OffsetAndMetadata


def test_topic_partition_pickles_as_itself_after_pyspark_rewrites_namedtuples() -> None:
    """With PYSPARK_ENABLE_NAMEDTUPLE_PATCH=1 pyspark patches collections.namedtuple so that later
    namedtuples unpickle as anonymous look-alikes; a Spark worker that imports pyspark first must
    still get TopicPartition back, __str__ included."""
    script = textwrap.dedent("""
        import pickle, pyspark.serializers
        from proto.structs import TopicPartition, OffsetAndMetadata
        tp = pickle.loads(pickle.dumps(TopicPartition("in", 1)))
        om = pickle.loads(pickle.dumps(OffsetAndMetadata(5)))
        assert type(tp) is TopicPartition and str(tp) == "in-1", (type(tp), str(tp))
        assert type(om) is OffsetAndMetadata
    """)
    env = dict(os.environ, PYSPARK_ENABLE_NAMEDTUPLE_PATCH="1")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60, env=env)


def test_kafka_python_import_habits_work_on_the_public_package():
    import txnsim
    from proto import errors
    from txnsim.errors import CommitFailedError, NoBrokersAvailable  # as `from kafka.errors import ...`
    assert txnsim.errors.CommitFailedError is CommitFailedError is errors.CommitFailedError
    assert NoBrokersAvailable is errors.KafkaConnectionError
    assert txnsim.OffsetAndTimestamp(5, 1000, -1).offset == 5


def test_every_error_has_its_kip_1050_class_and_kafkas_table_wins():
    from proto.errors import ERRORS_BY_CODE, ErrorClass, error_class_of
    assert {error_class_of(cls) for cls in ERRORS_BY_CODE.values()} <= set(ErrorClass)
    assert error_class_of(errors.ProducerFencedError) is ErrorClass.APPLICATION_RECOVERABLE
    assert error_class_of(errors.InvalidProducerEpochError) is ErrorClass.APPLICATION_RECOVERABLE
    assert error_class_of(errors.NotCoordinatorError) is ErrorClass.REFRESH_RETRIABLE
    assert error_class_of(errors.ConcurrentTransactionsError) is ErrorClass.RETRIABLE
    assert error_class_of(errors.TransactionAbortableError) is ErrorClass.ABORTABLE
    assert error_class_of(errors.InvalidConfigError("x")) is ErrorClass.INVALID_CONFIG
    assert error_class_of(errors.UnknownServerError) is ErrorClass.FATAL


def test_the_class_table_in_kafka_wire_md_is_the_codes_own():
    import re
    from pathlib import Path

    from proto.errors import ERRORS_BY_CODE, RocketMQError, error_class_of
    doc = (Path(__file__).parents[2] / "docs" / "kafka-wire.md").read_text()
    documented = {(m[1], int(m[2]), m[3]) for m in re.finditer(r"^\| ([A-Z_]+) \| (-?\d+) \| ([a-z-]+) \|$", doc,
                                                                 re.MULTILINE)}
    wanted = {(cls.name, code, error_class_of(cls).value) for code, cls in ERRORS_BY_CODE.items()
              if not issubclass(cls, RocketMQError) and code < 1000}
    assert documented == wanted
