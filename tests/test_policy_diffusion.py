"""Diffusion policy: encoder / U-Net shapes, DDPM-DDIM schedule round trip, normaliser, policy files, act_chunk and a
small learning check."""

import dataclasses
import json

import numpy as np
import pytest
import torch

from robot_rl.policies.base import ActionChunk, ObservationHistory, Policy, PolicyError
from robot_rl.policies.checkpoint import POLICY_CONFIG, POLICY_WEIGHTS, load_policy
from robot_rl.policies.diffusion import ChunkConv1d, DiffusionConfig, DiffusionPolicy, policy_from_files
from robot_rl.policies.normalizer import Normalizer
from robot_rl.core.types import ObservationSpec

torch.set_num_threads(1)

TINY = DiffusionConfig(obs_horizon=2, prediction_horizon=8, action_horizon=4, down_dims=(16, 32), groups=4,
                       step_embedding_dim=16, image_channels=(8, 16), image_features=8, state_features=16,
                       train_timesteps=20, inference_steps=5)
ACTION_DIM = 3


def _spec(cameras=("images/front",), side=20, state_dim=5, object_dim=0):
    shapes = {camera: ((side, side, 3), np.uint8) for camera in cameras}
    if state_dim:
        shapes["state"] = ((state_dim,), np.float32)
    if object_dim:
        shapes["object_state"] = ((object_dim,), np.float32)
    return ObservationSpec.from_shapes(shapes)


def _normalizer(spec, action_dim=ACTION_DIM, seed=0):
    rng = np.random.default_rng(seed)
    data = {key: rng.normal(size=(50, int(np.prod(spec[key].shape)))) for key in spec.vector_keys}
    data["action"] = rng.uniform(-1, 1, (50, action_dim))
    return Normalizer().fit(data)


def _policy(spec=None, config=TINY, seed=0):
    spec = spec or _spec()
    return DiffusionPolicy.create(config, spec, ACTION_DIM, _normalizer(spec), seed=seed)


def _observation(spec, rng):
    return {key: (rng.integers(0, 256, spec[key].shape, dtype=np.uint8) if spec[key].is_image
                  else rng.normal(size=spec[key].shape).astype(np.float32)) for key in spec.keys}


def _batch_obs(spec, batch, horizon, seed=0):
    rng = np.random.default_rng(seed)
    return {key: torch.from_numpy(np.stack([np.stack([_observation(spec, rng)[key] for _ in range(horizon)])
                                            for _ in range(batch)])) for key in spec.keys}


# ----- config ----------------------------------------------------------------------------------------------------


def test_config_round_trips_through_json_and_refuses_unknown_keys():
    config = DiffusionConfig(down_dims=(256, 512, 1024), middle_blocks=2)
    data = json.loads(json.dumps(config.to_json()))
    assert data["down_dims"] == [256, 512, 1024]
    assert DiffusionConfig.from_json(data) == config
    with pytest.raises(PolicyError, match="bogus"):
        DiffusionConfig.from_json({**data, "bogus": 1})


@pytest.mark.parametrize("kwargs, words", [
    ({"obs_horizon": 4, "action_horizon": 14}, "prediction_horizon"),
    ({"prediction_horizon": 10}, "divisible by 4"),
    ({"kernel_size": 4}, "odd"),
    ({"groups": 5}, "groups=5"),
    ({"crop_fraction": 0.0}, "crop_fraction"),
    ({"inference_steps": 200}, "inference_steps"),
    ({"beta_schedule": "cosine"}, "beta_schedule"),
    ({"prediction_type": "noise"}, "prediction_type"),
    ({"obs_horizon": 0}, "obs_horizon"),
    ({"down_dims": ()}, "down_dims"),
    ({"clip_sample": 1}, "clip_sample"),
])
def test_config_validation_names_the_field_in_one_line(kwargs, words):
    with pytest.raises(PolicyError, match=words) as error:
        DiffusionConfig(**kwargs)
    assert "\n" not in str(error.value)


