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
from robot_rl.learner.learner import Learner, LearnerConfig
from robot_rl.policies.base import ChunkRunner, PolicyError
from robot_rl.policies.config import DiffusionConfig
from robot_rl.policies.diffusion import DiffusionPolicy
from robot_rl.policies.noise import CHUNK_STEP_KEY, NoisePolicy, noise_dim
from robot_rl.policies.normalizer import Normalizer
from robot_rl.core.types import ObservationSpec

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


def test_a_repeated_noise_head_picks_one_step_of_noise_for_the_whole_chunk():
    base = tiny_base()
    assert noise_dim(base, repeat=True) == 3
    agent = SACAgent.create(0, SPEC, 3, SMALL)
    params = jax.tree.map(lambda x: x, agent.actor.params)
    params["mean"]["bias"] = np.arctanh(np.array([0.5, -0.2, 0.1], np.float32))
    policy = NoisePolicy(base, agent.replace(actor=agent.actor.replace(params=params)), 1.2, repeat=True)
    obs = history()
    chunk = policy.act_chunk(obs)
    noise = policy.noise_of(chunk.learner_actions[0])
    assert noise.shape == (8, 3)
    np.testing.assert_allclose(noise, np.tile(1.2 * np.array([0.5, -0.2, 0.1]), (8, 1)), atol=1e-5)
    np.testing.assert_array_equal(chunk.actions, base.chunk_from_noise(obs, noise).actions)
    assert policy.policy_config()["repeat"] is True
    with pytest.raises(PolicyError, match="acts in 24 dims; the base's noise has 3 \\(one step's, repeated\\)"):
        NoisePolicy(base, SACAgent.create(0, SPEC, 24, SMALL), repeat=True)


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
    from robot_rl.sim.loop import make_env

    env = make_env("PickCube-v0", obs_mode="state")
    spec = ObservationSpec.from_space(env.observation_space)
    env.close()
    base = tiny_base(spec, action_dim=4)
    return base.save(tmp_path_factory.mktemp("base") / "policy")


