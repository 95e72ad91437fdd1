"""Learned success classifier (SERL / HIL-SERL style): camera frames -> the probability that the task is done.

A real robot has no simulator to say "success". This module learns it from the recorded datasets:

- **Training frames.** An episode of T steps has T + 1 frames: the observations ``data/obs`` before each step, then
  ``meta/final_obs`` (frame T). Success frames: the last ``success_frames`` frames of each successful episode (the
  final observation included) and every frame a human labelled success. Failure frames: every frame of a failed
  episode, the frames of a successful episode that come more than ``margin`` frames before its success frames
  (the frames in between are ambiguous and left out), and every frame a human labelled failure. A human label
  always wins over the automatic one.
- **Human labels** live in the dataset folder, in ``frame_labels.json`` (see :class:`FrameLabels`): the zarr arrays
  and their checksums stay untouched, each labelled episode is tied to the checksums it was recorded with (labels
  never land on another recording's frames), and the file carries its own CRC-32.
- **Model.** The pixel encoder of the SAC agent (robot_rl.agents.networks, one conv stack per camera) and a small
  MLP head give one logit; trained with sigmoid cross-entropy on class-balanced batches (half success, half
  failure) with DrQ random-shift augmentation (robot_rl.agents.augment) and AdamW.
- **Validation** is on held-out *episodes* (split by episode, stratified by whether an episode has success frames),
  never on frames of an episode seen in training: neighbouring frames are near copies.
- **Files.** ``<out>/reward_classifier.msgpack`` (flax msgpack of the parameters), ``config.json`` (the config, the
  cameras and their image shapes, the threshold), ``metrics.json``. No pickle.

``load_reward_classifier(path)`` gives a :class:`RewardClassifier` with ``predict(observation) -> probability`` and
``success(observation) -> bool`` at its threshold (one frame or a batch; jitted, about a millisecond on a CPU).
The ROS shell is robot_rl.ros.nodes.reward_node; ``robot-rl train-reward`` and ``robot-rl label`` are the commands.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import shutil
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core import interrupts
from robot_rl.data.episodes import DatasetError, DatasetReader
from robot_rl.core.files import atomic_write_text

LABELS_FILE = "frame_labels.json"
LABELS_FORMAT = "robot_rl/frame_labels"
LABELS_VERSION = 1
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


# ================================================================================================= frame labels


def parse_frames(text: str, frames: int) -> range:
    """Python slice syntax over an episode's `frames` frames: '40:50' (40..49), '7', '-5:' (the last five), ':'."""
    text = text.strip()
    try:
        parts = [int(p) if p.strip() else None for p in text.split(":")]
    except ValueError:
        raise RewardClassifierError(f"--frames {text!r} is not a frame or a range such as 40:50") from None
    if len(parts) == 1:
        index = parts[0]
        if index is None or not -frames <= index < frames:
            raise RewardClassifierError(f"--frames {text}: frame {index} out of range: the episode has {frames} "
                                        f"frames (0..{frames - 1}, the last one its final observation)")
        index %= frames
        return range(index, index + 1)
    if len(parts) != 2:
        raise RewardClassifierError(f"--frames {text!r} is not a frame or a range such as 40:50")
    outside = [p for p in parts if p is not None and not -frames <= p <= frames]
    if outside:
        raise RewardClassifierError(f"--frames {text}: {outside[0]} is out of range: the episode has {frames} frames "
                                    f"(0..{frames - 1}, the last one its final observation)")
    selected = range(frames)[slice(*parts)]
    if not selected:
        raise RewardClassifierError(f"--frames {text} selects no frame: the episode has {frames} frames "
                                    f"(0..{frames - 1})")
    return selected


def _runs(frames: Iterable[int]) -> list[list[int]]:
    """Sorted frame indices as [start, stop) runs: [3, 4, 5, 9] -> [[3, 6], [9, 10]]."""
    runs: list[list[int]] = []
    for frame in sorted(frames):
        if runs and runs[-1][1] == frame:
            runs[-1][1] += 1
        else:
            runs.append([frame, frame + 1])
    return runs


def _content_crc(episodes: Mapping[str, Any]) -> int:
    return zlib.crc32(json.dumps(episodes, sort_keys=True, separators=(",", ":")).encode())


