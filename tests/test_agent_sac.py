"""SAC agent: shapes, losses, gradients, scanned vs single-step updates, pixels, validation, serialisation."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from robot_rl.agents.sac import ImageEncoderConfig, SACAgent, SACConfig
from robot_rl.agents.sac import actor_loss, critic_loss, critic_values, encode, subset_min
from robot_rl.core.types import Batch, ObservationSpec

SMALL = SACConfig(actor_hidden_dims=(32, 32), critic_hidden_dims=(32, 32), critic_ensemble_size=4,
                  image_encoder=ImageEncoderConfig(channels=(8, 8, 8), latent_dim=16))
STATE_SPEC = ObservationSpec.from_shapes({"state": ((14,), np.float32), "object_state": ((7,), np.float32)})


def pixel_spec(cameras, size=16):
    shapes = {"state": ((14,), np.float32)}
    shapes.update({f"images/{c}": ((size, size, 3), np.uint8) for c in cameras})
    return ObservationSpec.from_shapes(shapes)


def random_obs(spec, lead, rng):
    return {k: (rng.integers(0, 256, lead + s.shape, dtype=np.uint8) if s.is_image
                else rng.normal(size=lead + s.shape).astype(np.float32)) for k, s in spec.entries}


def random_batch(spec, lead, action_dim=4, seed=0):
    rng = np.random.default_rng(seed)
    return Batch(
        observations=random_obs(spec, lead, rng),
        actions=rng.uniform(-1, 1, lead + (action_dim,)).astype(np.float32),
        rewards=rng.normal(size=lead).astype(np.float32),
        discounts=np.full(lead, 0.99, np.float32),
        masks=(rng.uniform(size=lead) > 0.1).astype(np.float32),
        next_observations=random_obs(spec, lead, rng),
        intervention=np.zeros(lead, bool),
        demo=np.zeros(lead, bool),
    )


def test_create_from_gymnasium_space_and_act():
    from gymnasium import spaces

    space = spaces.Dict({"state": spaces.Box(-1, 1, (14,), np.float32),
                         "base_action": spaces.Box(-1, 1, (7,), np.float32)})  # any extra key is a vector input
    agent = SACAgent.create(0, space, 7, SMALL)
    obs = {"state": np.zeros(14, np.float32), "base_action": np.ones(7, np.float32)}
    single = agent.sample_actions(obs, jax.random.PRNGKey(0))
    assert single.shape == (7,) and np.all(np.abs(np.asarray(single)) <= 1)
    batched = agent.eval_actions({k: np.stack([v] * 3) for k, v in obs.items()})
    assert batched.shape == (3, 7)
    np.testing.assert_allclose(np.asarray(agent.eval_actions(obs)), np.asarray(batched[0]), atol=1e-5)


def test_ensemble_shapes_and_subset_min():
    agent = SACAgent.create(0, STATE_SPEC, 4, dataclasses.replace(SMALL, critic_ensemble_size=10))
    batch = random_batch(STATE_SPEC, (32,))
    q = jax.jit(lambda obs, a: critic_values(
        agent, agent.critic.params["critic"], encode(agent, agent.critic.params["encoder"], obs), a
    ))(batch.observations, jnp.asarray(batch.actions))
    assert q.shape == (10, 32)
    assert not np.allclose(q[0], q[1])  # heads are independently initialised
    target = subset_min(jax.random.PRNGKey(3), q, 2)
    assert target.shape == (32,)
    # the min over 2 distinct heads equals, for every sample, the min over one fixed pair of heads
    pair_mins = np.stack([np.minimum(q[i], q[j]) for i in range(10) for j in range(i + 1, 10)])
    assert np.any(np.all(np.isclose(pair_mins, np.asarray(target)[None]), axis=1))


def test_critic_loss_decreases_on_fixed_regression_target():
    agent = SACAgent.create(0, STATE_SPEC, 4, SMALL)
    batch = random_batch(STATE_SPEC, (128,))
    targets = jnp.asarray(np.sin(batch.observations["state"][:, 0]) + batch.actions[:, 0])
    obs, actions = jax.tree.map(jnp.asarray, batch.observations), jnp.asarray(batch.actions)
    tx = optax.adam(3e-3)
    params = agent.critic.params
    opt_state = tx.init(params)

    @jax.jit
    def step(params, opt_state):
        (loss, _), grads = jax.value_and_grad(lambda p: critic_loss(agent, p, obs, actions, targets), has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state)
        return optax.apply_updates(params, updates), opt_state, loss

    losses = []
    for _ in range(200):
        params, opt_state, loss = step(params, opt_state)
        losses.append(float(loss))
    assert np.isfinite(losses).all()
    assert losses[-1] < 0.1 * losses[0]


def test_gradients_reach_actor_and_critic_but_not_encoder_from_actor_loss():
    spec = pixel_spec(["front"])
    agent = SACAgent.create(0, spec, 4, SMALL)
    batch = random_batch(spec, (16,))
    obs = jax.tree.map(jnp.asarray, batch.observations)
    enc_params = agent.critic.params["encoder"]
    actor_grads, encoder_grads = jax.jit(jax.grad(
        lambda a, e: actor_loss(agent, a, e, agent.critic.params["critic"], obs, jax.random.PRNGKey(0), 0.1)[0],
        argnums=(0, 1),
    ))(agent.actor.params, enc_params)
    assert all(float(jnp.abs(g).sum()) > 0 for g in jax.tree.leaves(actor_grads))
    assert jax.tree.leaves(encoder_grads) and all(float(jnp.abs(g).max()) == 0 for g in jax.tree.leaves(encoder_grads))
    critic_grads = jax.jit(jax.grad(lambda p: critic_loss(agent, p, obs, jnp.asarray(batch.actions),
                                                          jnp.ones(16))[0]))(agent.critic.params)
    assert all(float(jnp.abs(g).sum()) > 0 for g in jax.tree.leaves(critic_grads["critic"]))
    assert all(float(jnp.abs(g).sum()) > 0 for g in jax.tree.leaves(critic_grads["encoder"]))


def test_scanned_update_equals_single_steps():
    """With an actor step every second critic step (the scan's branch), and target_bounds clipping the TD targets
    (rewards of 3 give targets above 2 unless bounded to [0, 1])."""
    config = dataclasses.replace(SMALL, critic_actor_ratio=2, target_bounds=(0.0, 1.0))
    agent = SACAgent.create(0, STATE_SPEC, 4, config)
    batch = random_batch(STATE_SPEC, (4, 32))
    batch = batch.replace(rewards=np.full((4, 32), 3.0, np.float32), masks=np.ones((4, 32), np.float32))
    scanned, info = agent.update(batch)
    assert 0.5 < float(info["target_q_mean"]) <= 1.0 + 1e-6
    stepped = agent
    for k in range(4):
        stepped, _ = stepped.update_step(jax.tree.map(lambda x, k=k: x[k], batch))
    assert int(scanned.step) == int(stepped.step) == 4
    for a, b in zip(jax.tree.leaves(scanned), jax.tree.leaves(stepped), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=2e-6)
    assert set(info) >= {"critic_loss", "actor_loss", "temperature", "entropy", "q_mean"}
    assert all(np.isfinite(float(v)) for v in info.values())
    # params actually moved
    assert not np.allclose(jax.tree.leaves(scanned.actor.params)[0], jax.tree.leaves(agent.actor.params)[0])


def test_pixel_agent_updates():
    cameras = ["front", "wrist"]  # one encoder per camera
    spec = pixel_spec(cameras)
    jitter = dataclasses.replace(SMALL.image_encoder, augment_colour=0.3)  # shifts and colour jitter
    agent = SACAgent.create(0, spec, 4, dataclasses.replace(SMALL, image_encoder=jitter))
    assert set(agent.critic.params["encoder"]) == {f"images_{c}" for c in cameras}
    new_agent, info = agent.update(random_batch(spec, (2, 16)))
    assert all(np.isfinite(float(v)) for v in info.values())
    enc_before = jax.tree.leaves(agent.critic.params["encoder"])[0]
    assert not np.allclose(enc_before, jax.tree.leaves(new_agent.critic.params["encoder"])[0])
    assert new_agent.sample_actions(random_obs(spec, (), np.random.default_rng(0)), jax.random.PRNGKey(0)).shape == (4,)


def test_the_wrist_wrench_enters_symlog_compressed_and_the_rest_as_is():
    from robot_rl.agents.networks import ObservationEncoder

    spec = ObservationSpec.from_shapes({"state": ((2,), np.float32), "wrench": ((6,), np.float32)})
    encoder = ObservationEncoder(spec, channels=(), kernel_sizes=(), strides=(), latent_dim=1)
    wrench = np.array([[0.0, 0.5, -3.0, 100.0, -100.0, 1e4]], np.float32)
    features = encoder.apply({}, {"state": np.array([[0.25, -40.0]], np.float32), "wrench": wrench})
    np.testing.assert_allclose(features, [[0.25, -40.0, *(np.sign(wrench[0]) * np.log1p(np.abs(wrench[0])))]],
                               rtol=1e-6)


def test_per_image_normalisation_sees_through_brightness_and_tint():
    """Per-image pixels: a scene x0.7 darker with a shifted tint gives the encoder (nearly) the input it had; fixed
    scaling does not (the patch-matmul path; nn.Conv's path scales with the same pixel_scale)."""
    kernel_sizes = strides = (4, 2)
    from robot_rl.agents.networks import ObservationEncoder

    spec = pixel_spec(["front"], size=16)
    rng = np.random.default_rng(0)
    images = rng.integers(40, 200, (4, 16, 16, 3)).astype(np.uint8)
    lit = np.clip(np.round(images * 0.7 + np.array([12.0, -5.0, 20.0])), 0, 255).astype(np.uint8)
    state = np.zeros((4, 14), np.float32)
    features = {}
    for normalisation in ("fixed", "per_image"):
        encoder = ObservationEncoder(spec, channels=(8, 8), kernel_sizes=kernel_sizes, strides=strides,
                                     latent_dim=8, normalisation=normalisation)
        params = encoder.init(jax.random.PRNGKey(0), {"images/front": images, "state": state})
        features[normalisation] = [np.asarray(encoder.apply(params, {"images/front": x, "state": state}))[:, :8]
                                   for x in (images, lit)]
    fixed_change = np.abs(features["fixed"][0] - features["fixed"][1]).mean()
    per_image_change = np.abs(features["per_image"][0] - features["per_image"][1]).mean()
    assert per_image_change < 0.05 < fixed_change, (per_image_change, fixed_change)
    with pytest.raises(ValueError, match="normalisation='mean' must be one of fixed, per_image"):
        dataclasses.replace(SMALL.image_encoder, normalisation="mean")


def test_per_image_is_the_default_and_configs_saved_before_it_read_as_fixed():
    """A policy file or run folder written before the setting existed keeps the scaling it was trained with."""
    from robot_rl.core.config_io import config_from_json, config_to_json

    assert SACConfig().image_encoder.normalisation == "per_image"
    saved = config_to_json(SACConfig())
    assert config_from_json(SACConfig, saved).image_encoder.normalisation == "per_image"
    del saved["image_encoder"]["normalisation"]
    assert config_from_json(SACConfig, saved).image_encoder.normalisation == "fixed"


def test_overlapping_conv_encoder_runs():
    """An encoder of overlapping convs (kernel 3, strides 2 and 1) encodes and passes gradients to every layer (the
    agent's update around the encoder is the one test_pixel_agent_updates runs)."""
    from robot_rl.agents.networks import ObservationEncoder

    spec = pixel_spec(["front"], size=20)
    encoder = ObservationEncoder(spec, channels=(8, 8), kernel_sizes=(3, 3), strides=(2, 1), latent_dim=8,
                                 normalisation="per_image")  # the agent's default scaling, on nn.Conv's path
    obs = jax.tree.map(jnp.asarray, random_obs(spec, (8,), np.random.default_rng(0)))
    params = jax.jit(encoder.init)(jax.random.PRNGKey(0), obs)
    features = jax.jit(encoder.apply)(params, obs)
    assert features.shape == (8, 8 + 14) and bool(jnp.isfinite(features).all())
    grads = jax.jit(jax.grad(lambda p: (encoder.apply(p, obs) ** 2).sum()))(params)
    assert all(float(jnp.abs(g).sum()) > 0 for g in jax.tree.leaves(grads))


def test_bad_batches_raise_clear_errors():
    agent = SACAgent.create(0, STATE_SPEC, 4, SMALL)
    batch = random_batch(STATE_SPEC, (2, 8))
    with pytest.raises(ValueError, match="object_state"):
        agent.update(dataclasses.replace(batch, observations={"state": batch.observations["state"]}))
    bad = dict(batch.next_observations, state=np.zeros((2, 8, 13), np.float32))
    with pytest.raises(ValueError, match="next_observations.*state"):
        agent.update(dataclasses.replace(batch, next_observations=bad))
    rewards = batch.rewards.copy()
    rewards[1, 3] = np.nan
    with pytest.raises(ValueError, match="rewards"):
        agent.update(dataclasses.replace(batch, rewards=rewards))
    with pytest.raises(ValueError, match="actions"):
        agent.update(dataclasses.replace(batch, actions=batch.actions[..., :3]))
    with pytest.raises(ValueError, match="keys"):
        agent.sample_actions({"state": np.zeros(14, np.float32)}, jax.random.PRNGKey(0))


def test_serialisation_round_trip(tmp_path):
    import flax.serialization

    spec = pixel_spec(["front"])
    agent = SACAgent.create(0, spec, 4, SMALL)
    trained = jax.tree.map(lambda x: x + 0.01 if jnp.issubdtype(x.dtype, jnp.floating) else x + 1, agent)
    data = trained.to_bytes()
    assert isinstance(data, bytes) and not data.startswith(b"\x80")  # msgpack, not pickle
    restored = agent.restore_bytes(data)
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(trained), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    obs = random_obs(spec, (), np.random.default_rng(1))
    from_policy = agent.with_policy_bytes(trained.policy_to_bytes())
    np.testing.assert_allclose(from_policy.eval_actions(obs), trained.eval_actions(obs), rtol=1e-6)
    path = tmp_path / "encoder.msgpack"
    path.write_bytes(flax.serialization.to_bytes(trained.critic.params["encoder"]))
    loaded = agent.with_encoder_params_file(str(path))
    np.testing.assert_array_equal(jax.tree.leaves(loaded.target_critic_params["encoder"])[0],
                                  jax.tree.leaves(trained.critic.params["encoder"])[0])


def test_actors_get_the_averaged_policy_and_old_checkpoints_start_it():
    spec = STATE_SPEC  # the encoder's params are averaged by the same tree map (pixel runs)
    config = dataclasses.replace(SMALL, policy_average_rate=0.1)
    agent = SACAgent.create(0, spec, 4, config)
    trained = agent
    for step in range(2):  # average <- 0.1 latest + 0.9 average after each actor step
        before = trained.policy_params()
        trained, _ = trained.update(random_batch(spec, (8,), seed=step))
        for a, b, c in zip(*(jax.tree.leaves(x) for x in (before, trained.policy_params(),
                                                          trained.latest_policy_params())), strict=True):
            np.testing.assert_allclose(np.asarray(b), 0.9 * np.asarray(a) + 0.1 * np.asarray(c), atol=1e-6)
    obs = random_obs(spec, (), np.random.default_rng(1))
    assert not np.allclose(trained.eval_actions(obs), trained.replace(policy_average=None).eval_actions(obs))
    actor_side = agent.with_policy_bytes(trained.policy_to_bytes())  # what an actor acts with
    np.testing.assert_allclose(actor_side.eval_actions(obs), trained.eval_actions(obs), rtol=1e-6)
    assert agent.restore_bytes(trained.to_bytes()).policy_average is not None
    old = trained.replace(policy_average=None)  # as a checkpoint from before averaging holds it
    resumed = agent.restore_bytes(old.to_bytes())
    for a, b in zip(jax.tree.leaves(resumed.policy_params()), jax.tree.leaves(old.latest_policy_params()),
                    strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_patch_conv_matches_flax_conv():
    import flax.linen as nn

    from robot_rl.agents.networks import PatchConv

    x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 8, 12, 3)), jnp.float32)
    params = PatchConv(5, 4).init(jax.random.PRNGKey(0), x)
    conv = nn.Conv(5, (4, 4), strides=(4, 4), padding="VALID")
    ours, reference = jax.jit(PatchConv(5, 4).apply)(params, x), jax.jit(conv.apply)(params, x)
    np.testing.assert_allclose(np.asarray(ours), np.asarray(reference), rtol=1e-5, atol=1e-5)


