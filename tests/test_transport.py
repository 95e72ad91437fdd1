"""Actor <-> learner payloads and delivery bookkeeping (robot_rl.wire: protocol, transitions, weights, outbox, inbox,
transition_log, learner_contact): round trips, rejected payloads, outbox, inbox, log, run binding."""

from __future__ import annotations

import dataclasses

import math
import re

import numpy as np
import pytest

from robot_rl.agents.sac import SACConfig
from robot_rl.core.codec import pack, unpack
from robot_rl.core.config_io import config_to_json
from robot_rl.wire.inbox import Inbox, SequenceTracker
from robot_rl.wire.learner_contact import Heard, LearnerWatch, RunBinding
from robot_rl.wire.outbox import AckGaps, Outbox
from robot_rl.wire.protocol import PROTOCOL_VERSION, TransportError, make_source
from robot_rl.wire.transition_log import ClosedEpisodes, LoggedBatch, TransitionLog
from robot_rl.wire.transitions import (
    StampedTransition,
    decode_ack,
    decode_ack_message,
    decode_transitions,
    decode_transitions_message,
    encode_ack,
    encode_transitions,
)
from robot_rl.wire.weights import WeightsMessage, WeightsStamp, decode_weights, encode_weights, reversion_weights
from robot_rl.core.types import ObservationSpec

SOURCE = "arm-1/abc123"


def obs(value: float) -> dict[str, np.ndarray]:
    return {
        "state": np.full(14, value, np.float32),
        "images/wrist": np.full((6, 5, 3), int(value) % 256, np.uint8),
    }


def stamped(seq: int, episode: int = 0, step: int | None = None, **overrides) -> StampedTransition:
    values = dict(
        seq=seq, episode=episode, step=seq if step is None else step, observation=obs(seq),
        action=np.array([0.1, -0.2, 0.3, -1.0], np.float32) + seq, reward=0.5 * seq, terminated=False,
        truncated=False, next_observation=obs(seq + 1), intervention=False, success=False)
    values.update(overrides)
    return StampedTransition(**values)


def wire_payload(items, **overrides) -> bytes:
    """A transitions payload with message fields overridden (to build malformed ones)."""
    message = {"kind": "transitions", "protocol": PROTOCOL_VERSION, "source": SOURCE, "items": items}
    message.update(overrides)
    return pack(message)


def wire_item(base_seq: int = 0, /, **overrides) -> dict:
    item = stamped(base_seq).to_wire()
    item.update(overrides)
    return item


# ----- transitions ------------------------------------------------------------------------------------------------

def test_transitions_round_trip_keeps_arrays_dtypes_and_flags():
    items = [
        stamped(0),
        stamped(1, terminated=True, success=True, reward=1.0),
        stamped(2, episode=1, step=0, truncated=True, intervention=True),
    ]
    source, decoded = decode_transitions(encode_transitions(SOURCE, items))
    assert source == SOURCE
    assert len(decoded) == 3
    for original, back in zip(items, decoded):
        assert isinstance(back, StampedTransition)
        assert (back.seq, back.episode, back.step) == (original.seq, original.episode, original.step)
        assert back.reward == pytest.approx(original.reward)
        assert (back.terminated, back.truncated, back.intervention, back.success) == (
            original.terminated, original.truncated, original.intervention, original.success)
        assert back.action.dtype == np.float32
        np.testing.assert_array_equal(back.action, original.action)
        for name in ("observation", "next_observation"):
            a, b = getattr(original, name), getattr(back, name)
            assert set(a) == set(b) == {"state", "images/wrist"}
            for key in a:
                assert b[key].dtype == a[key].dtype
                assert b[key].shape == a[key].shape
                np.testing.assert_array_equal(b[key], a[key])
    assert decoded[1].terminated and decoded[1].success and not decoded[1].truncated
    assert decoded[2].truncated and decoded[2].intervention and not decoded[2].terminated
    assert decoded[0].observation["images/wrist"].dtype == np.uint8


def test_transitions_round_trip_empty_batch():
    assert decode_transitions(encode_transitions(SOURCE, [])) == (SOURCE, [])


def test_action_is_sent_as_float32():
    item = stamped(0, action=np.array([0.25, 0.5, -0.5, 1.0], np.float64))
    _, (back,) = decode_transitions(encode_transitions(SOURCE, [item]))
    assert back.action.dtype == np.float32
    np.testing.assert_array_equal(back.action, np.array([0.25, 0.5, -0.5, 1.0], np.float32))


@pytest.mark.parametrize("payload, words", [
    (b"\xc1garbage\xff\x00", ["undecodable"]),
    (b"", ["undecodable"]),
    (pack([1, 2, 3]), ["not a map"]),
    (pack({"kind": "ack", "protocol": PROTOCOL_VERSION, "acks": {}}), ["expected", "transitions", "ack"]),
    (wire_payload([], protocol=PROTOCOL_VERSION + 1), ["protocol", str(PROTOCOL_VERSION + 1)]),
    (wire_payload([], protocol=None), ["protocol"]),
    (wire_payload([], source="no-slash"), ["source", "no-slash"]),
    (wire_payload([], source="a/b/c"), ["source"]),
    (wire_payload([], source=42), ["source"]),
    (wire_payload({"not": "a list"}), ["list of items"]),
    (wire_payload(["not a map"]), ["transition 0", "not a map"]),
])
def test_decode_rejects_malformed_payloads(payload, words):
    with pytest.raises(TransportError) as error:
        decode_transitions(payload)
    message = str(error.value)
    for word in words:
        assert word in message, message


