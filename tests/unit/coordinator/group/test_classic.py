"""The classic group protocol core (coordinator/group/classic.py) with a plain clock: no threads, no log;
what a JoinGroup or SyncGroup gets is the effect naming its waiter."""
from __future__ import annotations

import itertools

import pytest

from coordinator.group.classic import (
    VALID_PREVIOUS,
    ClassicGroup,
    CompleteJoin,
    CompleteSync,
    GroupConfig,
    GroupState,
    JoinOutcome,
    JoinRequest,
    StoreGroup,
    SyncOutcome,
)
from proto.errors import (
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

DELAY = 3000


class Harness:
    """One group, a clock, and the answers its effects gave each waiter."""

    def __init__(self, delay_ms: int = DELAY) -> None:
        ids = itertools.count()
        self.now = 1_000_000
        self.group = ClassicGroup("g", GroupConfig(delay_ms, 100, 60_000), lambda client, instance: f"{instance or client}-{next(ids)}")
        self.answers: dict[str, JoinOutcome | SyncOutcome] = {}
        self.stored: list[int] = []
        self.fail_store = False

    def run(self, effects: list) -> None:
        queue = list(effects)
        while queue:
            effect = queue.pop(0)
            if isinstance(effect, StoreGroup):
                self.stored.append(effect.record.generation)
                error = RebalanceInProgressError("[NOT_COORDINATOR] disk gone") if self.fail_store else None
                queue[0:0] = self.group.store_completed(self.now, effect.record.generation, error)
            else:
                assert isinstance(effect, (CompleteJoin, CompleteSync))
                assert effect.waiter not in self.answers, f"{effect.waiter} answered twice"
                self.answers[effect.waiter] = effect.outcome

    def join(self, waiter: str, member_id: str = "", *, instance: str | None = None, protocols=(("range", b"r"),),
             protocol_type: str = "consumer", session_ms: int = 10_000, rebalance_ms: int = 20_000,
             require_id: bool = True) -> JoinOutcome | None:
        self.run(self.group.join(self.now, JoinRequest(member_id, instance, "c", "/127.0.0.1", session_ms,
                                                      rebalance_ms, protocol_type, tuple(protocols), require_id),
                                 waiter))
        return self.answers.get(waiter)  # type: ignore[return-value]

    def new_member(self, waiter: str, **kwargs) -> str:
        """MEMBER_ID_REQUIRED, then the JoinGroup with that id (its answer may be held)."""
        first = self.join(waiter + "-id", **kwargs)
        assert first is not None and first.error_code == MemberIdRequiredError.errno
        self.join(waiter, first.member_id, **kwargs)
        return first.member_id

    def sync(self, waiter: str, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
             instance: str | None = None) -> SyncOutcome | None:
        self.run(self.group.sync(self.now, member_id, instance, generation, None, None, assignments or {}, waiter))
        return self.answers.get(waiter)  # type: ignore[return-value]

    def tick(self, advance_ms: int = 0) -> None:
        self.now += advance_ms
        self.run(self.group.tick(self.now))


def stable_pair(h: Harness) -> tuple[str, str]:
    """Two members, a the leader, synced at generation 1."""
    a = h.new_member("ja")
    b = h.new_member("jb")
    h.tick(DELAY)
    h.sync("sb", b, 1)
    h.sync("sa", a, 1, {a: b"A", b: b"B"})
    assert h.group.state is GroupState.STABLE
    return a, b


def test_a_new_member_gets_member_id_required_then_the_initial_delay_gathers_the_others():
    h = Harness()
    a = h.new_member("ja")
    assert "ja" not in h.answers and h.group.state is GroupState.PREPARING_REBALANCE
    h.tick(DELAY - 1000)
    b = h.new_member("jb")  # extends the delay from now
    h.tick(1500)
    assert "ja" not in h.answers
    h.tick(DELAY)
    ja, jb = h.answers["ja"], h.answers["jb"]
    assert (ja.generation_id, ja.leader_id, ja.protocol_name) == (1, a, "range")
    assert [m for m, _, _ in ja.members] == [a, b] and jb.members == ()
    assert h.group.state is GroupState.COMPLETING_REBALANCE


def test_old_join_versions_get_an_id_at_once():
    h = Harness(delay_ms=0)
    answer = h.join("j", require_id=False)
    assert answer is not None and answer.error_code == 0 and answer.member_id == "c-0" and answer.generation_id == 1


def test_followers_wait_for_the_leaders_assignment_which_is_stored_first():
    h = Harness()
    a = h.new_member("ja")
    b = h.new_member("jb")
    h.tick(DELAY)
    assert h.sync("sb", b, 1) is None
    h.sync("sa", a, 1, {a: b"A"})  # b left out: gets nothing
    assert h.stored == [1]
    assert (h.answers["sa"].assignment, h.answers["sb"].assignment) == (b"A", b"")
    assert h.group.state is GroupState.STABLE


def test_a_failed_store_answers_the_syncs_with_the_error_and_rebalances():
    h = Harness()
    a = h.new_member("ja")
    h.tick(DELAY)
    h.fail_store = True
    assert h.sync("sa", a, 1, {a: b"A"}).error_code == RebalanceInProgressError.errno
    assert h.group.state is GroupState.PREPARING_REBALANCE


def test_the_join_barrier_waits_for_every_known_member_then_bumps_the_generation():
    h = Harness()
    a, b = stable_pair(h)
    c = h.new_member("jc")
    assert "jc" not in h.answers
    with pytest.raises(RebalanceInProgressError):
        h.group.heartbeat(h.now, a, None, 1)
    h.join("ja2", a)
    assert "jc" not in h.answers  # b has not rejoined
    h.join("jb2", b)
    answers = [h.answers[w] for w in ("ja2", "jb2", "jc")]
    assert {x.generation_id for x in answers} == {2} and answers[0].leader_id == a
    assert len(answers[0].members) == 3 and answers[1].members == () == answers[2].members
    h.sync("sc2", c, 2)
    h.sync("sb2", b, 2)
    h.sync("sa2", a, 2, {a: b"1", b: b"2", c: b"3"})
    assert [h.answers[w].assignment for w in ("sa2", "sb2", "sc2")] == [b"1", b"2", b"3"]


def test_members_that_do_not_rejoin_within_the_rebalance_timeout_are_removed():
    h = Harness()
    a, b = stable_pair(h)
    h.join("ja2", a, rebalance_ms=5000)
    for _ in range(2):  # b stays alive, but never rejoins
        h.tick(9_000)
        with pytest.raises(RebalanceInProgressError):
            h.group.heartbeat(h.now, b, None, 1)
    h.tick(1_999)  # the barrier's timeout is the largest rebalance timeout when it started (20 s)
    assert "ja2" not in h.answers
    h.tick(1)
    assert h.answers["ja2"].generation_id == 2 and [m for m, _, _ in h.answers["ja2"].members] == [a]
    assert b not in h.group.members


def test_a_leader_that_left_is_replaced_by_a_member_that_rejoined():
    h = Harness()
    a, b = stable_pair(h)
    errors, effects = h.group.leave(h.now, [(a, None)])
    h.run(effects)
    assert errors == [None] and h.group.state is GroupState.PREPARING_REBALANCE
    h.join("jb2", b)
    assert h.answers["jb2"].leader_id == b and h.answers["jb2"].generation_id == 2


def test_a_silent_member_is_removed_when_its_session_expires_and_the_last_one_empties_the_group():
    h = Harness()
    a, b = stable_pair(h)
    h.group.heartbeat(h.now + 9000, a, None, 1)
    h.tick(10_001)
    assert b not in h.group.members and h.group.state is GroupState.PREPARING_REBALANCE
    h.tick(20_000)
    assert h.group.state is GroupState.EMPTY and h.group.generation == 2 and h.stored[-1] == 2
    # still a consumer group, as Kafka keeps it (librdkafka takes a group without a type for a simple one)
    assert h.group.protocol_type == "consumer" and h.group.record().protocol_type == "consumer"


def test_heartbeats_say_rebalance_in_progress_illegal_generation_or_unknown_member():
    h = Harness()
    a, b = stable_pair(h)
    h.group.heartbeat(h.now, a, None, 1)
    with pytest.raises(IllegalGenerationError):
        h.group.heartbeat(h.now, a, None, 0)
    with pytest.raises(UnknownMemberIdError):
        h.group.heartbeat(h.now, "ghost", None, 1)
    h.new_member("jc")
    with pytest.raises(RebalanceInProgressError):
        h.group.heartbeat(h.now, b, None, 1)
    assert h.sync("late", b, 1).error_code == RebalanceInProgressError.errno


def test_the_protocol_is_the_one_all_support_chosen_by_vote():
    h = Harness(delay_ms=0)
    h.join("j1", protocols=(("roundrobin", b""), ("range", b"")), require_id=False)
    h.tick()
    h.sync("s1", h.answers["j1"].member_id, 1)
    h.join("j2", protocols=(("range", b""), ("roundrobin", b"")), require_id=False)
    h.join("j1b", h.answers["j1"].member_id, protocols=(("range", b""), ("roundrobin", b"")))
    assert h.answers["j1b"].protocol_name == "range"  # both now prefer range
    bad = h.join("j3", protocols=(("sticky", b""),), require_id=False)
    assert bad.error_code == InconsistentGroupProtocolError.errno
    other_type = h.join("j4", protocol_type="connect", require_id=False)
    assert other_type.error_code == InconsistentGroupProtocolError.errno


def test_an_empty_group_needs_a_protocol_type_and_a_session_timeout_in_bounds():
    h = Harness()
    assert h.join("j", protocol_type="").error_code == InconsistentGroupProtocolError.errno
    assert h.join("k", session_ms=10).error_code == InvalidSessionTimeoutError.errno


def test_a_static_member_back_within_its_session_keeps_its_assignment_and_fences_its_old_id():
    h = Harness()
    h.join("ja", instance="one")  # a static member is given its id at once
    h.tick(DELAY)
    h.sync("sa", h.answers["ja"].member_id, 1, {h.answers["ja"].member_id: b"A"})
    old = h.answers["ja"].member_id
    again = h.join("ja2", instance="one")
    assert again.error_code == 0 and again.generation_id == 1 and again.member_id != old
    assert h.group.state is GroupState.STABLE and h.group.generation == 1  # no rebalance
    assert h.sync("sa2", again.member_id, 1, instance="one").assignment == b"A"
    with pytest.raises(FencedInstanceIdError):
        h.group.heartbeat(h.now, old, "one", 1)
    assert h.sync("old", old, 1, instance="one").error_code == FencedInstanceIdError.errno


def test_leave_group_batches_by_member_or_instance_id():
    h = Harness()
    h.join("ja", instance="one")
    h.tick(DELAY)
    a = h.answers["ja"].member_id
    errors, effects = h.group.leave(h.now, [("wrong", "one"), ("", "two"), ("ghost", None)])
    assert [type(e) for e in errors] == [FencedInstanceIdError, UnknownMemberIdError, UnknownMemberIdError]
    errors, effects = h.group.leave(h.now, [("", "one")])
    h.run(effects)
    assert errors == [None] and a not in h.group.members and h.group.state is GroupState.EMPTY


def test_offset_commits_follow_kafkas_rules():
    h = Harness()
    h.group.validate_offset_commit(-1, "", None, transactional=False)  # offsets-only group
    a = h.new_member("ja")
    h.tick(DELAY)
    with pytest.raises(RebalanceInProgressError):  # CompletingRebalance
        h.group.validate_offset_commit(1, a, None, transactional=False)
    h.group.validate_offset_commit(1, a, None, transactional=True)
    h.sync("sa", a, 1, {a: b""})
    h.group.validate_offset_commit(1, a, None, transactional=False)
    h.new_member("jb")
    h.group.validate_offset_commit(1, a, None, transactional=False)  # the revoke-time commit
    with pytest.raises(IllegalGenerationError):
        h.group.validate_offset_commit(0, a, None, transactional=False)
    with pytest.raises(UnknownMemberIdError):
        h.group.validate_offset_commit(-1, "", None, transactional=False)
    h.group.validate_offset_commit(-1, "", None, transactional=True)  # a bare TxnOffsetCommit


def test_every_transition_is_in_the_table():
    h = Harness()
    with pytest.raises(AssertionError, match="Empty to Stable"):
        h.group.transition_to(GroupState.STABLE)
    assert GroupState.EMPTY in VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]


