"""Noise-space SAC (DSRL) on a frozen diffusion policy: deterministic DDIM from the head's noise, the noise bound, the
zero head equals the base's deterministic acting, the learner joins a chunk's steps into one transition, policy
files and an in-process run with resume."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
import pytest
import torch

from robot_rl.agents.sac import SACAgent, SACConfig
from robot_rl.learner import Learner, LearnerConfig
from robot_rl.policies.base import ChunkRunner, PolicyError
from robot_rl.policies.config import DiffusionConfig
from robot_rl.policies.diffusion import DiffusionPolicy
from robot_rl.policies.noise import CHUNK_STEP_KEY, NoisePolicy, noise_dim
from robot_rl.policies.normalizer import Normalizer
from robot_rl.types import ObservationSpec

torch.set_num_threads(1)

TINY = DiffusionConfig(obs_horizon=2, prediction_horizon=8, action_horizon=4, down_dims=(16, 32), groups=4,
                       step_embedding_dim=16, state_features=16, train_timesteps=20, inference_steps=5)
SPEC = ObservationSpec.from_shapes({"state": ((5,), np.float32)})
SMALL = SACConfig(actor_hidden_dims=(32, 32), critic_hidden_dims=(32, 32), critic_ensemble_size=2,
                  actor_zero_init_last=True)


def tiny_base(spec=SPEC, action_dim=3, seed=0) -> DiffusionPolicy:
    rng = np.random.default_rng(seed)
    data = {key: rng.normal(size=(50, int(np.prod(spec[key].shape)))) for key in spec.vector_keys}
    data["action"] = rng.uniform(-1, 1, (50, action_dim))
    return DiffusionPolicy.create(TINY, spec, action_dim, Normalizer().fit(data), seed=seed)


def noise_policy(base, bound=1.5, bias=None, execute=None) -> NoisePolicy:
    agent = SACAgent.create(0, SPEC, noise_dim(base), SMALL)
    if bias is not None:  # the head's mean fixed at tanh^-1(bias) for every observation
        params = jax.tree.map(lambda x: x, agent.actor.params)
        params["mean"]["bias"] = np.arctanh(np.asarray(bias, np.float32))
        agent = agent.replace(actor=agent.actor.replace(params=params))
    return NoisePolicy(base, agent, bound, execute=execute)


def history(seed=0, n=2):
    rng = np.random.default_rng(seed)
    return [{"state": rng.normal(size=5).astype(np.float32)} for _ in range(n)]


def test_deterministic_ddim_the_same_noise_gives_the_same_chunk():
    base = tiny_base()
    obs = history()
    noise = np.random.default_rng(1).normal(size=base.noise_shape).astype(np.float32)
    first, again = base.chunk_from_noise(obs, noise), base.chunk_from_noise(obs, noise)
    np.testing.assert_array_equal(first.actions, again.actions)
    other = base.chunk_from_noise(obs, noise + 0.5)
    assert np.abs(other.actions - first.actions).max() > 1e-3
    assert base.noise_shape == (8, 3) and first.actions.shape == (4, 3)


def test_a_zero_initialised_head_acts_like_the_base_from_zero_noise():
    base = tiny_base()
    policy = noise_policy(base)
    base_runner, runner = ChunkRunner(base), ChunkRunner(policy)
    for obs in history(n=6):
        np.testing.assert_array_equal(runner.act(obs), base_runner.act(obs))


def test_the_head_action_is_bounded_noise_and_every_step_of_a_chunk_carries_it():
    base = tiny_base()
    bias = np.linspace(-0.9, 0.9, noise_dim(base))
    policy = noise_policy(base, bound=1.5, bias=bias, execute=3)
    obs = history()
    chunk = policy.act_chunk(obs)
    np.testing.assert_allclose(chunk.learner_actions, np.repeat(bias[None], 3, axis=0), atol=1e-5)
    np.testing.assert_array_equal(chunk.info[CHUNK_STEP_KEY], [0, 1, 2])
    noise = policy.noise_of(chunk.learner_actions[0])
    assert noise.shape == base.noise_shape and np.abs(noise).max() <= 1.5
    np.testing.assert_allclose(noise.ravel(), 1.5 * bias, atol=1e-5)
    np.testing.assert_array_equal(chunk.actions, base.chunk_from_noise(obs, noise).actions[:3])
    assert policy.learner_action_of(np.zeros(3), {}) is None  # a human's noise is unknown
    with pytest.raises(PolicyError, match="execute=5 must be in \\[1, the base's chunk_length=4\\]"):
        noise_policy(base, execute=5)
    with pytest.raises(PolicyError, match="noise bound=0.0 must be > 0"):
        noise_policy(base, bound=0.0)


def test_a_noise_head_needs_a_diffusion_base():
    from robot_rl.policies.gaussian import GaussianPolicy

    sac = GaussianPolicy(SACAgent.create(0, SPEC, 3, SMALL))
    with pytest.raises(PolicyError, match="needs a diffusion or one-step base; a gaussian policy has no initial noise"):
        noise_dim(sac)


def steps_of(learner, rows):
    """Insert (state value, chunk_step or None for a human, reward, terminated, truncated) steps of one episode."""
    frame = lambda v: {"state": np.full(5, v, np.float32)}  # noqa: E731
    for t, (step, reward, terminated, truncated) in enumerate(rows):
        info = {} if step is None else {CHUNK_STEP_KEY: np.int32(step)}
        learner.insert(frame(t), np.zeros(3, np.float32), reward, terminated, truncated, frame(t + 1),
                       intervention=step is None,
                       learner_action=None if step is None else np.full(24, 0.01 * t, np.float32), policy_info=info)


def test_the_learner_joins_the_steps_of_a_chunk_into_one_transition():
    learner = Learner(SPEC, 24, SMALL, LearnerConfig(batch_size=4), chunk_decisions=True)
    # chunk of 3 (steps 0-2), a human step cuts the next chunk after 1 step, a chunk seen from its middle is
    # skipped, then a chunk of 2 ends the episode with a success
    steps_of(learner, [(0, 0.0, False, False), (1, 0.0, False, False), (2, 0.5, False, False),
                       (0, 0.0, False, False), (None, 0.0, False, False), (1, 0.0, False, False),
                       (0, 0.0, False, False), (1, 1.0, True, False)])
    assert learner.transitions == 8 and learner.skipped == 2 and len(learner.demo) == 0
    batch = learner.online.gather(np.flatnonzero(learner.online.valid))
    np.testing.assert_allclose(batch.observations["state"][:, 0], [0, 3, 6])
    np.testing.assert_allclose(batch.next_observations["state"][:, 0], [3, 4, 8])
    np.testing.assert_allclose(batch.actions[:, 0], [0.0, 0.03, 0.06], atol=1e-6)
    np.testing.assert_allclose(batch.rewards, [0.5, 0.0, 1.0])
    np.testing.assert_allclose(batch.masks, [1.0, 1.0, 0.0])  # the success terminates
    # the first chunk continues into the second (same replay episode); the cut one ends its episode (truncated)
    assert list(learner.online.truncated[learner.online.valid]) == [False, True, False]


@pytest.fixture(scope="module")
def base_folder(tmp_path_factory) -> Path:
    """A tiny (untrained) diffusion policy on PickCube state as a frozen base."""
    from robot_rl.loop import make_env

    env = make_env("PickCube-v0", obs_mode="state")
    spec = ObservationSpec.from_space(env.observation_space)
    env.close()
    base = tiny_base(spec, action_dim=4)
    return base.save(tmp_path_factory.mktemp("base") / "policy")


def test_an_in_process_noise_run_trains_saves_evaluates_and_resumes(base_folder, tmp_path):
    from robot_rl.loop import make_env
    from robot_rl.policies.checkpoint import load_policy
    from robot_rl.train import TrainConfig, policy_kind, train

    cfg = TrainConfig(policy="noise", base=base_folder, steps=60, eval_every=60, eval_episodes=1, video=False,
                      run_dir=tmp_path / "run", learner=LearnerConfig(batch_size=8, utd=2, warmup_transitions=20))
    run_dir = train(cfg)
    policy = load_policy(run_dir / "policy.msgpack")
    assert policy.kind == "noise" and policy.bound == 1.5 and policy.chunk_length == 4
    assert policy.base_path == str(base_folder.resolve())
    state = json.loads((run_dir / "checkpoint" / "learner.json").read_text())
    assert state["transitions"] == 60 and state["demo_transitions"] == 0
    from robot_rl.data.replay import ReplayBuffer

    online = ReplayBuffer.load(run_dir / "checkpoint" / "online.zarr")
    assert online.action_dim == 32 and 60 / 4 <= len(online) < 60  # one transition per chunk of 4

    env = make_env("PickCube-v0", obs_mode="state")
    kind = policy_kind(cfg, env.observation_space, env.action_space.shape[0])
    env.close()
    assert kind.sac.discount == pytest.approx(cfg.sac.discount ** 4) and kind.chunk_decisions
    learners = [Learner(kind.observation_spec, kind.action_dim, kind.sac, cfg.learner, chunk_decisions=True)
                for _ in range(2)]
    for learner in learners:
        learner.restore(run_dir / "checkpoint")
    assert learners[0].step() == learners[1].step()
    resumed = train(TrainConfig(**{**cfg.__dict__, "steps": 80}), resume=run_dir)
    assert json.loads((resumed / "checkpoint" / "learner.json").read_text())["transitions"] == 80