@pytest.mark.parametrize("field", ["seq", "episode", "step", "obs", "action", "reward", "terminated", "truncated"])
def test_decode_names_a_missing_field(field):
    item = wire_item(0)
    del item[field]
    with pytest.raises(TransportError, match=f"transition 1 lacks field '{field}'"):
        decode_transitions(wire_payload([wire_item(5), item]))


def test_each_pixel_frame_crosses_once_on_a_first_send_and_an_episode_end_carries_its_own():
    """A first send leaves out a next frame the next transition starts from: about half the bytes of a pixel
    transition (two 64 px cameras); a re-send, or an episode's last step, carries it."""
    rng = np.random.default_rng(0)

    def frame():
        return {"state": rng.normal(size=14).astype(np.float32),
                **{f"images/{c}": rng.integers(0, 256, (64, 64, 3), np.uint8) for c in ("scene", "hand")}}

    item = dataclasses.replace(stamped(0), observation=frame(), next_observation=frame(), next_frame_follows=True)
    once, twice = (len(encode_transitions(SOURCE, [item], first_sends=sends)) for sends in ({0}, ()))
    assert once <= 0.51 * twice, (once, twice)
    _, (back,) = decode_transitions(encode_transitions(SOURCE, [item], first_sends={0}))
    assert back.next_observation is None
    ended = dataclasses.replace(item, truncated=True, next_frame_follows=False)
    _, (back,) = decode_transitions(encode_transitions(SOURCE, [ended], first_sends={0}))
    assert back.next_observation is not None
    wire = ended.to_wire()
    del wire["next_obs"]
    with pytest.raises(TransportError, match="ends its episode without its next_obs"):
        decode_transitions(wire_payload([wire]))


def test_optional_flags_default_to_false():
    item = wire_item(0)
    del item["intervention"], item["success"]
    _, (back,) = decode_transitions(wire_payload([item]))
    assert back.intervention is False and back.success is False


@pytest.mark.parametrize("bad_action", [
    np.array([0.0, math.nan, 0.0, 0.0], np.float32),
    np.array([0.0, 0.0, math.inf, 0.0], np.float32),
    np.array([-math.inf, 0.0, 0.0, 0.0], np.float32),
])
def test_decode_rejects_non_finite_actions(bad_action):
    with pytest.raises(TransportError, match="seq 3.*non-finite action"):
        decode_transitions(wire_payload([wire_item(3, action=bad_action)]))


@pytest.mark.parametrize("bad_reward", [math.nan, math.inf, -math.inf])
def test_decode_rejects_non_finite_rewards(bad_reward):
    with pytest.raises(TransportError, match="non-finite action or reward"):
        decode_transitions(wire_payload([wire_item(3, reward=bad_reward)]))


def test_decode_rejects_negative_sequence_numbers():
    with pytest.raises(TransportError, match="negative sequence number -1"):
        decode_transitions(wire_payload([wire_item(0, seq=-1)]))


@pytest.mark.parametrize("field, value, words", [
    ("obs", [1.0, 2.0], ["obs", "map"]),
    ("obs", {}, ["obs", "non-empty map"]),
    ("next_obs", np.zeros(3, np.float32), ["next_obs", "map"]),
    ("obs", {"state": [1.0, 2.0]}, ["obs['state']", "array"]),
    ("action", [0.0, 0.0, 0.0, 0.0], ["action", "array"]),
    ("seq", 1.5, ["seq", "integer"]),
    ("seq", True, ["seq", "integer"]),
    ("reward", "high", ["reward", "number"]),
    ("terminated", 1, ["terminated", "bool"]),
    ("intervention", "yes", ["intervention", "bool"]),
])
def test_decode_rejects_wrongly_typed_fields(field, value, words):
    with pytest.raises(TransportError) as error:
        decode_transitions(wire_payload([wire_item(0, **{field: value})]))
    for word in words:
        assert word in str(error.value), str(error.value)


def test_transport_error_is_a_value_error():
    assert issubclass(TransportError, ValueError)


# ----- acks -------------------------------------------------------------------------------------------------------

def test_ack_round_trip():
    acks = {"arm-1/aaa": 17, "arm-2/bbb": -1, "arm-3/c.c_c": 0}
    assert decode_ack(encode_ack(acks)) == acks
    assert decode_ack(encode_ack({})) == {}


def test_decode_ack_rejects_malformed_acks():
    with pytest.raises(TransportError, match="ack"):
        decode_ack(encode_transitions(SOURCE, []))  # a transitions payload is not an ack
    with pytest.raises(TransportError, match="source"):
        decode_ack(pack({"kind": "ack", "protocol": PROTOCOL_VERSION, "acks": {"bad source": 3}}))
    with pytest.raises(TransportError, match="integer"):
        decode_ack(pack({"kind": "ack", "protocol": PROTOCOL_VERSION, "acks": {SOURCE: "3"}}))
    with pytest.raises(TransportError, match="map of acks"):
        decode_ack(pack({"kind": "ack", "protocol": PROTOCOL_VERSION, "acks": [1]}))
    with pytest.raises(TransportError, match="protocol"):
        decode_ack(pack({"kind": "ack", "protocol": 0, "acks": {}}))


# ----- weights ----------------------------------------------------------------------------------------------------

