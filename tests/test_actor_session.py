"""ActorSession (observation -> safe command, transitions into an outbox, episode ends) and SensorCache."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robot_rl.actor.session import Actor, ActorSession, ActorStep, SessionStep
from robot_rl.policies.base import PolicyBase
from robot_rl.actor.safety import Safety, SafetyConfig
from robot_rl.actor.sensors import MissingSensors, SensorCache, sensors_for
from robot_rl.wire.outbox import Outbox
from robot_rl.wire.protocol import make_source

SOURCE = make_source("arm-1", "test")
START_POSITION = np.array([0.5, 0.0, 0.15])
NOMINAL = np.array([0.0, 1.0, 0.0, 0.0])
CONFIG = SafetyConfig()
SLACK = 1e-9


def obs(t: int) -> dict[str, np.ndarray]:
    return {"state": np.full(14, t, np.float32), "object_state": np.full(10, -t, np.float32)}


class StubPolicy:
    """`observe(obs)`, `step(obs, uniform=, now=)`, `learner_action_of(action, obs)`, `human_acted(obs)` and
    `reset()`: what ActorSession uses of an Actor."""

    def __init__(self, actions):
        self.actions = list(actions)
        self.calls = 0
        self.resets = 0
        self.seen = []

    def policy_action(self, observation, now=None):
        self.seen.append(observation)
        action = self.actions[min(self.calls, len(self.actions) - 1)]
        self.calls += 1
        return np.asarray(action, dtype=np.float32)

    def step(self, observation, *, uniform=False, now=None):
        action = self.policy_action(observation, now)
        return ActorStep(action)

    def observe(self, observation):
        return observation

    def learner_action_of(self, executed, observation):
        return np.asarray(executed, dtype=np.float32)

    def human_acted(self, observation):
        self.seen.append(observation)

    def reset(self):
        self.resets += 1


class ConstantPolicy(PolicyBase):
    """A `robot_rl.policies` policy that always gives `action` (chunks of one)."""

    kind = "constant"
    obs_horizon = 1
    chunk_length = 1

    def __init__(self, action):
        self.action = np.asarray(action, dtype=np.float32)
        self.action_dim = len(self.action)

    def reset(self):
        pass

    def act_chunk(self, history, *, deterministic=False):
        from robot_rl.policies.base import ActionChunk

        return ActionChunk(self.action[None], self.action[None])

    def learner_action_of(self, executed, info):
        return np.asarray(executed, dtype=np.float32)


def new_session(actor=None, *, max_episode_steps: int = 50, outbox: Outbox | None = None,
                config: SafetyConfig = CONFIG) -> ActorSession:
    return ActorSession(Safety(config), SOURCE, outbox, max_episode_steps=max_episode_steps, actor=actor)


def inside_workspace(position) -> bool:
    low, high = np.asarray(CONFIG.workspace_low), np.asarray(CONFIG.workspace_high)
    return bool(np.all(position >= low - SLACK) and np.all(position <= high + SLACK))


# ----- episodes and transitions -----------------------------------------------------------------------------------

def test_first_step_commands_and_the_next_closes_the_transition():
    session = new_session()  # no actor and no human: hold the pose
    with pytest.raises(RuntimeError):
        session.step(obs(0))  # no episode yet
    assert session.hold() is None
    assert session.start_episode(START_POSITION, NOMINAL) == 0

    first = session.step(obs(0), reward=0.0)
    assert isinstance(first, SessionStep)
    assert first.transition is None and not first.episode_over and not first.intervention
    assert first.command is not None and not first.command.held
    np.testing.assert_allclose(first.command.target_position, START_POSITION, atol=1e-12)
    np.testing.assert_allclose(first.command.target_quat, NOMINAL, atol=1e-12)
    assert len(session.outbox) == 0

    second = session.step(obs(1), reward=0.25)
    t = second.transition
    assert t is not None and second.command is not None and not second.episode_over
    assert (t.seq, t.episode, t.step) == (0, 0, 0)
    np.testing.assert_array_equal(t.observation["state"], obs(0)["state"])
    np.testing.assert_array_equal(t.next_observation["state"], obs(1)["state"])
    np.testing.assert_array_equal(t.next_observation["object_state"], obs(1)["object_state"])
    # a hold: zero motion, and the gripper part (absolute) repeats the current gripper (initially open, -1)
    np.testing.assert_array_equal(t.action, np.array([0, 0, 0, -1], np.float32))
    assert t.action.dtype == np.float32
    assert t.reward == 0.25
    assert not (t.terminated or t.truncated or t.intervention or t.success)
    assert [item.seq for item in session.outbox.due(now=0.0)] == [0]

    third = session.step(obs(2))
    assert (third.transition.seq, third.transition.step) == (1, 1)
    np.testing.assert_array_equal(third.transition.observation["state"], obs(1)["state"])
    assert session.episode_return == pytest.approx(0.25)


def test_policy_actions_are_clipped_in_the_transition_and_executed():
    policy = StubPolicy([[2.0, -0.5, 0.1, 0.3]])
    session = new_session(policy)
    session.start_episode(START_POSITION, NOMINAL, gripper=-1.0)
    assert policy.resets == 1
    first = session.step(obs(0))
    assert policy.calls == 1 and policy.seen[0] is not None
    np.testing.assert_allclose(first.command.target_position,
                               START_POSITION + np.array([1.0, -0.5, 0.1]) * CONFIG.max_translation, atol=1e-12)
    assert first.command.gripper == pytest.approx(0.3)
    np.testing.assert_allclose(session.target[0], first.command.target_position)
    second = session.step(obs(1))
    np.testing.assert_allclose(second.transition.action, [1.0, -0.5, 0.1, 0.3], atol=1e-7)
    assert np.all(np.abs(second.transition.action) <= 1.0)
    # the second command moves on from the first target (the tracked absolute target)
    np.testing.assert_allclose(second.command.target_position,
                               START_POSITION + 2 * np.array([1.0, -0.5, 0.1]) * CONFIG.max_translation, atol=1e-12)


def test_success_terminates_and_ends_the_episode_without_a_command():
    session = new_session(StubPolicy([[0.1, 0.0, 0.0, 0.0]]))
    session.start_episode(START_POSITION, NOMINAL)
    session.step(obs(0))
    session.step(obs(1))
    last = session.step(obs(2), reward=1.0, success=True)
    assert last.episode_over and last.command is None and last.success
    t = last.transition
    assert (t.seq, t.step) == (1, 1)
    assert t.terminated and not t.truncated and t.success and t.reward == 1.0
    assert session.episode_over
    with pytest.raises(RuntimeError):
        session.step(obs(3))
    assert [item.seq for item in session.outbox.due(now=0.0)] == [0, 1]


def test_time_limit_truncates_at_max_episode_steps():
    session = new_session(max_episode_steps=3)
    session.start_episode(START_POSITION, NOMINAL)
    steps = [session.step(obs(t)) for t in range(4)]
    transitions = [s.transition for s in steps if s.transition is not None]
    assert [t.step for t in transitions] == [0, 1, 2]
    assert [t.truncated for t in transitions] == [False, False, True]
    assert not any(t.terminated for t in transitions)
    assert steps[-1].episode_over and steps[-1].command is None
    assert all(s.command is not None for s in steps[:-1])


def test_success_at_the_time_limit_is_terminated_not_truncated():
    session = new_session(max_episode_steps=2)
    session.start_episode(START_POSITION, NOMINAL)
    session.step(obs(0))
    session.step(obs(1))
    last = session.step(obs(2), reward=1.0, success=True)
    assert last.transition.terminated and not last.transition.truncated


def test_failure_key_truncates():
    session = new_session()
    session.start_episode(START_POSITION, NOMINAL)
    session.step(obs(0))
    session.step(obs(1))
    last = session.step(obs(2), reward=0.5, episode_key="failure")
    assert last.episode_over and last.command is None and not last.success
    assert last.transition.truncated and not last.transition.terminated and not last.transition.success
    assert last.transition.reward == 0.5


def test_reset_key_truncates():
    session = new_session()
    session.start_episode(START_POSITION, NOMINAL)
    session.step(obs(0))
    last = session.step(obs(1), episode_key="reset")
    assert last.episode_over and last.transition.truncated and not last.transition.terminated


@pytest.mark.parametrize("reward, expected", [(0.0, 1.0), (0.4, 1.0), (2.5, 2.5)])
def test_success_key_terminates_with_reward_at_least_one(reward, expected):
    session = new_session()
    session.start_episode(START_POSITION, NOMINAL)
    session.step(obs(0))
    last = session.step(obs(1), reward=reward, episode_key="success")
    t = last.transition
    assert last.episode_over and last.success and last.command is None
    assert t.terminated and not t.truncated and t.success
    assert t.reward == pytest.approx(expected) and t.reward >= 1.0


def test_episode_key_on_the_first_step_ends_without_a_transition():
    session = new_session()
    session.start_episode(START_POSITION, NOMINAL)
    result = session.step(obs(0), episode_key="failure")
    assert result.episode_over and result.transition is None and result.command is None
    assert len(session.outbox) == 0


def test_unknown_episode_key_is_rejected():
    session = new_session()
    session.start_episode(START_POSITION, NOMINAL)
    with pytest.raises(ValueError, match="episode key"):
        session.step(obs(0), episode_key="pause")


def test_human_action_is_executed_and_flagged_as_intervention():
    policy = StubPolicy([[-1.0, -1.0, -1.0, -1.0]])
    session = new_session(policy)
    session.start_episode(START_POSITION, NOMINAL)
    human = np.array([0.5, 1.0, -0.25, 1.0], np.float32)
    first = session.step(obs(0), human_action=human)
    assert first.intervention
    np.testing.assert_allclose(first.command.target_position,
                               START_POSITION + human[:3].astype(np.float64) * CONFIG.max_translation, atol=1e-7)
    assert first.command.gripper == pytest.approx(1.0)
    second = session.step(obs(1))  # the human lets go: the policy acts again
    t = second.transition
    assert t.intervention and not second.intervention
    np.testing.assert_array_equal(t.action, human)
    third = session.step(obs(2))
    assert not third.transition.intervention
    np.testing.assert_array_equal(third.transition.action, [-1.0, -1.0, -1.0, -1.0])
    assert session.episode_interventions == 1


def test_a_humans_action_overrides_the_actor_even_in_warm_up_through_the_safety_layer():
    """A human's action (a teleop device's, or the simulated human's in-process, through the episode loop's inputs)
    replaces a real Actor's, its uniform warm-up action too, goes through the safety layer, and is flagged."""
    policy_action = np.array([0.2, 0.0, 0.0, -1.0], np.float32)
    human_action = np.array([0.0, 0.0, -3.0, 1.0], np.float32)  # out of range: clipped like any action
    session = new_session(Actor(ConstantPolicy(policy_action)))
    session.start_episode(START_POSITION, NOMINAL)
    first = session.step(obs(0))
    second = session.step(obs(1), human_action=human_action, uniform=True)
    third = session.step(obs(2))
    assert (first.intervention, second.intervention, third.intervention) == (False, True, False)
    assert "action_clipped" in second.command.reasons
    np.testing.assert_allclose(second.command.target_position - first.command.target_position,
                               [0.0, 0.0, -CONFIG.max_translation], atol=1e-12)
    t = third.transition
    assert t.intervention and not second.transition.intervention
    np.testing.assert_array_equal(t.action, [0.0, 0.0, -1.0, 1.0])
    np.testing.assert_array_equal(session.step(obs(3)).transition.action, policy_action)  # the policy again
    assert session.episode_interventions == 1


