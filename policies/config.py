"""Configs of the torch policy kinds, importable without torch (they are the `--help` of `robot-rl train-bc` and
`robot-rl distill`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from robot_rl.policies.base import PolicyError, as_json_ready

BETA_SCHEDULES = ("linear", "scaled_linear", "squaredcos_cap_v2")
PREDICTION_TYPES = ("epsilon", "sample", "v_prediction")
MAY_BE_ZERO = ("middle_blocks",)


@dataclasses.dataclass(frozen=True)
class DiffusionConfig:
    """Diffusion Policy architecture and noise schedule (the defaults are sized for a CPU actor)."""

    obs_horizon: int = 2
    """Past observations (the newest included) the policy conditions on."""
    prediction_horizon: int = 16
    """Actions in one denoised chunk; it starts at the oldest observation of the history."""
    action_horizon: int = 8
    """Actions of a chunk executed, from the one at the newest observation on (the rest is context)."""
    down_dims: tuple[int, ...] = (64, 128, 256)
    """Channel widths of the U-Net levels; each level after the first halves the time axis (Diffusion Policy: 256
    512 1024)."""
    middle_blocks: int = 0
    """Residual blocks between the down and the up path, at the lowest resolution (Diffusion Policy: 2); each costs
    the actor about as much as the whole deepest level."""
    kernel_size: int = 5
    """Temporal kernel size of the U-Net convolutions (odd)."""
    groups: int = 8
    """GroupNorm groups in the U-Net and the image encoders (must divide every width)."""
    step_embedding_dim: int = 64
    """Size of the diffusion-step embedding (sinusoidal, then an MLP)."""
    image_channels: tuple[int, ...] = (16, 32, 64)
    """Channel widths of each camera's conv encoder; each stage halves the image (32 64 128 costs a CPU twice the
    time per training step at 64 px)."""
    image_features: int = 64
    """Features per camera per observation (spatial softmax keypoints, then a linear layer)."""
    crop_fraction: float = 0.95
    """Image crop side as a fraction of the image side: a random crop in training, the centre crop when acting
    (Diffusion Policy crops 0.9 of 84-240 px images; with 64 px images PickCube succeeded in 98 of 100 held-out
    episodes at 0.95 against 89 at 0.9, same seed)."""
    state_features: int = 64
    """Features of the MLP over the concatenated, normalised observation vectors, per observation."""
    train_timesteps: int = 100
    """Diffusion steps of the DDPM training schedule."""
    inference_steps: int = 5
    """DDIM denoising steps per chunk when acting (fewer: faster, coarser). 5, not Diffusion Policy's 10: on three
    PickCube pixel BC policies 5 steps succeeded in 90, 96, 90 % of 100 episodes where 10 gave 88, 90, 87 %, in half
    the time."""
    beta_schedule: str = "squaredcos_cap_v2"
    """Noise schedule: linear, scaled_linear or squaredcos_cap_v2."""
    prediction_type: str = "epsilon"
    """What the U-Net predicts: epsilon (the noise), sample (the clean chunk) or v_prediction."""
    clip_sample: bool = True
    """Clip the predicted clean chunk to [-1, 1] (normalised) at each DDIM step."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            minimum = 0 if field.name in MAY_BE_ZERO else 1
            if field.type == "tuple[int, ...]":
                if isinstance(value, list):
                    value = tuple(value)
                    object.__setattr__(self, field.name, value)
                if not isinstance(value, tuple) or not value or not all(is_int(v) and v >= 1 for v in value):
                    raise PolicyError(f"{field.name}={value!r} must be a non-empty list of positive integers")
            elif field.type == "int" and not (is_int(value) and value >= minimum):
                raise PolicyError(f"{field.name}={value!r} must be an integer >= {minimum}")
            elif field.type == "float" and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise PolicyError(f"{field.name}={value!r} must be a number")
            elif field.type == "bool" and not isinstance(value, bool):
                raise PolicyError(f"{field.name}={value!r} must be true or false")
            elif field.type == "str" and not isinstance(value, str):
                raise PolicyError(f"{field.name}={value!r} must be a string")
        if self.obs_horizon - 1 + self.action_horizon > self.prediction_horizon:
            raise PolicyError(f"obs_horizon - 1 + action_horizon = {self.obs_horizon - 1 + self.action_horizon} "
                              f"exceeds prediction_horizon={self.prediction_horizon}")
        halvings = 2 ** (len(self.down_dims) - 1)
        if self.prediction_horizon % halvings:
            raise PolicyError(f"prediction_horizon={self.prediction_horizon} must be divisible by {halvings} "
                              f"(2 ** (len(down_dims) - 1) for down_dims={list(self.down_dims)})")
        if self.kernel_size % 2 == 0:
            raise PolicyError(f"kernel_size={self.kernel_size} must be odd")
        for name in ("down_dims", "image_channels"):
            if any(width % self.groups for width in getattr(self, name)):
                raise PolicyError(f"groups={self.groups} must divide every {name} width {list(getattr(self, name))}")
        if self.step_embedding_dim % 2:
            raise PolicyError(f"step_embedding_dim={self.step_embedding_dim} must be even")
        if not 0.0 < self.crop_fraction <= 1.0:
            raise PolicyError(f"crop_fraction={self.crop_fraction} must be in (0, 1]")
        if self.inference_steps > self.train_timesteps:
            raise PolicyError(f"inference_steps={self.inference_steps} exceeds train_timesteps={self.train_timesteps}")
        if self.beta_schedule not in BETA_SCHEDULES:
            raise PolicyError(f"beta_schedule={self.beta_schedule!r} must be one of {', '.join(BETA_SCHEDULES)}")
        if self.prediction_type not in PREDICTION_TYPES:
            raise PolicyError(f"prediction_type={self.prediction_type!r} must be one of {', '.join(PREDICTION_TYPES)}")

    def to_json(self) -> dict[str, Any]:
        return as_json_ready(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DiffusionConfig:
        """The config written by `to_json`; PolicyError names unknown keys (missing keys take their defaults)."""
        if not isinstance(data, Mapping):
            raise PolicyError(f"a diffusion config must be a JSON object, got {type(data).__name__}")
        names = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise PolicyError(f"unknown diffusion config keys {unknown}")
        return cls(**{key: tuple(value) if isinstance(value, list) else value for key, value in data.items()})


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
