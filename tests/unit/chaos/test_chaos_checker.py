"""The chaos checker over hand-made histories: a clean one finds nothing, each anomaly is found."""
from __future__ import annotations

import itertools

import pytest

from proto.structs import TopicPartition
from txnsim.chaos.checker import ANOMALIES, check, txn_outcomes
from txnsim.chaos.history import (
    CommitStarted,
    FinalRead,
    Observed,
    Outcome,
    Polled,
    Seeked,
    Sent,
    TxnBegun,
    TxnEnded,
)

IN, OUT = "chaos-in", "chaos-out"


class Story:
    """Builds a history event by event, with a clock that ticks once per event."""

    def __init__(self) -> None:
        self.events: list = []
        self._clock = itertools.count(1)

    def now(self) -> float:
        return float(next(self._clock))

    def txn(self, name: str, topic: str, writes: list[tuple[int, int | None, int]], outcome: Outcome | None,
            *, on_purpose: bool = False, commit_asked: bool | None = None,
            offsets: dict[TopicPartition, int] | None = None) -> None:
        """`writes` are (partition, offset or None if unacknowledged, value)."""
        producer = name.split("/")[0]
        self.events.append(TxnBegun(name, producer, self.now()))
        for partition, offset, value in writes:
            self.events.append(Sent(producer, name, topic, partition, value, offset,
                                    None if offset is not None else "KafkaTimeoutError", self.now()))
        if commit_asked is None:
            commit_asked = outcome in (Outcome.COMMITTED, Outcome.UNKNOWN)
        if commit_asked:
            self.commit_asked(name)
        if outcome is not None and outcome is not Outcome.UNKNOWN:
            self.events.append(TxnEnded(name, outcome, on_purpose, offsets or {}, self.now()))

    def commit_asked(self, name: str) -> None:
        self.events.append(CommitStarted(name, self.now()))

    def poll(self, consumer: str, *records: Observed) -> None:
        self.events.append(Polled(consumer, tuple(records), self.now()))

    def seek(self, consumer: str, topic: str, partition: int, offset: int) -> None:
        self.events.append(Seeked(consumer, TopicPartition(topic, partition), offset, "test", self.now()))


def rec(topic: str, partition: int, offset: int, value: int, writer: str | None) -> Observed:
    return Observed(topic, partition, offset, value, writer)


def clean_story() -> tuple[Story, FinalRead]:
    """Two committed input transactions around an aborted one, copied once by a worker.

    chaos-in-0: 0 = v1 (gen.1/1), 1 marker, 2 = v3 (gen.1/2, aborted), 3 marker, 4 = v4 (gen.1/3)
    chaos-in-1: 0 = v2 (gen.1/1), 1 marker
    """
    s = Story()
    s.txn("gen.1/1", IN, [(0, 0, 1), (1, 0, 2)], Outcome.COMMITTED)
    s.txn("gen.1/2", IN, [(0, 2, 3)], Outcome.ABORTED, on_purpose=True)
    s.txn("gen.1/3", IN, [(0, 4, 4)], Outcome.COMMITTED)
    s.seek("w0.c1", IN, 0, 0)
    s.poll("w0.c1", rec(IN, 0, 0, 1, "gen.1/1"), rec(IN, 0, 4, 4, "gen.1/3"))
    s.txn("w0.1/1", OUT, [(2, 0, 1), (2, 1, 4)], Outcome.ABORTED, on_purpose=True,
          offsets={TopicPartition(IN, 0): 5})
    s.seek("w0.c1", IN, 0, 0)
    s.poll("w0.c1", rec(IN, 0, 0, 1, "gen.1/1"), rec(IN, 0, 4, 4, "gen.1/3"))
    s.txn("w0.1/2", OUT, [(2, 3, 1), (2, 4, 4)], Outcome.COMMITTED, offsets={TopicPartition(IN, 0): 5})
    final = FinalRead(
        records={IN: [rec(IN, 0, 0, 1, "gen.1/1"), rec(IN, 0, 4, 4, "gen.1/3"), rec(IN, 1, 0, 2, "gen.1/1")],
                 OUT: [rec(OUT, 2, 3, 1, "w0.1/2"), rec(OUT, 2, 4, 4, "w0.1/2")]},
        committed={TopicPartition(IN, 0): 5, TopicPartition(IN, 1): None, TopicPartition(IN, 2): None})
    return s, final