def test_uniform_steps_act_at_random_through_the_safety_layer():
    """A learner's warm-up: the actor's uniform random actions, not the policy's, become the commands."""
    policy_action = np.array([0.0, 0.0, 0.0, 0.0], np.float32)
    actor = Actor(ConstantPolicy(policy_action), seed=3)
    expected = Actor(ConstantPolicy(policy_action), seed=3)
    session = new_session(actor)
    session.start_episode(START_POSITION, NOMINAL)
    session.step(obs(0), uniform=True)
    t = session.step(obs(1), uniform=False).transition
    np.testing.assert_array_equal(t.action, expected.uniform_action())
    assert not t.intervention
    np.testing.assert_array_equal(session.step(obs(2)).transition.action, policy_action)


def test_human_action_out_of_range_is_clipped_in_the_transition():
    session = new_session()
    session.start_episode(START_POSITION, NOMINAL)
    session.step(obs(0), human_action=np.array([3.0, 0.0, -3.0, 0.5]))
    t = session.step(obs(1)).transition
    np.testing.assert_array_equal(t.action, np.array([1.0, 0.0, -1.0, 0.5], np.float32))
    assert t.intervention


def test_non_finite_policy_action_holds_and_records_no_transition():
    policy = StubPolicy([[0.1, 0.0, 0.0, 0.0], [math.nan, 0.0, 0.0, 0.0], [0.0, 0.2, 0.0, 0.0]])
    session = new_session(policy)
    session.start_episode(START_POSITION, NOMINAL)
    s0 = session.step(obs(0))
    target_after_first = s0.command.target_position.copy()
    s1 = session.step(obs(1))  # closes transition 0, then the policy gives NaN
    assert s1.transition.seq == 0
    assert s1.command.held and "non_finite_action" in s1.command.reasons
    np.testing.assert_array_equal(s1.command.target_position, target_after_first)
    np.testing.assert_array_equal(session.target[0], target_after_first)
    assert session.counters["held"] == 1
    s2 = session.step(obs(2))  # nothing was executed after obs(1): no transition
    assert s2.transition is None and not s2.command.held
    s3 = session.step(obs(3))
    t = s3.transition
    assert t.seq == 1 and t.step == 2  # the control step of obs(2): the gap after step 0 marks the held command
    np.testing.assert_array_equal(t.observation["state"], obs(2)["state"])
    np.testing.assert_allclose(t.action, [0.0, 0.2, 0.0, 0.0])
    assert all(np.isfinite(item.action).all() for item in session.outbox.due(now=0.0))
    assert [item.seq for item in session.outbox.due(now=0.0)] == [0, 1]