# ----- shapes ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cameras, state_dim, object_dim, config", [
    (("images/front",), 5, 0, TINY),
    (("images/front", "images/wrist"), 4, 3, TINY),
    ((), 6, 2, TINY),
    (("images/front",), 0, 0, TINY),
    (("images/front", "images/wrist"), 5, 0,
     DiffusionConfig(obs_horizon=1, prediction_horizon=16, action_horizon=8, down_dims=(16, 32, 64), groups=8,
                     image_channels=(8, 16, 32), image_features=16, state_features=8, middle_blocks=2)),
])
def test_encoder_and_denoiser_shapes(cameras, state_dim, object_dim, config):
    spec = _spec(cameras, side=24, state_dim=state_dim, object_dim=object_dim)
    policy = DiffusionPolicy.create(config, spec, ACTION_DIM, _normalizer(spec))
    obs = _batch_obs(spec, 3, config.obs_horizon)
    per_step = len(cameras) * config.image_features + (config.state_features if spec.vector_keys else 0)
    for training in (True, False):
        policy.model.train(training)
        cond = policy._encode(obs)
        assert cond.shape == (3, config.obs_horizon * per_step)
        noisy = torch.randn(3, config.prediction_horizon, ACTION_DIM)
        out = policy.model.denoiser(noisy, torch.tensor([0, 5, config.train_timesteps - 1]), cond)
        assert out.shape == noisy.shape and torch.isfinite(out).all()
    loss = policy.loss({"obs": obs, "actions": torch.rand(3, config.prediction_horizon, ACTION_DIM) * 2 - 1})
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    assert all(p.grad is not None for p in policy.model.parameters())
    chunks = policy.sample(obs, generator=torch.Generator().manual_seed(0))
    assert chunks.shape == (3, config.prediction_horizon, ACTION_DIM) and chunks.abs().max() <= 1


def test_images_are_randomly_cropped_in_training_and_centre_cropped_in_eval():
    policy = _policy(_spec(side=20), dataclasses.replace(TINY, crop_fraction=0.9))
    camera = policy.model.encoder.cameras[0]
    assert (camera.crop_height, camera.crop_width) == (18, 18)
    images = torch.arange(4 * 20 * 20 * 3).reshape(4, 20, 20, 3).to(torch.uint8)
    camera.eval()
    assert torch.equal(camera.crop(images), images[:, 1:19, 1:19])
    camera.train()
    crops = [camera.crop(images, torch.Generator().manual_seed(seed)) for seed in range(8)]
    assert all(crop.shape == (4, 18, 18, 3) for crop in crops)
    assert any(not torch.equal(crops[0], crop) for crop in crops[1:])
    for crop in crops:  # every crop is a window of its own image
        for n in range(4):
            found = [(r, c) for r in range(3) for c in range(3) if torch.equal(images[n, r:r + 18, c:c + 18], crop[n])]
            assert found


def test_small_batch_conv_matches_torch_conv1d():
    torch.manual_seed(0)
    for stride, kernel, padding in ((1, 5, 2), (2, 3, 1), (1, 1, 0)):
        conv = ChunkConv1d(6, 10, kernel, stride=stride, padding=padding)
        for batch in (1, 3, 20):
            x = torch.randn(batch, 6, 16)
            expected = torch.nn.functional.conv1d(x, conv.weight, conv.bias, stride, padding)
            assert torch.allclose(conv(x), expected, atol=1e-5)


# ----- schedulers ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("prediction_type", ["epsilon", "sample"])
def test_ddim_with_the_true_model_output_recovers_the_clean_chunk(prediction_type):
    config = DiffusionConfig(train_timesteps=100, inference_steps=10, prediction_type=prediction_type)
    policy = DiffusionPolicy.create(config, _spec(), ACTION_DIM, _normalizer(_spec()))
    ddpm, ddim = policy.train_scheduler, policy.sample_scheduler
    generator = torch.Generator().manual_seed(0)
    clean = torch.rand(4, 16, ACTION_DIM, generator=generator) * 1.8 - 0.9
    noise = torch.randn(clean.shape, generator=generator)
    first = ddim.timesteps[0]
    x = ddpm.add_noise(clean, noise, torch.full((4,), int(first)))
    assert not torch.allclose(x, clean, atol=0.1)
    for t in ddim.timesteps:
        x = ddim.step(noise if prediction_type == "epsilon" else clean, t, x).prev_sample
    assert torch.allclose(x, clean, atol=1e-4)
    assert torch.equal(ddpm.alphas_cumprod, ddim.alphas_cumprod)


