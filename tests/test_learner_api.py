"""The Learner used as a new user would, on a dense-reward task of their own: episode ends, warm-up, reward and
action ranges, config checks, demo datasets that do not fit."""

from __future__ import annotations

import dataclasses
import logging
import re

import gymnasium as gym
import jax
import numpy as np
import pytest
from gymnasium.wrappers import RescaleAction, TimeLimit, TransformObservation
from scipy import stats

from robot_rl.actor.session import Actor
from robot_rl.policies.gaussian import GaussianPolicy
from robot_rl.agents.sac import SACConfig
from robot_rl.data.episode_writer import EpisodeWriter
from robot_rl.data.episodes import EpisodeDataset
from robot_rl.learner.learner import Learner, LearnerConfig
from robot_rl.core.types import ArraySpec

pytestmark = pytest.mark.filterwarnings("ignore:.*precision lowered by casting:UserWarning")  # RescaleAction
SMALL_SAC = SACConfig(actor_hidden_dims=(16, 16), critic_hidden_dims=(16, 16), critic_ensemble_size=2)
SMALL_LEARNER = LearnerConfig(batch_size=8, utd=1, online_capacity=1000, demo_capacity=1000, seed=0)
SPEC = {"state": ((4,), np.float32)}


class ReachEnv(gym.Env):
    """A point moves towards a goal drawn at reset; dense reward 1 - distance; actions in [-2, 2] (m/s)."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = self.np_random.uniform(-1, 1, 2)
        self.goal = self.np_random.uniform(-1, 1, 2)
        return self._obs(), {}

    def step(self, action):
        self.position = np.clip(self.position + 0.05 * np.clip(action, -2, 2), -1, 1)
        distance = float(np.linalg.norm(self.position - self.goal))
        return self._obs(), max(0.0, 1.0 - distance), False, False, {}

    def _obs(self):
        return np.concatenate([self.position, self.goal]).astype(np.float32)


def user_env(rescale: bool = True) -> gym.Env:
    """The user's env with the two standard wrappers the learner's messages name."""
    env = TimeLimit(ReachEnv(), max_episode_steps=25)
    if rescale:
        env = RescaleAction(env, -1.0, 1.0)
    return TransformObservation(env, lambda o: {"state": o}, gym.spaces.Dict(state=env.observation_space))


def user_loop(env, learner: Learner, actor: Actor, episodes: int, *, end_episodes: bool) -> None:
    """A loop as a user writes it: fixed-length episodes of 10 steps, shorter than the env's time limit."""
    for episode in range(episodes):
        obs, _ = env.reset(seed=episode)
        for _ in range(10):
            action = actor.step(obs, uniform=learner.warming_up).action
            next_obs, reward, terminated, truncated, _ = env.step(action)
            learner.insert(obs, action, reward, terminated, truncated, next_obs)
            learner.step()
            obs = next_obs
        if end_episodes:
            learner.end_episode()


def test_a_users_loop_that_does_not_end_episodes_gets_a_clear_error_and_runs_once_fixed():
    with pytest.raises(ValueError, match=r"action space bounds \[-2, 2\] are not \[-1, 1\]: wrap the env in "
                                         r"gymnasium.wrappers.RescaleAction\(env, -1.0, 1.0\)"):
        Learner(user_env(rescale=False).observation_space, user_env(rescale=False).action_space, SMALL_SAC)
    with pytest.raises(ValueError, match="is not a Dict.*TransformObservation"):
        Learner(ReachEnv().observation_space, 2, SMALL_SAC)

    env = user_env()
    learner = Learner(env.observation_space, env.action_space, SMALL_SAC, SMALL_LEARNER)
    actor = Actor(GaussianPolicy(learner.agent, seed=1), seed=1)
    with pytest.raises(ValueError, match=r"previous episode was not ended.*Learner\.end_episode\(\)") as error:
        user_loop(env, learner, actor, 2, end_episodes=False)
    assert "\n" not in str(error.value)
    assert learner.transitions == len(learner.online) == 10  # the second episode's first step was not stored

    learner = Learner(env.observation_space, env.action_space, SMALL_SAC, SMALL_LEARNER)
    actor = Actor(GaussianPolicy(learner.agent, seed=1), seed=1)
    user_loop(env, learner, actor, 6, end_episodes=True)
    assert learner.transitions == len(learner.online) == 60
    assert learner.updates == 60 - learner.warmup_transitions + 1 > 0  # step() from the last warm-up insert on
    batch = learner.online.gather(np.flatnonzero(learner.online.valid))
    # no stored transition joins two episodes: the goal (obs[2:]) is the same on both sides of every transition
    np.testing.assert_array_equal(batch.observations["state"][:, 2:], batch.next_observations["state"][:, 2:])
    assert learner.online.truncated[learner.online.valid].sum() == 6  # each ended episode bootstraps
    assert (batch.masks == 1).all()