class FrameLabels:
    """Human success / failure labels of single frames of a dataset, kept in ``<dataset>/frame_labels.json``.

    File layout: ``{"format", "version", "episodes": {"<index>": {"frames": T + 1, "fingerprint": crc32,
    "success": [[start, stop], ...], "failure": [[start, stop], ...]}}, "crc32": crc32 of "episodes"}``. The
    fingerprint is the CRC-32 of the episode's row of ``meta/checksums`` (its recorded content), so labels are
    refused on an episode they were not made for; the file's own CRC-32 finds a damaged or hand-edited file.
    Written atomically (a reader never sees half a file).
    """

    def __init__(self, reader: DatasetReader, labels: dict[int, dict[int, bool]] | None = None):
        self.reader = reader
        self.path = reader.path / LABELS_FILE
        self.labels: dict[int, dict[int, bool]] = labels or {}

    # ----- episode facts -----------------------------------------------------------------------------------------
    def frames(self, episode: int) -> int:
        """Frames of an episode: its steps plus the final observation."""
        return int(self.reader.episode_lengths[episode]) + 1

    def fingerprint(self, episode: int) -> int:
        if self.reader.checksums is None:  # schema 1: no checksums; the length is all there is
            return zlib.crc32(str(self.frames(episode)).encode())
        return zlib.crc32(np.ascontiguousarray(self.reader.checksums[episode], dtype="<u4").tobytes())

    def episode_index(self, episode: int) -> int:
        count = self.reader.num_episodes
        if not -count <= episode < count:
            raise RewardClassifierError(f"episode {episode} out of range: {self.reader.path} has {count} episodes")
        return episode % count

    # ----- load / save -------------------------------------------------------------------------------------------
    @classmethod
    def load(cls, dataset: str | Path | DatasetReader) -> FrameLabels:
        """The dataset's labels (none if it has no labels file); a damaged or foreign file is a DatasetError."""
        reader = dataset if isinstance(dataset, DatasetReader) else DatasetReader(dataset)
        labels = cls(reader)
        if not labels.path.exists():
            return labels
        where = labels.path
        try:
            data = json.loads(where.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DatasetError(f"{where}: unreadable frame labels ({exc}); the file is truncated or damaged") from None
        if not isinstance(data, dict) or data.get("format") != LABELS_FORMAT:
            raise DatasetError(f"{where}: not a frame labels file (format is not {LABELS_FORMAT!r})")
        if data.get("version") != LABELS_VERSION:
            raise DatasetError(f"{where}: frame labels version {data.get('version')!r} is not {LABELS_VERSION}")
        episodes = data.get("episodes")
        if not isinstance(episodes, dict) or data.get("crc32") != _content_crc(episodes):
            raise DatasetError(f"{where}: fails its checksum: the file was altered or damaged "
                               "(relabel, or `robot-rl label --import` a labels list)")
        for key, entry in episodes.items():
            try:
                episode = int(key)
                if not 0 <= episode < reader.num_episodes:
                    raise DatasetError(f"{where}: labels for episode {episode}, the dataset has {reader.num_episodes}")
                if entry["frames"] != labels.frames(episode) or entry["fingerprint"] != labels.fingerprint(episode):
                    raise DatasetError(f"{where}: the labels of episode {episode} were made for another recording "
                                       "(its checksums differ); remove the file or relabel")
                frames: dict[int, bool] = {}
                for name, value in (("failure", False), ("success", True)):
                    for start, stop in entry[name]:
                        if not 0 <= start < stop <= entry["frames"]:
                            raise ValueError(f"{name} frames [{start}, {stop}) outside the episode")
                        frames.update(dict.fromkeys(range(start, stop), value))
            except (KeyError, TypeError, ValueError) as exc:  # a DatasetError (not a ValueError) passes through
                raise DatasetError(f"{where}: episode {key!r} entry is malformed ({exc!r})") from None
            labels.labels[episode] = frames
        return labels

    def save(self) -> Path:
        episodes = {}
        for episode in sorted(self.labels):
            frames = self.labels[episode]
            if not frames:
                continue
            episodes[str(episode)] = {
                "frames": self.frames(episode),
                "fingerprint": self.fingerprint(episode),
                "success": _runs(f for f, v in frames.items() if v),
                "failure": _runs(f for f, v in frames.items() if not v),
            }
        head = json.dumps({"format": LABELS_FORMAT, "version": LABELS_VERSION, "crc32": _content_crc(episodes)})
        lines = ",\n".join(f"  {json.dumps(key)}: {json.dumps(entry)}" for key, entry in episodes.items())
        # an episode a line
        return atomic_write_text(self.path, head[:-1] + ', "episodes": {\n' + lines + ("\n" if lines else "") + "}}\n")

    # ----- editing -----------------------------------------------------------------------------------------------
    def set(self, episode: int, frames: Iterable[int], label: bool | None) -> int:
        """Label `frames` of `episode` success (True), failure (False) or clear them (None); returns how many."""
        episode = self.episode_index(episode)
        count = self.frames(episode)
        current = self.labels.setdefault(episode, {})
        changed = 0
        for frame in frames:
            if not 0 <= frame < count:
                raise RewardClassifierError(f"frame {frame} out of range: episode {episode} has {count} frames")
            if label is None:
                changed += current.pop(frame, None) is not None
            else:
                current[frame] = label
                changed += 1
        return changed

    def get(self, episode: int, frame: int) -> bool | None:
        return self.labels.get(episode, {}).get(frame)

    def import_file(self, path: str | Path) -> int:
        """Apply a labels list: ``[{"episode": 3, "frames": "40:50", "label": "success" | "failure" | "none"}, ...]``
        (``frames`` a range string, a frame index or a list of them). Nothing changes unless every entry is valid.
        Returns the number of frames labelled."""
        path = Path(path)
        try:
            entries = json.loads(path.read_text())
        except OSError as exc:
            raise RewardClassifierError(f"--import {path}: {exc.strerror or exc}") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RewardClassifierError(f"--import {path}: not JSON ({exc})") from None
        if not isinstance(entries, list):
            raise RewardClassifierError(f"--import {path}: expected a list of {{episode, frames, label}} entries")
        staged = FrameLabels(self.reader, {e: dict(f) for e, f in self.labels.items()})
        total = 0
        for number, entry in enumerate(entries):
            where = f"--import {path}: entry {number}"
            if not isinstance(entry, dict) or set(entry) != {"episode", "frames", "label"}:
                raise RewardClassifierError(f"{where}: needs exactly the keys episode, frames, label; got {entry!r}")
            label = {"success": True, "failure": False, "none": None}.get(entry["label"], "bad")
            if label == "bad":
                raise RewardClassifierError(f"{where}: label {entry['label']!r} is not success, failure or none")
            if not isinstance(entry["episode"], int) or isinstance(entry["episode"], bool):
                raise RewardClassifierError(f"{where}: episode {entry['episode']!r} is not an integer")
            try:
                episode = staged.episode_index(entry["episode"])
                count = staged.frames(episode)
                items = entry["frames"] if isinstance(entry["frames"], list) else [entry["frames"]]
                frames: list[int] = []
                for item in items:
                    if isinstance(item, bool) or not isinstance(item, (int, str)):
                        raise RewardClassifierError(f"frames {item!r} is not a frame index or a range string")
                    frames.extend(parse_frames(str(item), count))
                total += staged.set(episode, frames, label)
            except RewardClassifierError as exc:
                raise RewardClassifierError(f"{where}: {str(exc).removeprefix('--frames ')}") from None
        self.labels = staged.labels
        return total

    def counts(self) -> dict[str, int]:
        values = [v for frames in self.labels.values() for v in frames.values()]
        return {"success": sum(values), "failure": len(values) - sum(values),
                "episodes": sum(1 for frames in self.labels.values() if frames)}


# ================================================================================================ training data


@dataclasses.dataclass
class FrameSet:
    """Labelled frames of one or more datasets, in RAM."""

    images: dict[str, np.ndarray]
    """Observation key -> (N, H, W, 3) uint8."""
    labels: np.ndarray
    """(N,) bool, True: success."""
    episode: np.ndarray
    """(N,) int, the frame's episode among all datasets' episodes (see `episodes`)."""
    frame: np.ndarray
    """(N,) int, the frame's index in its episode (T: the final observation)."""
    episodes: list[tuple[str, int]]
    """(dataset path, episode index) of each episode."""
    image_transforms: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Observation key -> the image transform its frames were recorded with (vision.ImageTransform JSON)."""

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, mask: np.ndarray) -> FrameSet:
        return FrameSet({k: v[mask] for k, v in self.images.items()}, self.labels[mask], self.episode[mask],
                        self.frame[mask], self.episodes, self.image_transforms)


def episode_frame_labels(steps: int, success: bool, human: Mapping[int, bool], success_frames: int,
                         margin: int) -> np.ndarray:
    """Training label of each of an episode's `steps` + 1 frames: 1 success, 0 failure, -1 left out."""
    frames = steps + 1
    labels = np.zeros(frames, dtype=np.int8)
    if success:
        first_success = max(0, frames - success_frames)
        labels[first_success:] = 1
        labels[max(0, first_success - margin):first_success] = -1
    for frame, value in human.items():
        labels[frame] = int(value)
    return labels


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


def resolve_transforms(readers: Sequence[DatasetReader], keys: Iterable[str]) -> dict[str, Any]:
    """The image transform each camera key was recorded with (datasets' ``image_transforms`` attribute; keys no
    dataset recorded one for are left out); RewardClassifierError when two datasets cut a camera differently."""
    transforms: dict[str, Any] = {}
    first_with: dict[str, Path] = {}
    for reader in readers:
        recorded = reader.attrs.get("image_transforms") or {}
        for key in keys:
            if key not in recorded:
                continue
            if key in transforms and transforms[key] != recorded[key]:
                raise RewardClassifierError(
                    f"{reader.path}: {key} was recorded with image transform {recorded[key]}, {first_with[key]} with "
                    f"{transforms[key]}; train on datasets whose cameras were cropped / resized one way")
            transforms.setdefault(key, recorded[key])
            first_with.setdefault(key, reader.path)
    return transforms


def load_frames(datasets: Sequence[str | Path], config: RewardClassifierConfig) -> FrameSet:
    """Every training frame (success or failure, see the module doc) of the datasets, verified, in RAM."""
    if not datasets:
        raise RewardClassifierError("no dataset given: pass --dataset PATH [PATH ...]")
    readers = [DatasetReader(path) for path in datasets]
    for reader in readers:
        reader.raise_for(reader.missing_chunks())
        if reader.num_episodes == 0:
            raise RewardClassifierError(f"{reader.path} holds no episodes")
    shapes = resolve_cameras(readers, config.cameras)
    transforms = resolve_transforms(readers, shapes)
    images: dict[str, list[np.ndarray]] = {key: [] for key in shapes}
    labels, episode_ids, frame_ids, episodes = [], [], [], []
    for reader in readers:
        human = FrameLabels.load(reader)
        success = reader.read_array("meta/success")
        lengths = reader.episode_lengths
        starts = np.concatenate([[0], reader.episode_ends[:-1]])
        episode_labels = [
            episode_frame_labels(int(lengths[e]), bool(success[e]), human.labels.get(e, {}), config.success_frames,
                                 config.margin) for e in range(reader.num_episodes)]
        # rows into concat(data/obs, final_obs): frame t < T of episode e is data row start + t, frame T its final obs
        rows = np.concatenate([np.append(starts[e] + np.arange(lengths[e]), reader.num_steps + e)
                               for e in range(reader.num_episodes)])
        kept = np.concatenate(episode_labels) >= 0
        for key in shapes:
            both = np.concatenate([reader.read_array(f"data/obs/{key}"), reader.read_array(f"meta/final_obs/{key}")])
            images[key].append(both[rows[kept]])
        labels.append(np.concatenate(episode_labels)[kept] == 1)
        first = len(episodes)
        episode_ids.append(np.concatenate([np.full(len(x), first + e) for e, x in enumerate(episode_labels)])[kept])
        frame_ids.append(np.concatenate([np.arange(len(x)) for x in episode_labels])[kept])
        episodes.extend((str(reader.path), e) for e in range(reader.num_episodes))
    return FrameSet({k: np.concatenate(v) for k, v in images.items()}, np.concatenate(labels),
                    np.concatenate(episode_ids), np.concatenate(frame_ids), episodes, transforms)


def split_by_episode(frames: FrameSet, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Boolean frame masks (train, validation): whole episodes held out, stratified by having success frames."""
    rng = np.random.default_rng(seed)
    positive = np.zeros(len(frames.episodes), dtype=bool)
    positive[frames.episode[frames.labels]] = True
    present = np.zeros(len(frames.episodes), dtype=bool)
    present[frames.episode] = True
    held_out: list[int] = []
    for stratum in (positive & present, ~positive & present):
        ids = rng.permutation(np.flatnonzero(stratum))
        count = int(round(fraction * len(ids)))
        if fraction > 0 and len(ids) >= 2:
            count = min(max(count, 1), len(ids) - 1)  # both sides keep some of each kind
        held_out.extend(ids[:count].tolist())
    validation = np.isin(frames.episode, held_out)
    return ~validation, validation


# ======================================================================================================== model


def _module(config: RewardClassifierConfig, shapes: Mapping[str, tuple[int, ...]]):
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
        self.module = _module(config, self.shapes)
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
    init = _module(config, shapes).init
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


# ===================================================================================================== training


def binary_metrics(probabilities: np.ndarray, labels: np.ndarray, threshold: float) -> dict[str, Any]:
    """Precision, recall, F1, accuracy and the confusion counts at `threshold` (None where undefined)."""
    predicted = np.asarray(probabilities) >= threshold
    labels = np.asarray(labels, dtype=bool)
    tp = int(np.sum(predicted & labels))
    fp = int(np.sum(predicted & ~labels))
    fn = int(np.sum(~predicted & labels))
    tn = int(np.sum(~predicted & ~labels))
    precision = tp / (tp + fp) if tp + fp else None
    recall = tp / (tp + fn) if tp + fn else None
    f1 = (2 * precision * recall / (precision + recall) if precision and recall else
          (0.0 if precision is not None and recall is not None else None))
    return {"threshold": threshold, "precision": precision, "recall": recall, "f1": f1,
            "accuracy": (tp + tn) / len(labels) if len(labels) else None,
            "tp": tp, "fp": fp, "tn": tn, "fn": fn}


def _train_steps(config: RewardClassifierConfig, module, optimizer, chunk: int):
    """A jitted function running `chunk` class-balanced, augmented gradient steps with lax.scan."""
    import jax
    import jax.numpy as jnp
    import optax

    from robot_rl.agents.augment import random_shift

    half = config.batch_size // 2

    def loss_fn(params, images, labels):
        logits = module.apply(params, images)
        return optax.sigmoid_binary_cross_entropy(logits, labels).mean()

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def run(params, opt_state, images, positives, negatives, key):
        def one_step(carry, key):
            params, opt_state = carry
            pos_key, neg_key, *shift_keys = jax.random.split(key, 2 + len(images))
            rows = jnp.concatenate([
                positives[jax.random.randint(pos_key, (half,), 0, len(positives))],
                negatives[jax.random.randint(neg_key, (config.batch_size - half,), 0, len(negatives))]])
            batch = {name: random_shift(shift_key, value[rows], config.augment_pad)
                     for shift_key, (name, value) in zip(shift_keys, images.items(), strict=True)}
            labels = jnp.concatenate([jnp.ones(half), jnp.zeros(config.batch_size - half)])
            loss, grads = jax.value_and_grad(loss_fn)(params, batch, labels)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), loss

        (params, opt_state), losses = jax.lax.scan(one_step, (params, opt_state), jax.random.split(key, chunk))
        return params, opt_state, losses.mean()

    return run


def train_reward_classifier(
    datasets: Sequence[str | Path],
    config: RewardClassifierConfig = RewardClassifierConfig(),
    *,
    on_progress: Callable[[int, float], None] | None = None,
) -> tuple[RewardClassifier, dict[str, Any]]:
    """Train on the datasets' frames (see the module doc); returns the classifier and its metrics (held-out
    episodes' precision / recall / F1 at the threshold, and the counts behind them)."""
    import jax
    import jax.numpy as jnp
    import optax

    started = time.perf_counter()
    frames = load_frames(datasets, config)
    train_mask, val_mask = split_by_episode(frames, config.validation_fraction, config.seed)
    train = frames.subset(train_mask)
    success_count = int(train.labels.sum())
    if success_count == 0:
        raise RewardClassifierError("no success frames to train on: record successful episodes or label success "
                                    "frames (`robot-rl label`)")
    if success_count == len(train):
        raise RewardClassifierError("no failure frames to train on: record failed episodes or label failure frames "
                                    "(`robot-rl label`)")
    shapes = {key: value.shape[1:] for key, value in frames.images.items()}
    module = _module(config, shapes)
    params = init_params(config, shapes, config.seed)
    optimizer = optax.adamw(config.learning_rate, weight_decay=config.weight_decay)
    opt_state = optimizer.init(params)
    images = {key: jnp.asarray(value) for key, value in train.images.items()}
    positives = jnp.asarray(np.flatnonzero(train.labels))
    negatives = jnp.asarray(np.flatnonzero(~train.labels))
    chunk = min(50, config.steps)
    run = _train_steps(config, module, optimizer, chunk)
    key = random_key(config.seed + 1)
    done, loss = 0, float("nan")
    while done < config.steps:
        if config.steps - done < chunk:  # the tail: one more compile, only when steps is not a multiple
            chunk = config.steps - done
            run = _train_steps(config, module, optimizer, chunk)
        key, sub = jax.random.split(key)
        params, opt_state, mean_loss = run(params, opt_state, images, positives, negatives, sub)
        done += chunk
        loss = float(mean_loss)
        if on_progress is not None:
            on_progress(done, loss)
    classifier = RewardClassifier(config, shapes, params, image_transforms=frames.image_transforms)

    def counts(part: FrameSet) -> dict[str, int]:
        return {"episodes": len(np.unique(part.episode)), "frames": len(part), "success_frames": int(part.labels.sum()),
                "failure_frames": int((~part.labels).sum())}

    metrics: dict[str, Any] = {
        "datasets": [str(Path(p)) for p in datasets], "cameras": list(shapes), "train": counts(train),
        "final_train_loss": loss, "steps": config.steps,
    }
    validation = frames.subset(val_mask)
    if len(validation):
        probabilities = classifier.predict(validation.images)
        metrics["validation"] = {**counts(validation),
                                 **binary_metrics(probabilities, validation.labels, classifier.threshold)}
    else:
        metrics["validation"] = None
    metrics["seconds"] = round(time.perf_counter() - started, 1)
    return classifier, metrics


def check_output_folder(out: str | Path) -> Path:
    """The output folder must not exist, or be empty (checked before minutes of training)."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise RewardClassifierError(f"--out {out} exists and is not an empty folder; choose another one")
    return out


def save_atomically(classifier: RewardClassifier, out: str | Path, metrics: Mapping[str, Any]) -> Path:
    """Write the classifier folder under a temporary name and rename it into place (no half-made folder)."""
    out = check_output_folder(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.with_name(f".{out.name}.creating-{os.getpid()}")
    with interrupts.uninterrupted():  # a Ctrl-C now comes once the folder is in place: no staging folder left
        shutil.rmtree(staging, ignore_errors=True)
        try:
            classifier.save(staging, metrics)
            if out.exists():
                out.rmdir()  # empty (checked above)
            os.rename(staging, out)
        except OSError as exc:  # name the folder the user gave, not the staging folder beside it
            raise RewardClassifierError(
                f"--out {out}: cannot write the classifier there: {exc.strerror or exc}") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return out


def summary_line(out: str | Path, metrics: Mapping[str, Any]) -> str:
    train = metrics["train"]
    line = (f"trained reward classifier on {train['frames']} frames ({train['success_frames']} success) of "
            f"{train['episodes']} episodes, cameras {', '.join(metrics['cameras'])}, {metrics['steps']} steps in "
            f"{metrics['seconds']:.0f} s")
    val = metrics.get("validation")
    if val:
        def fmt(value):
            return "n/a" if value is None else f"{value:.3f}"

        line += (f"; held-out {val['episodes']} episodes ({val['success_frames']} success / "
                 f"{val['failure_frames']} failure frames): precision {fmt(val['precision'])} recall "
                 f"{fmt(val['recall'])} F1 {fmt(val['f1'])} at threshold {val['threshold']:g}")
    else:
        line += "; no held-out episodes (validation_fraction 0)"
    return line + f" -> {out}"


# ============================================================================================ interactive labels


LABEL_KEYS = {"s": "success", "f": "failure", "c": "clear", "n": "next", "b": "back", "]": "next episode",
              "[": "previous episode", "q": "quit"}


class LabelCursor:
    """The labelling tool's state: which frame is shown, and what a key does (pure; the window only draws it)."""

    def __init__(self, labels: FrameLabels, episode: int = 0):
        self.labels = labels
        self.episode = labels.episode_index(episode)
        self.frame = 0
        self.changed = 0

    def press(self, key: str) -> bool:
        """Apply one key (see LABEL_KEYS); returns False on quit. Labelling a frame moves to the next one."""
        action = LABEL_KEYS.get(key)
        count = self.labels.frames(self.episode)
        if action in ("success", "failure", "clear"):
            value = {"success": True, "failure": False, "clear": None}[action]
            self.changed += self.labels.set(self.episode, [self.frame], value)
            self.frame = min(self.frame + 1, count - 1)
        elif action == "next":
            self.frame = min(self.frame + 1, count - 1)
        elif action == "back":
            self.frame = max(self.frame - 1, 0)
        elif action in ("next episode", "previous episode"):
            step = 1 if action == "next episode" else -1
            self.episode = min(max(self.episode + step, 0), self.labels.reader.num_episodes - 1)
            self.frame = 0
        return action != "quit"

    def caption(self) -> str:
        label = self.labels.get(self.episode, self.frame)
        count = self.labels.frames(self.episode)
        final = "  (final observation)" if self.frame == count - 1 else ""
        text = {True: "SUCCESS", False: "FAILURE", None: "-"}[label]
        return f"episode {self.episode} frame {self.frame}/{count - 1}{final}  label {text}"


def display_available() -> str | None:
    """None if an OpenCV window can be opened here, else the reason."""
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return "no display ($DISPLAY is not set)"
    import cv2

    try:
        cv2.namedWindow("robot-rl label")
    except cv2.error:
        return "this OpenCV has no window support (opencv-python-headless)"
    return None


def label_interactively(dataset: str | Path, episode: int = 0, cameras: Sequence[str] = (), scale: int = 4) -> dict:
    """The OpenCV labelling window (keys in LABEL_KEYS); labels are saved after every change. Returns counts."""
    import cv2

    reason = display_available()
    if reason is not None:
        raise RewardClassifierError(f"cannot open the labelling window: {reason}; label without one: "
                                    "`robot-rl label DATASET --episode N --frames A:B --success` (or --failure), "
                                    "or `--import labels.json`")
    reader = DatasetReader(dataset)
    keys = list(resolve_cameras([reader], cameras))
    labels = FrameLabels.load(reader)
    cursor = LabelCursor(labels, episode)
    loaded: dict[int, list[np.ndarray]] = {}
    window = "robot-rl label"
    try:
        while True:
            if cursor.episode not in loaded:
                data = reader.read_episode(cursor.episode, keys=keys)
                loaded = {cursor.episode: [np.concatenate([data["obs"][k], data["final_obs"][k][None]])
                                           for k in keys]}
            tiles = np.concatenate([frames[cursor.frame] for frames in loaded[cursor.episode]], axis=1)
            tiles = cv2.resize(tiles, None, fx=scale, fy=scale, interpolation=cv2.INTER_NEAREST)
            canvas = np.concatenate([np.zeros((28, tiles.shape[1], 3), np.uint8), tiles])
            cv2.putText(canvas, cursor.caption(), (4, 19), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 255), 1)
            cv2.putText(canvas, "s success  f failure  c clear  n next  b back  [ ] episode  q quit",
                        (4, canvas.shape[0] - 6), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (255, 255, 0), 1)
            cv2.imshow(window, cv2.cvtColor(canvas, cv2.COLOR_RGB2BGR))
            key = cv2.waitKey(0) & 0xFF
            before = cursor.changed
            if not cursor.press(chr(key)):
                break
            if cursor.changed != before:
                labels.save()
    finally:
        cv2.destroyAllWindows()
    if cursor.changed:
        labels.save()
    return labels.counts()