def test_target_bounds_must_be_an_interval():
    with pytest.raises(ValueError, match="target_bounds"):
        SACConfig(target_bounds=(1.0, 0.0))


def test_random_shift_is_an_edge_replicated_crop_per_sample():
    from robot_rl.agents.augment import random_shift

    images = np.random.default_rng(0).integers(0, 256, (64, 12, 10, 3), dtype=np.uint8)
    pad = 3
    shifted = np.asarray(random_shift(jax.random.PRNGKey(1), jnp.asarray(images), pad))
    padded = np.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="edge")
    offsets = []
    for image, out in zip(padded, shifted, strict=True):
        # Exactly one crop of the edge-padded image gives each output.
        matches = [
            (dy, dx)
            for dy in range(2 * pad + 1)
            for dx in range(2 * pad + 1)
            if np.array_equal(image[dy : dy + 12, dx : dx + 10], out)
        ]
        assert matches, "output is not a crop of the edge-padded image"
        offsets.append(matches[0])
    # Offsets are drawn per sample over the whole range, not one shift for the batch.
    assert len(set(offsets)) > 20
    assert {dy for dy, _ in offsets} == set(range(2 * pad + 1))
    np.testing.assert_array_equal(random_shift(jax.random.PRNGKey(1), jnp.asarray(images), 0), images)
    np.testing.assert_array_equal(random_shift(jax.random.PRNGKey(1), jnp.asarray(images), pad), shifted)


