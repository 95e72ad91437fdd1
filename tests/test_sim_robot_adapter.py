"""The sim robot adapter: a sim env driven by safe absolute commands, as in-process training drives it through an
ActorSession."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robot_rl.actor.session import ActorSession, ActorStep
from robot_rl.sim.loop import make_env
from robot_rl.actor.safety import Safety
from robot_rl.sim.robot_adapter import SimRobotAdapter


@pytest.fixture
def env():
    env = make_env("PickCube-v0", obs_mode="state")
    yield env
    env.close()


class ScriptedActor:
    """The part of an Actor an ActorSession uses, acting from a list (the last action repeats)."""

    def __init__(self, actions):
        self.actions = [np.asarray(a, dtype=np.float32) for a in actions]
        self.calls = 0

    def step(self, obs, *, uniform=False, now=None):
        action = self.actions[min(self.calls, len(self.actions) - 1)]
        self.calls += 1
        return ActorStep(action)

    def human_acted(self, obs):
        pass

    def reset(self):
        pass


def run_episode(adapter: SimRobotAdapter, actions, seed: int = 0):
    """One episode through an ActorSession: (session, executed steps, transitions)."""
    session = ActorSession(Safety(adapter.safety_config()), "test/adapter", max_episode_steps=adapter.max_episode_steps,
                           actor=ScriptedActor(actions))
    start = adapter.reset(seed=seed)
    session.start_episode(start.tcp_position, start.tcp_quat, start.gripper)
    decision = session.step(start.observation)
    executed = []
    while not decision.episode_over:
        result = adapter.execute(decision.command)
        executed.append(result)
        decision = session.step(result.observation, reward=result.reward, success=result.success,
                                episode_key=result.episode_key)
    return session, executed, session.outbox.due(0.0, max_items=len(session.outbox))


def test_reset_starts_the_episode_at_the_controller_target(env):
    adapter = SimRobotAdapter(env)
    start = adapter.reset(seed=3)
    position, quat = env.unwrapped.target_pose()
    np.testing.assert_array_equal(start.tcp_position, position)
    np.testing.assert_array_equal(start.tcp_quat, quat)
    assert start.gripper == env.unwrapped.gripper_command == -1.0
    again = make_env("PickCube-v0", obs_mode="state")
    expected, _ = again.reset(seed=3)
    again.close()
    assert start.observation.keys() == expected.keys()
    for key in expected:
        np.testing.assert_array_equal(start.observation[key], expected[key])


@pytest.mark.parametrize("control_rotation", [False, True], ids=["4d", "7d"])
def test_commands_move_the_env_as_the_actions_they_came_from(control_rotation):
    """Safety filter + execute == env.step(action): the same observations and rewards, step for step, with actions
    out of range and pushing through the workspace walls (clipped by the safety layer instead of the env)."""
    rng = np.random.default_rng(0)
    dim = 7 if control_rotation else 4
    actions = np.concatenate([rng.uniform(-1.0, 1.0, (15, dim)), rng.uniform(-3.0, 3.0, (10, dim)),
                              np.tile(np.r_[[1.0, 1.0, 1.0], [0.0] * (dim - 4), [1.0]], (10, 1))]).astype(np.float32)
    if control_rotation:  # at the orientation box the safety layer also bounds the step (the env does not): stay off it
        actions[:, 3:6] *= 0.1
    direct = make_env("PickCube-v0", obs_mode="state", control_rotation=control_rotation)
    commanded = make_env("PickCube-v0", obs_mode="state", control_rotation=control_rotation)
    try:
        adapter = SimRobotAdapter(commanded)
        session, executed, transitions = run_episode(adapter, actions, seed=5)
        obs, _ = direct.reset(seed=5)
        assert len(executed) == len(transitions) == adapter.max_episode_steps == 50  # the env's time limit
        for step, (result, transition) in enumerate(zip(executed, transitions)):
            action = actions[min(step, len(actions) - 1)]
            next_obs, reward, terminated, truncated, info = direct.step(action)
            for key in next_obs:
                np.testing.assert_allclose(result.observation[key], next_obs[key], atol=1e-6, err_msg=f"step {step}")
            assert (result.reward, result.terminated, result.truncated) == (reward, terminated, truncated)
            assert not result.info["action_rejected"]
            np.testing.assert_array_equal(transition.action, np.clip(action, -1.0, 1.0))
        np.testing.assert_allclose(commanded.unwrapped.target_pose()[0], direct.unwrapped.target_pose()[0],
                                   atol=1e-9)
        assert transitions[-1].truncated and not transitions[-1].terminated
        assert session.safety.counters["action_clipped"] > 0 and session.safety.counters["workspace_clipped"] > 0
    finally:
        direct.close()
        commanded.close()


def test_a_held_command_holds_the_env_and_makes_no_transition(env):
    """A non-finite action never reaches the env: the safety layer holds it, the env's target and gripper stay, and
    the session records no transition for it (the steps leave a gap)."""
    adapter = SimRobotAdapter(env)
    base = env.unwrapped
    seen = []
    step = base.step

    def recording_step(action):
        seen.append(np.array(action))
        return step(action)

    base.step = recording_step
    actions = [[0.5, 0.0, 0.0, 1.0], [math.nan, 0.0, 0.0, 0.0], [0.0, 0.5, 0.0, 1.0]]
    session, executed, transitions = run_episode(adapter, actions)
    assert all(np.isfinite(a).all() and np.abs(a).max() <= 1.0 for a in seen)
    assert not any(result.info["action_rejected"] for result in executed)
    np.testing.assert_allclose(seen[1], [0.0, 0.0, 0.0, 1.0], atol=1e-6)  # the hold: no motion, gripper kept
    assert session.safety.counters["held"] == 1 and session.safety.counters["non_finite_action"] == 1
    assert len(executed) == 50 and len(transitions) == 49  # the held step took an env step but no transition
    assert [t.step for t in transitions[:3]] == [0, 2, 3]
    assert transitions[-1].truncated  # ended by the env's time limit, at its step
    assert executed[-1].truncated and executed[-1].episode_key == "reset"


def test_an_episode_ends_at_the_envs_time_limit_even_after_holds(env):
    """Held commands make fewer transitions than env steps: the env's time limit still ends the episode at its step.
    Here the last env step is a held one, so no transition ends the episode (the learner cuts it there)."""
    adapter = SimRobotAdapter(env)
    actions = [[math.nan, 0.0, 0.0, 0.0] if t % 2 else [0.1, 0.0, 0.0, -1.0] for t in range(50)]
    session, executed, transitions = run_episode(adapter, actions)
    assert len(executed) == 50 and executed[-1].truncated and session.episode_over
    assert [t.step for t in transitions] == list(range(0, 50, 2))
    assert not any(t.terminated or t.truncated for t in transitions)


def test_a_success_ends_the_episode_terminated(env):
    from robot_rl.sim.expert import make_expert

    expert = make_expert(env)

    class Expert(ScriptedActor):
        def step(self, obs, *, uniform=False, now=None):
            action = expert.act(obs)
            return ActorStep(action)

    adapter = SimRobotAdapter(env)
    session = ActorSession(Safety(adapter.safety_config()), "test/adapter", max_episode_steps=adapter.max_episode_steps,
                           actor=Expert([]))
    start = adapter.reset(seed=0)
    session.start_episode(start.tcp_position, start.tcp_quat, start.gripper)
    decision = session.step(start.observation)
    steps = 0
    while not decision.episode_over:
        result = adapter.execute(decision.command)
        steps += 1
        decision = session.step(result.observation, reward=result.reward, success=result.success,
                                episode_key=result.episode_key)
    assert result.success and result.terminated and steps < 50
    assert decision.transition.terminated and decision.transition.reward == 1.0 and decision.success


def test_the_adapter_refuses_what_it_cannot_drive():
    import gymnasium as gym

    from robot_rl.sim.tasks import PickCubeEnv

    with pytest.raises(TypeError, match="SimRobotAdapter needs a robot_rl sim env"):
        SimRobotAdapter(gym.make("CartPole-v1"))
    bare = PickCubeEnv(obs_mode="state")  # no gymnasium registration: no time limit to end episodes
    with pytest.raises(ValueError, match="needs an env with a time limit"):
        SimRobotAdapter(bare)
    bare.close()
