"""Sequence windows for chunked behaviour cloning: edge padding at both ends, whole episodes per split side,
statistics for the normaliser, and clear errors for datasets that do not fit together."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.data.episode_writer import EpisodeWriter
from robot_rl.data.episodes import DatasetError
from robot_rl.data.sequences import SequenceWindows
from robot_rl.core.types import ArraySpec


def write(path, lengths, state_dim: int = 1, task: str = "Toy-v0"):
    """Episodes whose state and action at step t are 100 * episode + t (so a row says where it came from)."""
    specs = {"state": ArraySpec((state_dim,), "float32"), "images/front": ArraySpec((4, 4, 3), "uint8")}
    with EpisodeWriter(path, specs, ArraySpec((2,), "float32"), fps=10.0, task=task) as writer:
        for episode, length in enumerate(lengths):
            for t in range(length):
                value = 100.0 * episode + t
                writer.add_step({"state": np.full(state_dim, value, np.float32),
                                 "images/front": np.full((4, 4, 3), t, np.uint8)},
                                np.full(2, value, np.float32), 0.0, False, t == length - 1)
            writer.end_episode({"state": np.zeros(state_dim, np.float32),
                                "images/front": np.zeros((4, 4, 3), np.uint8)}, success=True, seed=episode)
    return path


def test_windows_are_edge_padded_at_both_ends(tmp_path):
    windows = SequenceWindows([write(tmp_path / "d", [10])], ["state", "images/front"], obs_horizon=2,
                              prediction_horizon=4, action_horizon=3)
    # starts from -(To-1) = -1 to L - To = 8: every step is the newest observation of one window
    assert len(windows) == 10
    first = windows.batch(np.array([0]))
    np.testing.assert_array_equal(first.obs["state"][0, :, 0], [0, 0])  # step -1 is step 0 repeated
    np.testing.assert_array_equal(first.actions[0, :, 0], [0, 0, 1, 2])
    assert first.obs["images/front"].shape == (1, 2, 4, 4, 3)
    last = windows.batch(np.array([len(windows) - 1]))
    np.testing.assert_array_equal(last.actions[0, :, 0], [8, 9, 9, 9])  # past the end: the last action repeated
    np.testing.assert_array_equal(last.obs["state"][0, :, 0], [8, 9])
    newest = windows.batch(np.arange(len(windows))).obs["state"][:, -1, 0]
    np.testing.assert_array_equal(newest, np.arange(10))


def test_episodes_shorter_than_a_chunk_have_a_window_at_every_step(tmp_path):
    """A 14-step pick with 16-step chunks: the grasp at the end is conditioned on too (the end is padded)."""
    windows = SequenceWindows([write(tmp_path / "d", [5, 14])], ["state"], obs_horizon=2, prediction_horizon=16,
                              action_horizon=8)
    assert len(windows) == 5 + 14
    batch = windows.batch(np.arange(len(windows)))
    np.testing.assert_array_equal(batch.obs["state"][:, -1, 0], [*range(5), *(100 + t for t in range(14))])
    np.testing.assert_array_equal(batch.actions[4, :, 0], [3, 4] + [4] * 14)  # the last step holds its action


def test_windows_never_cross_episodes_and_the_split_keeps_episodes_whole(tmp_path):
    a = write(tmp_path / "a", [6, 8, 5])
    b = write(tmp_path / "b", [7])
    windows = SequenceWindows([a, b], ["state"], obs_horizon=2, prediction_horizon=4, action_horizon=2)
    assert windows.num_episodes == 4
    batch = windows.batch(np.arange(len(windows)))
    episode_of_action = batch.actions[..., 0] // 100
    assert (episode_of_action == episode_of_action[:, :1]).all()  # one episode per window
    train, validation = windows.split(0.5, seed=0)
    assert len(train) + len(validation) == len(windows)
    assert not set(windows.episode_of_window[train]) & set(windows.episode_of_window[validation])
    assert len(set(windows.episode_of_window[validation])) == 2
    stats = windows.vector_statistics()
    assert set(stats) == {"state", "action"} and stats["action"].shape == (26, 2)


def test_datasets_that_do_not_fit_together_are_named(tmp_path):
    a = write(tmp_path / "a", [5])
    wide = write(tmp_path / "wide", [5], state_dim=3)
    with pytest.raises(DatasetError, match="state is"):
        SequenceWindows([a, wide], ["state"], obs_horizon=2, prediction_horizon=4, action_horizon=2)
    with pytest.raises(DatasetError, match="has no observation object_state"):
        SequenceWindows([a], ["object_state"], obs_horizon=2, prediction_horizon=4, action_horizon=2)
    with pytest.raises(ValueError, match="horizons"):
        SequenceWindows([a], ["state"], obs_horizon=5, prediction_horizon=4, action_horizon=2)