def test_no_timer_stays_due_while_the_barrier_waits_for_a_member():
    """The driver sleeps until next_deadline_ms(): a deadline in the past would make it spin."""
    h = Harness()
    h.new_member("ja")
    h.join("jb-id")  # MEMBER_ID_REQUIRED handed out; that member has not joined with it yet
    h.tick(DELAY)
    assert "ja" not in h.answers  # the barrier waits for the pending member
    assert h.group.next_deadline_ms() > h.now
    h.tick(h.group.next_deadline_ms() - h.now)  # its id lapses with its session timeout
    assert h.answers["ja"].generation_id == 1


def test_no_timer_stays_due_while_the_leaders_assignment_is_being_stored():
    """A store slower than the sync deadline (a slow fsync, a coordinator paused mid-write) leaves nothing
    for tick() to do until it completes, so the deadline must not stay due meanwhile: a driver sleeping
    until next_deadline_ms() would spin (the simulator hung at one instant on this, seed 70)."""
    h = Harness()
    leader = h.new_member("ja", rebalance_ms=5_000)
    h.tick(DELAY)
    effects = h.group.sync(h.now, leader, None, 1, None, None, {leader: b"A"}, "sa")
    (store,) = [e for e in effects if isinstance(e, StoreGroup)]  # not completed: the write is in flight
    h.now += 10_000  # past the sync deadline
    assert h.group.tick(h.now) == []
    deadline = h.group.next_deadline_ms()
    assert deadline is None or deadline > h.now
    h.run(h.group.store_completed(h.now, store.record.generation, None))
    assert h.answers["sa"].error_code == 0 and h.group.state is GroupState.STABLE