def test_weights_round_trip_with_spec_kind_and_config():
    spec = ObservationSpec.from_shapes({"state": ((14,), np.float32), "object_state": ((10,), np.float32),
                                        "images/wrist": ((64, 64, 3), np.uint8)})
    sac = config_to_json(SACConfig(actor_hidden_dims=(16, 16), critic_hidden_dims=(8,), discount=0.9))
    message = WeightsMessage(version=7, policy=b"\x00\x01policy-bytes\xff", observation_spec=spec, action_dim=4,
                             policy_config=sac, transitions=123, updates=456)
    back = decode_weights(encode_weights(message))
    assert back.version == 7
    assert back.policy == message.policy and isinstance(back.policy, bytes)
    assert back.observation_spec == spec
    assert back.observation_spec.keys == spec.keys
    assert back.observation_spec["images/wrist"].shape == (64, 64, 3)
    assert back.observation_spec["images/wrist"].dtype == "uint8"
    assert back.action_dim == 4
    assert back.policy_kind == "gaussian"
    assert back.policy_config == unpack(pack(sac))
    assert back.policy_config["discount"] == pytest.approx(0.9)
    assert list(back.policy_config["actor_hidden_dims"]) == [16, 16]
    assert (back.transitions, back.updates) == (123, 456)
    other = decode_weights(encode_weights(dataclasses.replace(message, policy_kind="residual",
                                                              policy_config={"scale": 0.1})))
    assert (other.policy_kind, other.policy_config) == ("residual", {"scale": 0.1})


def test_weights_written_before_kinds_read_as_gaussian():
    """Policy files from before weights named their kind hold the SAC config under `sac_config`."""
    spec = ObservationSpec.from_shapes({"state": ((14,), np.float32)})
    new = unpack(encode_weights(WeightsMessage(2, b"p", spec, 4, {"discount": 0.9})))
    old = {key: value for key, value in new.items() if key not in ("policy_kind", "policy_config")}
    back = decode_weights(pack({**old, "sac_config": {"discount": 0.8}}))
    assert (back.policy_kind, back.policy_config, back.version) == ("gaussian", {"discount": 0.8}, 2)


def test_decode_weights_rejects_malformed_payloads():
    spec = ObservationSpec.from_shapes({"state": ((14,), np.float32)})
    good = unpack(encode_weights(WeightsMessage(1, b"p", spec, 4, {})))
    for field in ("version", "policy", "observation_spec", "action_dim", "policy_config", "policy_kind"):
        broken = dict(good)
        del broken[field]
        with pytest.raises(TransportError, match="weights payload"):
            decode_weights(pack(broken))
    with pytest.raises(TransportError, match="malformed"):
        decode_weights(pack({**good, "policy": "not bytes"}))
    with pytest.raises(TransportError, match="malformed"):
        decode_weights(pack({**good, "policy_kind": 3}))
    with pytest.raises(TransportError, match="expected a 'weights' payload"):
        decode_weights(encode_ack({}))
    with pytest.raises(TransportError, match="undecodable"):
        decode_weights(b"\xc1")


def test_reversion_weights_changes_only_the_version():
    spec = ObservationSpec.from_shapes({"state": ((14,), np.float32)})
    message = WeightsMessage(3, b"\x00policy", spec, 4, {"discount": 0.9}, transitions=12, updates=24)
    back = decode_weights(reversion_weights(encode_weights(message), 1_000_000_001))
    assert back.version == 1_000_000_001
    assert (back.policy, back.observation_spec, back.action_dim, back.policy_config, back.transitions, back.updates) == (
        message.policy, spec, 4, {"discount": 0.9}, 12, 24)
    with pytest.raises(TransportError, match="expected a 'weights' payload"):
        reversion_weights(encode_ack({}), 2)


# ----- outbox -----------------------------------------------------------------------------------------------------

def test_learner_watch_counts_an_outage_from_when_the_learner_was_last_heard():
    watch = LearnerWatch(after_s=5.0)
    assert not watch.away(100.0) and watch.silent_s(100.0) is None  # never heard: not away (nothing to lose yet)
    assert watch.heard(100.0) is None
    assert not watch.away(104.9)
    assert watch.away(105.0) and watch.away(130.0) and watch.is_away and watch.outages == 1
    assert watch.heard(131.0) == pytest.approx(31.0) and not watch.is_away and watch.away_s == pytest.approx(31.0)
    assert not watch.away(135.0) and watch.away(136.5) and watch.outages == 2
    with pytest.raises(ValueError, match="after_s"):
        LearnerWatch(after_s=0)


def test_outbox_sends_once_then_resends_after_timeout():
    outbox = Outbox(capacity=10, resend_after_s=2.0)
    for seq in range(3):
        outbox.add(stamped(seq))
    due = outbox.due(now=100.0)
    assert [t.seq for t in due] == [0, 1, 2]
    outbox.mark_sent(due, now=100.0)
    assert outbox.due(now=100.0) == []
    assert outbox.due(now=101.9) == []
    outbox.add(stamped(3))
    assert [t.seq for t in outbox.due(now=101.9)] == [3]  # only the never-sent one
    outbox.mark_sent(outbox.due(now=101.9), now=101.9)
    assert [t.seq for t in outbox.due(now=102.0)] == [0, 1, 2]  # resend after resend_after_s
    outbox.mark_sent(outbox.due(now=102.0), now=102.0)
    assert outbox.resent == 3
    assert [t.seq for t in outbox.due(now=103.9)] == [3]
    assert len(outbox) == 4


def test_outbox_waits_longer_before_resending_to_a_learner_that_acknowledges_late():
    outbox = Outbox(capacity=100, resend_after_s=2.0)
    for seq in range(5):
        outbox.add(stamped(seq))
    outbox.mark_sent(outbox.due(0.0), 0.0)
    assert [t.seq for t in outbox.due(2.0)] == [0, 1, 2, 3, 4]  # no acknowledgement timed yet: resend_after_s
    outbox.acknowledge(0, now=3.5)  # the learner acknowledges 3.5 s after the send (a busy pixel learner)
    assert outbox.round_trip_s == 3.5 and outbox.resend_timeout() > 3.5
    assert outbox.due(5.0) == []  # not re-sent to a learner that is slow, not deaf
    assert [t.seq for t in outbox.due(outbox.resend_timeout())] == [1, 2, 3, 4]  # a lost one still goes again
    # A re-sent transition's acknowledgement is no sample (which send it answers is unknown).
    outbox.mark_sent(outbox.due(20.0), 20.0)
    outbox.acknowledge(1, now=120.0)
    assert outbox.round_trip_s == 3.5 and outbox.resent == 4
    for seq in range(5, 25):  # however late the acknowledgements, the timeout stays bounded
        outbox.add(stamped(seq))
        outbox.mark_sent([t for t in outbox.due(1000.0 + seq) if t.seq == seq], 1000.0 + seq)
        outbox.acknowledge(seq, now=1000.0 + seq + 200.0)
    assert outbox.resend_timeout() == Outbox.MAX_RESEND_S


