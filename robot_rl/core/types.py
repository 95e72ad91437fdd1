"""Shared types: observation specs and training batches.

Observations are flat dicts of arrays. Image keys are uint8 HxWxC arrays (by convention named `images/<camera>`);
every other key is a float vector. Shapes always come from an `ObservationSpec`, never from constants.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import flax.struct
import numpy as np

Observation = dict[str, Any]  # key -> array (numpy or jax)


@dataclasses.dataclass(frozen=True)
class ArraySpec:
    """Shape and dtype of one observation entry (without a batch dimension)."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def is_image(self) -> bool:
        return self.dtype == "uint8" and len(self.shape) == 3

    def to_json(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ArraySpec:
        return cls(tuple(int(d) for d in data["shape"]), str(data["dtype"]))


@dataclasses.dataclass(frozen=True)
class ObservationSpec:
    """Ordered, hashable description of an observation dict: key -> ArraySpec."""

    entries: tuple[tuple[str, ArraySpec], ...]

    @classmethod
    def from_shapes(cls, shapes: Mapping[str, tuple[tuple[int, ...], Any] | ArraySpec]) -> ObservationSpec:
        """Build from {key: (shape, dtype)} or {key: ArraySpec}; keys are sorted for a stable order."""
        entries = []
        for key in sorted(shapes):
            value = shapes[key]
            if not isinstance(value, ArraySpec):
                shape, dtype = value
                value = ArraySpec(tuple(int(s) for s in shape), np.dtype(dtype).name)
            entries.append((key, value))
        return cls(tuple(entries))

    @classmethod
    def from_space(cls, space: Any) -> ObservationSpec:
        """Build from a gymnasium `spaces.Dict` (or any mapping of objects with .shape and .dtype)."""
        inner = getattr(space, "spaces", space)
        if not isinstance(inner, Mapping):
            raise TypeError(f"expected a gymnasium spaces.Dict or a mapping of spaces, got {type(space).__name__}")
        return cls.from_shapes({k: (v.shape, v.dtype) for k, v in inner.items()})

    @classmethod
    def from_example(cls, observation: Mapping[str, Any]) -> ObservationSpec:
        """Build from one unbatched example observation."""
        return cls.from_shapes({k: (np.shape(v), np.asarray(v).dtype) for k, v in observation.items()})

    @classmethod
    def coerce(cls, spec: Any) -> ObservationSpec:
        """Accept an ObservationSpec, a gymnasium Dict space or a {key: (shape, dtype)} mapping."""
        if isinstance(spec, ObservationSpec):
            return spec
        if hasattr(spec, "spaces"):
            return cls.from_space(spec)
        return cls.from_shapes(spec)

    def __getitem__(self, key: str) -> ArraySpec:
        for k, v in self.entries:
            if k == key:
                return v
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return any(k == key for k, _ in self.entries)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.entries)

    @property
    def image_keys(self) -> tuple[str, ...]:
        return tuple(k for k, v in self.entries if v.is_image)

    @property
    def vector_keys(self) -> tuple[str, ...]:
        return tuple(k for k, v in self.entries if not v.is_image)

    @property
    def vector_dim(self) -> int:
        return int(sum(int(np.prod(self[k].shape)) for k in self.vector_keys))

    def validate(self, observation: Mapping[str, Any], batch_dims: int = 0, name: str = "observation") -> None:
        """Raise a ValueError naming the problem if `observation` does not match this spec."""
        if not isinstance(observation, Mapping):
            raise TypeError(f"{name} must be a dict of arrays, got {type(observation).__name__}")
        missing = [k for k in self.keys if k not in observation]
        extra = [k for k in observation if k not in self]
        if missing or extra:
            raise ValueError(f"{name} keys mismatch: missing {missing}, unexpected {extra}; expected {list(self.keys)}")
        for key, spec in self.entries:
            shape = tuple(np.shape(observation[key]))
            if shape[batch_dims:] != spec.shape or len(shape) != batch_dims + len(spec.shape):
                raise ValueError(
                    f"{name}[{key!r}] has shape {shape}, expected {batch_dims} batch dim(s) followed by {spec.shape}"
                )


@flax.struct.dataclass
class Batch:
    """Training batch (a jax pytree); leading dims [B] or [K, B].

    The bootstrap target is `rewards + discounts * masks * V(next_observations)`: `rewards` is the (n-step,
    discounted) reward sum, `discounts` is gamma**n for the steps actually taken, `masks` is 0 where the
    episode terminated inside the window (no bootstrap) and 1 otherwise (including time-limit truncation).
    """

    observations: Observation
    actions: Any
    rewards: Any
    discounts: Any
    masks: Any
    next_observations: Observation
    intervention: Any
    demo: Any  # True for rows drawn from the demo buffer (demos and human interventions)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Batch:
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in data]
        if missing:
            raise ValueError(f"batch is missing fields {missing}")
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls)})

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
