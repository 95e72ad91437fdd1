"""Residual SAC on a frozen base: the zero head reproduces the base, scale and clipping, the critic scores executed
actions, transitions carry the base action and the head's action, demos are labelled, interventions reach both
buffers, policy files and in-process runs (with resume)."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
import pytest

from robot_rl.actor.session import Actor, ActorSession
from robot_rl.agents.sac import SACAgent, SACConfig, executed_actions
from robot_rl.learner.learner import Learner, LearnerConfig
from robot_rl.policies.base import ActionChunk, ChunkRunner, PolicyError
from robot_rl.policies.residual import BASE_ACTION_KEY, FrozenBase, ResidualPolicy, residual_observation_spec
from robot_rl.actor.safety import Safety, SafetyConfig
from robot_rl.wire.protocol import TransportError
from robot_rl.wire.transitions import StampedTransition, decode_transitions, encode_transitions
from robot_rl.core.types import ObservationSpec

SPEC = ObservationSpec.from_shapes({"state": ((3,), "float32")})
SMALL = SACConfig(actor_hidden_dims=(32, 32), critic_hidden_dims=(32, 32), critic_ensemble_size=2)


class ScriptedBase:
    """A chunked base policy: chunk k of an episode is [c, c + 0.1, c + 0.2, c + 0.3] (c = 0.1 * state[0] - 0.5 + k
    / 10) in every dim, the gripper dim at +1 (so a correction pushes it outside [-1, 1])."""

    kind = "scripted"
    observation_spec = SPEC
    observation_keys = ("state",)
    action_dim = 4
    obs_horizon = 2
    chunk_length = 4
    device = "cpu"

    def __init__(self):
        self.calls = 0

    def reset(self):
        self.calls = 0

    def act_chunk(self, history, *, deterministic=True):
        assert len(history) == 2
        start = 0.1 * float(history[-1]["state"][0]) - 0.5 + self.calls / 10
        self.calls += 1
        actions = np.repeat((start + 0.1 * np.arange(4, dtype=np.float32))[:, None], 4, axis=1)
        actions[:, -1] = 1.0
        return ActionChunk(actions, actions)

    def learner_action_of(self, executed, info):
        return None


def head_agent(seed=0, **changes):
    config = SACConfig(**{**SMALL.__dict__, "residual_scale": 0.1, "actor_zero_init_last": True, **changes})
    return SACAgent.create(seed, residual_observation_spec(ScriptedBase()), 4, config)


def residual(execute=None, agent=None, scale=0.1):
    return ResidualPolicy(FrozenBase(ScriptedBase(), execute=execute), agent or head_agent(), scale)


def observations(n, offset=0.0):
    return [{"state": np.array([offset + t, 0.0, 0.0], np.float32)} for t in range(n)]


def with_mean_bias(agent: SACAgent, bias: float) -> SACAgent:
    """The head with its (zero-initialised) mean output fixed at tanh^-1(bias) for every observation."""
    params = jax.tree.map(lambda x: x, agent.actor.params)
    params["mean"]["bias"] = np.full(agent.action_dim, np.arctanh(bias), np.float32)
    return agent.replace(actor=agent.actor.replace(params=params))


def test_a_zero_initialised_head_reproduces_the_base_exactly():
    base_runner = ChunkRunner(ScriptedBase(), execute=3)
    policy = residual(execute=3)
    runner = ChunkRunner(policy)
    for episode in range(2):
        base_runner.reset()
        runner.reset()
        for obs in observations(8, offset=episode):
            expected = base_runner.act(obs)
            np.testing.assert_array_equal(runner.act(obs), expected)
    assert policy.base.chunks == 2 * 3  # receding horizon: 3 of each 4-action chunk, 8 steps -> 3 chunks


def test_scale_and_clipping_of_the_correction():
    policy = residual(agent=with_mean_bias(head_agent(), 0.5), scale=0.2)
    chunk = policy.act_chunk(observations(1))
    base_action = chunk.info[BASE_ACTION_KEY][0]
    np.testing.assert_allclose(chunk.learner_actions[0], 0.5, atol=1e-6)
    np.testing.assert_allclose(chunk.actions[0, :3], base_action[:3] + 0.1, atol=1e-6)
    assert chunk.actions[0, 3] == 1.0  # base +1 plus a correction: clipped to the action range
    assert (chunk.learner_actions.shape, chunk.actions.shape) == ((1, 4), (1, 4))
    # a human's action maps back into the head's space (clipped into [-1, 1])
    mapped = policy.learner_action_of(np.array([0.0, 0.0, 0.0, 1.0]), {BASE_ACTION_KEY: np.full(4, 0.05)})
    np.testing.assert_allclose(mapped, [-0.25, -0.25, -0.25, 1.0], atol=1e-6)
    assert policy.learner_action_of(np.zeros(4), {}) is None


def test_the_residual_agent_needs_the_base_action_entry():
    with pytest.raises(ValueError, match="needs observation entry 'base_action' of shape \\(4,\\)"):
        SACAgent.create(0, SPEC, 4, SACConfig(residual_scale=0.1))
    with pytest.raises(ValueError, match="residual_scale=0.0 must be > 0"):
        SACConfig(residual_scale=0.0)
    with pytest.raises(PolicyError, match="base execute=5 must be in \\[1, the base's chunk_length=4\\]"):
        FrozenBase(ScriptedBase(), execute=5)


def test_executed_actions_add_the_scaled_residual_and_clip():
    config = SACConfig(residual_scale=0.1)
    obs = {"base_action": np.array([[0.5, 0.95, -1.0]], np.float32)}
    np.testing.assert_allclose(executed_actions(config, obs, np.array([[1.0, 1.0, -0.5]])), [[0.6, 1.0, -1.0]])
    assert executed_actions(SACConfig(), obs, np.ones((1, 3))) is not None


def test_the_critic_scores_executed_actions_and_the_head_learns_the_correction():
    """A one-step bandit whose reward peaks at executed action 0.25 while the base says 0.2: the critic must score
    base + 0.1 x residual for the head to learn residual ~0.5 (a plain agent would learn 0.25 itself)."""
    spec = ObservationSpec.from_shapes({"state": ((1,), "float32"), BASE_ACTION_KEY: ((1,), "float32")})
    learner = Learner(spec, 1, SACConfig(actor_hidden_dims=(32,), critic_hidden_dims=(64, 64), critic_ensemble_size=2,
                                         residual_scale=0.1, actor_zero_init_last=True, init_temperature=1e-3,
                                         actor_delay=100),
                      LearnerConfig(batch_size=64, utd=20, warmup_transitions=0, seed=1))
    rng = np.random.default_rng(0)
    obs = {"state": np.zeros(1, np.float32), BASE_ACTION_KEY: np.full(1, 0.2, np.float32)}
    for _ in range(400):  # executed actions around the base, as a residual actor explores
        executed = np.clip(0.2 + 0.1 * rng.uniform(-1, 1, 1), -1, 1).astype(np.float32)
        learner.insert(obs, executed, float(1.0 - 100 * (executed[0] - 0.25) ** 2), True, False, obs)
    for _ in range(40):
        info = learner.step()
    residual_action = float(learner.agent.eval_actions(obs)[0])
    assert abs(residual_action - 0.5) < 0.2, (residual_action, info)
    plain = SACAgent.create(0, spec, 1, SACConfig())
    assert np.isfinite(plain.eval_actions(obs)).all()


def test_transitions_carry_the_base_action_the_head_action_and_the_next_base_action():
    policy = residual(agent=with_mean_bias(head_agent(), 0.5))
    safety = Safety(SafetyConfig(action_dim=4))
    session = ActorSession(safety, "test/residual", actor=Actor(policy, deterministic=True), max_episode_steps=5)
    session.start_episode(np.array([0.5, 0.0, 0.3]), np.array([1.0, 0, 0, 0]), 0.04)
    frames = observations(7)
    session.step(frames[0])
    session.step(frames[1])
    session.step(frames[2], human_action=np.array([-0.28, -0.3, -0.33, 1.0], np.float32))
    for obs in frames[3:6]:
        session.step(obs)
    items = session.outbox.due(0.0, max_items=10)
    assert len(items) == 5 and items[-1].truncated
    for item, following in zip(items, items[1:]):
        assert BASE_ACTION_KEY in item.observation and BASE_ACTION_KEY in item.next_observation
        np.testing.assert_array_equal(item.next_observation[BASE_ACTION_KEY], following.observation[BASE_ACTION_KEY])
    policy_step, human_step = items[0], items[2]
    np.testing.assert_allclose(policy_step.learner_action, 0.5, atol=1e-6)
    np.testing.assert_array_equal(policy_step.policy_info[BASE_ACTION_KEY], policy_step.observation[BASE_ACTION_KEY])
    np.testing.assert_allclose(policy_step.action[:3], policy_step.observation[BASE_ACTION_KEY][:3] + 0.05, atol=1e-6)
    assert human_step.intervention
    np.testing.assert_allclose(human_step.observation[BASE_ACTION_KEY], [-0.3, -0.3, -0.3, 1.0], atol=1e-6)
    np.testing.assert_allclose(human_step.learner_action, [0.2, 0.0, -0.3, 0.0], atol=1e-5)  # (human - base) / 0.1
    # the human moved the arm: the base plans a fresh (second) chunk at the next step, not the first one's -0.2
    assert items[3].observation[BASE_ACTION_KEY][0] == pytest.approx(0.1 * 3 - 0.5 + 0.1)
    # on the wire and back, with the new fields
    source, decoded = decode_transitions(encode_transitions("a/b", items))
    np.testing.assert_array_equal(decoded[2].learner_action, human_step.learner_action)
    np.testing.assert_array_equal(decoded[0].policy_info[BASE_ACTION_KEY], policy_step.policy_info[BASE_ACTION_KEY])


def test_old_and_malformed_wire_transitions():
    obs = {"state": np.zeros(3, np.float32)}
    old = StampedTransition(0, 0, 0, obs, np.zeros(4, np.float32), 0.0, False, False, obs)
    (_, [decoded]) = decode_transitions(encode_transitions("a/b", [old]))
    assert decoded.learner_action is None and decoded.policy_info == {}
    bad = StampedTransition(0, 0, 0, obs, np.zeros(4, np.float32), 0.0, False, False, obs,
                            learner_action=np.array([np.nan, 0, 0, 0], np.float32))
    with pytest.raises(TransportError, match="transition 0 \\(seq 0\\) has a non-finite or non-float learner_action"):
        decode_transitions(encode_transitions("a/b", [bad]))


def test_interventions_of_a_residual_run_reach_both_buffers():
    spec = residual_observation_spec(ScriptedBase())
    learner = Learner(spec, 4, head_agent().config, LearnerConfig(batch_size=4, warmup_transitions=0))
    frames = [{**o, BASE_ACTION_KEY: np.full(4, 0.1, np.float32)} for o in observations(4)]
    for t in range(3):
        learner.insert(frames[t], np.zeros(4, np.float32), 0.0, False, t == 2, frames[t + 1], intervention=t == 1)
    assert (len(learner.online), len(learner.demo), learner.interventions) == (3, 1, 1)


def test_demos_are_labelled_with_the_base_actions(tmp_path):
    from robot_rl.data.episode_writer import EpisodeWriter
    from robot_rl.data.episodes import EpisodeDataset

    action_spec = ObservationSpec.from_shapes({"a": ((4,), "float32")})["a"]
    writer = EpisodeWriter(tmp_path / "demos.zarr", dict(SPEC.entries), action_spec, fps=10.0, task="Scripted")
    frames = observations(6)
    for obs in frames[:5]:
        writer.add_step(obs, np.zeros(4, np.float32), 0.0, False, False)
    writer.end_episode(frames[5], success=False)
    writer.close()
    policy = residual(execute=2)
    learner = Learner(policy.learner_observation_spec, 4, head_agent().config, LearnerConfig(batch_size=4))
    assert learner.add_demos(EpisodeDataset(tmp_path / "demos.zarr"), policy) == 5
    batch = learner.demo.gather(np.arange(5))
    runner = ChunkRunner(ScriptedBase(), execute=2)
    expected = [runner.act(obs) for obs in frames]
    np.testing.assert_allclose(batch.observations[BASE_ACTION_KEY], expected[:5])
    np.testing.assert_allclose(batch.next_observations[BASE_ACTION_KEY], expected[1:])


@pytest.fixture(scope="module")
def base_file(tmp_path_factory) -> Path:
    """A (randomly initialised) SAC policy file on PickCube state as a frozen base."""
    from robot_rl.sim.loop import make_env
    from robot_rl.policies.gaussian import weights_message
    from robot_rl.wire.policy_file import write_policy_file

    env = make_env("PickCube-v0", obs_mode="state")
    agent = SACAgent.create(7, env.observation_space, env.action_space.shape[0], SMALL)
    env.close()
    return write_policy_file(tmp_path_factory.mktemp("base") / "policy.msgpack", weights_message(agent, version=1))


def test_an_in_process_residual_run_trains_saves_evaluates_and_resumes_identically(base_file, tmp_path):
    from robot_rl.policies.checkpoint import load_policy
    from robot_rl.training.config import TrainConfig
    from robot_rl.apps.train import train

    cfg = TrainConfig(policy="residual", base=base_file, steps=40, demos=2, eval_every=40, eval_episodes=1,
                      video=False, run_dir=tmp_path / "run", checkpoint_every=20,
                      learner=LearnerConfig(batch_size=16, utd=2, n_step=3, seed=0))
    run_dir = train(cfg)
    policy = load_policy(run_dir / "policy.msgpack")
    assert policy.kind == "residual" and policy.scale == 0.1 and policy.base.path == str(base_file.resolve())
    assert BASE_ACTION_KEY in policy.learner_observation_spec and BASE_ACTION_KEY not in policy.observation_spec
    state = json.loads((run_dir / "checkpoint" / "learner.json").read_text())
    assert state["transitions"] == 40 and state["updates"] == 80

    # resume: the restored learner gives the same next update as the one that saved
    from robot_rl.training.config import policy_kind
    from robot_rl.sim.loop import make_env

    env = make_env("PickCube-v0", obs_mode="state")
    kind = policy_kind(cfg, env.observation_space, env.action_space.shape[0])
    env.close()
    learners = [Learner(kind.observation_spec, 4, kind.sac, cfg.learner) for _ in range(2)]
    for learner in learners:
        learner.restore(run_dir / "checkpoint")
    assert learners[0].step() == learners[1].step()
    resumed = train(TrainConfig(**{**cfg.__dict__, "steps": 50}), resume=run_dir)
    assert json.loads((resumed / "checkpoint" / "learner.json").read_text())["transitions"] == 50


def test_residual_config_errors_are_one_line(base_file, tmp_path):
    from robot_rl.training.run_folder import RunError
    from robot_rl.training.config import TrainConfig
    from robot_rl.apps.train import train

    with pytest.raises(ValueError, match="policy='residual' needs --base"):
        TrainConfig(policy="residual")
    with pytest.raises(ValueError, match="--base .* is only used with --policy residual or noise"):
        TrainConfig(base=base_file)
    with pytest.raises(ValueError, match="sac.residual_scale is set by the run: use --policy residual "
                                         "--residual-scale 0.2"):
        TrainConfig(sac=SACConfig(residual_scale=0.2))
    with pytest.raises(RunError, match="--base .*nowhere.*does not exist"):
        train(TrainConfig(policy="residual", base=tmp_path / "nowhere", run_dir=tmp_path / "run"))
    with pytest.raises(RunError, match="reads object_state"):
        train(TrainConfig(policy="residual", base=base_file, obs_mode="pixels", run_dir=tmp_path / "run2"))
    assert not (tmp_path / "run").exists() and not (tmp_path / "run2").exists()


def test_the_actor_waits_for_the_critic_warm_up():
    spec = ObservationSpec.from_shapes({"state": ((3,), "float32")})
    agent = SACAgent.create(0, spec, 2, SACConfig(actor_hidden_dims=(16,), critic_hidden_dims=(16,),
                                                  critic_ensemble_size=2, actor_delay=4))
    rng = np.random.default_rng(0)
    batch = {"observations": {"state": rng.normal(size=(3, 8, 3)).astype(np.float32)},
             "next_observations": {"state": rng.normal(size=(3, 8, 3)).astype(np.float32)},
             "actions": rng.uniform(-1, 1, (3, 8, 2)).astype(np.float32), "rewards": np.ones((3, 8), np.float32),
             "discounts": np.full((3, 8), 0.99, np.float32), "masks": np.ones((3, 8), np.float32),
             "demo": np.zeros((3, 8), bool), "intervention": np.zeros((3, 8), bool)}
    same = lambda a, b: all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))  # noqa
    after_three, info = agent.update(batch)  # critic steps 1-3: the actor waits
    assert same(after_three.actor.params, agent.actor.params) and np.isnan(info["actor_loss"])
    assert not same(after_three.critic.params, agent.critic.params)
    after_six, _ = after_three.update(batch)  # steps 4-6: the actor moves from step 5 on
    assert not same(after_six.actor.params, agent.actor.params)


def test_device_cpu_keeps_a_sac_head_on_the_host_where_jax_defaults_elsewhere(tmp_path):
    """`device cpu` pins a SAC policy (a residual's or noise head's too: it is one) to the host even where JAX's
    default device is another (a GPU on a robot's computer: 5x slower there at batch 1). Stood in for by two host devices with the second the
    default, in a subprocess so the flags take effect."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import os
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
        import jax
        import numpy as np
        jax.config.update("jax_default_device", jax.devices()[1])
        from robot_rl.agents.sac import SACAgent, SACConfig
        from robot_rl.policies.gaussian import GaussianPolicy
        from robot_rl.core.types import ArraySpec, ObservationSpec

        spec = ObservationSpec.from_shapes({"state": ArraySpec((5,), "float32")})
        config = SACConfig(actor_hidden_dims=(8,), critic_hidden_dims=(8,))
        newer = SACAgent.create(1, spec, 3, config).policy_to_bytes()

        def devices(policy):
            leaves = jax.tree_util.tree_leaves(policy.agent)
            return sorted({str(d) for leaf in leaves if isinstance(leaf, jax.Array) for d in leaf.devices()})

        for device in ("cpu", "auto"):
            policy = GaussianPolicy(SACAgent.create(0, spec, 3, config), device=device)
            placed = devices(policy)
            policy.update_weights(newer, 2)
            action = policy.act_chunk([{"state": np.ones(5, np.float32)}], deterministic=False).actions
            print(device, placed, devices(policy), action.shape)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert lines == ["cpu ['cpu:0'] ['cpu:0'] (1, 3)", "auto ['cpu:1'] ['cpu:1'] (1, 3)"], lines