def counts(story: Story, final: FinalRead) -> dict[str, int]:
    result = check(story.events, final, input_topic=IN, output_topic=OUT)
    return {name: f.count for name, f in result.findings.items() if f.count}


def test_a_clean_history_has_no_anomalies():
    story, final = clean_story()
    result = check(story.events, final, input_topic=IN, output_topic=OUT)
    assert tuple(result.findings) == ANOMALIES
    assert result.valid, result.findings
    assert all(f.example is None for f in result.findings.values())
    assert result.totals["input records not copied yet (workers behind)"] == 1  # v2: nobody committed past it
    assert result.totals["generator transactions aborted on purpose"] == 1


def test_outcomes_follow_what_the_client_was_told():
    s = Story()
    s.txn("a/1", IN, [(0, 0, 1)], Outcome.COMMITTED)
    s.txn("a/2", IN, [(0, 1, 2)], None)                      # never asked to commit: cannot have committed
    s.txn("a/3", IN, [(0, 2, 3)], Outcome.UNKNOWN)          # asked, no answer
    s.txn("a/4", IN, [(0, 3, 4)], Outcome.ABORTED, commit_asked=True)  # commit failed, abort answered
    assert txn_outcomes(s.events) == {"a/1": Outcome.COMMITTED, "a/2": Outcome.ABORTED, "a/3": Outcome.UNKNOWN,
                                      "a/4": Outcome.ABORTED}


def test_lost_write_when_a_later_offset_was_read_but_an_acknowledged_commit_was_not():
    story, final = clean_story()
    story.txn("gen.1/4", IN, [(0, 6, 5)], Outcome.COMMITTED)
    story.txn("gen.1/5", IN, [(0, 8, 6)], Outcome.COMMITTED)
    final.records[IN].append(rec(IN, 0, 8, 6, "gen.1/5"))
    result = check(story.events, final, input_topic=IN, output_topic=OUT)
    assert result.findings["lost-write"].count == 1
    assert "value 5" in result.findings["lost-write"].example
    assert result.findings["unseen"].count == 1  # never read at all, too


def test_lost_write_when_committed_input_offsets_passed_a_record_that_was_never_copied():
    story, final = clean_story()
    final.committed[TopicPartition(IN, 1)] = 2  # the group says chaos-in-1@0 (v2) was processed
    assert counts(story, final) == {"lost-write": 1}
    result = check(story.events, final, input_topic=IN, output_topic=OUT)
    assert "value 2" in result.findings["lost-write"].example and OUT in result.findings["lost-write"].example


def test_unseen_when_the_final_read_misses_an_acknowledged_commit():
    story, final = clean_story()
    story.txn("gen.1/4", IN, [(2, 0, 9)], Outcome.COMMITTED)
    assert counts(story, final) == {"unseen": 1}


def test_records_of_undecided_or_failed_sends_are_not_expected():
    story, final = clean_story()
    story.txn("gen.1/4", IN, [(2, 0, 9)], Outcome.UNKNOWN)
    story.txn("gen.1/5", IN, [(2, None, 10)], Outcome.COMMITTED)  # the send failed: nothing acknowledged
    assert counts(story, final) == {}


def test_duplicate_when_a_value_is_at_two_offsets():
    story, final = clean_story()
    final.records[OUT].append(rec(OUT, 1, 7, 1, "w1.1/1"))
    result = check(story.events, final, input_topic=IN, output_topic=OUT)
    assert result.findings["duplicate"].count == 1
    assert "value 1" in result.findings["duplicate"].example


