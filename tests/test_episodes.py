"""Zarr episode datasets: round trip, validation on open, and crash safety under a real SIGKILL."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from robot_rl.core.types import ArraySpec
from robot_rl.data.episode_writer import EpisodeWriter
from robot_rl.data.episodes import DatasetError, DatasetReader, EpisodeDataset

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
    writer.close()


@pytest.mark.parametrize("obs_spec, action_spec, task, message", [
    ({**OBS_SPEC, "images/front": ArraySpec((32, 32, 3), "uint8")}, ACTION_SPEC, "Test-v0",
     "observations differ from the dataset's (images/front is 16x16x3 uint8 in the dataset, 32x32x3 uint8 here): "
     "record with --image-size 16, or into another dataset"),
    ({"state": OBS_SPEC["state"]}, ACTION_SPEC, "Test-v0",
     "observations differ from the dataset's (images/front is stored but not given): record with the dataset's "
     "--obs-mode and --image-size, or into another dataset"),
    ({**OBS_SPEC, "state": ArraySpec((7,), "float32")}, ArraySpec((2,), "float32"), "Other-v0",
     "dataset task is 'Test-v0', not 'Other-v0'; record Other-v0 into another dataset"),  # the task first
    (OBS_SPEC, ArraySpec((7,), "float32"), "Test-v0", "actions are 4 float32 in the dataset, 7 float32 here"),
])
def test_an_incompatible_append_names_only_what_differs(tmp_path, obs_spec, action_spec, task, message):
    write_episode(new_writer(tmp_path / "ds"), 0, 4)
    with pytest.raises(DatasetError) as error:
        EpisodeWriter(tmp_path / "ds", obs_spec, action_spec, fps=10, task=task)
    assert str(error.value) == f"{tmp_path / 'ds'}: {message}"


def test_a_second_writer_is_refused_while_the_first_is_open(tmp_path):
    """Two recordings into one dataset would write their episodes over each other's and both report success."""
    path = tmp_path / "ds"
    first = new_writer(path)
    write_episode(first, 0, 4)  # creates the dataset: the lock is held from then on
    with pytest.raises(DatasetError, match=re.escape(f"{path} is being written by another writer")):
        new_writer(path)
    write_episode(first, 1, 5)
    first.close()
    with pytest.raises(DatasetError, match="this writer was closed"):
        write_episode(first, 2, 3)
    with new_writer(path) as second:  # released: appending goes on
        write_episode(second, 2, 3)
        with pytest.raises(DatasetError, match="being written by another writer"):
            new_writer(path)
    dataset = EpisodeDataset(path)
    assert dataset.episode_lengths.tolist() == [4, 5, 3]
    for episode in range(3):
        assert_episode_intact(dataset, episode)
    write_episode(new_writer(path), 3, 2)  # a writer dropped without close() releases the lock too
    write_episode(new_writer(path), 4, 2)
    assert EpisodeDataset(path).num_episodes == 5


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

    chunk = path / "data" / "obs" / "images" / "front" / "c" / "0" / "0" / "0" / "0"
    chunk.write_bytes(b"garbage" * 10)
    with pytest.raises(DatasetError, match=r"data/obs/images/front: episode 0 \(steps 0-4\) cannot be read: "
                                           r"chunk data/obs/images/front/c/0/0/0/0 cannot be decoded"):
        EpisodeDataset(path)

    import shutil

    shutil.rmtree(path / "data" / "obs" / "images")
    with pytest.raises(DatasetError, match="'data/obs/images/front' is missing"):
        EpisodeDataset(path)

    group.attrs["schema_version"] = 99
    with pytest.raises(DatasetError, match="schema_version 99"):
        EpisodeDataset(path)


def three_episodes(path: Path) -> Path:
    writer = new_writer(path)
    for episode, length in enumerate([5, 3, 7]):
        write_episode(writer, episode, length)
    return path


@pytest.mark.parametrize(
    "array, chunk",
    [
        ("data/action", "c/0/0"),
        ("data/intervention", "c/0"),  # all False: a chunk of fill values is written all the same
        ("data/obs/images/front", "c/0/0/0/0"),
        ("meta/success", "c/0"),
        ("meta/final_obs/state", "c/0/0"),
    ],
)
def test_a_deleted_chunk_is_named_with_its_array_and_episodes(tmp_path, array, chunk):
    path = three_episodes(tmp_path / "ds")
    (path / array / chunk).unlink()
    first = r"\(steps 0-4\) " if array.startswith("data/") else ""
    with pytest.raises(DatasetError, match=rf"{array}: episode 0 {first}cannot be read: chunk {array}/{chunk} is "
                                           r"missing \(and 2 more\)"):
        EpisodeDataset(path)
    reader = DatasetReader(path)
    for damage in (reader.missing_chunks(), reader.verify()):
        assert [(d.array, d.episode) for d in damage] == [(array, 0), (array, 1), (array, 2)]
    with pytest.raises(DatasetError, match=rf"{array}: episode 1 .*{array}/{chunk} is missing"):
        reader.read_episode(1)
    with pytest.raises(DatasetError, match=rf"is damaged, not appending: {array}: episode 0"):
        new_writer(path)
    assert (path / "data" / "action" / "c" / "0" / "0").exists() or array == "data/action"  # nothing truncated