def test_end_episode_closes_the_episode_in_both_buffers_as_a_truncation():
    def state(episode: int, t: int) -> dict:
        return {"state": np.array([episode, t, 0, 0], np.float32)}

    learner = Learner(SPEC, 2, SMALL_SAC, SMALL_LEARNER)
    for t in range(3):  # a human holds the controls at the end of an episode the user then resets
        learner.insert(state(0, t), np.zeros(2), 0.0, False, False, state(0, t + 1), intervention=t > 0)
    learner.end_episode()
    learner.insert(state(1, 0), np.zeros(2), 0.0, False, False, state(1, 1), intervention=True)
    for buffer, length in ((learner.online, 4), (learner.demo, 3)):
        batch = buffer.gather(np.flatnonzero(buffer.valid))
        assert len(buffer) == length
        np.testing.assert_array_equal(batch.next_observations["state"][:, 0], batch.observations["state"][:, 0])
        np.testing.assert_array_equal(batch.next_observations["state"][:, 1], batch.observations["state"][:, 1] + 1)
        assert (batch.masks == 1).all()  # bootstraps: the episode was cut, not terminated
        ended = batch.observations["state"][:, :2].tolist().index([0, 2])
        assert buffer.truncated[np.flatnonzero(buffer.valid)[ended]]


def mean_return(env, actor: Actor, episodes: int = 10) -> float:
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=10_000 + episode)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(actor.act(obs))
            total, done = total + reward, terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def test_a_users_loop_learns_the_dense_task_after_its_warm_up():
    """A new user's setting end to end: no demos, warm-up, RescaleAction, dense rewards, no target bounds (~10 s)."""
    env = user_env()
    sac = SACConfig(actor_hidden_dims=(64, 64), critic_hidden_dims=(64, 64), critic_ensemble_size=2, discount=0.9,
                    actor_lr=1e-3, critic_lr=1e-3, init_temperature=0.05)
    learner = Learner(env.observation_space, env.action_space, sac, LearnerConfig(batch_size=64, utd=1))
    actor, evaluator = Actor(GaussianPolicy(learner.agent), seed=0), Actor(GaussianPolicy(learner.agent), deterministic=True)
    before = mean_return(env, evaluator)
    for episode in range(48):  # 1200 env steps, the first 256 uniformly random
        obs, _ = env.reset(seed=episode)
        done = False
        while not done:
            action = actor.step(obs, uniform=learner.warming_up).action
            next_obs, reward, terminated, truncated, _ = env.step(action)
            learner.insert(obs, action, reward, terminated, truncated, next_obs)
            learner.step()
            obs, done = next_obs, terminated or truncated
        actor.update_weights(learner.policy_bytes(), episode + 1)
    evaluator.update_weights(learner.policy_bytes(), 1)
    after = mean_return(env, evaluator)
    assert learner.updates == 1200 - 256 + 1
    assert before < 8 and after > 12, (before, after)  # of 25 at most; uniform random actions score about 6