def test_a_static_member_that_does_not_rejoin_stays_until_its_session_ends_and_keeps_its_share():
    """KIP-345: the rebalance timeout removes dynamic members only; the leader still assigns the static one."""
    h = Harness()
    h.join("js", instance="static", session_ms=60_000, rebalance_ms=5_000)  # first: the leader
    d = h.new_member("jd", rebalance_ms=5_000)
    h.tick(DELAY)
    s = h.answers["js"].member_id
    h.sync("sd", d, 1)
    h.sync("ss", s, 1, {s: b"S", d: b"D"})
    assert h.group.state is GroupState.STABLE
    h.new_member("je", rebalance_ms=5_000)  # a third joins: everyone must rejoin
    h.join("jd2", d, rebalance_ms=5_000)
    h.tick(5_001)  # the static member did not rejoin within the rebalance timeout
    assert s in h.group.members, "a static member was removed by the rebalance timeout"
    outcome = h.answers["jd2"]
    assert outcome.error_code == 0 and outcome.generation_id == 2
    assert h.group.leader_id != s, "the leader must be a member that rejoined"
    leader_outcome = outcome if outcome.leader_id == d else h.answers["je"]
    assert s in [m for m, _, _ in leader_outcome.members], "the leader is not told of the static member"
    h.tick(60_000)  # its session ends: now it goes
    assert s not in h.group.members