def test_outbox_resends_everything_at_once_when_a_learner_appears():
    outbox = Outbox(capacity=10, resend_after_s=2.0)
    for seq in range(4):
        outbox.add(stamped(seq))
    outbox.mark_sent(outbox.due(now=100.0), now=100.0)
    outbox.acknowledge(0)
    assert outbox.due(now=100.5) == []
    assert outbox.resend_all() == 3  # a respawned learner: what it has not acknowledged goes out now
    due = outbox.due(now=100.5)
    assert [t.seq for t in due] == [1, 2, 3]
    outbox.mark_sent(due, now=100.5)
    assert outbox.resent == 3 and outbox.due(now=101.0) == []


def test_outbox_due_respects_max_items_oldest_first():
    outbox = Outbox(capacity=100)
    for seq in range(10):
        outbox.add(stamped(seq))
    assert [t.seq for t in outbox.due(now=0.0, max_items=4)] == [0, 1, 2, 3]


def test_outbox_acknowledge_removes_only_through():
    outbox = Outbox(capacity=10, resend_after_s=1.0)
    for seq in range(6):
        outbox.add(stamped(seq))
    outbox.mark_sent(outbox.due(0.0), 0.0)
    assert outbox.acknowledge(2) == 3
    assert len(outbox) == 3
    assert outbox.acknowledged_through == 2
    assert [t.seq for t in outbox.due(now=5.0)] == [3, 4, 5]
    assert outbox.acknowledge(1) == 0  # older ack: nothing changes
    assert outbox.acknowledged_through == 2 and len(outbox) == 3
    assert outbox.acknowledge(2) == 0
    assert outbox.acknowledge(5) == 3
    assert len(outbox) == 0 and outbox.due(now=100.0) == []


def test_outbox_drops_oldest_when_full():
    outbox = Outbox(capacity=3)
    for seq in range(5):
        outbox.add(stamped(seq))
    assert len(outbox) == 3
    assert outbox.dropped == 2
    assert [t.seq for t in outbox.due(now=0.0)] == [2, 3, 4]


def test_a_gap_the_outbox_dropped_does_not_hold_the_learners_acknowledgement_back():
    """A learner away longer than the outbox holds: the oldest transitions are dropped for good. Each message says
    the lowest sequence number its actor still holds, so the learner's cumulative ack passes the gap (its record of
    what arrived above a gap stays small) and the actor's outbox empties."""
    outbox, inbox = Outbox(capacity=5), Inbox()
    for seq in range(12):  # seqs 0-6 dropped while nobody listened
        outbox.add(stamped(seq))
    assert outbox.dropped == 7
    for payload in outbox.due_messages(SOURCE, now=0.0, max_items=2):
        message = decode_transitions_message(payload)
        assert message.floor == 7, message.floor
        inbox.accept(message.source, message.items, message.floor)
    assert inbox.acks() == {SOURCE: 11} and inbox.trackers[SOURCE].above == set()
    outbox.acknowledge(inbox.acks()[SOURCE])
    assert len(outbox) == 0
    # without the floor (an actor from before it), the acknowledgement stays below the gap
    old = Inbox()
    old.accept(SOURCE, [stamped(seq) for seq in range(7, 12)])
    assert old.acks() == {SOURCE: -1} and old.acks_above() == {SOURCE: [(7, 11)]}
    with pytest.raises(TransportError, match="floor"):
        decode_transitions_message(pack({**unpack(encode_transitions(SOURCE, [stamped(0)])), "floor": -3}))


def test_outbox_rejects_reused_sequence_numbers():
    outbox = Outbox(capacity=10)
    outbox.add(stamped(0))
    outbox.add(stamped(1))
    with pytest.raises(ValueError, match="already used"):
        outbox.add(stamped(1))
    outbox.acknowledge(1)
    with pytest.raises(ValueError, match="already used"):
        outbox.add(stamped(0))  # acknowledged and removed, still used
    outbox.add(stamped(2))


@pytest.mark.parametrize("capacity, resend", [(0, 1.0), (5, 0.0), (5, -1.0)])
def test_outbox_rejects_bad_settings(capacity, resend):
    with pytest.raises(ValueError):
        Outbox(capacity=capacity, resend_after_s=resend)


# ----- sequence tracker -------------------------------------------------------------------------------------------

def test_sequence_tracker_out_of_order_duplicates_and_gaps():
    tracker = SequenceTracker()
    assert tracker.through == -1
    assert tracker.add(0) and tracker.through == 0
    assert tracker.add(2) and tracker.through == 0
    assert tracker.add(4) and tracker.through == 0
    assert tracker.above == {2, 4}
    assert not tracker.add(2)  # duplicate above the prefix
    assert not tracker.add(0)  # duplicate in the prefix
    assert tracker.seen(4) and not tracker.seen(3) and not tracker.seen(1)
    assert tracker.add(1)  # fills the gap: through advances over 2
    assert tracker.through == 2 and tracker.above == {4}
    assert tracker.add(3)
    assert tracker.through == 4 and tracker.above == set()
    assert not tracker.add(4)