@pytest.mark.parametrize("aliasing", [False, True], ids=["dsrl-sac", "dsrl-na"])
def test_an_in_process_noise_run_trains_saves_evaluates_and_resumes(base_folder, tmp_path, aliasing):
    from robot_rl.learner.learner import checkpoint_replay
    from robot_rl.sim.loop import make_env
    from robot_rl.policies.checkpoint import load_policy
    from robot_rl.training.config import TrainConfig, policy_kind
    from robot_rl.apps.train import train

    # DSRL-NA learns from demos (joined into chunks of 4 steps); DSRL-SAC takes none
    cfg = TrainConfig(policy="noise", base=base_folder, steps=60, eval_every=60, eval_episodes=1, video=False,
                      noise_aliasing=aliasing, demos=1 if aliasing else 0, run_dir=tmp_path / "run",
                      learner=LearnerConfig(batch_size=8, utd=2, warmup_transitions=20))
    run_dir = train(cfg)
    policy = load_policy(run_dir / "policy.msgpack")
    assert policy.kind == "noise" and policy.bound == 1.5 and policy.chunk_length == 4
    assert policy.base_path == str(base_folder.resolve())
    assert policy.aliasing_samples == (4 if aliasing else 0)
    state = json.loads((run_dir / "checkpoint" / "learner.json").read_text())
    assert state["transitions"] == 60
    online = checkpoint_replay(run_dir / "checkpoint", "online")
    assert 60 / 4 <= len(online) < 60  # one transition per chunk of 4
    if aliasing:
        assert online.action_dim == 32 + 1 + 16 + 4 * (32 + 16) + 1  # packed: noise, executed chunk, aliases
        demo = checkpoint_replay(run_dir / "checkpoint", "demo")
        from robot_rl.data.episodes import EpisodeDataset

        demo_steps = int(EpisodeDataset(run_dir / "demos.zarr").episode_ends[-1])
        assert state["demo_transitions"] == len(demo) == -(-demo_steps // 4) > 0  # one per 4 demo steps
        assert np.all(demo.actions[demo.valid][:, 32] == 0)  # a demo's noise is unknown
    else:
        assert online.action_dim == 32 and state["demo_transitions"] == 0

    env = make_env("PickCube-v0", obs_mode="state")
    kind = policy_kind(cfg, env.observation_space, env.action_space.shape[0])
    env.close()
    assert kind.sac.discount == pytest.approx(cfg.sac.discount ** 4) and kind.chunk_decisions
    learners = [Learner(kind.observation_spec, kind.action_dim, kind.sac, cfg.learner, chunk_decisions=True,
                        robot_action_dim=kind.robot_action_dim) for _ in range(2)]
    for learner in learners:
        learner.restore(run_dir / "checkpoint")
    assert learners[0].step() == learners[1].step()
    resumed = train(TrainConfig(**{**cfg.__dict__, "steps": 80}), resume=run_dir)
    assert json.loads((resumed / "checkpoint" / "learner.json").read_text())["transitions"] == 80


# ------------------------------------------------------------------------------------ noise aliasing (DSRL-NA)
NA = SACConfig(actor_hidden_dims=(64, 64), critic_hidden_dims=(64, 64), critic_ensemble_size=2,
               actor_zero_init_last=True, aliased_chunk_dim=2, aliasing_samples=3, backup_entropy=False)


def test_packed_aliased_actions_round_trip():
    from robot_rl.agents.sac import aliased_actions

    layout = aliased_actions(NA, 4)
    assert layout.size == 4 + 1 + 2 + 3 * (4 + 2) + 1
    noise, executed = np.arange(4.0), np.array([0.5, -0.5])
    alias_noise, alias_chunks = np.arange(12.0).reshape(3, 4), -np.arange(6.0).reshape(3, 2)
    parts = layout.unpack(jax.numpy.asarray(layout.pack(executed, noise, alias_noise, alias_chunks)[None]))
    np.testing.assert_array_equal(parts["noise"][0], noise)
    np.testing.assert_array_equal(parts["executed"][0], executed)
    np.testing.assert_array_equal(parts["alias_noise"][0], alias_noise)
    np.testing.assert_array_equal(parts["alias_chunks"][0], alias_chunks)
    assert parts["noise_known"][0] == 1 and parts["aliases_known"][0] == 1
    human = layout.unpack(jax.numpy.asarray(layout.pack(executed)[None]))
    assert human["noise_known"][0] == 0 and human["aliases_known"][0] == 0
    with pytest.raises(ValueError, match="exclude each other"):
        SACConfig(aliased_chunk_dim=2, residual_scale=0.1)


def test_the_noise_critic_regresses_the_action_critic_and_the_head_follows_it():
    """A stand-in base denoises noise w into the chunk tanh(2 w[:2]); the task pays the chunk's first number. The
    action critic learns the reward of executed chunks (random ones: no noise known, like a human's), the noise
    critic learns it through the recorded (w, chunk) aliases, and the head's noise moves to where the base's chunk
    pays, with no base in the learner."""
    from robot_rl.agents.sac import aliased_actions, noise_critic_values, critic_values, encode

    rng = np.random.default_rng(0)
    layout = aliased_actions(NA, 4)
    agent = SACAgent.create(0, SPEC, 4, NA)
    base = lambda w: np.tanh(2.0 * w[..., :2])  # noqa: E731
    rows = 256
    executed = rng.uniform(-1, 1, (rows, 2))
    alias_noise = rng.uniform(-1, 1, (rows, 3, 4))
    actions = np.stack([layout.pack(executed[i], None, alias_noise[i], base(alias_noise[i])) for i in range(rows)])
    obs = {"state": rng.normal(size=(rows, 5)).astype(np.float32)}
    batch = {"observations": obs, "next_observations": obs, "actions": actions.astype(np.float32),
             "rewards": executed[:, 0].astype(np.float32), "discounts": np.full(rows, 0.9, np.float32),
             "masks": np.zeros(rows, np.float32), "intervention": np.ones(rows, bool), "demo": np.ones(rows, bool)}
    stacked = jax.tree.map(lambda x: np.repeat(np.asarray(x)[None], 50, axis=0), batch)
    for _ in range(12):
        agent, info = agent.update(stacked)
    assert np.isfinite(info["noise_critic_loss"]) and info["noise_critic_loss"] < 0.05
    # on fresh noise the noise critic matches the action critic on the chunk the base makes of it
    w = rng.uniform(-1, 1, (rows, 4)).astype(np.float32)
    features = encode(agent, agent.critic.params["encoder"], obs)
    q_noise = np.asarray(noise_critic_values(agent, agent.critic.params["noise_critic"], features, w).mean(0))
    q_action = np.asarray(critic_values(agent, agent.critic.params["critic"], features, base(w)).mean(0))
    assert np.corrcoef(q_noise, q_action)[0, 1] > 0.9 and np.abs(q_noise - q_action).mean() < 0.15
    assert np.corrcoef(q_action, base(w)[:, 0])[0, 1] > 0.9  # and the action critic knows the reward
    head_noise = np.asarray(agent.eval_actions(obs))
    assert head_noise[:, 0].mean() > 0.5  # base chunk tanh(2 w0) pays: the head pushes w0 up


def test_a_noise_aliasing_head_records_aliases_the_base_denoised():
    from robot_rl.policies.noise import ALIAS_CHUNKS_KEY, ALIAS_NOISE_KEY

    base = tiny_base()
    config = SACConfig(actor_hidden_dims=(32, 32), critic_hidden_dims=(32, 32), critic_ensemble_size=2,
                       aliased_chunk_dim=3 * 3, aliasing_samples=5)
    policy = NoisePolicy(base, SACAgent.create(0, SPEC, noise_dim(base), config), 1.5, execute=3, seed=1)
    obs = history()
    chunk = policy.act_chunk(obs, deterministic=False)
    aliases, chunks = chunk.info[ALIAS_NOISE_KEY], chunk.info[ALIAS_CHUNKS_KEY]
    assert aliases.shape == (3, 5, 24) and chunks.shape == (3, 5, 9)
    np.testing.assert_array_equal(aliases[0], aliases[2])  # every step of the chunk carries the decision's aliases
    assert np.abs(aliases).max() <= 1.0 and aliases.std() > 0.1
    for k in (0, 4):
        denoised = base.chunk_from_noise(obs, policy.noise_of(aliases[0, k])).actions[:3]
        np.testing.assert_allclose(chunks[0, k].reshape(3, 3), denoised, atol=1e-5)
    assert ALIAS_NOISE_KEY not in policy.act_chunk(obs, deterministic=True).info  # evaluation feeds no learner
    with pytest.raises(PolicyError, match="scores 9-number chunks; this policy executes 4 x 3"):
        NoisePolicy(base, SACAgent.create(0, SPEC, noise_dim(base), config), 1.5, execute=4)


def test_a_noise_aliasing_learner_keeps_human_steps_as_chunks_in_both_buffers():
    from robot_rl.agents.sac import aliased_actions
    from robot_rl.policies.noise import ALIAS_CHUNKS_KEY, ALIAS_NOISE_KEY

    config = SACConfig(actor_hidden_dims=(32, 32), critic_hidden_dims=(32, 32), critic_ensemble_size=2,
                       aliased_chunk_dim=2 * 3, aliasing_samples=2)
    learner = Learner(SPEC, 24, config, LearnerConfig(batch_size=4), chunk_decisions=True, robot_action_dim=3)
    assert learner.steps_per_decision == 2
    frame = lambda v: {"state": np.full(5, v, np.float32)}  # noqa: E731
    aliases = {ALIAS_NOISE_KEY: np.full((2, 24), 0.5, np.float32), ALIAS_CHUNKS_KEY: np.full((2, 6), 0.25, np.float32)}
    # policy chunk (2 steps), 3 human steps (a chunk of 2, a chunk of 1 cut by the hand-back), policy chunk (ends)
    rows = [(0, False), (1, False), (None, False), (None, False), (None, False), (0, False), (1, True)]
    for t, (step, terminal) in enumerate(rows):
        info = {} if step is None else {CHUNK_STEP_KEY: np.int32(step), **aliases}
        learner.insert(frame(t), np.full(3, t / 10, np.float32), float(terminal), terminal, False, frame(t + 1),
                       intervention=step is None,
                       learner_action=None if step is None else np.full(24, 0.1, np.float32), policy_info=info)
    assert learner.skipped == 0
    layout = aliased_actions(config, 24)
    online = learner.online.gather(np.flatnonzero(learner.online.valid))
    parts = layout.unpack(jax.numpy.asarray(online.actions))
    np.testing.assert_allclose(online.observations["state"][:, 0], [0, 2, 4, 5])
    np.testing.assert_allclose(np.asarray(parts["noise_known"]), [1, 0, 0, 1])
    np.testing.assert_allclose(np.asarray(parts["aliases_known"]), [1, 0, 0, 1])
    np.testing.assert_allclose(np.asarray(parts["executed"])[:, ::3],  # first number of each step's action
                               [[0.0, 0.1], [0.2, 0.3], [0.4, 0.4], [0.5, 0.6]], atol=1e-6)  # the cut one padded
    np.testing.assert_allclose(np.asarray(parts["alias_chunks"])[0], 0.25)
    np.testing.assert_allclose(online.rewards, [0, 0, 0, 1])
    demo = learner.demo.gather(np.flatnonzero(learner.demo.valid))  # the HIL-SERL rule: human chunks here too
    np.testing.assert_allclose(demo.observations["state"][:, 0], [2, 4])
    assert demo.intervention.all()
