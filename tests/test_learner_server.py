"""LearnerServer without transport, driving a real (tiny) Learner: ingest from several actors, episode-wise
insertion, de-duplication, acks, rejections, training schedule and real gradient steps, weights, abandoned episodes,
acknowledging before the learner is built, and crash recovery from checkpoint + transition log."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections import Counter

import jax
import numpy as np
import pytest

from robot_rl.agents.sac import SACConfig
from robot_rl.learner.learner import Learner, LearnerConfig
from robot_rl.learner.server import (
    CHECKPOINT_DIR,
    LOG_DIR,
    MAX_POLL_GAP_S,
    POLICY_FILE,
    RUN_FILE,
    LearnerServer,
    checkpoint_server_state,
    compile_learner_step,
)
from robot_rl.wire.protocol import TransportError, make_source
from robot_rl.wire.transitions import StampedTransition, encode_transitions
from robot_rl.wire.weights import decode_weights

SPEC = {"state": ((14,), np.float32), "object_state": ((10,), np.float32)}
ACTION_DIM = 4
SMALL_SAC = SACConfig(actor_hidden_dims=(16, 16), critic_hidden_dims=(16, 16), critic_ensemble_size=2)
# No warm-up of random actions: the schedule tests count learner steps from the first transition on.
SMALL_LEARNER = LearnerConfig(batch_size=8, utd=1, online_capacity=400, demo_capacity=400, seed=1,
                              warmup_transitions=0)

SOURCE_A = make_source("arm-a", "inc0")
SOURCE_A_RESTARTED = make_source("arm-a", "inc1")
SOURCE_B = make_source("arm-b", "inc0")
SOURCE_ID = {SOURCE_A: 1, SOURCE_B: 2, SOURCE_A_RESTARTED: 3}


@pytest.fixture(scope="module", autouse=True)
def compiled_learner_step():
    """Compile the tiny learner's jitted init and update once for the module (the jit cache is process-wide)."""
    compile_learner_step(new_learner())


def new_learner() -> Learner:
    return Learner(SPEC, ACTION_DIM, SMALL_SAC, SMALL_LEARNER)


def new_server(run_dir, **kwargs) -> LearnerServer:
    return LearnerServer(new_learner(), run_dir, **kwargs)


