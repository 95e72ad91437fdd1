"""One-step student of a DDIM Diffusion Policy: (initial noise, observations) -> action chunk in ONE denoiser call.

The student is the teacher's network (observation encoder + conditional U-Net, the same `DiffusionConfig`),
initialised from the teacher's weights. Sampling is a single DDIM jump with eta 0 from the teacher's first DDIM
timestep straight to 0: the student's U-Net output at that timestep gives the clean chunk (for epsilon prediction
x0 = (x - sqrt(1 - abar) eps) / sqrt(abar)). Undistilled, that is the teacher's own first clean-chunk estimate;
distillation (`distillation_loss`, `robot-rl distill`) trains it to equal the teacher's full DDIM chunk from the
same noise. The map is deterministic, so the same noise and observations give the same chunk: what a noise-space RL
head steers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from robot_rl.policies import diffusion
from robot_rl.policies.base import ActionChunk, Observation, PolicyBase, PolicyError
from robot_rl.policies.checkpoint import POLICY_CONFIG, save_policy
from robot_rl.policies.diffusion import ACTION_KEY, DiffusionPolicy, executed_chunks
from robot_rl.policies.normalizer import Normalizer
from robot_rl.policies.registry import ONE_STEP

KIND = ONE_STEP
TEACHER_KEY = "teacher"
RESERVED_DESCRIPTION_KEYS = (*diffusion.RESERVED_DESCRIPTION_KEYS, TEACHER_KEY)
# a teacher chunk element at least this close to +-1 (normalised) was clipped there (float error of the round trip
# through the action range)
BOUND = 1.0 - 1e-5


class OneStepPolicy(PolicyBase):
    """A one-step distilled Diffusion Policy behind the common `Policy` interface (one denoiser call per chunk).

    `act_chunk(deterministic=True)` starts from zero noise, as a `DiffusionPolicy` does (so the student's
    deterministic chunk imitates the teacher's); `deterministic=False` draws noise from a generator owned by the
    policy, seeded with the seed and re-seeded by `reset()`.
    """

    kind = KIND

    def __init__(self, network: DiffusionPolicy, *, teacher: str | None = None):
        if not isinstance(network, DiffusionPolicy):
            raise PolicyError(f"a one-step policy wraps a diffusion network, got {type(network).__name__}")
        self.network = network
        self.teacher = teacher
        self.config = network.config
        self.observation_spec = network.observation_spec
        self.observation_keys = network.observation_keys
        self.action_dim = network.action_dim
        self.obs_horizon = network.obs_horizon
        self.chunk_length = network.chunk_length
        self.device = network.device
        self.seed = network.seed
        self.model = network.model
        self.model.eval()  # acting mode (centre crops); distillation_loss switches to training mode itself
        self.normalizer = network.normalizer

        self.timestep = int(network.sample_scheduler.timesteps[0])
        alpha_bar = float(network.sample_scheduler.alphas_cumprod[self.timestep])
        self._signal, self._noise_scale = math.sqrt(alpha_bar), math.sqrt(1.0 - alpha_bar)
        self._timestep_tensor = torch.tensor([self.timestep], device=self.device)
        self._chunk_shape = (self.config.prediction_horizon, self.action_dim)
        self._zero_noise = network._zero_noise
        self._generator = torch.Generator().manual_seed(self.seed)

    @classmethod
    def from_teacher(cls, teacher: DiffusionPolicy, seed: int = 0, *,
                     teacher_path: str | Path | None = None) -> OneStepPolicy:
        """A student with a copy of the teacher's network, weights and normaliser (the teacher is left untouched).
        `seed` seeds the stochastic acting noise (drawn as a teacher of the same seed draws it); `teacher_path`
        (its policy folder) is recorded in the student's policy.json."""
        if not isinstance(teacher, DiffusionPolicy):
            raise PolicyError(f"the teacher must be a diffusion policy, got a {getattr(teacher, 'kind', '?')} policy")
        normalizer = Normalizer.from_tensors(teacher.normalizer.to_tensors())
        network = DiffusionPolicy.create(teacher.config, teacher.observation_spec, teacher.action_dim, normalizer,
                                         device=teacher.device, seed=seed)
        network.model.load_state_dict(teacher.model.state_dict())
        return cls(network, teacher=None if teacher_path is None else str(teacher_path))

    # ------------------------------------------------------------------------------------------------- the jump

    def _clean_chunk(self, noise: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """Normalised clean chunks (B, prediction_horizon, action_dim), unclipped, from the initial `noise` taken as
        the sample at the first DDIM timestep: one denoiser call, then DDIM's clean-sample estimate."""
        output = self.model.denoiser(noise, self._timestep_tensor.expand(noise.shape[0]), cond)
        prediction = self.config.prediction_type
        if prediction == "epsilon":
            return (noise - self._noise_scale * output) / self._signal
        if prediction == "sample":
            return output
        return self._signal * noise - self._noise_scale * output  # v_prediction

    def _noise(self, batch_size: int, noise: torch.Tensor | None, generator: torch.Generator | None) -> torch.Tensor:
        shape = (batch_size, *self._chunk_shape)
        if noise is None:
            noise_device = generator.device if generator is not None else self.device
            noise = torch.randn(shape, generator=generator, device=noise_device)
        elif tuple(noise.shape) != shape:
            raise PolicyError(f"noise has shape {tuple(noise.shape)}, expected {shape}")
        return noise.to(device=self.device, dtype=torch.float32)

    def sample(self, obs: Mapping[str, torch.Tensor], noise: torch.Tensor | None = None,
               generator: torch.Generator | None = None) -> torch.Tensor:
        """Chunks (B, prediction_horizon, action_dim) in [-1, 1] from `noise` (standard normal of that shape, from
        `generator`, when None) in one denoiser call; the same noise and observations give the same chunks."""
        # switching modes walks every module (~0.3 ms each way): a tenth of a one-step chunk, so only when needed
        was_training = self.model.training
        if was_training:
            self.model.eval()
        try:
            with torch.inference_mode():
                cond = self.network._encode(obs)
                clean = self._clean_chunk(self._noise(cond.shape[0], noise, generator), cond)
                if self.config.clip_sample:
                    clean = clean.clamp(-1.0, 1.0)
                return self.normalizer.unnormalize(ACTION_KEY, clean).clamp_(-1.0, 1.0)
        finally:
            if was_training:
                self.model.train()

    # ------------------------------------------------------------------------------------------------ distilling

    def distillation_loss(self, obs_batch: Mapping[str, torch.Tensor], teacher: DiffusionPolicy, *,
                          generator: torch.Generator | None = None, random_crop: bool = True,
                          zero_noise_rows: int = 0) -> torch.Tensor:
        """MSE between the student's one-step chunk and the teacher's DDIM chunk from the same noise, in normalised
        action space, on raw observations {key: (B, obs_horizon, ...)} on the policy's device.

        The noise (and, with `random_crop`, the student's image crops; the teacher sees the centre crop it acts on)
        come from `generator` or torch's global generator; the first `zero_noise_rows` rows start from zero noise,
        the noise both policies act from deterministically. With `clip_sample` the student's chunk is clipped to
        [-1, 1] when it acts, so where the teacher's chunk sits on a bound, overshooting that bound costs nothing;
        elsewhere the unclipped chunk is compared (clipping it would pass no gradient back from outside [-1, 1]).
        """
        batch_size = next(iter(obs_batch.values())).shape[0]
        noise = self._noise(batch_size, None, generator)
        noise[:zero_noise_rows] = 0.0
        with torch.no_grad():
            target = teacher.normalizer.normalize(ACTION_KEY, teacher.sample(obs_batch, noise))
        self.model.train(random_crop)  # train mode only changes the crop (GroupNorm keeps no running statistics)
        prediction = self._clean_chunk(noise, self.network._encode(obs_batch, generator))
        if self.config.clip_sample:
            prediction = torch.where(target >= BOUND, prediction.clamp(max=1.0),
                                     torch.where(target <= -BOUND, prediction.clamp(min=-1.0), prediction))
        return F.mse_loss(prediction, target)

    # ------------------------------------------------------------------------------------------- Policy protocol

    def reset(self) -> None:
        self._generator.manual_seed(self.seed)

    def act_chunk(self, history: Sequence[Observation], *, deterministic: bool = True) -> ActionChunk:
        noise = self._zero_noise if deterministic else torch.randn((1, *self._chunk_shape), generator=self._generator)
        return self.network.executed_chunk(self.sample(self.network.history_tensors(history), noise))

    @property
    def noise_shape(self) -> tuple[int, int]:
        """Shape of one chunk's initial noise: (prediction_horizon, action_dim)."""
        return tuple(self._chunk_shape)

    def chunk_from_noise(self, history: Sequence[Observation], noise: np.ndarray) -> ActionChunk:
        """The executed chunk the student denoises from `noise` of `noise_shape` in one call (deterministic)."""
        noise = torch.from_numpy(np.asarray(noise, dtype=np.float32).reshape(1, *self._chunk_shape))
        return self.network.executed_chunk(self.sample(self.network.history_tensors(history), noise))

    def chunks_from_noises(self, history: Sequence[Observation], noises: np.ndarray) -> np.ndarray:
        """Executed chunks (K, chunk_length, action_dim) the student denoises from K noises at one history, in one
        batched call."""
        return executed_chunks(self, self.network.history_tensors(history), noises)

    def learner_action_of(self, executed: np.ndarray, info: Mapping[str, np.ndarray]) -> np.ndarray | None:
        return np.asarray(executed, dtype=np.float32)

    # ------------------------------------------------------------------------------------------------------ files

    def state_tensors(self) -> dict[str, torch.Tensor]:
        """Weights and normaliser bounds, named as a diffusion policy names them."""
        return self.network.state_tensors()

    def description(self) -> dict[str, Any]:
        """The policy.json content that rebuilds this policy (without format, version and kind)."""
        return {**self.network.description(), TEACHER_KEY: self.teacher}

    def save(self, directory: str | Path, extra: Mapping[str, Any] | None = None, *, overwrite: bool = False) -> Path:
        """Write policy.json and model.safetensors into `directory`; `extra` (training facts) goes into policy.json."""
        return save_policy(directory, KIND, self.description(), self.state_tensors(), extra,
                           RESERVED_DESCRIPTION_KEYS, overwrite=overwrite)


def teacher_from_files(description: Mapping[str, Any], tensors: Mapping[str, torch.Tensor],
                       device: str) -> DiffusionPolicy:
    """The diffusion policy of a policy folder's (description, tensors), to distil; PolicyError for another kind."""
    if description.get("kind") != diffusion.KIND:
        raise PolicyError(f"a {description.get('kind')} policy; the teacher must be a diffusion policy")
    return diffusion.policy_from_files(description, tensors, device)


def policy_from_files(description: Mapping[str, Any], tensors: Mapping[str, torch.Tensor],
                      device: str) -> OneStepPolicy:
    """The policy saved by `OneStepPolicy.save` (what `checkpoint.load_policy` calls); PolicyError names the file
    and what does not match."""
    teacher = description.get(TEACHER_KEY)
    if teacher is not None and not isinstance(teacher, str):
        raise PolicyError(f"{POLICY_CONFIG}: {TEACHER_KEY}={teacher!r} must be a path or null")
    return OneStepPolicy(diffusion.policy_from_files(description, tensors, device), teacher=teacher)