# ----- normaliser ------------------------------------------------------------------------------------------------


def test_normalizer_round_trip_and_constant_dimensions():
    rng = np.random.default_rng(0)
    data = np.stack([rng.uniform(-3, 5, 200), np.full(200, 0.25), rng.normal(0, 0.01, 200)], axis=1)
    normalizer = Normalizer().fit({"state": data, "action": rng.uniform(-1, 1, (200, 2))})
    x = torch.from_numpy(data).float()
    scaled = normalizer.normalize("state", x)
    assert scaled.min() >= -1 - 1e-6 and scaled.max() <= 1 + 1e-6
    assert torch.allclose(scaled[:, [0, 2]].min(0).values, torch.tensor([-1.0, -1.0]), atol=1e-5)
    assert torch.allclose(scaled[:, [0, 2]].max(0).values, torch.tensor([1.0, 1.0]), atol=1e-5)
    assert torch.all(scaled[:, 1] == 0)
    assert torch.allclose(normalizer.unnormalize("state", scaled), x, atol=1e-5)
    assert torch.allclose(normalizer.unnormalize("state", torch.ones(3)), torch.tensor([5.0, 0.25, 0.0]), atol=0.1)
    assert normalizer.unnormalize("state", torch.full((3,), 0.7))[1] == pytest.approx(0.25)
    batched = normalizer.normalize("state", x.view(20, 10, 3))
    assert batched.shape == (20, 10, 3) and torch.allclose(batched.view(200, 3), scaled)

    with torch.inference_mode():  # coefficients first made here still serve autograd later
        normalizer.unnormalize("action", torch.zeros(2))
    wanted = torch.zeros(2, requires_grad=True)
    normalizer.unnormalize("action", wanted).sum().backward()
    assert wanted.grad is not None

    tensors = normalizer.to_tensors()
    assert set(tensors) == {"normalizer.state.min", "normalizer.state.max", "normalizer.action.min",
                            "normalizer.action.max"}
    restored = Normalizer.from_tensors({**tensors, "model.weight": torch.zeros(2)})
    assert restored.keys == normalizer.keys
    assert torch.equal(restored.normalize("state", x), scaled)
    with pytest.raises(PolicyError, match="object_state"):
        normalizer.normalize("object_state", x)
    with pytest.raises(PolicyError, match="state"):
        normalizer.normalize("state", torch.zeros(4))
    with pytest.raises(PolicyError, match="normalizer.state.max"):
        Normalizer.from_tensors({"normalizer.state.min": torch.zeros(2)})


# ----- policy files ----------------------------------------------------------------------------------------------


def test_saved_policy_loads_and_samples_exactly_the_same(tmp_path):
    spec = _spec(("images/front", "images/wrist"), state_dim=4)
    policy = DiffusionPolicy.create(TINY, spec, ACTION_DIM, _normalizer(spec), seed=3)
    assert isinstance(policy, Policy) and policy.kind == "diffusion"
    folder = policy.save(tmp_path / "policy", {"steps": 12})
    assert {p.name for p in folder.iterdir()} == {POLICY_CONFIG, POLICY_WEIGHTS}
    description = json.loads((folder / POLICY_CONFIG).read_text())
    assert description["kind"] == "diffusion" and description["steps"] == 12 and description["action_dim"] == 3
    assert b"pickle" not in (folder / POLICY_WEIGHTS).read_bytes()[:2000]

    loaded = load_policy(folder, device="cpu")
    assert isinstance(loaded, DiffusionPolicy) and loaded.config == TINY
    assert loaded.observation_keys == policy.observation_keys
    obs = _batch_obs(spec, 2, TINY.obs_horizon)
    noise = torch.randn(2, TINY.prediction_horizon, ACTION_DIM, generator=torch.Generator().manual_seed(1))
    assert torch.equal(loaded.sample(obs, noise), policy.sample(obs, noise))
    other = DiffusionPolicy.create(TINY, spec, ACTION_DIM, _normalizer(spec), seed=4)
    assert not torch.equal(other.sample(obs, noise), policy.sample(obs, noise))

    with pytest.raises(PolicyError, match="exists"):
        policy.save(folder)
    policy.save(folder, overwrite=True)
    with pytest.raises(PolicyError, match="config"):
        policy.save(tmp_path / "clash", {"config": {}})