def test_no_update_before_the_warm_up_of_a_run_without_demos():
    learner = Learner(SPEC, 2, SMALL_SAC, SMALL_LEARNER)
    assert learner.warmup_transitions == 4 * SMALL_LEARNER.batch_size
    params = jax.tree.leaves(learner.agent.critic.params)
    rng = np.random.default_rng(0)
    for t in range(learner.warmup_transitions):
        assert learner.warming_up and not learner.ready
        assert learner.step() == {}
        obs = {"state": np.full(4, t, np.float32)}
        learner.insert(obs, rng.uniform(-1, 1, 2), 0.5, False, False, {"state": np.full(4, t + 1, np.float32)})
    assert learner.updates == 0
    for before, after in zip(params, jax.tree.leaves(learner.agent.critic.params)):
        np.testing.assert_array_equal(before, after)
    assert not learner.warming_up and learner.ready
    assert "critic_loss" in learner.step() and learner.updates == SMALL_LEARNER.utd


def test_with_demos_there_is_no_warm_up_unless_asked(tmp_path):
    demos = write_dataset(tmp_path / "demos.zarr")
    learner = Learner(SPEC, 2, SMALL_SAC, SMALL_LEARNER)
    learner.add_demos(demos)
    assert learner.warmup_transitions == 0 and learner.ready
    assert learner.step() and learner.updates == 1
    asked = Learner(SPEC, 2, SMALL_SAC, LearnerConfig(batch_size=8, utd=1, warmup_transitions=3))
    asked.add_demos(demos)
    assert asked.warming_up and asked.step() == {}
    learner.save(tmp_path / "ckpt")
    restored = Learner(SPEC, 2, SMALL_SAC, SMALL_LEARNER)
    restored.restore(tmp_path / "ckpt")
    assert restored.demo_transitions == demos.num_steps and not restored.warming_up


def test_warm_up_actions_are_uniform_over_the_action_box():
    learner = Learner(SPEC, 3, SMALL_SAC, SMALL_LEARNER)
    actor = Actor(GaussianPolicy(learner.agent, seed=4), seed=4)
    obs = {"state": np.zeros(4, np.float32)}
    uniform = np.stack([actor.step(obs, uniform=learner.warming_up).action for _ in range(3000)])
    assert uniform.dtype == np.float32 and uniform.shape == (3000, 3)
    for column in uniform.T:
        assert stats.kstest(column, stats.uniform(loc=-1, scale=2).cdf).pvalue > 1e-3
    assert uniform.min() >= -1 and uniform.max() <= 1
    assert np.abs(np.corrcoef(uniform.T) - np.eye(3)).max() < 0.1  # independent dimensions
    # the same check rejects the untrained policy's actions: the test can tell the two apart
    policy = np.stack([actor.step(obs).action for _ in range(300)])
    assert stats.kstest(policy[:, 0], stats.uniform(loc=-1, scale=2).cdf).pvalue < 1e-3


def test_a_human_still_overrides_warm_up_actions():
    """A human's action replaces a warm-up step's (ActorSession.step gives it precedence over `uniform`:
    tests/test_actor_session.py); the learner trains on the human's action as its own."""
    actor = Actor(GaussianPolicy(Learner(SPEC, 2, SMALL_SAC, SMALL_LEARNER).agent))
    obs = actor.observe({"state": np.zeros(4, np.float32)})
    uniform = actor.step(obs, uniform=True).action
    human = -uniform
    np.testing.assert_array_equal(actor.learner_action_of(human, obs), human)
    actor.human_acted(obs)
    assert actor.step(obs, uniform=True).action.shape == (2,)


