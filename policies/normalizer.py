"""Min-max scaling of float vectors (observation vectors and actions) to [-1, 1], saved next to the weights.

Each key ("state", "object_state", ... and "action") has a per-dimension minimum and maximum fitted from data. A
dimension whose range is under 1e-6 is constant in the data: it maps to 0 and back to its constant, so a policy
cannot move what the demonstrations never moved.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from robot_rl.policies.base import PolicyError

PREFIX = "normalizer."
CONSTANT_RANGE = 1e-6


class Normalizer:
    """Per-dimension min-max scaling to [-1, 1] of named float vectors, on torch tensors of shape (..., d)."""

    def __init__(self, bounds: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None):
        self._bounds: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._cache: dict[tuple[str, torch.device, torch.dtype], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        for key, (low, high) in (bounds or {}).items():
            self._set(key, low, high)

    def _set(self, key: str, low: np.ndarray, high: np.ndarray) -> None:
        low = np.asarray(low, dtype=np.float32).reshape(-1)
        high = np.asarray(high, dtype=np.float32).reshape(-1)
        if low.shape != high.shape:
            raise PolicyError(f"normalizer {key!r}: min has {low.size} dims but max has {high.size}")
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise PolicyError(f"normalizer {key!r}: min / max are not finite")
        if np.any(high < low):
            raise PolicyError(f"normalizer {key!r}: max is below min in some dimension")
        self._bounds[key] = (low, high)
        self._cache = {k: v for k, v in self._cache.items() if k[0] != key}

    def fit(self, arrays: Mapping[str, np.ndarray]) -> Normalizer:
        """Set the bounds of each key from its data, (N, d) (or (N, ...), flattened per row); returns self."""
        for key, data in arrays.items():
            data = np.asarray(data, dtype=np.float64)
            if data.ndim < 1 or len(data) == 0:
                raise PolicyError(f"normalizer {key!r}: need at least one row of data, got shape {data.shape}")
            data = data.reshape(len(data), -1)
            if not np.all(np.isfinite(data)):
                raise PolicyError(f"normalizer {key!r}: the data holds non-finite values")
            self._set(key, data.min(axis=0), data.max(axis=0))
        return self

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self._bounds)

    def __contains__(self, key: object) -> bool:
        return key in self._bounds

    def dim(self, key: str) -> int:
        """Number of dimensions of `key`."""
        return int(self.bounds(key)[0].size)

    def bounds(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(min, max) of `key`, float32 (d,) each."""
        try:
            return self._bounds[key]
        except KeyError:
            raise PolicyError(f"the normalizer has no {key!r} (it has {list(self._bounds)})") from None

    def _coefficients(self, key: str, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(centre, half range, 1 / half range) on `like`'s device and dtype; constant dims get 0 for both."""
        cache_key = (key, like.device, like.dtype)
        if cache_key not in self._cache:
            low, high = (b.astype(np.float64) for b in self.bounds(key))
            half = (high - low) / 2
            constant = (high - low) < CONSTANT_RANGE
            half = np.where(constant, 0.0, half)
            inverse = np.where(constant, 0.0, 1.0 / np.where(constant, 1.0, half))
            # normal tensors even when first asked for under inference_mode, so later autograd may save them
            with torch.inference_mode(False):
                self._cache[cache_key] = tuple(torch.as_tensor(v, dtype=like.dtype, device=like.device)
                                               for v in ((low + high) / 2, half, inverse))
        return self._cache[cache_key]

    def _check(self, key: str, tensor: torch.Tensor) -> None:
        if tensor.shape[-1:] != (self.dim(key),):
            raise PolicyError(f"normalizer {key!r} expects (..., {self.dim(key)}), got shape {tuple(tensor.shape)}")

    def normalize(self, key: str, tensor: torch.Tensor) -> torch.Tensor:
        """Data range of `key` -> [-1, 1] (constant dims -> 0)."""
        self._check(key, tensor)
        centre, _, inverse = self._coefficients(key, tensor)
        return (tensor - centre) * inverse

    def unnormalize(self, key: str, tensor: torch.Tensor) -> torch.Tensor:
        """[-1, 1] -> data range of `key` (constant dims -> their constant)."""
        self._check(key, tensor)
        centre, half, _ = self._coefficients(key, tensor)
        return tensor * half + centre

    def to_tensors(self) -> dict[str, torch.Tensor]:
        """{"normalizer.<key>.min": (d,), "normalizer.<key>.max": (d,)} float32 CPU tensors."""
        tensors = {}
        for key, (low, high) in self._bounds.items():
            tensors[f"{PREFIX}{key}.min"] = torch.from_numpy(low.copy())
            tensors[f"{PREFIX}{key}.max"] = torch.from_numpy(high.copy())
        return tensors

    @classmethod
    def from_tensors(cls, tensors: Mapping[str, torch.Tensor]) -> Normalizer:
        """The normalizer saved by `to_tensors` (names not starting with "normalizer." are ignored)."""
        halves: dict[str, dict[str, np.ndarray]] = {}
        for name, tensor in tensors.items():
            if not name.startswith(PREFIX):
                continue
            key, _, bound = name[len(PREFIX):].rpartition(".")
            if not key or bound not in ("min", "max"):
                raise PolicyError(f"tensor {name!r} is not a normalizer.<key>.min / .max entry")
            halves.setdefault(key, {})[bound] = tensor.detach().cpu().numpy()
        for key, pair in halves.items():
            if set(pair) != {"min", "max"}:
                missing = "max" if "min" in pair else "min"
                raise PolicyError(f"normalizer {key!r} has no {PREFIX}{key}.{missing}")
        return cls({key: (pair["min"], pair["max"]) for key, pair in halves.items()})