def test_sequence_tracker_json_round_trip():
    tracker = SequenceTracker()
    for seq in (0, 1, 5, 7, 3):
        tracker.add(seq)
    data = tracker.to_json()
    assert data == {"through": 1, "above": [3, 5, 7]}
    back = SequenceTracker.from_json(data)
    assert back.through == 1 and back.above == {3, 5, 7}
    assert not back.add(5) and back.add(2)
    assert back.through == 3


def test_sequence_tracker_constructor_normalises():
    tracker = SequenceTracker(through=2, above=[1, 2, 3, 4, 6])
    assert tracker.through == 4 and tracker.above == {6}


# ----- inbox ------------------------------------------------------------------------------------------------------

def test_inbox_drops_duplicates_across_and_within_batches():
    inbox = Inbox()
    fresh = inbox.accept(SOURCE, [stamped(0), stamped(1), stamped(1), stamped(3)])
    assert [t.seq for t in fresh] == [0, 1, 3]
    assert inbox.duplicates == 1
    assert inbox.acks() == {SOURCE: 1}
    fresh = inbox.accept(SOURCE, [stamped(1), stamped(2), stamped(3), stamped(4)])
    assert [t.seq for t in fresh] == [2, 4]
    assert inbox.duplicates == 3
    assert inbox.acks() == {SOURCE: 4}


def test_inbox_sources_are_independent():
    other = "arm-1/fff000"  # the same actor after a restart: its sequence numbers start again at 0
    inbox = Inbox()
    assert [t.seq for t in inbox.accept(SOURCE, [stamped(0), stamped(1), stamped(2)])] == [0, 1, 2]
    assert [t.seq for t in inbox.accept(other, [stamped(0), stamped(2)])] == [0, 2]
    assert inbox.duplicates == 0
    assert inbox.acks() == {SOURCE: 2, other: 0}
    inbox.accept(other, [stamped(1)])
    assert inbox.acks() == {SOURCE: 2, other: 2}


def test_inbox_json_round_trip():
    inbox = Inbox()
    inbox.accept(SOURCE, [stamped(0), stamped(2)])
    inbox.accept("arm-2/x", [stamped(0)])
    back = Inbox.from_json(unpack(pack(inbox.to_json())))
    assert back.acks() == inbox.acks() == {SOURCE: 0, "arm-2/x": 0}
    assert back.accept(SOURCE, [stamped(2), stamped(1)]) and back.acks()[SOURCE] == 2


# ----- transition log ---------------------------------------------------------------------------------------------

def test_transition_log_append_and_replay(tmp_path):
    log = TransitionLog(tmp_path / "log")
    assert list(log.replay()) == []
    assert log.append(SOURCE, [stamped(0), stamped(1)]) == 0
    assert log.append("arm-2/zz", [stamped(0)]) == 1
    assert log.append(SOURCE, [stamped(2, terminated=True)]) == 2
    replayed = list(log.replay())
    assert [(index, batch.source, [t.seq for t in batch.items]) for index, batch in replayed] == [
        (0, SOURCE, [0, 1]), (1, "arm-2/zz", [0]), (2, SOURCE, [2])]
    assert replayed[2][1].items[0].terminated
    np.testing.assert_array_equal(replayed[0][1].items[1].observation["state"], obs(1)["state"])
    assert [index for index, _ in log.replay(after=1)] == [2]
    assert list(log.replay(after=2)) == []
    assert not list((tmp_path / "log").glob("*.tmp"))


def test_transition_log_truncate_and_continue_numbering(tmp_path):
    log = TransitionLog(tmp_path / "log")
    for seq in range(4):
        log.append(SOURCE, [stamped(seq)])
    assert log.truncate(1) == 2
    assert log.indices() == [2, 3]
    assert [index for index, _ in log.replay()] == [2, 3]
    reopened = TransitionLog(tmp_path / "log")
    assert reopened.next_index == 4
    assert reopened.append(SOURCE, [stamped(9)]) == 4
    assert [index for index, _ in reopened.replay(after=2)] == [3, 4]
    assert reopened.truncate(10) == 3
    assert reopened.indices() == []
    assert reopened.append(SOURCE, [stamped(10)]) == 5


def test_transition_log_keeps_closed_episode_decisions_in_order(tmp_path):
    log = TransitionLog(tmp_path / "log")
    log.append(SOURCE, [stamped(0)])
    assert log.append_closed(ClosedEpisodes(((SOURCE, 0), ("arm-2/zz", 3)))) == 1
    log.append(SOURCE, [stamped(1)])
    entries = [entry for _, entry in log.replay()]
    assert isinstance(entries[0], LoggedBatch) and isinstance(entries[2], LoggedBatch)
    assert entries[1] == ClosedEpisodes(((SOURCE, 0), ("arm-2/zz", 3)))
    assert [t.seq for t in entries[2].items] == [1]
    with pytest.raises(TransportError, match="source"):
        log.append_closed(ClosedEpisodes((("no slash", 0),)))
    log._path(1).write_bytes(pack({"kind": "closed", "protocol": 1, "episodes": [[SOURCE]]}))
    with pytest.raises(TransportError, match=r"000000000001\.msgpack is corrupt.*pairs"):
        list(log.replay())
    log._path(1).write_bytes(pack({"kind": "weights", "protocol": 1}))
    with pytest.raises(TransportError, match="expected a 'transitions' or 'closed' payload"):
        list(log.replay())