# ----- rewards and target bounds ----------------------------------------------------------------------------------
def test_a_reward_outside_the_target_bounds_is_refused_naming_the_option():
    learner = Learner(SPEC, 2, dataclasses.replace(SMALL_SAC, target_bounds=(0.0, 1.0)), SMALL_LEARNER)
    obs, next_obs = {"state": np.zeros(4, np.float32)}, {"state": np.ones(4, np.float32)}
    with pytest.raises(ValueError, match=r"reward 2 is outside sac.target_bounds \(0.0, 1.0\).*--sac.target-bounds"):
        learner.insert(obs, np.zeros(2), 2.0, True, False, next_obs)
    with pytest.raises(ValueError, match=r"reward -0.5 is outside"):
        learner.insert(obs, np.zeros(2), -0.5, True, False, next_obs)
    assert learner.transitions == len(learner.online) == 0 and learner.online.num_frames == 0
    learner.insert(obs, np.zeros(2), 1.0, True, False, next_obs)
    assert len(learner.online) == 1
    unbounded = Learner(SPEC, 2, SMALL_SAC, SMALL_LEARNER)
    unbounded.insert(obs, np.zeros(2), 2.0, True, False, next_obs)  # no target_bounds: any finite reward
    assert len(unbounded.online) == 1


def test_dense_rewards_whose_return_leaves_the_bounds_warn_once(caplog):
    bounded = dataclasses.replace(SMALL_SAC, target_bounds=(0.0, 1.0), discount=0.97)
    env = user_env()
    with caplog.at_level(logging.WARNING, logger="robot_rl.learner.learner"):
        learner = Learner(env.observation_space, env.action_space, bounded, SMALL_LEARNER)
        user_loop(env, learner, Actor(GaussianPolicy(learner.agent)), 3, end_episodes=True)
    warnings = [r.getMessage() for r in caplog.records if r.name == "robot_rl.learner.learner"]
    assert len(warnings) == 1, warnings
    assert "discounted return" in warnings[0] and "(0.0, 1.0)" in warnings[0] and "--sac.target-bounds" in warnings[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="robot_rl.learner.learner"):  # sparse: 1 on success, episode over
        sparse = Learner(SPEC, 2, bounded, SMALL_LEARNER)
        for t in range(5):
            sparse.insert({"state": np.full(4, t, np.float32)}, np.zeros(2), float(t == 4), t == 4, False,
                          {"state": np.full(4, t + 1, np.float32)})
    assert not caplog.records


# ----- actions ------------------------------------------------------------------------------------------------------
def test_action_spaces_other_than_a_box_in_minus_one_one_are_refused():
    assert Learner(SPEC, gym.spaces.Box(-1.0, 1.0, (3,), np.float32), SMALL_SAC, SMALL_LEARNER).action_dim == 3
    with pytest.raises(ValueError, match=r"bounds \[\[-1, 0\], \[1, 5\]\] are not \[-1, 1\]"):
        Learner(SPEC, gym.spaces.Box(np.array([-1.0, 0.0]), np.array([1.0, 5.0])), SMALL_SAC, SMALL_LEARNER)
    with pytest.raises(ValueError, match="not a 1-d gymnasium Box"):
        Learner(SPEC, gym.spaces.Discrete(3), SMALL_SAC, SMALL_LEARNER)


def test_actions_outside_minus_one_one_are_stored_with_one_warning(caplog):
    learner = Learner(SPEC, 2, SMALL_SAC, SMALL_LEARNER)
    obs = {"state": np.zeros(4, np.float32)}
    with caplog.at_level(logging.WARNING, logger="robot_rl.learner.learner"):
        learner.insert(obs, np.array([1.0, -1.0]), 0.0, False, False, obs)
        assert not caplog.records
        for _ in range(3):
            learner.insert(obs, np.array([1.5, 0.0]), 0.0, False, False, obs)
    assert len(learner.online) == 4
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert message.startswith("action [1.5, 0. ] is outside [-1, 1]") and "RescaleAction(env, -1.0, 1.0)" in message