def test_a_held_command_cuts_the_episode_in_the_learners_replay(tmp_path):
    """The transitions before and after a held command are not joined: every stored next observation is the one
    that followed that transition's command (obs(2) was never the start of a transition)."""
    from robot_rl.agents.sac import SACConfig
    from robot_rl.learner.learner import Learner, LearnerConfig
    from robot_rl.learner.server import LearnerServer
    from robot_rl.wire.transitions import decode_transitions

    policy = StubPolicy([[0.1, 0.0, 0.0, 0.0], [0.1, 0.0, 0.0, 0.0], [math.nan, 0.0, 0.0, 0.0], [0.0, 0.1, 0.0, 0.0]])
    session = new_session(policy, max_episode_steps=5)
    session.start_episode(START_POSITION, NOMINAL)
    t = 0
    while not session.step(obs(t)).episode_over:
        t += 1
    items = session.outbox.due(now=0.0)
    assert [(int(i.observation["state"][0]), i.step) for i in items] == [(0, 0), (1, 1), (3, 3), (4, 4), (5, 5)]
    # Each frame crosses once: only a transition that no next transition starts from carries its next frame (the
    # one before the held command, and the episode's last).
    assert [i.next_frame_follows for i in items] == [True, False, True, True, False]
    first_messages = session.outbox.due_messages(SOURCE, now=0.0)
    first_send = [decode_transitions(message)[1] for message in first_messages]
    assert [None if i.next_observation is None else int(i.next_observation["state"][0])
            for i in sum(first_send, [])] == [None, 2, None, None, 6]
    resent = [decode_transitions(message)[1] for message in session.outbox.due_messages(SOURCE, now=100.0)]
    assert [int(i.next_observation["state"][0]) for i in sum(resent, [])] == [1, 2, 4, 5, 6]  # carry their own

    spec = {"state": ((14,), np.float32), "object_state": ((10,), np.float32)}
    learner = Learner(spec, 4, SACConfig(actor_hidden_dims=(8,), critic_hidden_dims=(8,), critic_ensemble_size=2),
                      LearnerConfig(batch_size=4, online_capacity=50, demo_capacity=50))
    server = LearnerServer(learner, tmp_path)
    server.start()
    for message in first_messages:  # the learner takes each left-out frame from the next transition
        server.ingest(message)
    assert server.received == len(items) == len(learner.online)
    batch = learner.online.gather(np.flatnonzero(learner.online.valid))
    stored = sorted(zip(batch.observations["state"][:, 0].astype(int),
                        batch.next_observations["state"][:, 0].astype(int)))
    assert stored == [(0, 1), (1, 2), (3, 4), (4, 5), (5, 6)]


