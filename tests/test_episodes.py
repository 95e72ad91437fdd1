"""Zarr episode datasets: round trip, validation on open, and crash safety under a real SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from robot_rl.data.episodes import ArraySpec, DatasetError, EpisodeDataset, EpisodeWriter

OBS_SPEC = {"state": ArraySpec((14,), "float32"), "images/front": ArraySpec((16, 16, 3), "uint8")}
ACTION_SPEC = ArraySpec((4,), "float32")


def make_obs(episode: int, t: int) -> dict[str, np.ndarray]:
    state = np.full(14, episode * 1000 + t, dtype=np.float32)
    image = np.full((16, 16, 3), (episode * 7 + t) % 256, dtype=np.uint8)
    return {"state": state, "images/front": image}


def write_episode(writer: EpisodeWriter, episode: int, length: int, intervene_every: int = 0) -> None:
    for t in range(length):
        writer.add_step(
            make_obs(episode, t),
            np.full(4, 0.01 * t, np.float32),
            reward=float(t == length - 1),
            terminated=t == length - 1,
            truncated=False,
            intervention=bool(intervene_every and t % intervene_every == 0),
            timestamp=0.1 * t,
        )
    writer.end_episode(make_obs(episode, length), success=episode % 2 == 0)


def assert_episode_intact(dataset: EpisodeDataset, episode: int) -> None:
    ep = dataset.episode(episode)
    length = len(ep["action"])
    for t in (0, length - 1):
        expected = make_obs(episode, t)
        np.testing.assert_array_equal(ep["obs"]["state"][t], expected["state"])
        np.testing.assert_array_equal(ep["obs"]["images/front"][t], expected["images/front"])
    np.testing.assert_array_equal(ep["final_obs"]["state"], make_obs(episode, length)["state"])


def new_writer(path: Path) -> EpisodeWriter:
    return EpisodeWriter(path, OBS_SPEC, ACTION_SPEC, fps=10, task="Test-v0")


def test_round_trip(tmp_path):
    writer = new_writer(tmp_path / "ds")
    for episode, length in enumerate([5, 3, 7]):
        write_episode(writer, episode, length, intervene_every=2)
    dataset = EpisodeDataset(tmp_path / "ds")
    assert dataset.num_episodes == 3 and dataset.num_steps == 15
    np.testing.assert_array_equal(dataset.episode_ends, [5, 8, 15])
    np.testing.assert_array_equal(dataset.success, [True, False, True])
    for episode in range(3):
        assert_episode_intact(dataset, episode)
    ep = dataset.episode(-1)
    assert ep["terminated"].tolist() == [False] * 6 + [True]
    assert ep["intervention"].tolist() == [True, False, True, False, True, False, True]
    np.testing.assert_allclose(ep["timestamp"], 0.1 * np.arange(7))
    next_index = dataset.next_observation_index()
    assert next_index[4] == -1 and next_index[7] == -1 and next_index[14] == -1 and next_index[5] == 6
    summary = dataset.summary()
    assert summary["episodes"] == 3 and summary["steps"] == 15
    assert summary["success_rate"] == pytest.approx(2 / 3)
    assert summary["keys"]["obs/images/front"] == {"shape": [15, 16, 16, 3], "dtype": "uint8"}
    assert summary["total_bytes"] > 0


def test_append_after_reopen_and_incompatible_spec(tmp_path):
    write_episode(new_writer(tmp_path / "ds"), 0, 4)
    writer = new_writer(tmp_path / "ds")
    assert writer.num_episodes == 1
    write_episode(writer, 1, 6)
    dataset = EpisodeDataset(tmp_path / "ds")
    assert dataset.num_episodes == 2
    assert_episode_intact(dataset, 0)
    assert_episode_intact(dataset, 1)
    other_spec = {**OBS_SPEC, "state": ArraySpec((7,), "float32")}
    with pytest.raises(DatasetError, match="observation spec"):
        EpisodeWriter(tmp_path / "ds", other_spec, ACTION_SPEC, fps=10, task="Test-v0")
    with pytest.raises(DatasetError, match="task"):
        EpisodeWriter(tmp_path / "ds", OBS_SPEC, ACTION_SPEC, fps=10, task="Other-v0")


def test_bad_steps_are_rejected_without_losing_the_episode(tmp_path):
    writer = new_writer(tmp_path / "ds")
    writer.add_step(make_obs(0, 0), np.zeros(4), 0.0, False, False)
    with pytest.raises(DatasetError, match="not finite"):
        writer.add_step(make_obs(0, 1), np.array([0, np.nan, 0, 0]), 0.0, False, False)
    with pytest.raises(DatasetError, match="missing key 'images/front'"):
        writer.add_step({"state": np.zeros(14)}, np.zeros(4), 0.0, False, False)
    with pytest.raises(DatasetError, match=r"obs\['state'\] has shape \(13,\)"):
        writer.add_step({**make_obs(0, 1), "state": np.zeros(13)}, np.zeros(4), 0.0, False, False)
    with pytest.raises(DatasetError, match="action has shape"):
        writer.add_step(make_obs(0, 1), np.zeros(7), 0.0, False, False)
    assert writer.pending_steps == 1
    writer.add_step(make_obs(0, 1), np.zeros(4), 1.0, True, False)
    writer.end_episode(make_obs(0, 2), success=True)
    assert EpisodeDataset(tmp_path / "ds").num_steps == 2


def test_reader_names_the_broken_part(tmp_path):
    path = tmp_path / "ds"
    writer = new_writer(path)
    for episode in range(2):
        write_episode(writer, episode, 5)

    with pytest.raises(DatasetError, match="not a robot_rl dataset"):
        EpisodeDataset(tmp_path / "nothing")

    group = zarr.open_group(str(path), mode="r+")
    group["data/reward"].resize((7,))
    with pytest.raises(DatasetError, match="data/reward has 7 steps .* 10 .*truncated"):
        EpisodeDataset(path)
    group["data/reward"].resize((10,))

    chunk = next((path / "data" / "obs" / "images" / "front" / "c").rglob("*"))
    while chunk.is_dir():
        chunk = next(chunk.iterdir())
    chunk.write_bytes(b"garbage" * 10)
    with pytest.raises(DatasetError, match="'data/obs/images/front' is corrupt"):
        EpisodeDataset(path)

    import shutil

    shutil.rmtree(path / "data" / "obs" / "images")
    with pytest.raises(DatasetError, match="'data/obs/images/front' is missing"):
        EpisodeDataset(path)

    group.attrs["schema_version"] = 99
    with pytest.raises(DatasetError, match="schema_version 99"):
        EpisodeDataset(path)


WRITER_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    import numpy as np
    import robot_rl.data.episodes as episodes
    from test_episodes import new_writer, write_episode

    kill_at = int(sys.argv[2])  # -1: run until killed from outside
    original_append = episodes._append
    def append_then_maybe_die(arr, index, values):
        original_append(arr, index, values)
        if index == kill_at and arr.path.endswith("episode_ends"):
            os.kill(os.getpid(), signal.SIGKILL)  # after every array is written, before the commit
    episodes._append = append_then_maybe_die

    writer = new_writer(sys.argv[1])
    episode = writer.num_episodes
    while True:
        write_episode(writer, episode, 20 + episode % 5)
        print(episode, flush=True)
        episode += 1
    """
)


