"""Sequence windows of demonstration episodes for chunked policies (behaviour cloning of action chunks).

A window starting at step s of an episode of L steps holds the observations of steps s .. s+To-1 and the actions of
steps s .. s+T-1 (To = obs horizon, T = prediction horizon). Every step of an episode is the newest observation of
exactly one window, so windows start To-1 steps before the episode and end up to T-To steps after it; the steps
outside are the first / last step repeated (edge padding): the policy learns to act from the very first observation
and to hold still at the end. (Diffusion Policy pads the end by only Ta-1 steps; on episodes not much longer than a
chunk, such as a 14-step pick, that would leave the last T-Ta observations, the grasp, without a window.) Everything
is loaded into RAM once; a batch is one fancy index per array.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from robot_rl.data.episodes import DatasetError, EpisodeDataset


@dataclasses.dataclass(frozen=True)
class WindowBatch:
    """Observations (key -> (B, To, ...)) and actions (B, T, action_dim) of B windows."""

    obs: dict[str, np.ndarray]
    actions: np.ndarray


class SequenceWindows:
    """Every padded window of the episodes of one or more datasets, sampled from RAM."""

    def __init__(self, datasets: Sequence[str | Path | EpisodeDataset], observation_keys: Sequence[str], *,
                 obs_horizon: int, prediction_horizon: int, action_horizon: int):
        if not datasets:
            raise DatasetError("no dataset given")
        if not (1 <= obs_horizon <= prediction_horizon and 1 <= action_horizon <= prediction_horizon):
            raise ValueError(f"horizons obs={obs_horizon} action={action_horizon} must be in [1, prediction="
                             f"{prediction_horizon}]")
        self.obs_horizon, self.prediction_horizon = int(obs_horizon), int(prediction_horizon)
        self.action_horizon = int(action_horizon)
        self.observation_keys = tuple(observation_keys)
        loaded = [d if isinstance(d, EpisodeDataset) else EpisodeDataset(d) for d in datasets]
        first = loaded[0]
        for data in loaded:
            missing = [k for k in self.observation_keys if k not in data.observation_spec]
            if missing:
                raise DatasetError(f"{data.path} has no observation {', '.join(missing)} (it stores "
                                   f"{', '.join(data.observation_spec)})")
            for key in self.observation_keys:
                if data.observation_spec[key] != first.observation_spec[key]:
                    raise DatasetError(f"{data.path}: {key} is {data.observation_spec[key].shape}, "
                                       f"{first.observation_spec[key].shape} in {first.path}")
            if data.action_spec != first.action_spec:
                raise DatasetError(f"{data.path}: actions are {data.action_spec.shape}, {first.action_spec.shape} in "
                                   f"{first.path}")
            if data.num_episodes == 0:
                raise DatasetError(f"{data.path} holds no episodes")
        self.datasets = loaded
        self.observation_spec = {k: first.observation_spec[k] for k in self.observation_keys}
        self.action_dim = int(first.action_spec.shape[0])
        self.obs = {k: np.concatenate([d.data[f"obs/{k}"] for d in loaded]) for k in self.observation_keys}
        self.actions = np.concatenate([d.data["action"] for d in loaded]).astype(np.float32)
        starts, lengths, offset = [], [], 0
        for data in loaded:
            starts.extend(offset + data.episode_starts)
            lengths.extend(data.episode_lengths)
            offset += data.num_steps
        self.episode_starts = np.asarray(starts, dtype=np.int64)
        self.episode_lengths = np.asarray(lengths, dtype=np.int64)
        self.episode_of_window, self.rows = self._windows()

    @property
    def num_episodes(self) -> int:
        return len(self.episode_starts)

    def __len__(self) -> int:
        return len(self.rows)

    def _windows(self) -> tuple[np.ndarray, np.ndarray]:
        """(episode of each window, (N, T) rows into the concatenated arrays, edge-padded)."""
        episodes, rows = [], []
        offsets = np.arange(self.prediction_horizon)
        for episode, (start, length) in enumerate(zip(self.episode_starts, self.episode_lengths)):
            first = -(self.obs_horizon - 1)
            last = length - self.obs_horizon  # the window whose newest observation is the episode's last step
            window_starts = np.arange(first, last + 1)
            steps = np.clip(window_starts[:, None] + offsets[None, :], 0, length - 1)
            rows.append(start + steps)
            episodes.append(np.full(len(window_starts), episode))
        return np.concatenate(episodes), np.concatenate(rows)

    def split(self, validation_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Window indices of training and validation episodes (whole episodes on one side; at least one episode
        is trained on)."""
        if not 0.0 <= validation_fraction < 1.0:
            raise ValueError(f"validation_fraction={validation_fraction} must be in [0, 1)")
        order = np.random.default_rng(seed).permutation(self.num_episodes)
        held = min(int(round(validation_fraction * self.num_episodes)), self.num_episodes - 1)
        validation = np.isin(self.episode_of_window, order[:held])
        return np.flatnonzero(~validation), np.flatnonzero(validation)

    def batch(self, indices: np.ndarray) -> WindowBatch:
        rows = self.rows[indices]
        obs = {k: v[rows[:, : self.obs_horizon]] for k, v in self.obs.items()}
        return WindowBatch(obs, self.actions[rows])

    def vector_statistics(self) -> dict[str, np.ndarray]:
        """Every step's vector observations and actions (key -> (N, d), "action" for actions), for a normaliser."""
        stats = {k: v.reshape(len(v), -1).astype(np.float32) for k, v in self.obs.items()
                 if not self.observation_spec[k].is_image}
        stats["action"] = self.actions
        return stats