def test_rereading_the_same_offset_after_a_seek_is_no_duplicate():
    story, final = clean_story()  # the clean story polls chaos-in-0@0 twice, with a seek between
    assert counts(story, final) == {}


def test_inconsistent_offsets_when_a_read_disagrees_with_the_acknowledgement():
    story, final = clean_story()
    story.seek("w1.c1", IN, 1, 0)
    story.poll("w1.c1", rec(IN, 1, 0, 7, "gen.1/1"))
    result = check(story.events, final, input_topic=IN, output_topic=OUT)
    assert result.findings["inconsistent-offsets"].count == 1
    assert "chaos-in-1@0" in result.findings["inconsistent-offsets"].example


def test_g1a_when_read_committed_returns_an_aborted_record():
    story, final = clean_story()
    story.seek("w0.c2", IN, 0, 0)
    story.poll("w0.c2", rec(IN, 0, 0, 1, "gen.1/1"), rec(IN, 0, 2, 3, "gen.1/2"), rec(IN, 0, 4, 4, "gen.1/3"))
    result = check(story.events, final, input_topic=IN, output_topic=OUT)
    assert counts(story, final) == {"G1a": 1}
    assert "gen.1/2" in result.findings["G1a"].example


def test_g1a_in_the_output_names_the_aborted_copy():
    story, final = clean_story()
    final.records[OUT].append(rec(OUT, 2, 0, 1, "w0.1/1"))  # the aborted attempt's copy of v1
    found = counts(story, final)
    assert found["G1a"] == 1
    assert found["duplicate"] == 1  # v1 now appears twice in chaos-out as well


def test_g1a_without_a_header_falls_back_to_the_values_writers():
    story, final = clean_story()
    story.seek("w0.c2", IN, 0, 2)
    story.poll("w0.c2", rec(IN, 0, 2, 3, None))
    assert counts(story, final) == {"G1a": 1}


def test_precommitted_read_when_a_poll_returns_a_record_before_commit_was_asked():
    s = Story()
    s.txn("gen.1/1", IN, [(0, 0, 1)], None)
    s.seek("w0.c1", IN, 0, 0)
    s.poll("w0.c1", rec(IN, 0, 0, 1, "gen.1/1"))  # before the commit below was even asked for
    s.commit_asked("gen.1/1")
    s.events.append(TxnEnded("gen.1/1", Outcome.COMMITTED, False, {}, s.now()))
    final = FinalRead(records={IN: [rec(IN, 0, 0, 1, "gen.1/1")], OUT: []})
    result = check(s.events, final, input_topic=IN, output_topic=OUT)
    assert {n: f.count for n, f in result.findings.items() if f.count} == {"precommitted-read": 1}
    assert "before gen.1/1 asked to commit" in result.findings["precommitted-read"].example


def test_a_record_read_between_commit_asked_and_commit_answered_is_fine():
    s = Story()
    s.txn("gen.1/1", IN, [(0, 0, 1)], None)
    s.commit_asked("gen.1/1")
    s.seek("w0.c1", IN, 0, 0)
    s.poll("w0.c1", rec(IN, 0, 0, 1, "gen.1/1"))  # decided at EndTxn, answered a moment later
    s.events.append(TxnEnded("gen.1/1", Outcome.COMMITTED, False, {}, s.now()))
    final = FinalRead(records={IN: [rec(IN, 0, 0, 1, "gen.1/1")], OUT: []})
    assert check(s.events, final, input_topic=IN, output_topic=OUT).valid


def skipping_story(seek_between: bool) -> tuple[Story, FinalRead]:
    s = Story()
    s.txn("gen.1/1", IN, [(0, 0, 1), (0, 1, 2), (0, 2, 3)], Outcome.COMMITTED)
    s.seek("w0.c1", IN, 0, 0)
    s.poll("w0.c1", rec(IN, 0, 0, 1, "gen.1/1"))
    if seek_between:
        s.seek("w0.c1", IN, 0, 2)
    s.poll("w0.c1", rec(IN, 0, 2, 3, "gen.1/1"))
    final = FinalRead(records={IN: [rec(IN, 0, o, o + 1, "gen.1/1") for o in range(3)], OUT: []})
    return s, final