def start_writer(tmp_path: Path, path: Path, kill_at: int) -> subprocess.Popen:
    script = tmp_path / "writer.py"
    script.write_text(WRITER_SCRIPT.format(tests=str(Path(__file__).parent)))
    return subprocess.Popen(
        [sys.executable, str(script), str(path), str(kill_at)], stdout=subprocess.PIPE, text=True
    )


def test_sigkill_just_before_commit_leaves_earlier_episodes_and_hides_the_partial_one(tmp_path):
    path = tmp_path / "ds"
    proc = start_writer(tmp_path, path, kill_at=3)
    proc.wait(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    dataset = EpisodeDataset(path)
    assert dataset.num_episodes == 3
    assert dataset.uncommitted_steps > 0  # episode 3's steps reached disk but were never committed
    for episode in range(3):
        assert_episode_intact(dataset, episode)
    writer = new_writer(path)  # reopening truncates the uncommitted tail, then appends cleanly
    write_episode(writer, 3, 6)
    dataset = EpisodeDataset(path)
    assert dataset.num_episodes == 4 and dataset.uncommitted_steps == 0
    for episode in range(4):
        assert_episode_intact(dataset, episode)


@pytest.mark.parametrize("delay", [0.7, 1.3])
def test_sigkill_at_a_random_moment(tmp_path, delay):
    path = tmp_path / "ds"
    proc = start_writer(tmp_path, path, kill_at=-1)
    deadline = time.monotonic() + 120
    while not (proc.stdout.readline() or "").strip().startswith("1"):  # two episodes committed
        assert time.monotonic() < deadline and proc.poll() is None
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    dataset = EpisodeDataset(path)
    assert dataset.num_episodes >= 2
    for episode in range(dataset.num_episodes):
        assert_episode_intact(dataset, episode)