def test_transition_log_corrupt_file_names_the_file(tmp_path):
    log = TransitionLog(tmp_path / "log")
    log.append(SOURCE, [stamped(0)])
    log.append(SOURCE, [stamped(1)])
    corrupt = log._path(1)
    corrupt.write_bytes(corrupt.read_bytes()[:20])  # truncated by a crash of the disk
    replay = log.replay()
    index, batch = next(replay)
    assert index == 0 and batch.items[0].seq == 0
    with pytest.raises(TransportError) as error:
        next(replay)
    assert corrupt.name in str(error.value)
    assert "corrupt" in str(error.value)


# ----- sources ----------------------------------------------------------------------------------------------------

def test_make_source_incarnations():
    a, b = make_source("arm-1"), make_source("arm-1")
    assert a != b
    assert a.startswith("arm-1/") and b.startswith("arm-1/")
    assert make_source("arm_1.x", "run7") == "arm_1.x/run7"
    # what make_source builds, the decoder accepts
    assert decode_transitions(encode_transitions(a, []))[0] == a


@pytest.mark.parametrize("actor_id", ["", "arm/1", "arm 1", "a" * 65, "arm:1", "ärm"])
def test_make_source_rejects_bad_actor_ids(actor_id):
    with pytest.raises(ValueError):
        make_source(actor_id)


def test_make_source_rejects_bad_incarnation():
    with pytest.raises(ValueError):
        make_source("arm-1", "bad/inc")


def test_transition_log_ignores_leftover_temp_and_foreign_files(tmp_path):
    log = TransitionLog(tmp_path / "log")
    log.append(SOURCE, [stamped(0)])
    (tmp_path / "log" / "000000000001.tmp").write_bytes(b"half written")  # a crash during append
    (tmp_path / "log" / "notes.msgpack").write_bytes(b"not a batch")
    reopened = TransitionLog(tmp_path / "log")
    assert reopened.indices() == [0] and reopened.next_index == 1
    assert [index for index, _ in reopened.replay()] == [0]
    assert reopened.append(SOURCE, [stamped(1)]) == 1
    assert [t.seq for _, batch in reopened.replay() for t in batch.items] == [0, 1]


def _stream_through_a_bounded_queue(max_in_flight: int, selective: bool, read_every: int = 4,
                                    ticks: int = 3000) -> tuple[int, int]:
    """An actor's outbox flushing every 50 ms (up to 8 messages of 8 transitions; new transitions at 10 Hz) to a
    learner that is away for the first 30 s (messages are lost), then appears (the actor re-sends everything) and reads
    one message every `read_every` ticks, its reader keeping the newest 64 messages (the transitions QoS). Returns
    (the learner's cumulative ack after `ticks`, the highest seq added)."""
    import collections

    from robot_rl.wire.inbox import SequenceTracker

    outbox = Outbox(capacity=3000, resend_after_s=2.0, max_in_flight=max_in_flight)
    queue: collections.deque = collections.deque(maxlen=64)
    tracker = SequenceTracker()
    seq = -1
    for tick in range(ticks):
        now, learner_up = tick * 0.05, tick >= 600
        if tick == 600:
            outbox.resend_all()
        if tick % 2 == 0 and seq < 599:
            seq += 1
            outbox.add(stamped(seq))
        for _ in range(8):
            due = outbox.due(now, max_items=8)
            if not due:
                break
            outbox.mark_sent(due, now)
            if learner_up:
                queue.append([t.seq for t in due])
        if queue and tick % read_every == 0:
            for received in queue.popleft():
                tracker.add(received)
        outbox.acknowledge(tracker.through)
        if selective:
            outbox.acknowledge_ranges(tracker.ranges())
    return tracker.through, seq


def test_outbox_drains_a_backlog_through_a_slow_bounded_reader_queue():
    """Cumulative acks and a backlog (the learner was away) meet a slow reader whose queue keeps the newest 64
    messages: re-sending everything unacknowledged bursts past the queue, which drops its oldest messages, the front
    of the backlog, round after round, so the acknowledgement hardly moves. With the in-flight window and selective
    acknowledgements (only the gaps are re-sent) the backlog drains."""
    through, last = _stream_through_a_bounded_queue(max_in_flight=256, selective=True)
    assert through == last == 599
    stalled, last = _stream_through_a_bounded_queue(max_in_flight=10**9, selective=False)
    assert stalled < 300, stalled


def test_selective_acks_round_trip_and_forget_only_their_ranges():
    from robot_rl.wire.inbox import SequenceTracker
    from robot_rl.wire.transitions import decode_ack_above

    tracker = SequenceTracker()
    for seq in (0, 1, 2, 5, 6, 9):
        tracker.add(seq)
    assert tracker.through == 2 and tracker.ranges() == [(5, 6), (9, 9)]
    payload = encode_ack({"a/run1": tracker.through}, {"a/run1": tracker.ranges()})
    assert decode_ack(payload) == {"a/run1": 2}
    assert decode_ack_above(payload) == {"a/run1": [(5, 6), (9, 9)]}
    assert decode_ack_above(encode_ack({"a/run1": 2})) == {}  # an older learner's acks: nothing selective
    outbox = Outbox(capacity=20)
    for seq in range(11):
        outbox.add(stamped(seq))
    outbox.acknowledge(2)
    assert outbox.acknowledge_ranges(decode_ack_above(payload)["a/run1"]) == 3
    assert [t.seq for t in outbox.due(now=0.0)] == [3, 4, 7, 8, 10]
    with pytest.raises(TransportError, match="empty range"):
        decode_ack_above(pack({"kind": "ack", "protocol": PROTOCOL_VERSION, "acks": {}, "above": {"a/run1": [[4, 3]]}}))


