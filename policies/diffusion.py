"""Diffusion Policy (Chi et al. 2023) in torch, sized for a CPU actor: observation history in, an action chunk out.

A small conv net per camera (GroupNorm, spatial softmax) and an MLP over the normalised observation vectors encode
`obs_horizon` observations into one conditioning vector. A 1-D U-Net over the action chunk, FiLM-conditioned on that
vector and the diffusion step, predicts the noise (DDPM training); DDIM with eta 0 samples a chunk, so the same
initial noise always gives the same chunk (what a noise-space RL head steers).

Actions and observation vectors are min-max normalised (:mod:`robot_rl.policies.normalizer`); images go in as uint8
(..., H, W, 3), randomly cropped in training mode and centre-cropped in eval mode. Nothing is ever downloaded.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from robot_rl.policies.base import ActionChunk, Observation, PolicyBase, PolicyError, stack_history
from robot_rl.policies.checkpoint import POLICY_CONFIG, POLICY_WEIGHTS, save_policy
from robot_rl.policies.config import DiffusionConfig, is_int
from robot_rl.policies.normalizer import Normalizer
from robot_rl.policies.registry import DIFFUSION
from robot_rl.core.types import ArraySpec, ObservationSpec

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the schedulers are built from arguments; nothing is ever fetched
from diffusers import DDIMScheduler, DDPMScheduler  # noqa: E402
from diffusers.models.embeddings import Timesteps  # noqa: E402

KIND = DIFFUSION
ACTION_KEY = "action"
RESERVED_DESCRIPTION_KEYS = ("format", "version", "kind", "config", "observation_spec", "action_dim")


def _conv_out(size: int) -> int:
    """Side after a 3x3 convolution with stride 2 and padding 1."""
    return (size - 1) // 2 + 1


class SpatialSoftmax(nn.Module):
    """(N, C, h, w) feature maps -> (N, 2C): the expected (x, y) in [-1, 1] of each channel's spatial softmax."""

    def __init__(self, height: int, width: int):
        super().__init__()
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, height), torch.linspace(-1, 1, width), indexing="ij")
        self.register_buffer("grid", torch.stack([xs.reshape(-1), ys.reshape(-1)], dim=-1), persistent=False)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        attention = torch.softmax(features.flatten(2), dim=-1)
        return torch.matmul(attention, self.grid).flatten(1)