# ----- config ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("field, value", [
    ("batch_size", 0), ("utd", 0), ("n_step", 0), ("online_capacity", 1), ("demo_capacity", 0), ("seed", -1),
    ("demo_ratio", 1.5), ("demo_ratio", -0.1), ("demo_ratio", float("nan")), ("warmup_transitions", -1),
])
def test_config_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"{field}=") as error:
        LearnerConfig(**{field: value})
    assert "\n" not in str(error.value)


def test_every_config_field_has_help_text(capsys, monkeypatch):
    """Field docstrings are the `robot-rl train --learner.* --help` texts."""
    import tyro

    monkeypatch.setenv("COLUMNS", "400")
    with pytest.raises(SystemExit):
        tyro.cli(LearnerConfig, args=["--help"])
    text = capsys.readouterr().out.replace("│", " ")
    for field in dataclasses.fields(LearnerConfig):
        flag = field.name.replace('_', '-')  # a bool is a flag pair: --name, --no-name
        entry = re.split(rf"--(?:no-)?{flag}[ ,]", text)[-1].split("(default:", 1)[0]
        assert len(entry.split()) >= 6, (field.name, entry)  # the metavar and at least five words of help


# ----- demo datasets --------------------------------------------------------------------------------------------
def write_dataset(path, image_size: int | None = None, reward: float = 0.0, action_scale: float = 1.0):
    spec = {"state": ArraySpec((4,), "float32")}
    if image_size:
        spec["images/front"] = ArraySpec((image_size, image_size, 3), "uint8")
    writer = EpisodeWriter(path, spec, ArraySpec((2,), "float32"), fps=10.0, task="Reach")
    rng = np.random.default_rng(0)
    for _ in range(2):
        for t in range(5):
            obs = {"state": np.full(4, t, np.float32)}
            if image_size:
                obs["images/front"] = np.zeros((image_size, image_size, 3), np.uint8)
            writer.add_step(obs, action_scale * rng.uniform(-1, 1, 2), reward, False, t == 4)
        writer.end_episode(obs, success=False)
    return EpisodeDataset(path)


def test_demo_images_of_another_size_name_both_shapes_and_the_option(tmp_path):
    learner = Learner({**SPEC, "images/front": ((32, 32, 3), np.uint8)}, 2, SMALL_SAC, SMALL_LEARNER)
    dataset = write_dataset(tmp_path / "big.zarr", image_size=64)
    with pytest.raises(ValueError) as error:
        learner.add_demos(dataset)
    assert str(error.value) == (
        f"demo dataset {dataset.path} has images/front 64x64x3 but this run uses 32x32x3: record demos with "
        "--image-size 32 or train with --image-size 64"
    )
    assert len(learner.demo) == 0


def test_demo_rewards_and_actions_are_checked_before_anything_is_added(tmp_path, caplog):
    bounded = dataclasses.replace(SMALL_SAC, target_bounds=(0.0, 1.0))
    dataset = write_dataset(tmp_path / "large.zarr", reward=3.0)
    learner = Learner(SPEC, 2, bounded, SMALL_LEARNER)
    with pytest.raises(ValueError, match=re.escape(f"demo dataset {dataset.path}: reward 3 is outside sac.target")):
        learner.add_demos(dataset)
    assert len(learner.demo) == 0 and learner.demo.num_frames == 0
    wide = write_dataset(tmp_path / "wide.zarr", action_scale=2.0)
    with pytest.raises(ValueError, match=re.escape(f"demo dataset {wide.path} has actions up to ")):
        learner.add_demos(wide)
    assert learner.demo.num_frames == 0
    assert Learner(SPEC, 2, SMALL_SAC, SMALL_LEARNER).add_demos(dataset) == 10  # no bounds: fine
    with caplog.at_level(logging.WARNING, logger="robot_rl.learner.learner"):  # 0.5 per step: a return of about 2.5
        assert learner.add_demos(write_dataset(tmp_path / "dense.zarr", reward=0.5)) == 10
    assert len(caplog.records) == 1 and "episode 0 has a discounted return of 2.45" in caplog.records[0].getMessage()
