"""Learner and actor without transport: demos in, interventions in both buffers, identical update after resume."""

from __future__ import annotations

import json
import re
import shutil

import jax
import numpy as np
import pytest

from robot_rl.actor.session import Actor
from robot_rl.policies.gaussian import GaussianPolicy
from robot_rl.agents.sac import SACConfig
from robot_rl.data.episodes import EpisodeDataset
from robot_rl.learner.learner import CheckpointError, Learner, LearnerConfig
from robot_rl.sim.loop import make_env, record_episodes, writer_for_env
from robot_rl.sim.expert import make_expert

SMALL_SAC = SACConfig(actor_hidden_dims=(32, 32), critic_hidden_dims=(32, 32), critic_ensemble_size=4)
SMALL_LEARNER = LearnerConfig(batch_size=16, utd=2, online_capacity=500, demo_capacity=500, seed=3,
                              warmup_transitions=0)  # updates from the first transitions (warm-up: test_learner_api)


@pytest.fixture(scope="module")
def env():
    env = make_env("PickCube-v0", obs_mode="state")
    yield env
    env.close()


@pytest.fixture(scope="module")
def demos(env, tmp_path_factory):
    path = tmp_path_factory.mktemp("demos") / "demos.zarr"
    record_episodes(env, make_expert(env), writer_for_env(env, path, "PickCube-v0"), 3, seed=0)
    return EpisodeDataset(path)


def new_learner(env) -> Learner:
    return Learner(env.observation_space, env.action_space.shape[0], SMALL_SAC, SMALL_LEARNER)


def fill_online(learner: Learner, env, steps: int, intervene_every: int = 0) -> None:
    obs, _ = env.reset(seed=5)
    for t in range(steps):
        action = env.action_space.sample()
        next_obs, reward, terminated, truncated, _ = env.step(action)
        learner.insert(obs, action, reward, terminated, truncated, next_obs, bool(intervene_every and t % intervene_every == 0))
        obs = env.reset(seed=6 + t)[0] if terminated or truncated else next_obs


def test_demos_fill_the_demo_buffer_with_final_observations(env, demos):
    learner = new_learner(env)
    added = learner.add_demos(demos)
    assert added == demos.num_steps == len(learner.demo)
    last = int(demos.episode_ends[0]) - 1
    batch = learner.demo.gather(np.array([last]))
    np.testing.assert_array_equal(batch.next_observations["object_state"][0], demos.final_obs["object_state"][0])
    np.testing.assert_array_equal(batch.actions[0], demos.data["action"][last])


def test_interventions_go_to_online_and_demo_buffers(env):
    learner = new_learner(env)
    fill_online(learner, env, 30, intervene_every=3)
    assert len(learner.online) == 30
    assert len(learner.demo) == 10 == learner.interventions
    assert learner.demo.intervention[learner.demo.valid].all()


def test_takeovers_as_failures_and_bc_on_the_demos_alone(env, demos):
    import dataclasses

    bc_sac = dataclasses.replace(SMALL_SAC, bc_weight=1.0, bc_on_interventions=False)
    learner = Learner(env.observation_space, env.action_space.shape[0], bc_sac,
                      dataclasses.replace(SMALL_LEARNER, takeover_is_failure=True, batch_size=64))
    learner.add_demos(demos)
    fill_online(learner, env, 30, intervene_every=3)
    # every takeover (steps 3, 6, ... after a policy step) fails the policy's step before it
    policy_steps = np.flatnonzero(learner.online.valid & ~learner.online.intervention)
    assert learner.online.terminated[policy_steps].sum() == 9
    info = learner.step()
    assert np.isfinite(info["bc_error_demos"]) and np.isfinite(info["bc_error_human"])
    np.testing.assert_allclose(info["bc_error"], info["bc_error_demos"], rtol=1e-5)  # the human's rows are left out