def test_values_altered_in_place_fail_their_checksum(tmp_path):
    path = three_episodes(tmp_path / "ds")
    zarr.open_group(str(path), mode="r+")["data/action"][6] = [0.5, 0.5, 0.5, 0.5]  # a valid chunk, other values
    assert DatasetReader(path).missing_chunks() == []  # every file is there: only the checksums can tell
    with pytest.raises(DatasetError, match=r"data/action: episode 1 \(steps 5-7\) fails its checksum .*"
                                           r"chunk data/action/c/0/0 was altered"):
        EpisodeDataset(path)
    damage = DatasetReader(path).verify()
    assert [(d.array, d.episode) for d in damage] == [("data/action", 1)]
    assert DatasetReader(path).read_episode(0)["action"].shape == (5, 4)  # episodes around it stay readable
    with pytest.raises(DatasetError, match="episode 1"):
        DatasetReader(path).read_episode(1)


@pytest.mark.parametrize("array", ["data/action", "data/reward", "data/obs/images/front", "meta/start_time"])
def test_flipped_bytes_are_never_read_silently(tmp_path, array):
    path = three_episodes(tmp_path / "ds")
    chunk = next(file for file in (path / array / "c").rglob("*") if file.is_file())
    original = chunk.read_bytes()
    name = array.split("/", 1)[1]
    expected = EpisodeDataset(path)
    expected = expected.data[name] if array.startswith("data/") else expected.start_time
    detected = 0
    for position in range(0, len(original), max(1, len(original) // 12)):
        damaged = bytearray(original)
        damaged[position] ^= 0x5A
        chunk.write_bytes(bytes(damaged))
        try:
            dataset = EpisodeDataset(path)
        except DatasetError as exc:
            assert f"{array}: episode " in str(exc)
            assert DatasetReader(path).verify(), f"verify misses byte {position} of {chunk}"
            detected += 1
        else:  # the flip landed where it changes no stored value (e.g. chunk padding)
            read = dataset.data[name] if array.startswith("data/") else dataset.start_time
            np.testing.assert_array_equal(read, expected)
    assert detected >= 8
    chunk.write_bytes(original)
    assert DatasetReader(path).verify() == []


@pytest.mark.parametrize("node", [".", "meta", "data/action", "meta/checksums"])
def test_a_truncated_zarr_json_names_the_file(tmp_path, node):
    path = three_episodes(tmp_path / "ds")
    file = path / node / "zarr.json"
    file.write_text(file.read_text()[:40])
    with pytest.raises(DatasetError, match=rf"{re.escape(str(file))}: unreadable zarr metadata"):
        EpisodeDataset(path)
    with pytest.raises(DatasetError, match="truncated or damaged"):
        new_writer(path)


def test_a_file_system_without_flock_still_records_with_a_warning(tmp_path, monkeypatch, caplog):
    import errno
    import fcntl

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with caplog.at_level("WARNING", logger="robot_rl.data.episode_writer"):
        write_episode(new_writer(tmp_path / "ds"), 0, 3)
        write_episode(new_writer(tmp_path / "ds"), 1, 2)
    assert EpisodeDataset(tmp_path / "ds").episode_lengths.tolist() == [3, 2]
    assert "cannot lock it against a second writer (No locks available)" in caplog.text


def test_seeds_are_stored_and_continued(tmp_path):
    path = tmp_path / "ds"
    writer = new_writer(path)
    assert writer.next_seed == 0
    for seed in (10, 11):
        writer.add_step(make_obs(0, 0), np.zeros(4), 1.0, True, False)
        writer.end_episode(make_obs(0, 1), success=True, seed=seed)
    writer.add_step(make_obs(0, 0), np.zeros(4), 1.0, True, False)
    writer.end_episode(make_obs(0, 1), success=True)  # no seed: a real robot
    writer.close()
    reopened = new_writer(path)
    assert reopened.seeds.tolist() == [10, 11, -1] and reopened.next_seed == 12
    assert EpisodeDataset(path).seeds.tolist() == [10, 11, -1]
    assert DatasetReader(path).read_episode(1)["seed"] == 11
    assert DatasetReader(path).summary()["seeds"] == {"min": 10, "max": 11, "count": 2}


def test_no_half_made_dataset(tmp_path):
    path = tmp_path / "out" / "ds"
    writer = new_writer(path)
    writer.add_step(make_obs(0, 0), np.zeros(4), 0.0, False, False)
    del writer  # nothing committed: nothing on disk
    assert not (tmp_path / "out").exists()
    (tmp_path / "empty").mkdir()
    write_episode(new_writer(tmp_path / "empty"), 0, 3)  # an empty folder is filled
    assert EpisodeDataset(tmp_path / "empty").num_episodes == 1
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(DatasetError, match="exists and is not a robot_rl dataset"):
        new_writer(tmp_path / "other")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging folder left behind


def make_schema_1(path: Path) -> Path:
    """A dataset as schema 1 wrote it: no seeds, no checksums."""
    import shutil

    three_episodes(path)
    shutil.rmtree(path / "meta" / "seed")
    shutil.rmtree(path / "meta" / "checksums")
    group = zarr.open_group(str(path), mode="r+")
    group.attrs["schema_version"] = 1
    return path


def test_schema_1_datasets_stay_readable_with_a_note(tmp_path):
    path = make_schema_1(tmp_path / "v1")
    dataset = EpisodeDataset(path)
    assert dataset.num_episodes == 3 and not dataset.verified
    assert dataset.seeds.tolist() == [-1, -1, -1]
    assert "no checksums" in dataset.notes[0]
    for episode in range(3):
        assert_episode_intact(dataset, episode)
    assert "no checksums" in DatasetReader(path).summary()["notes"][0]
    with pytest.raises(DatasetError, match="nothing to verify against"):
        DatasetReader(path).verify()
    with pytest.raises(DatasetError, match="schema_version 1 != 2; cannot append; it has no checksums"):
        new_writer(path)


def test_image_size_of_a_dataset(tmp_path):
    assert EpisodeDataset(three_episodes(tmp_path / "ds")).image_size == 16


WRITER_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    import numpy as np
    import robot_rl.data.episode_writer as episode_writer
    from test_episodes import new_writer, write_episode

    kill_at = int(sys.argv[2])  # -1: run until killed from outside
    kill_after = sys.argv[3]  # the array whose append is the last thing episode kill_at does
    original_append = episode_writer._append
    def append_then_maybe_die(arr, index, values):
        original_append(arr, index, values)
        if index == kill_at and arr.path.endswith(kill_after):
            os.kill(os.getpid(), signal.SIGKILL)
    episode_writer._append = append_then_maybe_die

    writer = new_writer(sys.argv[1])
    episode = writer.num_episodes
    while True:
        write_episode(writer, episode, 20 + episode % 5)
        print(episode, flush=True)
        episode += 1
    """
)


def start_writer(tmp_path: Path, path: Path, kill_at: int, kill_after: str = "checksums") -> subprocess.Popen:
    script = tmp_path / "writer.py"
    script.write_text(WRITER_SCRIPT.format(tests=str(Path(__file__).parent)))
    return subprocess.Popen(
        [sys.executable, str(script), str(path), str(kill_at), kill_after], stdout=subprocess.PIPE, text=True
    )


# checksums: the last write before the commit; episode_ends: the middle of the per-episode writes
@pytest.mark.parametrize("kill_at, kill_after", [(3, "checksums"), (3, "episode_ends"), (0, "checksums")])
def test_sigkill_just_before_commit_leaves_earlier_episodes_and_hides_the_partial_one(tmp_path, kill_at, kill_after):
    path = tmp_path / "ds"
    proc = start_writer(tmp_path, path, kill_at, kill_after)
    proc.wait(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    dataset = EpisodeDataset(path)  # verifies every committed episode's checksums
    assert dataset.num_episodes == kill_at
    assert dataset.uncommitted_steps > 0  # the killed episode's steps reached disk but were never committed
    for episode in range(kill_at):
        assert_episode_intact(dataset, episode)
    assert DatasetReader(path).verify() == []
    writer = new_writer(path)  # reopening truncates the uncommitted tail, then appends cleanly
    write_episode(writer, kill_at, 6)
    dataset = EpisodeDataset(path)
    assert dataset.num_episodes == kill_at + 1 and dataset.uncommitted_steps == 0
    for episode in range(kill_at + 1):
        assert_episode_intact(dataset, episode)
    assert DatasetReader(path).verify() == []


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
    assert DatasetReader(path).verify() == []
    write_episode(new_writer(path), dataset.num_episodes, 4)  # and the dataset takes new episodes
    assert DatasetReader(path).verify() == []
