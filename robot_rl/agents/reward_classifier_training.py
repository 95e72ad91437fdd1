"""Training a success classifier (robot_rl.agents.reward_classifier) on recorded datasets, and writing it out.

- **Training frames.** An episode of T steps has T + 1 frames: the observations ``data/obs`` before each step, then
  ``meta/final_obs`` (frame T). Success frames: the last ``success_frames`` frames of each successful episode (the
  final observation included) and every frame a human labelled success. Failure frames: every frame of a failed
  episode, the frames of a successful episode that come more than ``margin`` frames before its success frames
  (the frames in between are ambiguous and left out), and every frame a human labelled failure. A human label
  always wins over the automatic one (the labels: robot_rl.agents.frame_labels).
- **Training.** Sigmoid cross-entropy on class-balanced batches (half success, half failure) with DrQ random-shift
  augmentation (robot_rl.agents.augment) and AdamW, several jitted steps per call (``lax.scan``).
- **Validation** is on held-out *episodes* (split by episode, stratified by whether an episode has success frames),
  never on frames of an episode seen in training: neighbouring frames are near copies.
- **Output.** The classifier's folder is written under a temporary name and renamed into place.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.agents.frame_labels import FrameLabels
from robot_rl.agents.reward_classifier import (
    RewardClassifier,
    RewardClassifierConfig,
    RewardClassifierError,
    classifier_network,
    init_params,
    random_key,
    resolve_cameras,
)
from robot_rl.core import interrupts
from robot_rl.data.episodes import DatasetReader


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
    module = classifier_network(config, shapes)
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