def test_outbox_window_limits_what_is_out():
    outbox = Outbox(capacity=100, resend_after_s=2.0, max_in_flight=5)
    for seq in range(12):
        outbox.add(stamped(seq))
    first = outbox.due(now=0.0)
    assert [t.seq for t in first] == [0, 1, 2, 3, 4]
    outbox.mark_sent(first, 0.0)
    assert outbox.in_flight(0.5) == 5 and outbox.due(now=0.5) == []
    outbox.acknowledge(2)  # three acknowledged: three more may go out
    assert [t.seq for t in outbox.due(now=0.5)] == [5, 6, 7]
    assert [t.seq for t in outbox.due(now=2.0)] == [3, 4, 5, 6, 7]  # after the resend timeout: the oldest first


# ----- run identity -----------------------------------------------------------------------------------------------

RUN_A, RUN_B = "a" * 32, "b" * 32


def tiny_weights(version: int, run: str | None = None, incarnation: int | None = None) -> WeightsMessage:
    spec = ObservationSpec.from_shapes({"state": ((14,), np.float32)})
    return WeightsMessage(version, b"p", spec, 4, {}, run=run, incarnation=incarnation)


def test_weights_acks_and_transitions_carry_their_run_and_read_without_it():
    back = decode_weights(encode_weights(tiny_weights(7, RUN_A, 3)))
    assert back.stamp == WeightsStamp(RUN_A, 3, 7)
    old = decode_weights(encode_weights(tiny_weights(7)))  # a policy file or learner from before run ids
    assert (old.run, old.incarnation) == (None, None) and "run" not in unpack(encode_weights(tiny_weights(7)))
    moved = decode_weights(reversion_weights(encode_weights(tiny_weights(7, RUN_A, 3)), 9, run=RUN_B, incarnation=4))
    assert moved.stamp == WeightsStamp(RUN_B, 4, 9)
    assert decode_weights(reversion_weights(encode_weights(tiny_weights(7, RUN_A, 3)), 9)).stamp == (RUN_A, 3, 9)

    ack = decode_ack_message(encode_ack({SOURCE: 4}, {SOURCE: [(7, 9)]}, run=RUN_A, incarnation=2))
    assert (ack.acks, ack.above, ack.run, ack.incarnation) == ({SOURCE: 4}, {SOURCE: [(7, 9)]}, RUN_A, 2)
    plain = decode_ack_message(encode_ack({SOURCE: 4}))
    assert (plain.acks, plain.above, plain.run, plain.incarnation) == ({SOURCE: 4}, {}, None, None)

    addressed = decode_transitions_message(encode_transitions(SOURCE, [stamped(0)], RUN_A))
    assert (addressed.source, [t.seq for t in addressed.items], addressed.run) == (SOURCE, [0], RUN_A)
    assert decode_transitions_message(encode_transitions(SOURCE, [stamped(0)])).run is None
    assert decode_transitions(encode_transitions(SOURCE, [stamped(0)], RUN_A))[0] == SOURCE


@pytest.mark.parametrize("field, value", [("run", "bad run"), ("run", 7), ("run", "x" * 65), ("incarnation", "2"),
                                          ("incarnation", 0), ("incarnation", True), ("incarnation", 2.5)])
def test_a_malformed_run_or_incarnation_is_a_transport_error_naming_the_field(field, value):
    payloads = {"weights": unpack(encode_weights(tiny_weights(1, RUN_A, 1))),
                "ack": unpack(encode_ack({SOURCE: 1}, run=RUN_A, incarnation=1))}
    decoders = {"weights": decode_weights, "ack": decode_ack_message}
    if field == "run":
        payloads["transitions"] = unpack(encode_transitions(SOURCE, [], RUN_A))
        decoders["transitions"] = decode_transitions_message
    for kind, message in payloads.items():
        with pytest.raises(TransportError, match=rf"^{kind} payload has a malformed {field} ") as error:
            decoders[kind](pack({**message, field: value}))
        assert "\n" not in str(error.value)


def test_the_actor_binds_to_the_first_run_it_hears_and_ignores_any_other():
    lines: list[str] = []
    binding = RunBinding(log=lines.append)
    assert binding.hear(None, None) is Heard.UNMARKED  # a learner from before run ids: used while nothing is bound
    assert binding.hear(RUN_A, 1) is Heard.BOUND and binding.run == RUN_A
    assert binding.hear(RUN_A, 1) is Heard.CURRENT
    for _ in range(3):  # weights and acks of another run, again and again: ignored, logged once
        assert binding.hear(RUN_B, 1) is Heard.FOREIGN and not Heard.FOREIGN.admitted
    assert binding.hear(None, None) is Heard.FOREIGN  # nor, once bound, a learner without a run id
    foreign = [line for line in lines if RUN_B in line]
    assert foreign == [f"a learner of another run (run {RUN_B}, incarnation 1) is on the graph: ignoring its weights "
                       f"and acknowledgements; this actor serves run {RUN_A} (set follow_new_run:=true to switch to a "
                       "new run)"]
    assert binding.ignored == {RUN_B: 3, "": 1} and binding.run == RUN_A
    # the served run's learner restarts: its higher incarnation is used, the older one is stale from then on
    assert binding.hear(RUN_A, 2) is Heard.RESTARTED and Heard.RESTARTED.admitted
    assert binding.hear(RUN_A, 1) is Heard.STALE and not Heard.STALE.admitted
    assert binding.hear(RUN_A, 2) is Heard.CURRENT and binding.incarnation == 2
    assert binding.to_json()["run"] == RUN_A and binding.to_json()["incarnation"] == 2