def test_cpu_loop_and_batched_crops_agree():
    from robot_rl.agents.augment import crop_per_sample_batched, crop_per_sample_loop

    rng = np.random.default_rng(2)
    padded = jnp.asarray(rng.integers(0, 256, (16, 14, 13, 3), dtype=np.uint8))
    offsets = jnp.asarray(rng.integers(0, 5, (16, 2)), jnp.int32)
    shape = (16, 10, 9, 3)
    batched = jax.jit(crop_per_sample_batched, static_argnums=2)(padded, offsets, shape)
    looped = jax.jit(crop_per_sample_loop, static_argnums=2)(padded, offsets, shape)
    np.testing.assert_array_equal(batched, looped)
    row, col = np.asarray(offsets[3])
    np.testing.assert_array_equal(looped[3], np.asarray(padded[3])[row : row + 10, col : col + 9])


def test_colour_jitter_scales_and_shifts_each_sample_within_its_bounds():
    from robot_rl.agents.augment import colour_jitter

    images = jnp.full((256, 4, 4, 3), 128, jnp.uint8)
    jittered = np.asarray(colour_jitter(jax.random.PRNGKey(0), images, 0.3))
    assert jittered.dtype == np.uint8  # as the actor's images: the encoder scales uint8 pixels only
    jittered = jittered.astype(np.float32)
    per_sample = jittered[:, 0, 0, :]  # each image is one scale and one offset per channel: uniform within it
    assert np.allclose(jittered, per_sample[:, None, None, :])
    # 128 x [0.7, 1.3] + 255 x [-0.15, 0.15] per channel: the full range is used, and channels move apart
    assert per_sample.min() < 128 * 0.8 and per_sample.max() > 128 * 1.2
    assert np.abs(per_sample[:, 0] - per_sample[:, 1]).max() > 20
    assert per_sample.min() >= 128 * 0.7 - 255 * 0.15 - 0.5 and per_sample.max() <= 128 * 1.3 + 255 * 0.15 + 0.5
    np.testing.assert_array_equal(colour_jitter(jax.random.PRNGKey(0), images, 0.0), images)
    with pytest.raises(ValueError, match=r"augment_colour=1.5 must be in \[0, 1\)"):
        dataclasses.replace(SMALL.image_encoder, augment_colour=1.5)