def test_a_commit_from_an_old_generation_is_fenced_even_while_the_group_completes_a_rebalance():
    h = Harness()
    a = h.new_member("ja")
    h.tick(DELAY)
    assert h.group.state is GroupState.COMPLETING_REBALANCE
    with pytest.raises(IllegalGenerationError):
        h.group.validate_offset_commit(0, a, None, transactional=False)


def test_a_retried_sync_answers_the_earlier_call():
    h = Harness()
    a = h.new_member("ja")
    b = h.new_member("jb")
    h.tick(DELAY)
    follower = b if h.group.leader_id == a else a
    assert h.sync("first", follower, 1) is None  # waits for the leader's assignment
    h.sync("again", follower, 1)
    assert h.answers["first"].error_code == RebalanceInProgressError.errno


def test_a_static_replacement_whose_record_is_not_stored_fails_and_keeps_the_old_member():
    h = Harness()
    h.join("ja", instance="one")
    h.tick(DELAY)
    old = h.answers["ja"].member_id
    h.sync("sa", old, 1, {old: b"A"})
    h.fail_store = True
    again = h.join("ja2", instance="one")
    assert again is not None and again.error_code != 0, "the new id was answered though it was never stored"
    assert old in h.group.members and again.member_id not in h.group.members
    h.group.heartbeat(h.now, old, "one", 1)  # the old incarnation is still the member
    h.fail_store = False
    retried = h.join("ja3", instance="one")
    assert retried.error_code == 0 and h.sync("sa3", retried.member_id, 1, instance="one").assignment == b"A"


def test_a_leader_that_never_syncs_is_removed_after_the_rebalance_timeout_and_the_others_rejoin():
    """Kafka's pending-sync timeout: without it the followers' SyncGroups would wait for good."""
    h = Harness()
    a = h.new_member("ja", rebalance_ms=5_000)
    b = h.new_member("jb", rebalance_ms=5_000)
    h.tick(DELAY)
    leader = h.group.leader_id
    follower = b if leader == a else a
    assert h.sync("sf", follower, 1) is None  # waits for the leader's assignment
    h.group.heartbeat(h.now, leader, None, 1)  # the leader is alive, it just never sends SyncGroup
    h.tick(4_999)
    assert "sf" not in h.answers
    h.tick(1)
    assert h.answers["sf"].error_code == RebalanceInProgressError.errno
    assert leader not in h.group.members and h.group.state is GroupState.PREPARING_REBALANCE
    h.join("jf2", follower, rebalance_ms=5_000)
    assert h.answers["jf2"].generation_id == 2 and h.answers["jf2"].leader_id == follower