def test_stale_sensor_holds_the_command():
    config = SafetyConfig(required_sensors=("tcp_pose",), stale_timeout=0.2)
    session = new_session(StubPolicy([[1.0, 0.0, 0.0, 0.0]]), config=config)
    session.start_episode(START_POSITION, NOMINAL)
    held = session.step(obs(0), now=10.0, sensor_stamps={"tcp_pose": 9.0})
    assert held.command.held and "stale:tcp_pose" in held.command.reasons
    np.testing.assert_array_equal(held.command.target_position, START_POSITION)
    fresh = session.step(obs(1), now=10.1, sensor_stamps={"tcp_pose": 10.05})
    assert fresh.transition is None and not fresh.command.held
    assert fresh.command.target_position[0] > START_POSITION[0]


def test_commands_stay_inside_the_workspace_under_huge_random_actions():
    rng = np.random.default_rng(0)
    actions = rng.uniform(-100.0, 100.0, size=(200, 4))
    actions[::17, 1] = np.inf
    actions[::23, 0] = -np.inf
    actions[::29, 2] = np.nan
    policy = StubPolicy(actions)
    session = new_session(policy, max_episode_steps=1000, outbox=Outbox(capacity=1000))
    session.start_episode(START_POSITION, NOMINAL)
    previous = START_POSITION.copy()
    executed = 0
    for t in range(200):
        result = session.step(obs(t))
        command = result.command
        assert command is not None
        position = command.target_position
        assert np.all(np.isfinite(position)) and np.all(np.isfinite(command.target_quat))
        assert inside_workspace(position), (t, position)
        assert np.all(np.abs(position - previous) <= CONFIG.max_translation * (1 + 1e-9) + 1e-12), (t, position)
        assert CONFIG.gripper_low <= command.gripper <= CONFIG.gripper_high
        np.testing.assert_allclose(np.linalg.norm(command.target_quat), 1.0, atol=1e-9)
        previous = position.copy()
        executed += int(not command.held)
    assert policy.calls == 200
    assert session.counters["commands"] == 200
    assert session.counters["held"] == 200 - executed > 0
    items = session.outbox.due(now=0.0, max_items=1000)
    assert [item.seq for item in items] == list(range(len(items)))
    assert all(np.all(np.abs(item.action) <= 1.0) and np.isfinite(item.action).all() for item in items)