class FakeClock:
    """The learner's clock for abandoned episodes, advanced by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def poll_until(server: LearnerServer, clock: FakeClock, until: float) -> list:
    """Advance the clock to `until` in one-second polls of close_abandoned (as the node's timer does)."""
    closed = []
    while clock.now < until:
        clock.now = min(clock.now + 1.0, until)
        closed += server.close_abandoned()
    return closed


def observation(source: str, episode: int, step: int) -> dict[str, np.ndarray]:
    """An observation that encodes (source, episode, step) so replay contents can be checked exactly."""
    state = np.zeros(14, np.float32)
    state[:3] = (SOURCE_ID[source], episode, step)
    return {"state": state, "object_state": np.full(10, step, np.float32)}


class Stream:
    """One actor run: consecutive sequence numbers over its episodes (what ActorSession produces)."""

    def __init__(self, source: str):
        self.source = source
        self.next_seq = 0

    def episode(self, episode: int, length: int, end: str = "terminated", interventions=()) -> list[StampedTransition]:
        items = []
        for step in range(length):
            last = step == length - 1
            items.append(StampedTransition(
                seq=self.next_seq, episode=episode, step=step, observation=observation(self.source, episode, step),
                action=np.array([SOURCE_ID[self.source], episode, step, 0], np.float32),
                reward=1.0 if last and end == "terminated" else 0.0,
                terminated=last and end == "terminated", truncated=last and end == "truncated",
                next_observation=observation(self.source, episode, step + 1),
                intervention=step in interventions, success=last and end == "terminated"))
            self.next_seq += 1
        return items


def payload(source: str, items) -> bytes:
    return encode_transitions(source, list(items))


def contents(buffer) -> Counter:
    """Multiset of (source id, episode, step) of the transitions in a replay buffer."""
    return Counter(tuple(int(v) for v in row[:3]) for row in buffer.actions[buffer.valid])


def expected(source: str, items) -> Counter:
    return Counter((SOURCE_ID[source], t.episode, t.step) for t in items)


def check_next_observations(buffer) -> None:
    """Every stored transition's next observation is the step after it (episodes were not mixed up)."""
    batch = buffer.gather(np.flatnonzero(buffer.valid))
    np.testing.assert_array_equal(batch.observations["state"][:, :3], batch.actions[:, :3])
    np.testing.assert_array_equal(batch.next_observations["state"][:, :2], batch.actions[:, :2])
    np.testing.assert_array_equal(batch.next_observations["state"][:, 2], batch.actions[:, 2] + 1)


# ----- ingest -----------------------------------------------------------------------------------------------------

def test_interleaved_episodes_are_inserted_when_they_end(tmp_path):
    server = new_server(tmp_path)
    message = server.start(demos=None)
    assert "started" in message
    assert Learner.checkpoint_path(tmp_path / CHECKPOINT_DIR) is not None  # the initial checkpoint
    a, b = Stream(SOURCE_A), Stream(SOURCE_B)
    a0 = a.episode(0, 3, "terminated")
    b0 = b.episode(0, 4, "truncated")
    a1 = a.episode(1, 2, "truncated")
    b1 = b.episode(1, 3, "terminated")
    online = server.learner.online

    server.ingest(payload(SOURCE_A, a0[:2]))
    server.ingest(payload(SOURCE_B, b0[:1]))
    assert len(online) == 0 and server.received == 3  # nothing ended yet
    server.ingest(payload(SOURCE_A, a0[2:]))
    assert len(online) == 3 and server.learner.transitions == 3
    assert contents(online) == expected(SOURCE_A, a0)
    server.ingest(payload(SOURCE_B, b0[1:3]))
    server.ingest(payload(SOURCE_A, a1[:1]))
    assert len(online) == 3
    acks = server.ingest(payload(SOURCE_B, b0[3:] + b1[:2]))
    assert len(online) == 7
    assert acks == {SOURCE_A: a1[0].seq, SOURCE_B: b1[1].seq}
    server.ingest(payload(SOURCE_A, a1[1:]))
    server.ingest(payload(SOURCE_B, b1[2:]))

    everything = a0 + b0 + a1 + b1
    assert len(online) == len(everything) == server.received == server.learner.transitions == 12
    assert contents(online) == expected(SOURCE_A, a0 + a1) + expected(SOURCE_B, b0 + b1)
    check_next_observations(online)
    assert server.episodes == 4 and server.successes == 2
    assert int(online.terminated[online.valid].sum()) == 2
    assert int(online.truncated[online.valid].sum()) == 2
    assert len(server.learner.demo) == 0
    assert server.rejected == 0 and server.inbox.duplicates == 0


def test_steps_of_an_episode_arriving_out_of_order_before_its_end_are_inserted_in_order(tmp_path):
    server = new_server(tmp_path)
    server.start()
    items = Stream(SOURCE_A).episode(0, 4, "terminated")
    assert server.ingest(payload(SOURCE_A, [items[2], items[0]])) == {SOURCE_A: 0}
    assert server.ingest(payload(SOURCE_A, [items[1]])) == {SOURCE_A: 2}
    assert len(server.learner.online) == 0
    assert server.ingest(payload(SOURCE_A, [items[3]])) == {SOURCE_A: 3}
    assert contents(server.learner.online) == expected(SOURCE_A, items)
    check_next_observations(server.learner.online)


def test_step_arriving_after_its_episode_end_is_still_inserted(tmp_path):
    server = new_server(tmp_path)
    server.start()
    items = Stream(SOURCE_A).episode(0, 4, "terminated")
    server.ingest(payload(SOURCE_A, [items[0]]))
    server.ingest(payload(SOURCE_A, items[2:]))  # the batch with step 1 was lost
    assert server.ingest(payload(SOURCE_A, [items[1]])) == {SOURCE_A: 3}  # re-sent
    assert server.received == 4
    assert contents(server.learner.online) == expected(SOURCE_A, items)
    server.checkpoint()
    assert server.log.indices() == []


def test_frames_sent_once_are_joined_and_a_step_whose_next_frame_never_came_is_counted(tmp_path):
    """Transitions sent as an actor first sends them (robot_rl.wire.transitions.StampedTransition.next_frame_follows):
    each takes its next frame from the next step's transition, out of order too. The actor dies after step 3 of its
    second episode: steps 0-2 go in when it is abandoned, step 3 (its next frame never came) is counted, not
    inserted."""
    clock = FakeClock()
    server = new_server(tmp_path, clock=clock, abandon_after_s=5.0)
    server.start()
    stream = Stream(SOURCE_A)
    full, cut = stream.episode(0, 5), stream.episode(1, 6)[:4]
    items = [dataclasses.replace(t, next_frame_follows=not (t.terminated or t.truncated)) for t in full + cut]
    first_sends = {t.seq for t in items}
    for batch in (items[2:4], items[0:2], items[4:]):  # a terminal step arrives last (a lost first send comes again
        # with its next frame: robot_rl.wire.outbox.Outbox.due_messages)
        server.ingest(encode_transitions(SOURCE_A, batch, first_sends=first_sends))
    poll_until(server, clock, clock.now + 10.0)
    assert contents(server.learner.online) == expected(SOURCE_A, full + cut[:3])
    check_next_observations(server.learner.online)
    assert server.abandoned == 1 and server.without_next_frame == 1 and server.received == 8
    assert server.inbox.acks() == {SOURCE_A: 8}  # acknowledged all the same: nothing would bring that frame


def test_interventions_also_go_to_the_demo_buffer(tmp_path):
    server = new_server(tmp_path)
    server.start()
    items = Stream(SOURCE_A).episode(0, 6, "terminated", interventions=(1, 2, 4))
    server.ingest(payload(SOURCE_A, items))
    learner = server.learner
    assert len(learner.online) == 6
    assert len(learner.demo) == 3 == learner.interventions
    assert contents(learner.demo) == expected(SOURCE_A, [items[1], items[2], items[4]])
    assert learner.demo.intervention[learner.demo.valid].all()
    assert int(learner.online.intervention[learner.online.valid].sum()) == 3


def test_duplicates_are_not_inserted_twice_but_acknowledged(tmp_path):
    server = new_server(tmp_path)
    server.start()
    stream = Stream(SOURCE_A)
    items = stream.episode(0, 3) + stream.episode(1, 2, "truncated")
    first = server.ingest(payload(SOURCE_A, items))
    counts = (server.received, len(server.learner.online), server.learner.transitions, server.episodes)
    assert counts == (5, 5, 5, 2)
    again = server.ingest(payload(SOURCE_A, items))  # the ack was lost: the actor re-sends everything
    assert again == first == {SOURCE_A: 4}
    assert (server.received, len(server.learner.online), server.learner.transitions, server.episodes) == counts
    assert server.inbox.duplicates == 5
    server.ingest(payload(SOURCE_A, [items[0], items[0], items[3]]))
    assert server.inbox.duplicates == 8
    assert contents(server.learner.online) == expected(SOURCE_A, items)
    assert server.status()["duplicates"] == 8


def test_acks_are_the_highest_contiguous_sequence_number_per_source(tmp_path):
    server = new_server(tmp_path)
    server.start()
    a, b = Stream(SOURCE_A), Stream(SOURCE_B)
    items_a, items_b = a.episode(0, 5), b.episode(0, 3)
    assert server.ingest(payload(SOURCE_A, [items_a[0], items_a[1], items_a[3]])) == {SOURCE_A: 1}
    assert server.ingest(payload(SOURCE_B, [items_b[1]])) == {SOURCE_A: 1, SOURCE_B: -1}
    assert server.ingest(payload(SOURCE_A, [items_a[4]])) == {SOURCE_A: 1, SOURCE_B: -1}
    assert server.ingest(payload(SOURCE_A, [items_a[2]])) == {SOURCE_A: 4, SOURCE_B: -1}
    assert server.ingest(payload(SOURCE_B, [items_b[0]])) == {SOURCE_A: 4, SOURCE_B: 1}
    assert server.inbox.acks() == {SOURCE_A: 4, SOURCE_B: 1}


def test_malformed_payload_raises_and_changes_nothing(tmp_path):
    server = new_server(tmp_path)
    server.start()
    with pytest.raises(TransportError):
        server.ingest(b"\x00not msgpack at all\xc1")
    assert server.received == 0 and server.inbox.acks() == {}


@pytest.mark.parametrize("breakage, words", [
    (lambda t: {**t.observation, "state": np.zeros(13, np.float32)}, ["obs", "state", "(13,)"]),
    (lambda t: {**t.observation, "state": np.zeros(14, np.float64)}, ["obs", "state", "float64"]),
    (lambda t: {"state": t.observation["state"]}, ["obs", "lacks", "object_state"]),
    (lambda t: {**t.observation, "object_state": np.full(10, np.nan, np.float32)}, ["obs", "not finite"]),
])
def test_wrong_observations_are_rejected_counted_and_acknowledged(tmp_path, breakage, words):
    server = new_server(tmp_path)
    server.start()
    items = Stream(SOURCE_A).episode(0, 4, "terminated")
    bad = StampedTransition(**{**items[1].__dict__, "observation": breakage(items[1])})
    acks = server.ingest(payload(SOURCE_A, [items[0], bad, items[2], items[3]]))
    assert acks == {SOURCE_A: 3}  # the actor can forget it: it will never be accepted
    assert server.rejected == 1 and server.received == 3
    assert len(server.rejections) == 1
    reason = server.rejections[0]
    assert SOURCE_A in reason and "seq 1" in reason
    for word in words:
        assert word in reason, reason
    # the episode is still inserted (cut at the gap), without the rejected step
    assert contents(server.learner.online) == expected(SOURCE_A, [items[0], items[2], items[3]])
    assert server.learner.transitions == 3
    # a re-send of the rejected transition is a duplicate, not another rejection
    server.ingest(payload(SOURCE_A, [bad]))
    assert server.rejected == 1 and len(server.rejections) == 1 and server.inbox.duplicates == 1
    assert server.status()["rejected"] == 1


def test_wrong_next_observation_and_action_shapes_are_rejected(tmp_path):
    server = new_server(tmp_path)
    server.start()
    items = Stream(SOURCE_A).episode(0, 3, "terminated")
    bad_next = StampedTransition(**{**items[0].__dict__,
                                    "next_observation": {**items[0].next_observation,
                                                         "object_state": np.zeros((2, 5), np.float32)}})
    bad_action = StampedTransition(**{**items[1].__dict__, "action": np.zeros(7, np.float32)})
    assert server.ingest(payload(SOURCE_A, [bad_next, bad_action, items[2]])) == {SOURCE_A: 2}
    assert server.rejected == 2 and server.received == 1
    assert "next_obs" in server.rejections[0] and "object_state" in server.rejections[0]
    assert "action" in server.rejections[1] and "(7,)" in server.rejections[1]
    assert len(server.learner.online) == 1


# ----- training schedule and weights ------------------------------------------------------------------------------

def test_pending_steps_budget_train_step_and_weights(tmp_path):
    server = new_server(tmp_path, updates_per_transition=2.0, weights_every=3)
    server.start()
    assert server.pending_steps == 0  # nothing to train on yet
    stream = Stream(SOURCE_A)
    server.ingest(payload(SOURCE_A, stream.episode(0, 3) + stream.episode(1, 2, "truncated")))
    assert server.received == 5
    assert server.pending_steps == 10

    learner = server.learner
    params_before = jax.tree.leaves(learner.agent.critic.params)
    dues = []
    for _ in range(4):
        info, due = server.train_step()
        dues.append(due)
        assert np.isfinite(info["critic_loss"])
    assert dues == [False, False, True, False]
    assert server.steps == 4 and learner.updates == 4 * SMALL_LEARNER.utd == int(learner.agent.step)
    changed = [not np.array_equal(a, b) for a, b in zip(params_before, jax.tree.leaves(learner.agent.critic.params))]
    assert any(changed)  # real gradient steps on the staged transitions
    assert server.pending_steps == 10 - 4
    assert server.trained_on == 2  # 4 steps at 2 updates per transition

    first = server.weights()
    second = server.weights()
    assert (first.version, second.version) == (1, 2)
    assert second.transitions == 2 and second.updates == learner.updates
    assert second.action_dim == ACTION_DIM
    assert second.observation_spec == learner.observation_spec
    assert second.policy == learner.policy_bytes()
    assert second.policy_kind == "gaussian"
    assert second.policy_config["actor_hidden_dims"] in ([16, 16], (16, 16))

    server.budget = 3  # only 3 transitions' worth of training: 6 steps
    assert server.pending_steps == 2
    assert not server.budget_done
    server.train_step()
    server.train_step()
    assert server.pending_steps == 0 and server.budget_done
    server.ingest(payload(SOURCE_A, stream.episode(2, 2)))  # still logged, inserted and acknowledged
    assert server.received == 7 and len(learner.online) == 7
    assert server.pending_steps == 0 and server.inbox.acks() == {SOURCE_A: 6}

    server.checkpoint()
    restored = new_server(tmp_path, updates_per_transition=2.0, weights_every=3)
    restored.start()
    assert restored.steps == 6 and restored.weights_version >= 2
    assert restored.learner.updates == learner.updates
    for a, b in zip(jax.tree.leaves(learner.agent), jax.tree.leaves(restored.learner.agent)):
        np.testing.assert_array_equal(a, b)
    resumed = restored.weights()
    assert resumed.version > second.version  # versions keep increasing across restarts
    assert resumed.transitions == 3 == restored.trained_on and resumed.updates == 6 * SMALL_LEARNER.utd
    policy = decode_weights((tmp_path / POLICY_FILE).read_bytes())
    assert policy.observation_spec == learner.observation_spec


def test_compiling_the_learner_step_leaves_the_learner_unchanged():
    learner = new_learner()
    before = [np.asarray(leaf).copy() for leaf in jax.tree.leaves(learner.agent)]
    rng_state = learner.rng.bit_generator.state
    compile_learner_step(learner)
    assert all(np.array_equal(a, b) for a, b in zip(before, jax.tree.leaves(learner.agent)))
    assert learner.rng.bit_generator.state == rng_state and learner.updates == 0 and len(learner.online) == 0


@pytest.mark.parametrize("upt, received, steps, budget, pending", [
    (1.0, 5, 0, 0, 5), (1.0, 5, 3, 0, 2), (0.5, 5, 0, 0, 2), (2.0, 5, 1, 0, 9), (1.0, 5, 0, 2, 2),
    (1.0, 5, 7, 0, 0), (0.0, 5, 0, 0, 0),
])
def test_pending_steps_formula(tmp_path, upt, received, steps, budget, pending):
    server = new_server(tmp_path, updates_per_transition=upt, budget=budget)
    server.start()
    server.ingest(payload(SOURCE_A, Stream(SOURCE_A).episode(0, received)))
    assert server.received == received
    server.steps = steps  # without running the (jitted) learner
    assert server.pending_steps == pending


def test_bad_settings_are_rejected(tmp_path):
    with pytest.raises(ValueError):
        new_server(tmp_path, updates_per_transition=-1.0)
    with pytest.raises(ValueError):
        new_server(tmp_path, weights_every=0)


def test_status_and_policy_file(tmp_path):
    server = new_server(tmp_path)
    server.start()
    server.ingest(payload(SOURCE_A, Stream(SOURCE_A).episode(0, 2, interventions=(0,))))
    server.write_status(tmp_path / "status.json", phase="test")
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["received"] == 2 and status["online"] == 2 and status["demo"] == 1
    assert status["acks"] == {SOURCE_A: 1} and status["phase"] == "test"
    assert status["sources"][SOURCE_A] == {"through": 1, "above": []}
    weights = decode_weights(server.write_policy().read_bytes())
    assert weights.version >= 1 and weights.policy == server.learner.policy_bytes()


# ----- crash recovery ---------------------------------------------------------------------------------------------

def test_crash_after_checkpoint_loses_nothing_acknowledged_and_doubles_nothing(tmp_path):
    a_stream, b_stream = Stream(SOURCE_A), Stream(SOURCE_B)
    a0, a1, a2 = a_stream.episode(0, 3), a_stream.episode(1, 4, "truncated"), a_stream.episode(2, 5)
    b0, b1 = b_stream.episode(0, 2, interventions=(1,)), b_stream.episode(1, 6)

    first = new_server(tmp_path)
    first.start()
    first.ingest(payload(SOURCE_A, a0))
    first.ingest(payload(SOURCE_B, b0))
    first.ingest(payload(SOURCE_A, a1[:2]))  # a1 spans the checkpoint
    first.checkpoint()
    first.ingest(payload(SOURCE_A, a1[2:]))
    first.ingest(payload(SOURCE_B, b1[:3]))  # b1 starts after the checkpoint and is not over at the crash
    first.ingest(payload(SOURCE_A, a2[:2]))
    first.ingest(payload(SOURCE_A, a2[2:3]))
    acked_a, acked_b = first.inbox.acks()[SOURCE_A], first.inbox.acks()[SOURCE_B]
    assert (acked_a, acked_b) == (a2[2].seq, b1[2].seq)
    online_before = contents(first.learner.online)
    assert online_before == expected(SOURCE_A, a0 + a1) + expected(SOURCE_B, b0)
    # kill -9: `first` is abandoned without a checkpoint

    second = new_server(tmp_path)
    message = second.start()
    assert "resumed" in message
    assert second.received == first.received == 3 + 2 + 4 + 3 + 3
    assert second.inbox.acks() == first.inbox.acks()
    assert second.learner.transitions == first.learner.transitions
    assert contents(second.learner.online) == online_before
    assert len(second.learner.demo) == len(first.learner.demo) == 1
    assert second.episodes == first.episodes

    # the actors re-send what was not acknowledged (and, after a lost ack, a bit more), then carry on
    second.ingest(payload(SOURCE_A, a2[2:]))
    second.ingest(payload(SOURCE_B, b1[2:]))
    everything = expected(SOURCE_A, a0 + a1 + a2) + expected(SOURCE_B, b0 + b1)
    assert contents(second.learner.online) == everything
    assert len(second.learner.online) == sum(everything.values()) == second.received
    assert second.learner.transitions == second.received
    assert second.inbox.acks() == {SOURCE_A: a2[-1].seq, SOURCE_B: b1[-1].seq}
    check_next_observations(second.learner.online)


def test_partial_episode_at_checkpoint_survives_two_restarts(tmp_path):
    stream = Stream(SOURCE_A)
    e0, e1 = stream.episode(0, 2), stream.episode(1, 6)
    first = new_server(tmp_path)
    first.start()
    first.ingest(payload(SOURCE_A, e0 + e1[:2]))  # one batch with a finished and a running episode
    first.checkpoint()
    first.ingest(payload(SOURCE_A, e1[2:4]))
    first.checkpoint()  # e1 is still running at this checkpoint too

    second = new_server(tmp_path)
    second.start()
    assert second.received == 6 and len(second.learner.online) == 2
    second.ingest(payload(SOURCE_A, e1[4:5]))
    # crash again without a checkpoint
    third = new_server(tmp_path)
    third.start()
    assert third.received == 7 and third.inbox.acks() == {SOURCE_A: e1[4].seq}
    third.ingest(payload(SOURCE_A, e1[3:]))  # overlap with what was acknowledged
    assert contents(third.learner.online) == expected(SOURCE_A, e0 + e1)
    assert len(third.learner.online) == 8 == third.received
    check_next_observations(third.learner.online)


def test_crash_before_any_checkpoint_but_the_initial_one(tmp_path):
    a_stream, b_stream = Stream(SOURCE_A), Stream(SOURCE_B)
    a0, a1 = a_stream.episode(0, 3), a_stream.episode(1, 4)
    b0 = b_stream.episode(0, 5, interventions=(0, 1))
    first = new_server(tmp_path)
    first.start()
    first.ingest(payload(SOURCE_A, a0))
    first.ingest(payload(SOURCE_B, b0[:3]))
    first.ingest(payload(SOURCE_A, a1[:2]))
    first.ingest(payload(SOURCE_B, b0[3:]))
    first.ingest(payload(SOURCE_A, a0))  # a duplicate batch is not logged twice
    assert len(list(first.log.replay())) == 4

    second = new_server(tmp_path)
    second.start()
    assert second.received == first.received == 10
    assert second.inbox.acks() == first.inbox.acks() == {SOURCE_A: a1[1].seq, SOURCE_B: b0[-1].seq}
    assert contents(second.learner.online) == contents(first.learner.online) == expected(SOURCE_A, a0) + expected(
        SOURCE_B, b0)
    assert len(second.learner.demo) == 2
    second.ingest(payload(SOURCE_A, a1[1:]))
    assert contents(second.learner.online) == expected(SOURCE_A, a0 + a1) + expected(SOURCE_B, b0)
    assert second.learner.transitions == second.received == 12


def test_resume_does_not_add_demos_again(tmp_path):
    first = new_server(tmp_path)
    first.start()
    first.ingest(payload(SOURCE_A, Stream(SOURCE_A).episode(0, 2)))
    first.checkpoint()
    second = new_server(tmp_path)
    # a resume ignores `demos` (they are in the checkpoint's demo buffer already); an object that would fail if used
    second.start(demos=object())
    assert second.received == 2 and len(second.learner.online) == 2


def test_rejected_transition_after_checkpoint_stays_acknowledged_after_a_crash(tmp_path):
    items = Stream(SOURCE_A).episode(0, 5)
    first = new_server(tmp_path)
    first.start()
    first.ingest(payload(SOURCE_A, items[:2]))
    first.checkpoint()
    bad = StampedTransition(**{**items[2].__dict__,
                               "observation": {**items[2].observation, "state": np.zeros(3, np.float32)}})
    assert first.ingest(payload(SOURCE_A, [bad, items[3]])) == {SOURCE_A: 3}
    # crash
    second = new_server(tmp_path)
    second.start()
    assert second.inbox.acks() == first.inbox.acks() == {SOURCE_A: 3}
    assert second.ingest(payload(SOURCE_A, items[4:])) == {SOURCE_A: 4}


def test_second_crash_after_a_checkpoint_that_emptied_the_log(tmp_path):
    stream = Stream(SOURCE_A)
    e0, e1 = stream.episode(0, 2), stream.episode(1, 3)
    first = new_server(tmp_path)
    first.start()
    first.ingest(payload(SOURCE_A, e0[:1]))
    first.ingest(payload(SOURCE_A, e0[1:]))
    first.checkpoint()
    assert first.log.indices() == []  # everything is in the checkpoint

    second = new_server(tmp_path)
    second.start()
    second.ingest(payload(SOURCE_A, e1))
    assert second.inbox.acks() == {SOURCE_A: e1[-1].seq}
    # crash again, before the next checkpoint
    third = new_server(tmp_path)
    third.start()
    assert third.received == second.received == 5
    assert third.inbox.acks() == {SOURCE_A: e1[-1].seq}
    assert contents(third.learner.online) == expected(SOURCE_A, e0 + e1)


def test_checkpoint_keeps_only_needed_log_batches(tmp_path):
    stream = Stream(SOURCE_A)
    e0, e1 = stream.episode(0, 2), stream.episode(1, 3)
    server = new_server(tmp_path)
    server.start()
    server.ingest(payload(SOURCE_A, e0))
    server.ingest(payload(SOURCE_A, e1[:1]))
    server.ingest(payload(SOURCE_A, e1[1:2]))
    server.checkpoint()
    assert server.log.indices() == [1, 2]  # the running episode's batches stay until it is inserted
    server.ingest(payload(SOURCE_A, e1[2:]))
    server.checkpoint()
    assert server.log.indices() == []
    assert (tmp_path / LOG_DIR).is_dir()


def test_a_corrupt_log_entry_of_a_partial_episode_fails_open_naming_the_file(tmp_path):
    # open() reads every entry the log kept, also those the checkpoint covers (they hold its partial episodes), so a
    # respawned learner refuses a damaged run folder before it listens, not after it built its agent.
    stream = Stream(SOURCE_A)
    server = new_server(tmp_path)
    server.start()
    server.ingest(payload(SOURCE_A, stream.episode(0, 4)[:2]))
    server.checkpoint()
    (kept,) = server.log.indices()
    entry = tmp_path / LOG_DIR / f"{kept:012d}.msgpack"
    entry.write_bytes(entry.read_bytes()[:40])
    respawned = LearnerServer(None, tmp_path)
    with pytest.raises(TransportError, match=rf"{entry.name} is corrupt .*move that file out of the log"):
        respawned.open()
    assert not respawned.opened


# ----- abandoned episodes -----------------------------------------------------------------------------------------

def truncated_steps(buffer) -> Counter:
    """(source id, episode, step) of the stored transitions flagged truncated."""
    rows = buffer.actions[buffer.valid & buffer.truncated]
    return Counter(tuple(int(v) for v in row[:3]) for row in rows)


def test_a_new_incarnation_closes_the_episodes_its_predecessor_left_open(tmp_path):
    a, a_again, b = Stream(SOURCE_A), Stream(SOURCE_A_RESTARTED), Stream(SOURCE_B)
    a0, b0 = a.episode(0, 6), b.episode(0, 6)
    server = new_server(tmp_path)
    server.start()
    server.ingest(payload(SOURCE_A, a0[:3]))  # the actor is killed after step 2: its episode stays open
    server.ingest(payload(SOURCE_B, b0[:2]))
    server.checkpoint()
    assert len(server.learner.online) == 0 and len(server.log.indices()) == 2  # kept while they are staged

    restarted = a_again.episode(0, 2)
    server.ingest(payload(SOURCE_A_RESTARTED, restarted[:1]))
    online = server.learner.online
    assert contents(online) == expected(SOURCE_A, a0[:3])  # only arm-a's old episode: arm-b goes on
    assert truncated_steps(online) == Counter({(SOURCE_ID[SOURCE_A], 0, 2): 1})  # its last step bootstraps
    check_next_observations(online)
    assert server.abandoned == 1 and server.episodes == 1
    assert server.learner.ready and np.isfinite(server.train_step()[0]["critic_loss"])  # trainable
    server.ingest(payload(SOURCE_A, a0[3:4]))  # a late step of the closed episode is not lost
    assert contents(online) == expected(SOURCE_A, a0[:4])

    server.checkpoint()
    assert server.log.indices() == [1, 2, 3]  # from arm-b's open episode on; arm-a's old batch is gone
    assert {key for key in server.status()["staged"]} == {f"{SOURCE_B} episode 0", f"{SOURCE_A_RESTARTED} episode 0"}
    again = new_server(tmp_path)
    again.start()
    assert contents(again.learner.online) == expected(SOURCE_A, a0[:4])
    assert again.abandoned == 1 and again.received == server.received == 7
    again.ingest(payload(SOURCE_B, b0[2:]))
    again.ingest(payload(SOURCE_A_RESTARTED, restarted[1:]))
    assert contents(again.learner.online) == (expected(SOURCE_A, a0[:4]) + expected(SOURCE_B, b0)
                                              + expected(SOURCE_A_RESTARTED, restarted))
    again.checkpoint()
    assert again.log.indices() == []


def test_an_episode_without_data_for_abandon_after_s_is_closed_and_a_restart_keeps_it_closed(tmp_path):
    clock = FakeClock()
    a, b = Stream(SOURCE_A), Stream(SOURCE_B)
    a0, b0 = a.episode(0, 6), b.episode(0, 6)
    server = new_server(tmp_path, abandon_after_s=120.0, clock=clock)
    server.start()
    server.ingest(payload(SOURCE_A, a0[:3]))
    assert poll_until(server, clock, clock.now + 60.0) == []
    server.ingest(payload(SOURCE_B, b0[:2]))  # arm-b keeps streaming
    assert poll_until(server, clock, clock.now + 59.0) == []
    assert len(server.learner.online) == 0
    assert poll_until(server, clock, clock.now + 1.0) == [(SOURCE_A, 0)]  # 120 s after arm-a's last step
    assert contents(server.learner.online) == expected(SOURCE_A, a0[:3])
    assert truncated_steps(server.learner.online) == Counter({(SOURCE_ID[SOURCE_A], 0, 2): 1})
    assert server.abandoned == 1 and server.learner.ready

    # a crash before the next checkpoint: the logged decision closes the episode again at the same point
    crashed = new_server(tmp_path, abandon_after_s=120.0, clock=clock)
    crashed.start()
    assert contents(crashed.learner.online) == expected(SOURCE_A, a0[:3])
    assert crashed.abandoned == 1 and set(crashed.status()["staged"]) == {f"{SOURCE_B} episode 0"}
    crashed.checkpoint()
    assert crashed.log.indices() == [1, 2]  # from arm-b's open episode on; arm-a's batch is gone
    # the human resumes arm-a after the pause: its later steps go in as an episode of their own
    crashed.ingest(payload(SOURCE_A, a0[3:]))
    assert contents(crashed.learner.online) == expected(SOURCE_A, a0)
    assert crashed.episodes == 1 and crashed.abandoned == 1

    later = new_server(tmp_path, abandon_after_s=120.0, clock=clock)
    later.start()
    assert contents(later.learner.online) == expected(SOURCE_A, a0)
    assert set(later.status()["staged"]) == {f"{SOURCE_B} episode 0"}  # arm-b's silence restarts with the learner
    assert poll_until(later, clock, clock.now + 119.0) == []
    assert poll_until(later, clock, clock.now + 1.0) == [(SOURCE_B, 0)]


def test_time_the_learner_was_busy_does_not_count_as_silence(tmp_path):
    clock = FakeClock()
    server = new_server(tmp_path, abandon_after_s=30.0, clock=clock)
    server.start()
    server.ingest(payload(SOURCE_A, Stream(SOURCE_A).episode(0, 5)[:2]))
    assert server.close_abandoned() == []
    clock.now += MAX_POLL_GAP_S + 50.0  # a long checkpoint: no poll, no message processed meanwhile
    assert server.close_abandoned() == []
    assert poll_until(server, clock, clock.now + 29.0) == []
    assert poll_until(server, clock, clock.now + 1.0) == [(SOURCE_A, 0)]


# ----- acknowledging before the learner is built ------------------------------------------------------------------

def test_transitions_are_logged_and_acknowledged_before_the_learner_is_attached(tmp_path):
    stream = Stream(SOURCE_A)
    e0, e1, e2 = stream.episode(0, 3), stream.episode(1, 4), stream.episode(2, 3)
    first = new_server(tmp_path)
    first.start()
    first.ingest(payload(SOURCE_A, e0 + e1[:2]))
    first.checkpoint()
    first.ingest(payload(SOURCE_A, e1[2:3]))  # acknowledged, then kill -9

    respawned = LearnerServer(None, tmp_path)  # what the node has before JAX is even imported
    assert "resumed" in respawned.open()
    assert respawned.inbox.acks() == {SOURCE_A: e1[2].seq}
    with pytest.raises(RuntimeError, match="nothing to checkpoint"):
        respawned.checkpoint()
    assert respawned.pending_steps == 0 and not respawned.budget_done
    # an actor re-sends (a duplicate) and streams on while the learner is being built
    assert respawned.ingest(payload(SOURCE_A, e1[2:] + e2[:1])) == {SOURCE_A: e2[0].seq}
    assert respawned.ingest(payload(SOURCE_A, e2[1:])) == {SOURCE_A: e2[-1].seq}
    assert respawned.status()["learner_ready"] is False and respawned.status()["online"] is None
    assert respawned.inbox.duplicates == 1

    learner = new_learner()
    assert "restored" in respawned.load_learner(learner)
    assert len(learner.online) == 3  # e0, from the checkpoint
    respawned.attach(learner)
    assert respawned.learner is learner and respawned.received == 10
    assert contents(learner.online) == expected(SOURCE_A, e0 + e1 + e2)
    check_next_observations(learner.online)
    assert respawned.pending_steps == 10 - first.steps
    respawned.checkpoint()
    assert respawned.log.indices() == []
    state = checkpoint_server_state(tmp_path)
    assert state["action_dim"] == ACTION_DIM and state["observation_spec"]["state"]["shape"] == [14]


def test_a_respawned_server_offers_its_last_policy_as_new_weights_before_the_learner_exists(tmp_path):
    assert LearnerServer(None, tmp_path / "new").stored_weights() is None  # a new run has no policy yet
    first = new_server(tmp_path)
    first.start()
    first.weights()
    first.checkpoint()
    respawned = LearnerServer(None, tmp_path)
    respawned.open()
    stored = decode_weights(respawned.stored_weights())
    assert stored.version == respawned.weights_version > first.weights_version  # newer than anything sent before
    assert (stored.run, stored.incarnation) == (first.run_id, 2) == (respawned.run_id, respawned.incarnation)
    assert (decode_weights((tmp_path / POLICY_FILE).read_bytes()).run, first.weights().incarnation) == (
        first.run_id, 1)
    assert stored.policy == first.learner.policy_bytes()
    assert stored.observation_spec == first.learner.observation_spec and stored.action_dim == ACTION_DIM


# ----- run identity -----------------------------------------------------------------------------------------------

def test_a_run_keeps_its_id_across_restarts_and_each_start_is_a_new_incarnation(tmp_path):
    first = LearnerServer(None, tmp_path / "run")
    assert first.run_id is None and "learner incarnation 1" in first.open()
    assert len(first.run_id) == 32 and json.loads((tmp_path / "run" / RUN_FILE).read_text()) == {
        "run_id": first.run_id}
    restarts = [LearnerServer(None, tmp_path / "run") for _ in range(2)]
    for server in restarts:
        server.open()
    assert [server.run_id for server in restarts] == [first.run_id] * 2
    assert [first.incarnation] + [server.incarnation for server in restarts] == [1, 2, 3]
    other = LearnerServer(None, tmp_path / "other")
    other.open()
    assert other.run_id != first.run_id and other.incarnation == 1  # a new folder is a new run
    (tmp_path / "other" / RUN_FILE).write_text("{")
    with pytest.raises(ValueError, match=rf"{RUN_FILE} holds no valid run id: remove it"):
        LearnerServer(None, tmp_path / "other").open()


def test_transitions_addressed_to_another_run_are_dropped_unacknowledged(tmp_path):
    server = LearnerServer(None, tmp_path)
    server.open()
    items = Stream(SOURCE_A).episode(0, 3)
    assert server.ingest(encode_transitions(SOURCE_A, items[:2], "another-run")) == {}
    assert server.inbox.acks() == {} and server.log.indices() == [] and server.received == 0
    assert server.status()["foreign_transitions"] == {"another-run": 2}
    assert server.ingest(encode_transitions(SOURCE_A, items[:2], server.run_id)) == {SOURCE_A: 1}  # its own run
    assert server.ingest(encode_transitions(SOURCE_A, items[2:])) == {SOURCE_A: 2}  # an actor bound to no run yet
    assert server.status()["run"] == server.run_id and server.status()["incarnation"] == 1


def test_importing_the_server_does_not_import_jax():
    code = "import sys, robot_rl.learner.server; print(sorted(m for m in ('jax', 'flax') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("lost_send", [
    None,
    7,  # seq 6, the last step of episode 1: it arrives with the re-send
    2,
])
def test_actor_session_to_server_end_to_end(tmp_path, lost_send):
    """ActorSession -> Outbox -> payload (maybe one lost) -> LearnerServer -> acks -> Outbox, over two episodes."""
    from robot_rl.actor.session import ActorSession
    from robot_rl.actor.safety import Safety, SafetyConfig
    from robot_rl.wire.outbox import Outbox
    from robot_rl.wire.transitions import decode_ack, encode_ack

    class Policy:
        def step(self, obs, *, uniform=False, now=None):
            from robot_rl.actor.session import ActorStep

            action = np.array([0.5, -0.5, 0.0, 1.0], np.float32)
            return ActorStep(action)

        def reset(self):
            pass

    outbox = Outbox(capacity=100, resend_after_s=1.0)
    session = ActorSession(Safety(SafetyConfig()), SOURCE_A, outbox, max_episode_steps=4, actor=Policy())
    server = new_server(tmp_path)
    server.start()
    now, sends = 0.0, 0
    for episode in range(2):
        session.start_episode([0.5, 0.0, 0.15], [0.0, 1.0, 0.0, 0.0])
        t = 0
        while True:
            result = session.step(observation(SOURCE_A, episode, t), reward=0.0, success=(episode == 1 and t == 3))
            t += 1
            now += 0.1
            due = outbox.due(now, max_items=2)
            outbox.mark_sent(due, now)
            if due:
                sends += 1
                if sends != lost_send:  # that payload is lost on the way
                    acks = decode_ack(encode_ack(server.ingest(payload(SOURCE_A, due))))
                    outbox.acknowledge(acks.get(SOURCE_A, -1))
            if result.episode_over:
                break
    for _ in range(10):  # keep the loop going until the lost batch was re-sent
        now += 0.5
        due = outbox.due(now)
        outbox.mark_sent(due, now)
        if due:
            outbox.acknowledge(server.ingest(payload(SOURCE_A, due))[SOURCE_A])
    assert len(outbox) == 0 and outbox.resent >= int(lost_send is not None)
    assert server.received == 7 == len(server.learner.online)  # 4 (time limit) + 3 (success)
    assert server.episodes == 2 and server.successes == 1
    assert server.inbox.acks() == {SOURCE_A: 6}
    online = server.learner.online
    batch = online.gather(np.flatnonzero(online.valid))
    state, next_state = batch.observations["state"], batch.next_observations["state"]
    np.testing.assert_array_equal(next_state[:, :2], state[:, :2])
    np.testing.assert_array_equal(next_state[:, 2], state[:, 2] + 1)
    assert sorted(map(tuple, state[:, 1:3].astype(int).tolist())) == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1),
                                                                      (1, 2)]
    np.testing.assert_allclose(batch.actions, np.tile([0.5, -0.5, 0.0, 1.0], (7, 1)))
    assert int(online.terminated[online.valid].sum()) == 1
    # the time-limit end, plus (when a step came late) the cut before the gap and the end of the late fragment
    assert int(online.truncated[online.valid].sum()) == (1 if lost_send in (None, 7) else 3)