def test_resume_gives_the_same_next_update(env, demos, tmp_path):
    learner = new_learner(env)
    learner.add_demos(demos)
    fill_online(learner, env, 40, intervene_every=7)
    for _ in range(3):
        learner.step()
    learner.save(tmp_path / "ckpt", extra={"env_step": 40})

    restored = new_learner(env)
    assert restored.restore(tmp_path / "ckpt") == {"env_step": 40}
    assert (restored.updates, restored.transitions) == (learner.updates, learner.transitions)
    info_a, info_b = learner.step(), restored.step()
    assert info_a == info_b
    for a, b in zip(jax.tree.leaves(learner.agent), jax.tree.leaves(restored.agent)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _first_segment(store):
    return sorted(store.glob("rows-*.zip"))[0]


def _cut_in_half(file):
    file.write_bytes(file.read_bytes()[:file.stat().st_size // 2])


def _flip_a_byte(file, at: int = 200):
    data = bytearray(file.read_bytes())
    data[at] ^= 0xFF
    file.write_bytes(bytes(data))


@pytest.mark.parametrize("part, damage, named", [
    ("ckpt/agent.msgpack", lambda file: file.write_bytes(file.read_bytes()[:100]),
     "agent.msgpack is missing or damaged"),
    ("ckpt.replay/online.zarr", lambda store: _cut_in_half(_first_segment(store)),
     "replay store segment {folder}/rows-000000000000-"),
    ("ckpt.replay/online.zarr", lambda store: _flip_a_byte(_first_segment(store)),
     "replay store segment {folder}/rows-000000000000-"),
    ("ckpt.replay/online.zarr", lambda store: _first_segment(store).unlink(), "{folder} lacks rows 0..20"),
    ("ckpt.replay/demo.zarr", lambda store: (store / "zarr.json").write_text("{"),
     "{folder}/zarr.json is not a replay store's metadata"),
    ("ckpt.replay/demo.zarr", shutil.rmtree, "{folder}/zarr.json is missing"),
    ("ckpt/online_open.zarr", lambda store: _cut_in_half(_first_segment(store)),
     "replay store segment {folder}/rows-000000000021-"),
    ("ckpt/learner.json", lambda file: file.write_text(json.dumps({"version": 1, "updates": 3})),
     "learner.json is missing or damaged"),
])
def test_a_damaged_checkpoint_names_its_part_and_changes_nothing(env, tmp_path, part, damage, named):
    learner = new_learner(env)
    fill_online(learner, env, 20, intervene_every=4)
    learner.end_episode()  # in the stores beside the checkpoint
    fill_online(learner, env, 3)  # an open episode: in the checkpoint itself
    learner.step()
    learner.save(tmp_path / "ckpt")
    damage(tmp_path / part)
    fresh = new_learner(env)
    before = jax.tree.leaves(fresh.agent)
    with pytest.raises(CheckpointError, match=rf"^checkpoint {tmp_path / 'ckpt'} cannot be restored: "
                                              rf"{re.escape(named.format(folder=tmp_path / part))}"):
        fresh.restore(tmp_path / "ckpt")
    assert (fresh.updates, fresh.transitions, len(fresh.online), len(fresh.demo)) == (0, 0, 0, 0)
    assert all(a is b for a, b in zip(before, jax.tree.leaves(fresh.agent)))


def test_actor_follows_published_weights_and_the_human(env):
    learner = new_learner(env)
    actor = Actor(GaussianPolicy(learner.agent), deterministic=True)
    obs, _ = env.reset(seed=0)
    before = actor.act(obs)
    fill_online(learner, env, 20)
    for _ in range(5):
        learner.step()
    actor.update_weights(learner.policy_bytes(), version=1)
    np.testing.assert_allclose(actor.act(obs), np.asarray(learner.agent.eval_actions(obs)), atol=1e-6)
    assert not np.allclose(before, actor.act(obs))
    actor.update_weights(b"stale", version=1)  # not newer: ignored without decoding

    from robot_rl.actor.safety import Safety, sim_safety_config
    from robot_rl.actor.session import ActorSession

    session = ActorSession(Safety(sim_safety_config(env)), "test", actor=actor)  # a human takes over in its loop
    session.start_episode(*env.unwrapped.target_pose())
    assert session.step(obs, human_action=np.ones(4, np.float32)).intervention
    transition = session.step(obs).transition
    assert transition.intervention and np.array_equal(transition.action, np.ones(4, np.float32))