def test_start_outside_the_workspace_moves_back_one_step_at_a_time():
    session = new_session(StubPolicy([[0.0, 0.0, 0.0, 0.0]]))
    outside = np.array([0.8, 0.0, 0.15])  # 0.15 m beyond workspace_high[0]
    session.start_episode(outside, NOMINAL)
    positions = [session.step(obs(t)).command.target_position for t in range(8)]
    assert positions[0][0] == pytest.approx(outside[0] - CONFIG.max_translation)
    assert all(b[0] <= a[0] for a, b in zip(positions, positions[1:]))
    assert inside_workspace(positions[-1])


def test_outbox_gets_consecutive_sequence_numbers_across_episodes():
    outbox = Outbox(capacity=100)
    session = new_session(StubPolicy([[0.2, 0.1, 0.0, 0.0]]), max_episode_steps=3, outbox=outbox)
    for episode in range(3):
        assert session.start_episode(START_POSITION, NOMINAL) == episode
        t = 0
        while True:
            result = session.step(obs(t))
            t += 1
            if result.episode_over:
                break
    items = outbox.due(now=0.0, max_items=100)
    assert [item.seq for item in items] == list(range(9))
    assert [item.episode for item in items] == [0] * 3 + [1] * 3 + [2] * 3
    assert [item.step for item in items] == [0, 1, 2] * 3
    assert [item.truncated for item in items] == [False, False, True] * 3
    assert session.next_seq == 9


