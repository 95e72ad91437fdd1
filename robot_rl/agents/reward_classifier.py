"""Learned success classifier (SERL / HIL-SERL style): camera frames -> the probability that the task is done.

A real robot has no simulator to say "success". The classifier learns it from the recorded datasets' frames: the
last frames of successful episodes are success, the rest failure, and a human's frame labels win (how the frames are
chosen, labelled, split and trained on: robot_rl.agents.reward_classifier_training; the labels and the labelling
tool: robot_rl.agents.frame_labels). This module holds the classifier itself:

- **Model.** The pixel encoder of the SAC agent (robot_rl.agents.networks, one conv stack per camera) and a small
  MLP head give one logit.
- **Files.** ``<out>/reward_classifier.msgpack`` (flax msgpack of the parameters), ``config.json`` (the config, the
  cameras and their image shapes, the threshold), ``metrics.json``. No pickle.

``load_reward_classifier(path)`` gives a :class:`RewardClassifier` with ``predict(observation) -> probability`` and
``success(observation) -> bool`` at its threshold (one frame or a batch; jitted, about a millisecond on a CPU).
The ROS shell is robot_rl.ros.nodes.reward_node; ``robot-rl train-reward`` and ``robot-rl label`` are the commands.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.data.episodes import DatasetReader

MODEL_FILE = "reward_classifier.msgpack"
CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.json"
MODEL_FORMAT = "robot_rl/reward_classifier"
_PREDICT_BATCH = 256


class RewardClassifierError(ValueError):
    """A classifier cannot be trained or loaded (bad data, options or files); the message names the problem."""


@dataclasses.dataclass(frozen=True)
class RewardClassifierConfig:
    """What frames a success classifier learns from, its network and its training."""

    cameras: tuple[str, ...] = ()
    """Cameras to classify from, e.g. front wrist (or images/front); none given: every camera of the datasets."""
    success_frames: int = 3
    """The last this many frames of a successful episode (its final observation included) are success frames."""
    margin: int = 0
    """Frames of a successful episode this close before its success frames are left out (neither class). Raise it
    when the success key may come late (frames already successful must not be taught as failure); it costs a
    classifier that fires early (in the sim mirror, 5 made it fire 2.3 steps early on average, 0 0.1 steps)."""
    steps: int = 1500
    """Gradient steps."""
    batch_size: int = 64
    """Frames per gradient step, half success and half failure (class balance)."""
    learning_rate: float = 3e-4
    """AdamW learning rate."""
    weight_decay: float = 1e-4
    """AdamW weight decay."""
    augment_pad: int = 4
    """DrQ random shift: pad each image by this many pixels and crop at random; 0 turns it off."""
    channels: tuple[int, ...] = (16, 32, 32)
    """Output channels of each conv layer of the per-camera encoder."""
    kernel_sizes: tuple[int, ...] = (4, 2, 2)
    """Kernel size of each conv layer (kernel == stride runs as a fast patchify matmul on a CPU)."""
    strides: tuple[int, ...] = (4, 2, 2)
    """Stride of each conv layer."""
    latent_dim: int = 64
    """Per-camera feature size."""
    hidden_dim: int = 256
    """Width of the MLP head."""
    threshold: float = 0.5
    """Probability at and above which a frame is success (metrics are reported at it; the reward node's default)."""
    validation_fraction: float = 0.2
    """Fraction of episodes held out for precision / recall (split by episode, stratified; 0: no validation)."""
    seed: int = 0
    """Seed of the split, the initialisation, the batches and the augmentation."""

    def __post_init__(self) -> None:
        problems = [f"{name}={getattr(self, name)!r} must be >= {low}"
                    for name, low in (("success_frames", 1), ("margin", 0), ("steps", 1), ("batch_size", 2),
                                      ("augment_pad", 0), ("latent_dim", 1), ("hidden_dim", 1), ("seed", 0))
                    if not getattr(self, name) >= low]
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            problems.append(f"learning_rate={self.learning_rate!r} must be > 0")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            problems.append(f"weight_decay={self.weight_decay!r} must be >= 0")
        if not 0.0 < self.threshold < 1.0:
            problems.append(f"threshold={self.threshold!r} must be in (0, 1)")
        if not 0.0 <= self.validation_fraction < 1.0:
            problems.append(f"validation_fraction={self.validation_fraction!r} must be in [0, 1)")
        if not len(self.channels) == len(self.kernel_sizes) == len(self.strides):
            problems.append(f"channels {self.channels}, kernel_sizes {self.kernel_sizes} and strides {self.strides} "
                            "must have one entry per conv layer")
        if any(v < 1 for v in (*self.channels, *self.kernel_sizes, *self.strides)):
            problems.append("channels, kernel_sizes and strides must be >= 1")
        if problems:
            raise RewardClassifierError(f"invalid reward classifier options: {'; '.join(problems)}")

    def to_json(self) -> dict[str, Any]:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
                for f in dataclasses.fields(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RewardClassifierConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise RewardClassifierError(f"unknown reward classifier config keys {unknown}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def camera_key(name: str) -> str:
    """'front' or 'images/front' -> the observation key 'images/front'."""
    return name if name.startswith("images/") else f"images/{name}"


def resolve_cameras(readers: Sequence[DatasetReader], cameras: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Camera observation keys (and their image shapes) to train on: present, with one shape, in every dataset."""
    first = readers[0]
    stored = [k for k, spec in first.observation_spec.items() if spec.is_image]
    keys = [camera_key(c) for c in cameras] if cameras else stored
    if not keys:
        raise RewardClassifierError(f"{first.path} stores no camera frames (keys: {sorted(first.observation_spec)}); "
                                    "record with --obs-mode pixels or state+pixels")
    shapes: dict[str, tuple[int, ...]] = {}
    for reader in readers:
        for key in keys:
            spec = reader.observation_spec.get(key)
            if spec is None or not spec.is_image:
                have = [k for k, s in reader.observation_spec.items() if s.is_image]
                raise RewardClassifierError(f"--cameras: {key} is not a camera of {reader.path}; it has {have}")
            if shapes.setdefault(key, spec.shape) != spec.shape:
                raise RewardClassifierError(f"{reader.path}: {key} is {spec.shape}, {shapes[key]} in "
                                            f"{readers[0].path}; train on datasets with one image size")
    return shapes


def classifier_network(config: RewardClassifierConfig, shapes: Mapping[str, tuple[int, ...]]):
    """The flax module of a classifier of camera images of `shapes` (by observation key): images -> success logit."""
    import flax.linen as nn

    from robot_rl.agents.networks import ObservationEncoder
    from robot_rl.core.types import ObservationSpec

    spec = ObservationSpec.from_shapes({key: (shape, "uint8") for key, shape in shapes.items()})

    class SuccessClassifier(nn.Module):
        """Camera images -> success logit: the SAC pixel encoder, then an MLP head."""

        @nn.compact
        def __call__(self, images):
            features = ObservationEncoder(spec, config.channels, config.kernel_sizes, config.strides,
                                          config.latent_dim, name="encoder")(images)
            hidden = nn.relu(nn.Dense(config.hidden_dim)(features))
            return nn.Dense(1)(hidden)[..., 0]

    return SuccessClassifier()


class RewardClassifier:
    """A trained success classifier: ``predict(observation) -> probability``, ``success(observation) -> bool``."""

    def __init__(self, config: RewardClassifierConfig, shapes: Mapping[str, tuple[int, ...]], params,
                 threshold: float | None = None, image_transforms: Mapping[str, Any] | None = None):
        import jax

        self.config = config
        self.image_transforms = dict(image_transforms or {})
        """Observation key -> how its training frames were cut from the camera (checked against a robot file)."""
        self.shapes = {key: tuple(shape) for key, shape in shapes.items()}
        self.threshold = float(config.threshold if threshold is None else threshold)
        self.params = params
        self.module = classifier_network(config, self.shapes)
        self._probabilities = jax.jit(lambda params, images: jax.nn.sigmoid(self.module.apply(params, images)))

    @property
    def cameras(self) -> tuple[str, ...]:
        """Observation keys of the images it needs, e.g. ('images/front',)."""
        return tuple(self.shapes)

    def _images(self, observation: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], bool]:
        """(batched uint8 images by key, whether the input was one frame); ValueError naming a bad key."""
        images, single = {}, None
        for key, shape in self.shapes.items():
            if key not in observation:
                raise ValueError(f"observation has no {key!r} (the classifier needs {list(self.shapes)})")
            value = np.asarray(observation[key])
            if value.dtype != np.uint8:
                raise ValueError(f"observation[{key!r}] is {value.dtype}, expected uint8 images")
            one = value.shape == shape
            if not one and value.shape[1:] != shape:
                raise ValueError(f"observation[{key!r}] has shape {value.shape}, expected {shape} or (N, *{shape})")
            if single is not None and one != single:
                raise ValueError("observation mixes single frames and batches")
            single = one
            images[key] = value[None] if one else value
        return images, bool(single)

    def predict(self, observation: Mapping[str, Any]) -> float | np.ndarray:
        """Success probability of one frame (a float) or a batch of frames (an (N,) array)."""
        images, single = self._images(observation)
        count = len(next(iter(images.values())))
        if single:
            return float(self._probabilities(self.params, images)[0])
        out = np.empty(count, dtype=np.float32)
        for start in range(0, count, _PREDICT_BATCH):
            chunk = {k: v[start:start + _PREDICT_BATCH] for k, v in images.items()}
            size = len(next(iter(chunk.values())))
            padded = min(_PREDICT_BATCH, 1 << max(size - 1, 0).bit_length())  # few compiled shapes: powers of two
            if padded > size:
                chunk = {k: np.concatenate([v, np.repeat(v[-1:], padded - size, axis=0)]) for k, v in chunk.items()}
            out[start:start + size] = np.asarray(self._probabilities(self.params, chunk))[:size]
        return out

    def success(self, observation: Mapping[str, Any]) -> bool | np.ndarray:
        """Whether the probability reaches the threshold (a bool, or an (N,) bool array for a batch)."""
        probability = self.predict(observation)
        return probability >= self.threshold if isinstance(probability, np.ndarray) else probability >= self.threshold

    def save(self, directory: str | Path, metrics: Mapping[str, Any] | None = None) -> Path:
        """Write the model, config.json and (given) metrics.json into `directory` (created if needed)."""
        import flax.serialization

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / MODEL_FILE).write_bytes(flax.serialization.to_bytes(self.params))
        description = {"format": MODEL_FORMAT, "version": 1, "config": self.config.to_json(),
                       "cameras": {key: list(shape) for key, shape in self.shapes.items()},
                       "threshold": self.threshold, "image_transforms": self.image_transforms}
        (directory / CONFIG_FILE).write_text(json.dumps(description, indent=2) + "\n")
        if metrics is not None:
            (directory / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")
        return directory


def random_key(seed: int):
    """A PRNG key of XLA's RngBitGenerator ("rbg"): XLA:CPU compiles the initialisation and the training steps
    several times faster with it than with the default threefry keys (1.4 s instead of 6.5 s for the init)."""
    import jax

    return jax.random.key(seed, impl="rbg")


def init_params(config: RewardClassifierConfig, shapes: Mapping[str, tuple[int, ...]], seed: int = 0, *,
                shapes_only: bool = False):
    """Initial parameters (one compiled call, not op by op); `shapes_only`: their shapes and dtypes, computing none."""
    import jax
    import jax.numpy as jnp

    dummy = {key: jnp.zeros((1, *shape), jnp.uint8) for key, shape in shapes.items()}
    init = classifier_network(config, shapes).init
    if shapes_only:
        return jax.eval_shape(init, random_key(seed), dummy)
    return jax.jit(init)(random_key(seed), dummy)


def load_reward_classifier(path: str | Path) -> RewardClassifier:
    """A classifier saved by `robot-rl train-reward` (its folder, or the folder's config.json)."""
    import flax.serialization

    path = Path(path)
    directory = path.parent if path.name in (CONFIG_FILE, MODEL_FILE) else path
    if not directory.is_dir():
        raise RewardClassifierError(f"reward classifier {directory} does not exist")
    try:
        description = json.loads((directory / CONFIG_FILE).read_text())
        if not isinstance(description, dict) or description.get("format") != MODEL_FORMAT:
            raise RewardClassifierError(f"{directory / CONFIG_FILE} is not a reward classifier config")
        config = RewardClassifierConfig.from_json(description["config"])
        shapes = {key: tuple(int(s) for s in shape) for key, shape in description["cameras"].items()}
        payload = (directory / MODEL_FILE).read_bytes()
    except FileNotFoundError as exc:
        raise RewardClassifierError(f"{directory} is not a reward classifier folder: {Path(exc.filename).name} is "
                                    "missing (write one with `robot-rl train-reward`)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, RewardClassifierError):
            raise
        raise RewardClassifierError(f"{directory / CONFIG_FILE}: unreadable reward classifier config ({exc})") from None
    import jax

    template = init_params(config, shapes, shapes_only=True)
    try:
        params = flax.serialization.from_bytes(template, payload)
        expected = jax.tree_util.tree_map(lambda leaf: (tuple(leaf.shape), str(leaf.dtype)), template)
        restored = jax.tree_util.tree_map(lambda leaf: (tuple(np.shape(leaf)), str(np.asarray(leaf).dtype)), params)
        if expected != restored:
            raise ValueError("parameter shapes differ from the config's network")
    except Exception as exc:  # msgpack / structure errors come as several types
        raise RewardClassifierError(f"{directory / MODEL_FILE}: not this classifier's parameters ({exc})") from None
    return RewardClassifier(config, shapes, params, threshold=float(description.get("threshold", config.threshold)),
                            image_transforms=description.get("image_transforms") or {})
