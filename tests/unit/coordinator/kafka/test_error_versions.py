"""Error codes a client's version does not know are answered as Kafka answers them: KafkaJS speaks
AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v1, and reported PRODUCER_FENCED (added in v2) as
"Unknown error code 90"."""
from __future__ import annotations

import pytest
from kafka.protocol.producer import (
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    InitProducerIdResponse,
    ProduceResponse,
)

from coordinator.kafka.apis import ApiKey
from coordinator.kafka.error_versions import downgrade, older_code
from proto import errors

FENCED, OLD_FENCED = errors.ProducerFencedError.errno, errors.InvalidProducerEpochError.errno
ABORTABLE, INVALID_TXN_STATE = errors.TransactionAbortableError.errno, errors.InvalidTxnStateError.errno


@pytest.mark.parametrize("api, first_version", [
    (ApiKey.INIT_PRODUCER_ID, 4), (ApiKey.ADD_PARTITIONS_TO_TXN, 2), (ApiKey.ADD_OFFSETS_TO_TXN, 2),
    (ApiKey.END_TXN, 2)])
def test_producer_fenced_reaches_only_the_versions_that_know_it(api, first_version):
    assert older_code(api, first_version - 1, FENCED) == OLD_FENCED
    assert older_code(api, first_version, FENCED) == FENCED
    assert older_code(api, 0, errors.ConcurrentTransactionsError.errno) == errors.ConcurrentTransactionsError.errno


def test_produce_and_txn_offset_commit_never_say_producer_fenced():
    for version in (3, 9, 12):
        assert older_code(ApiKey.PRODUCE, version, FENCED) == OLD_FENCED
        assert older_code(ApiKey.TXN_OFFSET_COMMIT, version, FENCED) == OLD_FENCED
    assert older_code(ApiKey.PRODUCE, 10, ABORTABLE) == INVALID_TXN_STATE
    assert older_code(ApiKey.PRODUCE, 11, ABORTABLE) == ABORTABLE
    assert older_code(ApiKey.TXN_OFFSET_COMMIT, 1, errors.CoordinatorLoadInProgressError.errno) == \
        errors.CoordinatorNotAvailableError.errno


def test_every_error_code_of_a_response_is_rewritten_at_any_depth():
    R = AddPartitionsToTxnResponse
    response = R(version=1, throttle_time_ms=0, results_by_topic_v3_and_below=[
        R.AddPartitionsToTxnTopicResult(name="t", results_by_partition=[
            R.AddPartitionsToTxnTopicResult.AddPartitionsToTxnPartitionResult(partition_index=p,
                                                                               partition_error_code=FENCED)
            for p in range(2)])])
    end = EndTxnResponse(version=1, throttle_time_ms=0, error_code=FENCED)
    downgrade(end, ApiKey.END_TXN, 1)
    assert end.error_code == OLD_FENCED
    init = InitProducerIdResponse(version=4, throttle_time_ms=0, error_code=FENCED, producer_id=-1, producer_epoch=-1)
    downgrade(init, ApiKey.INIT_PRODUCER_ID, 4)
    assert init.error_code == FENCED
    P = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
    produce = ProduceResponse(version=9, throttle_time_ms=0, responses=[ProduceResponse.TopicProduceResponse(
        name="t", partition_responses=[P(index=0, error_code=ABORTABLE, base_offset=-1, log_append_time_ms=-1,
                                         log_start_offset=-1, record_errors=[], error_message=None)])])
    downgrade(produce, ApiKey.PRODUCE, 9)
    assert produce.responses[0].partition_responses[0].error_code == INVALID_TXN_STATE
    downgrade(response, ApiKey.ADD_PARTITIONS_TO_TXN, 1)
    assert [p.partition_error_code for p in response.results_by_topic_v3_and_below[0].results_by_partition] == [
        OLD_FENCED, OLD_FENCED]