def test_start_episode_resets_the_target_and_pending_transition():
    session = new_session(StubPolicy([[1.0, 1.0, 1.0, 1.0]]))
    session.start_episode(START_POSITION, NOMINAL)
    session.step(obs(0))
    session.step(obs(1))
    new_start = np.array([0.45, 0.05, 0.1])
    session.start_episode(new_start, NOMINAL)  # the previous episode was abandoned (e.g. the robot was reset)
    first = session.step(obs(10))
    assert first.transition is None  # the pending step of the abandoned episode is not closed with this obs
    np.testing.assert_allclose(first.command.target_position, new_start + CONFIG.max_translation, atol=1e-12)
    second = session.step(obs(11))
    assert (second.transition.episode, second.transition.step, second.transition.seq) == (1, 0, 1)


def test_hold_repeats_the_current_target():
    session = new_session(StubPolicy([[1.0, 0.0, 0.0, 0.5]]))
    session.start_episode(START_POSITION, NOMINAL)
    command = session.step(obs(0)).command
    before = dict(session.counters)
    hold = session.hold()
    np.testing.assert_allclose(hold.target_position, command.target_position, atol=1e-12)
    np.testing.assert_allclose(hold.target_quat, command.target_quat, atol=1e-12)
    np.testing.assert_allclose(session.target[0], command.target_position)
    # A hold is a command sent to the robot: counted, and counted as held.
    assert session.counters["commands"] == before["commands"] + 1
    assert session.counters["held"] == before.get("held", 0) + 1


def test_hold_repeats_the_current_gripper():
    session = new_session(StubPolicy([[1.0, 0.0, 0.0, 0.5]]))
    session.start_episode(START_POSITION, NOMINAL)
    session.step(obs(0))
    assert session.hold().gripper == pytest.approx(0.5)


def test_step_without_actor_keeps_the_gripper():
    session = new_session()
    session.start_episode(START_POSITION, NOMINAL, gripper=1.0)
    assert session.step(obs(0)).command.gripper == pytest.approx(1.0)


def test_bad_max_episode_steps_is_rejected():
    with pytest.raises(ValueError):
        new_session(max_episode_steps=0)


# ----- sensor cache -----------------------------------------------------------------------------------------------

def test_sensors_for_maps_observation_keys_to_sensors():
    assert sensors_for(["state"]) == ("tcp_pose", "tcp_twist", "gripper")
    assert sensors_for(["images/wrist", "state", "object_state", "images/front", "state"]) == (
        "camera/wrist", "tcp_pose", "tcp_twist", "gripper", "object_state", "camera/front")
    assert sensors_for([]) == ()
    for bad in (["images/"], ["joint_state"], ["state", "depth"]):
        with pytest.raises(ValueError, match="sensor source"):
            sensors_for(bad)


def fill_state_sensors(cache: SensorCache, stamp: float, *, quat=(0.0, 1.0, 0.0, 0.0)) -> None:
    cache.update("tcp_pose", (np.array([0.5, 0.1, 0.2]), np.array(quat)), stamp)
    cache.update("tcp_twist", (np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])), stamp)
    cache.update("gripper", 0.04, stamp)


def test_missing_and_stale_sensors_are_reported():
    cache = SensorCache(["state", "images/wrist"], max_age_s=0.2)
    assert cache.required == ("tcp_pose", "tcp_twist", "gripper", "camera/wrist")
    with pytest.raises(MissingSensors) as error:
        cache.observation(now=1.0)
    assert error.value.reasons == ("missing:tcp_pose", "missing:tcp_twist", "missing:gripper",
                                   "missing:camera/wrist")
    assert "missing:tcp_pose" in str(error.value)
    assert isinstance(error.value, RuntimeError)

    fill_state_sensors(cache, 1.0)
    cache.update("tcp_pose", (np.zeros(3), np.array([0.0, 1.0, 0.0, 0.0])), 0.5)  # older: ignored
    cache.update("camera/wrist", np.zeros((4, 4, 3), np.uint8), 0.7)
    assert cache.problems(now=1.0) == ("stale:camera/wrist",)
    assert cache.problems(now=1.25) == ("stale:tcp_pose", "stale:tcp_twist", "stale:gripper",
                                        "stale:camera/wrist")
    assert cache.problems(now=0.7) == ("stale:tcp_pose", "stale:tcp_twist", "stale:gripper")  # from the future
    with pytest.raises(MissingSensors) as error:
        cache.observation(now=1.0)
    assert error.value.reasons == ("stale:camera/wrist",)
    cache.update("camera/wrist", np.zeros((4, 4, 3), np.uint8), 1.1)
    assert cache.problems(now=1.1) == ()
    assert cache.problems(now=math.nan) == ("stale:tcp_pose", "stale:tcp_twist", "stale:gripper",
                                            "stale:camera/wrist")