def test_an_actor_named_to_a_run_serves_only_that_run():
    lines: list[str] = []
    binding = RunBinding(RUN_B, log=lines.append)
    assert binding.hear(RUN_A, 5) is Heard.FOREIGN and binding.run == RUN_B  # heard first, but not the named run
    assert "named by run_id" in lines[-1] and RUN_A in lines[-1]
    assert binding.hear(RUN_B, 3) is Heard.BOUND and binding.incarnation == 3
    assert binding.hear(RUN_B, 2) is Heard.STALE
    with pytest.raises(ValueError, match="follow_new_run"):
        RunBinding(RUN_B, follow_new_run=True)
    with pytest.raises(ValueError, match="run id"):
        RunBinding("not a run")


def test_follow_new_run_switches_once_and_never_back():
    lines: list[str] = []
    binding = RunBinding(follow_new_run=True, log=lines.append)
    assert binding.hear(RUN_A, 4) is Heard.BOUND
    assert binding.hear(RUN_B, 1) is Heard.SWITCHED and (binding.run, binding.incarnation) == (RUN_B, 1)
    assert f"switching to it from run {RUN_A} (follow_new_run)" in lines[-1]
    assert binding.hear(RUN_A, 4) is Heard.FOREIGN and binding.run == RUN_B  # the old learner, still up: no flapping
    assert binding.hear(RUN_A, 5) is Heard.FOREIGN and binding.switches == 1


def test_a_huge_version_of_another_run_or_an_older_incarnation_locks_nothing_out():
    """Versions compare only within one (run, learner incarnation): an intruder's 2**62 cannot shut out the run's
    own weights, nor can an old incarnation's versions shut out a restarted learner's."""
    binding = RunBinding()
    in_use = None

    def offer(weights: WeightsMessage) -> bool:
        """What the actor node does with weights: the binding first, then whether they supersede those in use."""
        nonlocal in_use
        if binding.hear(weights.run, weights.incarnation).admitted and weights.stamp.supersedes(in_use):
            in_use = weights.stamp
            return True
        return False

    assert offer(tiny_weights(5, RUN_A, 1))
    assert not offer(tiny_weights(2**62, RUN_B, 1))  # another run's: never used
    assert offer(tiny_weights(6, RUN_A, 1)) and in_use == (RUN_A, 1, 6)
    assert not offer(tiny_weights(6, RUN_A, 1)) and not offer(tiny_weights(3, RUN_A, 1))  # not newer
    assert offer(tiny_weights(2**62, RUN_A, 1))  # the served learner's own (or a replay of it): used ...
    assert offer(tiny_weights(1, RUN_A, 2))  # ... yet its restart's version 1 still replaces it
    assert not offer(tiny_weights(2**62 + 1, RUN_A, 1))  # and the old incarnation is stale
    assert offer(tiny_weights(2, RUN_A, 2)) and in_use == (RUN_A, 2, 2)
    assert WeightsStamp(None, None, 1).supersedes(None) and not WeightsStamp(None, None, 1).supersedes(
        WeightsStamp(None, None, 3))  # weights without a run compare by version, as before


def test_the_outbox_sends_to_the_run_served_and_applies_only_the_acks_given():
    outbox = Outbox(capacity=10)
    for seq in range(4):
        outbox.add(stamped(seq))
    (message,) = outbox.due_messages(SOURCE, now=0.0, run=RUN_A)
    assert decode_transitions_message(message).run == RUN_A
    outbox.apply_ack(decode_ack_message(encode_ack({SOURCE: 1}, {SOURCE: [(3, 3)]}, run=RUN_A, incarnation=1)),
                     SOURCE, now=0.5)
    assert len(outbox) == 1 and outbox.acknowledged_through == 1


# ----- clocks -----------------------------------------------------------------------------------------------------

def _clock_fields(value, path: str = "") -> list[str]:
    """Keys that name a time, and numbers that look like a clock reading (unix seconds or ns), anywhere in `value`."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}/{key}"
            if set(re.split(r"[^a-z]+", str(key).lower())) & {"time", "stamp", "clock", "deadline", "age", "at", "now"}:
                found.append(where)
            found += _clock_fields(item, where)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found += _clock_fields(item, f"{path}[{i}]")
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) > 1e8:
        found.append(f"{path}={value}")
    return found


def test_nothing_that_crosses_hosts_carries_a_clock():
    """Transitions, acknowledgements and weights carry sequence numbers, episodes, steps and versions, never a stamp
    of the sender's clock: the actor and the learner may run on hosts whose clocks disagree."""
    spec = ObservationSpec.from_shapes({"state": ((14,), np.float32)})
    payloads = {
        "transitions": encode_transitions(SOURCE, [stamped(5, learner_action=np.zeros(4, np.float32),
                                                           policy_info={"base_action": np.zeros(4, np.float32)})],
                                          RUN_A),
        "ack": encode_ack({SOURCE: 4}, {SOURCE: [(7, 9)]}, run=RUN_A, incarnation=2),
        "weights": encode_weights(WeightsMessage(version=3, policy=b"w", observation_spec=spec, action_dim=4,
                                                 policy_config={"base": "runs/dp/policy"}, transitions=10,
                                                 updates=20, training_done=True, files={"runs/dp/policy": "ab" * 32},
                                                 run=RUN_A, incarnation=2)),
    }
    for kind, payload in payloads.items():
        assert _clock_fields(unpack(payload)) == [], kind


def test_ack_gaps_keep_the_longest_and_the_long_ones_with_their_start():
    gaps = AckGaps(record_s=1.0, keep=2)
    for monotonic, unix in ((10.0, 1000.0), (10.4, 1000.4), (13.4, 1003.4), (13.5, 1003.5), (15.5, 1005.5),
                            (17.0, 1007.0)):
        gaps.heard(monotonic, unix)
    assert gaps.to_json() == {"longest_s": 3.0, "gaps": [[1003.5, 2.0], [1005.5, 1.5]]}  # the last two kept
