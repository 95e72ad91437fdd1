"""The in-process tools on the one episode loop (robot_rl.actor.runner.EpisodeRunner over a sim link): the same episodes
as stepping the env directly, every command through the safety layer, stops between env steps."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.actor.session import Actor
from robot_rl.sim.loop import StepPolicy, make_env, record_episodes, writer_for_env
from robot_rl.sim.env import RobotEnv
from robot_rl.sim.evaluate import StopRequested, evaluate
from robot_rl.sim.expert import make_expert


@pytest.fixture(scope="module")
def env():
    env = make_env("PickCube-v0", obs_mode="state")
    yield env
    env.close()


@pytest.fixture
def env_actions(monkeypatch):
    """Every action the sim env is stepped with, and its controller target after the step."""
    step, seen = RobotEnv.step, []

    def recording_step(self, action):
        result = step(self, action)
        seen.append((np.array(action), self.target_pose()[0].copy()))
        return result

    monkeypatch.setattr(RobotEnv, "step", recording_step)
    return seen


def stepped_directly(env, expert, seed: int) -> tuple[int, int, bool]:
    """(seed, env steps, success) of an episode with the expert's actions given to the env as they are."""
    obs, _ = env.reset(seed=seed)
    expert.reset()
    steps, success = 0, False
    while True:
        obs, _, terminated, truncated, info = env.step(expert.act(obs))
        steps += 1
        success = success or bool(info["success"])
        if terminated or truncated:
            return seed, steps, success


@pytest.mark.parametrize(("task", "noise"), [("PickCube-v0", 0.2), ("PegInsert-v0", 0.0)])
def test_the_runner_runs_the_episodes_that_stepping_the_env_directly_runs(task, noise):
    env = make_env(task, obs_mode="state")
    try:
        expected = [stepped_directly(env, make_expert(env, noise=noise, seed=3), seed) for seed in range(20, 24)]
        evaluation = evaluate(env, make_expert(env, noise=noise, seed=3), 4, 20)
    finally:
        env.close()
    assert [(e.seed, e.steps, e.success) for e in evaluation] == expected
    assert any(success for _, _, success in expected)


def test_an_evaluation_goes_through_the_safety_layer(env, env_actions):
    """A policy's NaN action is held (the env steps towards the unchanged target), never sent to the env."""

    class NaNEverySecondStep(Actor):
        calls = 0

        def policy_action(self, obs, now=None):
            action = super().policy_action(obs, now)
            self.calls += 1
            return np.full_like(action, np.nan) if self.calls % 2 else action

    actor = NaNEverySecondStep(StepPolicy(make_expert(env), 4), deterministic=True)
    (result,) = evaluate(env, actor, 1, 5)
    assert result.success and result.steps == len(env_actions) and actor.calls == result.steps
    actions = np.array([action for action, _ in env_actions])
    targets = np.array([target for _, target in env_actions])
    assert np.isfinite(actions).all()
    held = actions[0::2]  # the first step and every second one after it: NaN from the policy
    assert np.all(held[:, :3] == 0.0) and np.all(np.diff(targets, axis=0)[1::2] == 0.0)
    assert np.any(actions[1::2, :3] != 0.0)


def test_should_stop_stops_between_env_steps(env, env_actions, tmp_path):
    with pytest.raises(StopRequested):
        evaluate(env, make_expert(env), 3, 0, should_stop=lambda: len(env_actions) >= 25)
    assert len(env_actions) == 25  # in the middle of the second episode

    env_actions.clear()
    with writer_for_env(env, tmp_path / "demos.zarr", "PickCube-v0") as writer:
        kept = record_episodes(env, make_expert(env), writer, 3, seed=0, should_stop=lambda: len(env_actions) >= 25)
        assert len(env_actions) == 25 and len(kept) == 1 and writer.num_episodes == 1  # the second was dropped
        assert len(writer.seeds) == 1 and writer.seeds[0] == 0