def test_state_vector_layout():
    cache = SensorCache(["state"], max_age_s=0.2)
    fill_state_sensors(cache, 2.0)
    state = cache.observation(now=2.1)["state"]
    assert state.dtype == np.float32 and state.shape == (14,)
    np.testing.assert_allclose(state, [0.5, 0.1, 0.2, 0.0, 1.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.04],
                               rtol=1e-6)


def test_state_quaternion_is_flipped_to_the_nominal_hemisphere():
    quat = np.array([0.1, -0.9, 0.2, 0.1])
    quat /= np.linalg.norm(quat)
    cache = SensorCache(["state"])
    fill_state_sensors(cache, 1.0, quat=quat)
    np.testing.assert_allclose(cache.observation(now=1.0)["state"][3:7], -quat, rtol=1e-6)
    fill_state_sensors(cache, 1.1, quat=-quat)  # the same rotation, already in the nominal hemisphere
    np.testing.assert_allclose(cache.observation(now=1.1)["state"][3:7], -quat, rtol=1e-6)
    fill_state_sensors(cache, 1.2, quat=(0.0, -1.0, 0.0, 0.0))
    np.testing.assert_array_equal(cache.observation(now=1.2)["state"][3:7], np.array([0.0, 1.0, 0.0, 0.0],
                                                                                       np.float32))


def test_older_readings_are_ignored():
    cache = SensorCache(["state", "object_state"])
    fill_state_sensors(cache, 5.0)
    cache.update("object_state", np.arange(10.0), 5.0)
    cache.update("tcp_pose", (np.array([0.4, 0.0, 0.1]), np.array([0.0, 1.0, 0.0, 0.0])), 4.9)
    cache.update("object_state", np.zeros(10), 4.0)
    assert cache.stamp("tcp_pose") == 5.0 and cache.stamps()["object_state"] == 5.0
    observation = cache.observation(now=5.1)
    np.testing.assert_allclose(observation["state"][:3], [0.5, 0.1, 0.2], rtol=1e-6)
    np.testing.assert_array_equal(observation["object_state"], np.arange(10.0, dtype=np.float32))
    assert observation["object_state"].dtype == np.float32
    np.testing.assert_allclose(cache.tcp_pose()[0], [0.5, 0.1, 0.2])
    cache.update("tcp_pose", (np.array([0.4, 0.0, 0.1]), np.array([0.0, 1.0, 0.0, 0.0])), 5.0)  # same stamp: newer
    np.testing.assert_allclose(cache.observation(now=5.1)["state"][:3], [0.4, 0.0, 0.1], rtol=1e-6)
    assert cache.stamp("camera/front") is None


def test_images_and_shapes():
    cache = SensorCache(["images/front", "object_state"], shapes={"images/front": (4, 4, 3), "object_state": (10,)})
    image = np.arange(48, dtype=np.uint8).reshape(4, 4, 3)
    cache.update("camera/front", image, 1.0)
    cache.update("object_state", np.ones((2, 5)), 1.0)  # flattened
    observation = cache.observation(now=1.0)
    assert observation["images/front"].dtype == np.uint8
    np.testing.assert_array_equal(observation["images/front"], image)
    assert observation["object_state"].shape == (10,)
    cache.update("camera/front", np.zeros((8, 8, 3), np.uint8), 1.1)
    with pytest.raises(MissingSensors, match="shape:images/front"):
        cache.observation(now=1.1)


def test_cache_rejects_bad_settings():
    with pytest.raises(ValueError):
        SensorCache(["state"], max_age_s=0.0)
    with pytest.raises(ValueError):
        SensorCache(["lidar"])