def test_poll_skip_when_consecutive_reads_jump_over_a_committed_offset():
    story, final = skipping_story(seek_between=False)
    result = check(story.events, final, input_topic=IN, output_topic=OUT)
    assert {n: f.count for n, f in result.findings.items() if f.count} == {"poll-skip": 1}
    assert "skipping committed offset(s) 1" in result.findings["poll-skip"].example


def test_poll_skip_after_a_seek_counts_from_the_seek_position():
    story, final = skipping_story(seek_between=True)
    assert counts(story, final) == {}
    s = Story()
    s.txn("gen.1/1", IN, [(0, 0, 1), (0, 1, 2)], Outcome.COMMITTED)
    s.seek("w0.c1", IN, 0, 0)
    s.poll("w0.c1", rec(IN, 0, 1, 2, "gen.1/1"))  # the first read after the seek misses offset 0
    final = FinalRead(records={IN: [rec(IN, 0, 0, 1, "gen.1/1"), rec(IN, 0, 1, 2, "gen.1/1")], OUT: []})
    assert counts(s, final) == {"poll-skip": 1}


@pytest.mark.parametrize("seek_between", [False, True])
def test_nonmonotonic_poll_only_without_a_seek_in_between(seek_between):
    s = Story()
    s.txn("gen.1/1", IN, [(0, 0, 1), (0, 1, 2)], Outcome.COMMITTED)
    s.seek("w0.c1", IN, 0, 0)
    s.poll("w0.c1", rec(IN, 0, 0, 1, "gen.1/1"), rec(IN, 0, 1, 2, "gen.1/1"))
    if seek_between:
        s.seek("w0.c1", IN, 0, 0)
    s.poll("w0.c1", rec(IN, 0, 0, 1, "gen.1/1"))
    final = FinalRead(records={IN: [rec(IN, 0, 0, 1, "gen.1/1"), rec(IN, 0, 1, 2, "gen.1/1")], OUT: []})
    assert counts(s, final) == ({} if seek_between else {"nonmonotonic-poll": 1})


def test_consumers_are_checked_separately():
    s = Story()
    s.txn("gen.1/1", IN, [(0, 0, 1), (0, 1, 2)], Outcome.COMMITTED)
    s.seek("w0.c1", IN, 0, 0)
    s.poll("w0.c1", rec(IN, 0, 0, 1, "gen.1/1"), rec(IN, 0, 1, 2, "gen.1/1"))
    s.seek("w0.c2", IN, 0, 0)
    s.poll("w0.c2", rec(IN, 0, 0, 1, "gen.1/1"))
    final = FinalRead(records={IN: [rec(IN, 0, 0, 1, "gen.1/1"), rec(IN, 0, 1, 2, "gen.1/1")], OUT: []})
    assert counts(s, final) == {}


def test_nonmonotonic_send_when_a_producers_offsets_go_backwards():
    s = Story()
    s.txn("gen.1/1", IN, [(0, 5, 1)], Outcome.COMMITTED)
    s.txn("gen.1/2", IN, [(0, 3, 2)], Outcome.COMMITTED)
    s.txn("gen.2/1", IN, [(0, 1, 3)], Outcome.ABORTED)  # another producer session: its own order
    final = FinalRead(records={IN: [rec(IN, 0, 3, 2, "gen.1/2"), rec(IN, 0, 5, 1, "gen.1/1")], OUT: []})
    result = check(s.events, final, input_topic=IN, output_topic=OUT)
    assert {n: f.count for n, f in result.findings.items() if f.count} == {"nonmonotonic-send": 1}
    assert "gen.1" in result.findings["nonmonotonic-send"].example