def test_inference_steps_can_be_set_after_training_and_are_saved(tmp_path):
    spec = _spec(("images/front",), state_dim=4)
    policy = DiffusionPolicy.create(TINY, spec, ACTION_DIM, _normalizer(spec), seed=3)
    calls = []
    policy.model.denoiser.register_forward_hook(lambda *_: calls.append(1))
    obs = _batch_obs(spec, 1, TINY.obs_horizon)
    noise = torch.randn(1, TINY.prediction_horizon, ACTION_DIM, generator=torch.Generator().manual_seed(1))
    before = policy.sample(obs, noise)
    assert len(calls) == TINY.inference_steps
    policy.set_inference_steps(2)
    calls.clear()
    after = policy.sample(obs, noise)
    assert len(calls) == 2 and policy.config.inference_steps == 2 and not torch.equal(before, after)
    assert load_policy(policy.save(tmp_path / "policy"), device="cpu").config.inference_steps == 2
    for steps in (0, TINY.train_timesteps + 1):
        with pytest.raises(PolicyError, match=f"inference_steps={steps} must be in"):
            policy.set_inference_steps(steps)


def test_damaged_policy_files_are_policy_errors_naming_the_file(tmp_path):
    policy = _policy()
    folder = policy.save(tmp_path / "policy")
    weights, config = folder / POLICY_WEIGHTS, folder / POLICY_CONFIG
    original = weights.read_bytes()

    weights.write_bytes(original[: len(original) // 2])
    with pytest.raises(PolicyError, match=POLICY_WEIGHTS):
        load_policy(folder, device="cpu")
    weights.write_bytes(b"\x00" * 64)
    with pytest.raises(PolicyError, match=POLICY_WEIGHTS):
        load_policy(folder, device="cpu")
    weights.unlink()
    with pytest.raises(PolicyError, match=f"{POLICY_WEIGHTS} is missing"):
        load_policy(folder, device="cpu")
    weights.write_bytes(original)
    load_policy(folder, device="cpu")

    description = json.loads(config.read_text())
    edits = [
        (lambda d: d["config"].update(down_dims=[16, 48]), "shapes differ"),
        (lambda d: d["config"].update(down_dims=[16, 32, 64], prediction_horizon=8), "missing"),
        (lambda d: d["config"].update(hidden=3), "hidden"),
        (lambda d: d["config"].update(kernel_size=4), "kernel_size"),
        (lambda d: d["observation_spec"].pop("state"), "state"),
        (lambda d: d.pop("action_dim"), "action_dim"),
    ]
    for edit, words in edits:
        edited = json.loads(json.dumps(description))
        edit(edited)
        config.write_text(json.dumps(edited))
        with pytest.raises(PolicyError, match=words) as error:
            load_policy(folder, device="cpu")
        assert POLICY_CONFIG in str(error.value) and "\n" not in str(error.value)


def test_policy_from_files_checks_keys_strictly():
    policy = _policy()
    tensors = policy.state_tensors()
    assert any(name.startswith("model.encoder.") for name in tensors)
    assert "normalizer.action.min" in tensors and "normalizer.state.max" in tensors
    description = json.loads(json.dumps(policy.description()))
    name = next(n for n in tensors if n.startswith("model.denoiser."))
    with pytest.raises(PolicyError, match="missing") as error:
        policy_from_files(description, {k: v for k, v in tensors.items() if k != name}, "cpu")
    assert name in str(error.value) and "unexpected" not in str(error.value)
    with pytest.raises(PolicyError, match="unexpected.*model.extra"):
        policy_from_files(description, {**tensors, "model.extra": torch.zeros(1)}, "cpu")
    with pytest.raises(PolicyError, match="normalizer has no 'action'"):
        policy_from_files(description, {k: v for k, v in tensors.items() if "normalizer.action" not in k}, "cpu")


# ----- acting ----------------------------------------------------------------------------------------------------


def test_act_chunk_is_deterministic_in_range_and_checks_observations():
    spec = _spec(("images/front",), state_dim=5, object_dim=2)
    policy = _policy(spec)
    rng = np.random.default_rng(0)
    history = ObservationHistory(policy.obs_horizon)
    history.append(_observation(spec, rng))
    history.append(_observation(spec, rng))
    chunk = policy.act_chunk(history.observations())
    assert isinstance(chunk, ActionChunk)
    assert chunk.actions.shape == (TINY.action_horizon, ACTION_DIM) and len(chunk) == policy.chunk_length
    assert np.all(np.abs(chunk.actions) <= 1) and np.array_equal(chunk.learner_actions, chunk.actions)
    assert np.array_equal(policy.act_chunk(history.observations()).actions, chunk.actions)
    assert np.array_equal(policy.act_chunk(history.observations()[-1:]).actions,
                          policy.act_chunk([history.observations()[-1]] * 2).actions)
    np.testing.assert_array_equal(policy.learner_action_of(chunk.actions[0], {}), chunk.actions[0])

    first = [policy.act_chunk(history.observations(), deterministic=False).actions for _ in range(2)]
    assert not np.array_equal(first[0], first[1])
    policy.reset()
    again = [policy.act_chunk(history.observations(), deterministic=False).actions for _ in range(2)]
    assert all(np.array_equal(a, b) for a, b in zip(first, again))

    missing = [{k: v for k, v in obs.items() if k != "object_state"} for obs in history.observations()]
    with pytest.raises(PolicyError, match="object_state"):
        policy.act_chunk(missing)
    small = [{**obs, "images/front": np.zeros((16, 16, 3), np.uint8)} for obs in history.observations()]
    with pytest.raises(PolicyError, match=r"'images/front' has shape \(16, 16, 3\), expected \(20, 20, 3\)"):
        policy.act_chunk(small)
    floats = [{**obs, "images/front": np.zeros((20, 20, 3), np.float32)} for obs in history.observations()]
    with pytest.raises(PolicyError, match="images/front.*uint8"):
        policy.act_chunk(floats)
    with pytest.raises(PolicyError, match="state"):
        policy.act_chunk([{**obs, "state": np.zeros(4)} for obs in history.observations()])


# ----- learning --------------------------------------------------------------------------------------------------


def test_a_few_hundred_steps_learn_a_state_conditioned_chunk():
    config = DiffusionConfig(obs_horizon=1, prediction_horizon=8, action_horizon=4, down_dims=(32, 64), groups=8,
                             step_embedding_dim=32, state_features=32, train_timesteps=50, inference_steps=10)
    spec = ObservationSpec.from_shapes({"state": ((2,), np.float32)})
    rng = np.random.default_rng(0)

    def targets(goals):  # move toward the goal, faster the farther it is, constant over the chunk
        return np.repeat((0.8 * goals)[:, None, :], config.prediction_horizon, axis=1).astype(np.float32)

    goals = rng.uniform(-1, 1, (512, 2)).astype(np.float32)
    actions = targets(goals)
    normalizer = Normalizer().fit({"state": goals, "action": actions.reshape(-1, 2)})
    policy = DiffusionPolicy.create(config, spec, 2, normalizer, seed=0)

    test_goals = rng.uniform(-0.9, 0.9, (64, 2)).astype(np.float32)
    test_obs = {"state": torch.from_numpy(test_goals)[:, None]}
    noise = torch.randn(64, config.prediction_horizon, 2, generator=torch.Generator().manual_seed(0))

    def error() -> float:
        return float(((policy.sample(test_obs, noise).numpy() - targets(test_goals)) ** 2).mean())

    untrained = error()
    optimizer = torch.optim.Adam(policy.model.parameters(), lr=2e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(400):
        index = torch.randint(0, len(goals), (64,), generator=generator)
        batch = {"obs": {"state": torch.from_numpy(goals)[index][:, None]}, "actions": torch.from_numpy(actions)[index]}
        loss = policy.loss(batch, generator)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    trained = error()
    assert trained < 0.05 * untrained and trained < 0.02, (untrained, trained)