class ImageEncoder(nn.Module):
    """One camera's conv net: uint8 (N, H, W, C) -> (N, features); random crop in training mode, centre crop else."""

    def __init__(self, shape: tuple[int, int, int], config: DiffusionConfig):
        super().__init__()
        height, width, channels = shape
        self.crop_height = min(height, max(1, int(round(config.crop_fraction * height))))
        self.crop_width = min(width, max(1, int(round(config.crop_fraction * width))))
        stages: list[nn.Module] = []
        previous = channels
        out_height, out_width = self.crop_height, self.crop_width
        for index, width_out in enumerate(config.image_channels):
            down = [nn.Conv2d(previous, width_out, 3, stride=2, padding=1), nn.GroupNorm(config.groups, width_out),
                    nn.ReLU()]
            if index == 0:
                stages.append(nn.Sequential(*down))
            else:
                stages.append(ResidualConvStage(nn.Sequential(*down), width_out, config.groups))
            previous = width_out
            out_height, out_width = _conv_out(out_height), _conv_out(out_width)
        self.stages = nn.Sequential(*stages)
        self.keypoints = SpatialSoftmax(out_height, out_width)
        self.project = nn.Linear(2 * previous, config.image_features)

    def crop(self, images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """(N, H, W, C) -> (N, crop_height, crop_width, C): per-image random offsets in training mode, else centred."""
        count, height, width, _ = images.shape
        if self.training:
            device = images.device
            top = torch.randint(0, height - self.crop_height + 1, (count, 1, 1), device=device, generator=generator)
            left = torch.randint(0, width - self.crop_width + 1, (count, 1, 1), device=device, generator=generator)
            rows = top + torch.arange(self.crop_height, device=device).view(1, -1, 1)
            cols = left + torch.arange(self.crop_width, device=device).view(1, 1, -1)
            return images[torch.arange(count, device=device).view(-1, 1, 1), rows, cols]
        top, left = (height - self.crop_height) // 2, (width - self.crop_width) // 2
        return images[:, top:top + self.crop_height, left:left + self.crop_width]

    def forward(self, images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        pixels = self.crop(images, generator).permute(0, 3, 1, 2).to(torch.float32) * (2.0 / 255.0) - 1.0
        return self.project(self.keypoints(self.stages(pixels)))


class ResidualConvStage(nn.Module):
    """A stride-2 conv block followed by a residual 3x3 conv block."""

    def __init__(self, down: nn.Module, channels: int, groups: int):
        super().__init__()
        self.down = down
        self.refine = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.GroupNorm(groups, channels),
                                    nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.down(x)
        return x + self.refine(x)


class ObservationEncoder(nn.Module):
    """`obs_horizon` observations -> one conditioning vector: per-camera conv features and vector-MLP features of
    every step, concatenated."""

    def __init__(self, observation_spec: ObservationSpec, config: DiffusionConfig):
        super().__init__()
        self.image_keys = observation_spec.image_keys
        self.vector_keys = observation_spec.vector_keys
        self.vector_dim = observation_spec.vector_dim
        self.cameras = nn.ModuleList(ImageEncoder(observation_spec[key].shape, config) for key in self.image_keys)
        self.vectors = (nn.Sequential(nn.Linear(self.vector_dim, config.state_features), nn.Mish(),
                                      nn.Linear(config.state_features, config.state_features))
                        if self.vector_dim else None)
        per_step = len(self.image_keys) * config.image_features + (config.state_features if self.vector_dim else 0)
        self.output_dim = config.obs_horizon * per_step

    def forward(self, images: Mapping[str, torch.Tensor], vectors: torch.Tensor | None,
                generator: torch.Generator | None = None) -> torch.Tensor:
        """images: {key: uint8 (B, T, H, W, C)}; vectors: normalised (B, T, vector_dim) or None -> (B, output_dim)."""
        features = []
        for key, camera in zip(self.image_keys, self.cameras):
            frames = images[key]
            batch, steps = frames.shape[:2]
            features.append(camera(frames.reshape(batch * steps, *frames.shape[2:]), generator).view(batch, steps, -1))
        if self.vectors is not None:
            features.append(self.vectors(vectors))
        return torch.cat(features, dim=-1).flatten(1)


# ------------------------------------------------------------------------------------------------------- 1-D U-Net


SMALL_BATCH = 8


class ChunkConv1d(nn.Conv1d):
    """nn.Conv1d (same parameters) that runs small CPU batches as one im2col matmul: at batch 1 over a 16-step chunk
    torch's conv1d path is several times slower than the matmul, which is what bounds a CPU actor's latency."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > SMALL_BATCH or x.device.type != "cpu":
            return super().forward(x)
        batch, channels, _ = x.shape
        (kernel,), (stride,), (padding,) = self.kernel_size, self.stride, self.padding
        if padding:
            x = F.pad(x, (padding, padding))
        # (B, C, L', k) -> (B * L', C * k), matching the weight's (out, C, k) layout
        columns = x.unfold(2, kernel, stride).transpose(1, 2).reshape(-1, channels * kernel)
        weight = self.weight.view(self.out_channels, -1).t()
        out = torch.mm(columns, weight) if self.bias is None else torch.addmm(self.bias, columns, weight)
        return out.view(batch, -1, self.out_channels).transpose(1, 2)


class Conv1dBlock(nn.Module):
    """Conv1d (same length) -> GroupNorm -> Mish."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, groups: int):
        super().__init__()
        self.conv = ChunkConv1d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.norm = nn.GroupNorm(groups, out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        norm = self.norm
        return F.mish(F.group_norm(self.conv(x), norm.num_groups, norm.weight, norm.bias, norm.eps))


class FiLMResidualBlock(nn.Module):
    """Two conv blocks with a per-channel scale and bias (FiLM) between them, plus a residual connection."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, groups: int):
        super().__init__()
        self.out_channels = out_channels
        self.first = Conv1dBlock(in_channels, out_channels, kernel_size, groups)
        self.second = Conv1dBlock(out_channels, out_channels, kernel_size, groups)
        self.skip = ChunkConv1d(in_channels, out_channels, 1) if in_channels != out_channels else nn.Identity()

    def forward(self, x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """x: (B, C_in, L); scale, bias: (B, C_out, 1)."""
        return self.second(torch.addcmul(bias, self.first(x), scale)) + self.skip(x)


class ConditionalUnet1D(nn.Module):
    """Noise predictor over an action chunk: (B, L, action_dim), step (B,), global cond (B, G) -> (B, L, action_dim).

    Every residual block is FiLM-modulated by a linear map of Mish([step embedding, global cond]); that map is split
    into a step part and a global part so sampling computes the global part once per chunk (`condition`), not once
    per denoising step."""

    def __init__(self, action_dim: int, global_cond_dim: int, config: DiffusionConfig):
        super().__init__()
        kernel, groups, dims = config.kernel_size, config.groups, config.down_dims
        step_dim = config.step_embedding_dim
        self.step_embedding = nn.Sequential(
            Timesteps(step_dim, flip_sin_to_cos=True, downscale_freq_shift=0),
            nn.Linear(step_dim, 4 * step_dim), nn.Mish(), nn.Linear(4 * step_dim, step_dim))

        def block(cin: int, cout: int) -> FiLMResidualBlock:
            return FiLMResidualBlock(cin, cout, kernel, groups)

        self.down = nn.ModuleList()
        previous = action_dim
        for level, width in enumerate(dims):
            last = level == len(dims) - 1
            self.down.append(nn.ModuleList([
                block(previous, width), block(width, width),
                nn.Identity() if last else ChunkConv1d(width, width, 3, stride=2, padding=1)]))
            previous = width
        self.middle = nn.ModuleList(block(dims[-1], dims[-1]) for _ in range(config.middle_blocks))
        # upsampling repeats each step twice; the following blocks' convolutions learn the interpolation
        self.up = nn.ModuleList(nn.ModuleList([block(dims[level + 1] + dims[level], dims[level]),
                                               block(dims[level], dims[level])])
                                for level in reversed(range(len(dims) - 1)))
        self.head = nn.Sequential(Conv1dBlock(dims[0], dims[0], kernel, groups), ChunkConv1d(dims[0], action_dim, 1))
        blocks = [*(block for level in self.down for block in level[:2]), *self.middle,
                  *(block for level in self.up for block in level)]
        # FiLM parameters of all blocks side by side, in the order the blocks run: scale, bias, scale, bias, ...
        self._film_sizes = [size for b in blocks for size in (b.out_channels, b.out_channels)]
        total = sum(self._film_sizes)
        self.film_step = nn.Linear(step_dim, total)
        self.film_global = nn.Linear(global_cond_dim, total, bias=False)
        # scales are 1 + the linear output, so a freshly initialised block starts close to identity modulation
        offset = torch.cat([torch.full((size,), 1.0 - index % 2) for index, size in enumerate(self._film_sizes)])
        self.register_buffer("film_offset", offset, persistent=False)

    def condition(self, global_cond: torch.Tensor) -> torch.Tensor:
        """The step-independent part of every block's FiLM parameters, (B, sum of 2 * C_out); sampling computes it
        once per chunk."""
        return torch.addmm(self.film_offset, F.mish(global_cond), self.film_global.weight.t())

    def forward(self, sample: torch.Tensor, timesteps: torch.Tensor, global_cond: torch.Tensor | None = None, *,
                conditioned: torch.Tensor | None = None) -> torch.Tensor:
        """Predict from `global_cond` (B, G), or from `condition(global_cond)` computed beforehand."""
        if conditioned is None:
            conditioned = self.condition(global_cond)
        step = F.mish(self.step_embedding(timesteps).to(conditioned.dtype))
        films = iter((self.film_step(step) + conditioned).unsqueeze(-1).split(self._film_sizes, dim=1))
        x = sample.transpose(1, 2)
        skips = []
        for first, second, downsample in self.down:
            x = second(first(x, next(films), next(films)), next(films), next(films))
            skips.append(x)
            x = downsample(x)
        for block in self.middle:
            x = block(x, next(films), next(films))
        for (first, second), skip in zip(self.up, reversed(skips[:-1])):
            x = torch.cat([x.repeat_interleave(2, dim=-1), skip], dim=1)
            x = second(first(x, next(films), next(films)), next(films), next(films))
        return self.head(x).transpose(1, 2)


class DiffusionModel(nn.Module):
    """Everything a Diffusion Policy trains: the observation encoder and the conditional U-Net."""

    def __init__(self, config: DiffusionConfig, observation_spec: ObservationSpec, action_dim: int):
        super().__init__()
        self.encoder = ObservationEncoder(observation_spec, config)
        self.denoiser = ConditionalUnet1D(action_dim, self.encoder.output_dim, config)


# ---------------------------------------------------------------------------------------------------------- policy


class DiffusionPolicy(PolicyBase):
    """A Diffusion Policy behind the common `Policy` interface; its learner action is the executed action itself.

    `act_chunk(deterministic=True)` starts DDIM from zero noise, the mode of the noise distribution, so the same
    history gives the same chunk whatever the seed (a fixed random draw made success depend on the draw: 95/93/67 %
    on three PickCube BC seeds with DDIM-10 where zero noise gave 88/90/87 %); `deterministic=False` draws the noise
    from a generator owned by the policy, seeded with `seed` and re-seeded by `reset()`, so a run of episodes is
    reproducible.
    """

    kind = KIND

    def __init__(self, config: DiffusionConfig, observation_spec: ObservationSpec, action_dim: int,
                 normalizer: Normalizer, *, device: str = "cpu", seed: int = 0):
        self.config = config
        self.observation_spec = ObservationSpec.coerce(observation_spec)
        self.action_dim = int(action_dim)
        if self.action_dim < 1:
            raise PolicyError(f"action_dim={action_dim} must be >= 1")
        if not self.observation_spec.keys:
            raise PolicyError("the observation spec is empty; a diffusion policy needs a camera or a vector")
        self.normalizer = normalizer
        self._check_normalizer()
        self.observation_keys = self.observation_spec.keys
        self.obs_horizon = config.obs_horizon
        self.chunk_length = config.action_horizon
        self.device = str(device)
        self.seed = int(seed)

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.model = DiffusionModel(config, self.observation_spec, self.action_dim)
        self.model.to(self.device).eval()  # acting mode (centre crops); `loss` switches to training mode itself

        schedule = dict(num_train_timesteps=config.train_timesteps, beta_schedule=config.beta_schedule,
                        clip_sample=config.clip_sample, prediction_type=config.prediction_type)
        self.train_scheduler = DDPMScheduler(**schedule)
        self.sample_scheduler = DDIMScheduler(**schedule)
        self.set_inference_steps(config.inference_steps)

        self._chunk_shape = (config.prediction_horizon, self.action_dim)
        self._zero_noise = torch.zeros((1, *self._chunk_shape), device=self.device)
        self._generator = torch.Generator().manual_seed(self.seed)

    @classmethod
    def create(cls, config: DiffusionConfig, observation_spec: ObservationSpec, action_dim: int,
               normalizer: Normalizer, device: str = "cpu", seed: int = 0) -> DiffusionPolicy:
        """A freshly initialised policy (weights drawn from `seed`, without touching torch's global generator)."""
        return cls(config, observation_spec, action_dim, normalizer, device=device, seed=seed)

    def set_inference_steps(self, steps: int) -> None:
        """Sample with `steps` DDIM steps from now on (the weights are unchanged; `config.inference_steps` follows,
        so a policy saved afterwards samples the same way)."""
        if not 1 <= int(steps) <= self.config.train_timesteps:
            raise PolicyError(f"inference_steps={steps} must be in [1, {self.config.train_timesteps}] (the DDPM "
                              "training steps)")
        self.config = dataclasses.replace(self.config, inference_steps=int(steps))
        self.sample_scheduler.set_timesteps(self.config.inference_steps)
        self._timesteps = [int(t) for t in self.sample_scheduler.timesteps]
        self._timestep_tensors = {t: torch.tensor([t], device=self.device) for t in self._timesteps}

    def _check_normalizer(self) -> None:
        wanted = {key: int(np.prod(self.observation_spec[key].shape)) for key in self.observation_spec.vector_keys}
        wanted[ACTION_KEY] = self.action_dim
        for key, dim in wanted.items():
            if key not in self.normalizer:
                raise PolicyError(f"the normalizer has no {key!r} (fit it on the dataset's {key} values)")
            if self.normalizer.dim(key) != dim:
                raise PolicyError(f"the normalizer's {key!r} has {self.normalizer.dim(key)} dims, the policy {dim}")

    # ----------------------------------------------------------------------------------------------- observations

    def _check_observation(self, obs: Mapping[str, Any], *, batched: bool) -> None:
        """PolicyError naming the first key that is missing or has the wrong shape / dtype: `obs` holds (B,
        obs_horizon, ...) tensors when `batched`, else the (obs_horizon, ...) arrays of one stacked history."""
        for key in self.observation_keys:
            spec = self.observation_spec[key]
            if key not in obs:
                raise PolicyError(f"observation has no {key!r} (the policy reads {list(self.observation_keys)})")
            value = obs[key]
            shape = tuple(value.shape)
            if batched:
                if len(shape) < 2 or shape[1] != self.obs_horizon or shape[2:] != spec.shape:
                    raise PolicyError(f"observation {key!r} has shape {shape}, expected (batch, {self.obs_horizon}) + "
                                      f"{spec.shape}")
            elif shape[1:] != spec.shape:
                raise PolicyError(f"observation {key!r} has shape {shape[1:]}, expected {spec.shape}")
            if spec.is_image and str(value.dtype).rsplit(".", 1)[-1] != "uint8":
                raise PolicyError(f"observation {key!r} is {str(value.dtype).rsplit('.', 1)[-1]}, expected uint8 "
                                  f"{spec.shape} images")

    def _encode(self, obs: Mapping[str, torch.Tensor], generator: torch.Generator | None = None) -> torch.Tensor:
        """Raw observations {key: (B, obs_horizon, ...)} -> global conditioning (B, G)."""
        self._check_observation(obs, batched=True)
        images = {key: obs[key] for key in self.observation_spec.image_keys}
        vectors = None
        if self.observation_spec.vector_keys:
            parts = []
            for key in self.observation_spec.vector_keys:
                value = obs[key]
                value = value.reshape(*value.shape[:2], -1).to(torch.float32)
                parts.append(self.normalizer.normalize(key, value))
            vectors = torch.cat(parts, dim=-1)
        return self.model.encoder(images, vectors, generator)

    # ------------------------------------------------------------------------------------------------- training

    def loss(self, batch: Mapping[str, Any], generator: torch.Generator | None = None) -> torch.Tensor:
        """Denoising loss of a batch {"obs": {key: (B, obs_horizon, ...)}, "actions": (B, prediction_horizon,
        action_dim)} of raw values on the policy's device (puts the model in training mode: random crops). Crops,
        timesteps and noise come from `generator` (on the policy's device) or torch's global generator."""
        actions = batch["actions"]
        expected = (self.config.prediction_horizon, self.action_dim)
        if actions.ndim != 3 or tuple(actions.shape[1:]) != expected:
            raise PolicyError(f"actions have shape {tuple(actions.shape)}, expected (batch, {expected[0]}, "
                              f"{expected[1]})")
        self.model.train()
        clean = self.normalizer.normalize(ACTION_KEY, actions.to(torch.float32))
        cond = self._encode(batch["obs"], generator)
        batch_size = clean.shape[0]
        noise = torch.randn(clean.shape, device=clean.device, generator=generator)
        timesteps = torch.randint(0, self.config.train_timesteps, (batch_size,), device=clean.device,
                                  generator=generator)
        noisy = self.train_scheduler.add_noise(clean, noise, timesteps)
        prediction = self.model.denoiser(noisy, timesteps, cond)
        if self.config.prediction_type == "epsilon":
            target = noise
        elif self.config.prediction_type == "sample":
            target = clean
        else:
            target = self.train_scheduler.get_velocity(clean, noise, timesteps)
        return F.mse_loss(prediction, target)

    # ------------------------------------------------------------------------------------------------- sampling

    def sample(self, obs: Mapping[str, torch.Tensor], noise: torch.Tensor | None = None,
               generator: torch.Generator | None = None) -> torch.Tensor:
        """DDIM chunks (B, prediction_horizon, action_dim) in [-1, 1] from `noise` (standard normal of that shape,
        from `generator`, when None); eta 0, so the same noise and observations give the same chunks."""
        # switching modes walks every module (~0.3 ms each way), so only when the model is in training mode
        was_training = self.model.training
        if was_training:
            self.model.eval()
        try:
            with torch.inference_mode():
                conditioned = self.model.denoiser.condition(self._encode(obs))
                batch_size = conditioned.shape[0]
                shape = (batch_size, *self._chunk_shape)
                if noise is None:
                    noise_device = generator.device if generator is not None else self.device
                    noise = torch.randn(shape, generator=generator, device=noise_device)
                elif tuple(noise.shape) != shape:
                    raise PolicyError(f"noise has shape {tuple(noise.shape)}, expected {shape}")
                x = noise.to(device=self.device, dtype=torch.float32)
                denoiser, scheduler = self.model.denoiser, self.sample_scheduler
                for t in self._timesteps:
                    output = denoiser(x, self._timestep_tensors[t].expand(batch_size), conditioned=conditioned)
                    x = scheduler.step(output, t, x, eta=0.0, return_dict=False)[0]
                return self.normalizer.unnormalize(ACTION_KEY, x).clamp_(-1.0, 1.0)
        finally:
            if was_training:
                self.model.train()

    # ------------------------------------------------------------------------------------------- Policy protocol

    def reset(self) -> None:
        self._generator.manual_seed(self.seed)

    def act_chunk(self, history: Sequence[Observation], *, deterministic: bool = True) -> ActionChunk:
        noise = self._zero_noise if deterministic else torch.randn((1, *self._chunk_shape), generator=self._generator)
        return self.executed_chunk(self.sample(self.history_tensors(history), noise))

    @property
    def noise_shape(self) -> tuple[int, int]:
        """Shape of one chunk's initial noise: (prediction_horizon, action_dim)."""
        return tuple(self._chunk_shape)

    def chunk_from_noise(self, history: Sequence[Observation], noise: np.ndarray) -> ActionChunk:
        """The executed chunk denoised (deterministic DDIM) from `noise` of `noise_shape`: what a noise-space head
        steers."""
        noise = torch.from_numpy(np.asarray(noise, dtype=np.float32).reshape(1, *self._chunk_shape))
        return self.executed_chunk(self.sample(self.history_tensors(history), noise))

    def chunks_from_noises(self, history: Sequence[Observation], noises: np.ndarray) -> np.ndarray:
        """Executed chunks (K, chunk_length, action_dim) denoised from K noises (K, *noise_shape) at one history,
        in one batched call (a noise-aliasing head's samples)."""
        return executed_chunks(self, self.history_tensors(history), noises)

    def history_tensors(self, history: Sequence[Observation]) -> dict[str, torch.Tensor]:
        """The last obs_horizon observations as a batch of one on the policy's device; PolicyError names a missing
        key or a wrong shape."""
        stacked = stack_history(history, self.observation_keys, self.obs_horizon)
        self._check_observation(stacked, batched=False)
        return {key: torch.from_numpy(np.ascontiguousarray(value)).unsqueeze(0).to(self.device)
                for key, value in stacked.items()}

    def executed_chunk(self, predicted: torch.Tensor) -> ActionChunk:
        """The executed part of a predicted (1, prediction_horizon, action_dim) chunk: from the newest observation's
        step on, action_horizon actions."""
        actions = executed_steps(self, predicted)[0].cpu().numpy()
        return ActionChunk(actions, learner_actions=actions, info={})

    def learner_action_of(self, executed: np.ndarray, info: Mapping[str, np.ndarray]) -> np.ndarray | None:
        return np.asarray(executed, dtype=np.float32)

    # ------------------------------------------------------------------------------------------------------ files

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Weights ("model.<name>") and normaliser bounds ("normalizer.<key>.min / .max"): what `save` writes."""
        tensors = {f"model.{name}": tensor for name, tensor in self.model.state_dict().items()}
        tensors.update(self.normalizer.to_tensors())
        return tensors

    def description(self) -> dict[str, Any]:
        """The policy.json content that rebuilds this policy (without format, version and kind)."""
        return {"config": self.config.to_json(),
                "observation_spec": {key: spec.to_json() for key, spec in self.observation_spec.entries},
                "action_dim": self.action_dim}

    def save(self, directory: str | Path, extra: Mapping[str, Any] | None = None, *, overwrite: bool = False) -> Path:
        """Write policy.json and model.safetensors into `directory`; `extra` (training facts) goes into policy.json."""
        return save_policy(directory, KIND, self.description(), self.state_tensors(), extra,
                           RESERVED_DESCRIPTION_KEYS, overwrite=overwrite)


def policy_from_files(description: Mapping[str, Any], tensors: Mapping[str, torch.Tensor],
                      device: str) -> DiffusionPolicy:
    """The policy saved by `DiffusionPolicy.save` (what `checkpoint.load_policy` calls); PolicyError names the file
    and what does not match."""
    try:
        config = DiffusionConfig.from_json(description["config"])
        spec_json = description["observation_spec"]
        if not isinstance(spec_json, Mapping):
            raise PolicyError("observation_spec must be a JSON object")
        observation_spec = ObservationSpec.from_shapes({key: ArraySpec.from_json(value)
                                                        for key, value in spec_json.items()})
        action_dim = description["action_dim"]
        if not is_int(action_dim):
            raise PolicyError(f"action_dim={action_dim!r} must be an integer")
    except KeyError as error:
        raise PolicyError(f"{POLICY_CONFIG} has no {error.args[0]!r}") from None
    except (PolicyError, TypeError, ValueError) as error:
        raise PolicyError(f"{POLICY_CONFIG}: {error}") from None
    try:
        normalizer = Normalizer.from_tensors(tensors)
    except PolicyError as error:
        raise PolicyError(f"{POLICY_WEIGHTS}: {error}") from None

    mismatch = f"{POLICY_WEIGHTS} does not fit {POLICY_CONFIG}"
    try:
        policy = DiffusionPolicy(config, observation_spec, action_dim, normalizer, device=device)
    except PolicyError as error:
        raise PolicyError(f"{mismatch}: {error}") from None
    unused = sorted(set(normalizer.keys) - {ACTION_KEY, *observation_spec.vector_keys})
    if unused:
        raise PolicyError(f"{mismatch}: normaliser entries for {unused}, which the observation_spec lacks")

    expected = {f"model.{name}": tensor for name, tensor in policy.model.state_dict().items()}
    saved = {name: tensor for name, tensor in tensors.items() if not name.startswith("normalizer.")}
    missing, unexpected = sorted(set(expected) - set(saved)), sorted(set(saved) - set(expected))
    if missing or unexpected:
        parts = [f"{label} {_first(names)}" for label, names in (("missing", missing), ("unexpected", unexpected))
                 if names]
        raise PolicyError(f"{mismatch}: {'; '.join(parts)}")
    wrong = [f"{name} {tuple(saved[name].shape)} (expected {tuple(tensor.shape)})"
             for name, tensor in expected.items() if saved[name].shape != tensor.shape]
    if wrong:
        raise PolicyError(f"{mismatch}: shapes differ for {_first(wrong)}")
    policy.model.load_state_dict({name[len("model."):]: tensor for name, tensor in saved.items()}, strict=True)
    return policy


def _first(names: Sequence[str], count: int = 4) -> str:
    """The first `count` names, and how many there are in all when that is more."""
    more = f", ... ({len(names)} in all)" if len(names) > count else ""
    return f"[{', '.join(names[:count])}{more}]"


def executed_steps(policy, predicted: torch.Tensor) -> torch.Tensor:
    """The executed part of predicted chunks (B, prediction_horizon, action_dim): from the newest observation's step
    on, `policy.chunk_length` actions."""
    start = policy.obs_horizon - 1
    return predicted[:, start:start + policy.chunk_length]


def executed_chunks(policy, history: Mapping[str, torch.Tensor], noises: np.ndarray) -> np.ndarray:
    """`policy.sample` of K noises at one history (a batch of one, as `history_tensors` gives it), cut to the
    executed steps: (K, chunk_length, action_dim)."""
    noises = np.asarray(noises, dtype=np.float32)
    noise = torch.from_numpy(noises.reshape(len(noises), *policy._chunk_shape))
    batch = {key: value.expand(len(noises), *value.shape[1:]) for key, value in history.items()}
    return executed_steps(policy, policy.sample(batch, noise)).cpu().numpy()