def test_a_noise_head_learner_takes_robot_actions_with_noise_chunks_and_aliases_off_the_wire(tmp_path):
    """A noise-space (DSRL-NA) learner behind the server: transitions carry the robot's 4-d executed action, the
    head's noise as learner action and per-step chunk info with 2-d alias arrays; the server checks the robot
    action's shape (not the noise's), and the learner joins each chunk of 2 steps (a human's too) into one."""
    from robot_rl.agents.sac import aliased_actions
    from robot_rl.policies.noise import ALIAS_CHUNKS_KEY, ALIAS_NOISE_KEY, CHUNK_STEP_KEY

    noise_dim = 16
    sac = SACConfig(actor_hidden_dims=(16, 16), critic_hidden_dims=(16, 16), critic_ensemble_size=2,
                    aliased_chunk_dim=2 * ACTION_DIM, aliasing_samples=2)
    learner = Learner(SPEC, noise_dim, sac, SMALL_LEARNER, chunk_decisions=True, robot_action_dim=ACTION_DIM)
    server = LearnerServer(learner, tmp_path)
    server.start()
    import dataclasses

    items = [item if item.intervention else dataclasses.replace(
        item, learner_action=np.full(noise_dim, 0.25, np.float32),
        policy_info={CHUNK_STEP_KEY: np.int32(item.step % 2), ALIAS_NOISE_KEY: np.zeros((2, noise_dim), np.float32),
                     ALIAS_CHUNKS_KEY: np.ones((2, 2 * ACTION_DIM), np.float32)})
        for item in Stream(SOURCE_A).episode(0, 6, interventions=(2, 3))]
    acks = server.ingest(payload(SOURCE_A, items))
    assert acks == {SOURCE_A: 5} and server.rejected == 0 and server.received == 6
    layout = aliased_actions(sac, noise_dim)
    online = learner.online.gather(np.flatnonzero(learner.online.valid))
    parts = layout.unpack(jax.numpy.asarray(online.actions))
    np.testing.assert_array_equal(online.observations["state"][:, 2], [0, 2, 4])  # one transition per chunk
    np.testing.assert_array_equal(np.asarray(parts["noise_known"]), [1, 0, 1])  # the human's noise is unknown
    np.testing.assert_array_equal(np.asarray(parts["executed"])[:, [2, 6]], [[0, 1], [2, 3], [4, 5]])
    np.testing.assert_array_equal(np.asarray(parts["alias_chunks"])[:, 0, 0], [1, 0, 1])
    assert len(learner.demo) == 1  # the human's chunk also went to the demo buffer
    assert learner.step() and np.isfinite(learner.step()["noise_critic_loss"])


def test_weights_go_out_during_the_warm_up_so_a_lock_step_actor_is_not_held_back(tmp_path):
    """No gradient steps while the learner warms up, but every `weights_every` transitions it owes the actors
    weights that account for them (a lock-step actor with max_weight_lag waits for those)."""
    import dataclasses

    learner = Learner(SPEC, ACTION_DIM, SMALL_SAC, dataclasses.replace(SMALL_LEARNER, warmup_transitions=8))
    server = LearnerServer(learner, tmp_path, weights_every=3)
    server.start()
    assert not server.warmup_weights_due
    stream = Stream(SOURCE_A)
    server.ingest(payload(SOURCE_A, stream.episode(0, 4, "truncated")))
    assert server.pending_steps == 0 and server.trained_on == 4 and server.warmup_weights_due
    assert server.weights().transitions == 4 and not server.warmup_weights_due
    server.ingest(payload(SOURCE_A, stream.episode(1, 5, "truncated")))  # 9 received: the warm-up is over
    assert not server.warmup_weights_due and server.pending_steps == 1  # now weights come with the training steps
