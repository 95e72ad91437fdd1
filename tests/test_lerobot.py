"""LeRobot v3.0 export and import: the layout LeRobot reads, a round trip, datasets LeRobot wrote, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from robot_rl.data.episodes import DatasetError, DatasetReader, EpisodeDataset
from robot_rl.data.lerobot import export_lerobot, import_lerobot
from robot_rl.sim.loop import make_env, writer_for_env
from robot_rl.sim.expert import make_expert

STEP_ARRAYS = ("action", "reward", "terminated", "truncated", "intervention")


def record_sim_episodes(path: Path) -> Path:
    """Three scripted PickCube episodes at 64 px with every flag exercised: interventions (episodes 0 and 1),
    a truncated failure (episode 1), an unseeded episode (2)."""
    env = make_env("PickCube-v0", obs_mode="state+pixels", image_size=64)
    try:
        writer = writer_for_env(env, path, "PickCube-v0")
        expert = make_expert(env, seed=0)
        for episode in range(3):
            obs, _ = env.reset(seed=episode)
            expert.reset()
            t, info = 0, {}
            while True:
                action = expert.act(obs)
                next_obs, reward, terminated, truncated, info = env.step(action)
                truncated = truncated or (episode == 1 and t == 5)
                writer.add_step(obs, action, reward, terminated, truncated, intervention=episode < 2 and t % 3 == 0,
                                timestamp=0.1 * t)
                obs, t = next_obs, t + 1
                if terminated or truncated:
                    break
            writer.end_episode(obs, success=bool(info["success"]) and not truncated,
                               seed=None if episode == 2 else 100 + episode)
    finally:
        env.close()
    return path


@pytest.fixture(scope="module")
def sim_dataset(tmp_path_factory) -> Path:
    return record_sim_episodes(tmp_path_factory.mktemp("sim") / "demos.zarr")


@pytest.mark.parametrize("file_mb", [None, 0.004], ids=["one-file", "several-files"])
def test_round_trip_keeps_steps_flags_and_boundaries_exactly_and_images_within_codec_error(
        sim_dataset, tmp_path, file_mb):
    sizes = {} if file_mb is None else {"data_file_mb": file_mb, "video_file_mb": file_mb}
    export_lerobot(sim_dataset, tmp_path / "lerobot", **sizes)
    if file_mb is not None:  # the small limits really split the data and the videos over several files
        assert len(list((tmp_path / "lerobot" / "data").glob("*/*.parquet"))) > 1
        assert len(list((tmp_path / "lerobot" / "videos" / "observation.images.front").glob("*/*.mp4"))) > 1
    assert import_lerobot(tmp_path / "lerobot", tmp_path / "back.zarr") == 3

    original, back = EpisodeDataset(sim_dataset), EpisodeDataset(tmp_path / "back.zarr")
    assert back.task == "PickCube-v0" and back.fps == 10
    np.testing.assert_array_equal(back.episode_ends, original.episode_ends)
    for name in STEP_ARRAYS:
        np.testing.assert_array_equal(back.data[name], original.data[name], err_msg=name)
    assert original.data["intervention"].any() and original.data["truncated"].any()  # the flags were exercised
    np.testing.assert_array_equal(back.success, original.success)
    assert back.seeds.tolist() == original.seeds.tolist() == [100, 101, -1]
    for key in ("state", "object_state"):
        np.testing.assert_array_equal(back.data[f"obs/{key}"], original.data[f"obs/{key}"])
    for camera in ("images/front", "images/wrist"):
        stored, decoded = original.data[f"obs/{camera}"].astype(int), back.data[f"obs/{camera}"].astype(int)
        error = np.abs(decoded - stored).mean(axis=(1, 2, 3))
        assert error.mean() < 4 and error.max() < 8, f"{camera}: mean abs error {error.mean():.2f} grey levels"
        before = np.abs(decoded[1:] - stored[:-1]).mean(axis=(1, 2, 3))  # each frame against its neighbours
        after = np.abs(decoded[:-1] - stored[1:]).mean(axis=(1, 2, 3))
        assert error.sum() < 0.5 * min(before.sum(), after.sum()), "frames must line up with their own steps"
    # LeRobot has no observation after the last step: the last one stands in
    for index in range(3):
        last = original.episode(index)["obs"]["state"][-1]
        np.testing.assert_array_equal(back.episode(index)["final_obs"]["state"], last)


def test_export_writes_the_v3_layout_lerobot_reads(sim_dataset, tmp_path):
    root = tmp_path / "lerobot"
    export_lerobot(sim_dataset, root)
    original = EpisodeDataset(sim_dataset)
    info = json.loads((root / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == 10
    assert info["total_episodes"] == 3 and info["total_frames"] == original.num_steps and info["total_tasks"] == 1
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    assert info["chunks_size"] == 1000 and info["splits"] == {"train": "0:3"}
    features = info["features"]
    assert features["observation.state"]["shape"] == [14] and features["action"]["shape"] == [4]
    assert features["observation.environment_state"]["shape"] == [10]
    assert features["observation.images.front"]["dtype"] == "video"
    assert features["observation.images.front"]["shape"] == [64, 64, 3]
    assert features["complementary_info.is_intervention"] == {"dtype": "float32", "shape": [1], "names": None,
                                                              "fps": 10}
    for name in ("timestamp", "frame_index", "episode_index", "index", "task_index", "next.reward", "next.done"):
        assert name in features

    data = pq.read_table(root / "data" / "chunk-000" / "file-000.parquet")
    assert set(data.column_names) == {name for name, f in features.items() if f["dtype"] != "video"}
    assert data.schema.field("action").type == pa.list_(pa.float32(), 4)  # a fixed-size list, as `datasets` writes
    assert data.schema.field("next.reward").type == pa.float32()
    assert data.schema.field("next.done").type == pa.bool_()
    assert data.column("index").to_pylist() == list(range(original.num_steps))
    assert np.allclose(data.column("timestamp").to_numpy()[:3], [0.0, 0.1, 0.2])

    episodes = pq.read_table(root / "meta" / "episodes" / "chunk-000" / "file-000.parquet").to_pylist()
    assert [e["episode_index"] for e in episodes] == [0, 1, 2]
    assert [e["length"] for e in episodes] == original.episode_lengths.tolist()
    assert [e["dataset_to_index"] for e in episodes] == original.episode_ends.tolist()
    assert episodes[0]["tasks"] == ["PickCube-v0"] and episodes[1]["dataset_from_index"] == episodes[0]["length"]
    assert episodes[1]["videos/observation.images.front/from_timestamp"] == pytest.approx(episodes[0]["length"] / 10)
    assert episodes[2]["videos/observation.images.wrist/to_timestamp"] == pytest.approx(original.num_steps / 10)
    assert len(episodes[0]["stats/observation.images.front/mean"]) == 3  # per channel, (3, 1, 1)
    assert episodes[0]["stats/action/count"] == [episodes[0]["length"]]

    tasks = pq.read_table(root / "meta" / "tasks.parquet")
    assert tasks.column("task").to_pylist() == ["PickCube-v0"] and tasks.column("task_index").to_pylist() == [0]
    assert json.loads(tasks.schema.metadata[b"pandas"])["index_columns"] == ["task"]  # pandas reads task as index

    stats = json.loads((root / "meta" / "stats.json").read_text())
    assert stats["action"]["count"] == [original.num_steps]
    np.testing.assert_allclose(stats["action"]["mean"], original.data["action"].mean(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats["action"]["max"], original.data["action"].max(axis=0))
    assert 0 <= min(sum(stats["observation.images.front"]["mean"], [])[0]) <= 1

    with av.open(str(root / "videos" / "observation.images.front" / "chunk-000" / "file-000.mp4")) as video:
        stream = video.streams.video[0]
        assert (stream.codec_context.name, stream.codec_context.pix_fmt) == ("h264", "yuv420p")
        times = [frame.time for frame in video.decode(stream)]
    np.testing.assert_allclose(times, np.arange(original.num_steps) / 10, atol=1e-6)


def write_dataset_like_lerobot(root: Path, *, fps: int = 30, lengths=(7, 5)) -> dict:
    """A v3.0 dataset laid out as LeRobot's own writer does (independently of our exporter): AV1 video at LeRobot's
    default encoder settings, the data split over two files, variable-length list columns, extra columns and
    features we do not use, no next.truncated / success / seed."""
    rng = np.random.default_rng(0)
    total = sum(lengths)
    state = rng.normal(size=(total, 6)).astype(np.float32)
    action = rng.uniform(-1, 1, size=(total, 6)).astype(np.float32)
    reward = np.zeros(total, np.float32)
    done = np.zeros(total, bool)
    ends = np.cumsum(lengths)
    reward[ends[0] - 1], done[ends - 1] = 1.0, True
    intervention = (np.arange(total) % 4 == 1).astype(np.float32)
    frames = np.zeros((total, 64, 96, 3), np.uint8)
    for i in range(total):
        frames[i, :, :, 0] = 30 + 10 * i  # brightness tells frames apart
        frames[i, 20:40, 10 + 3 * i : 30 + 3 * i] = (40, 200, 90)
    features = {
        "observation.state": {"dtype": "float32", "shape": [6], "names": [f"joint{i}" for i in range(6)]},
        "observation.images.laptop": {
            "dtype": "video", "shape": [64, 96, 3], "names": ["height", "width", "channels"],
            "info": {"video.fps": fps, "video.codec": "av1", "video.pix_fmt": "yuv420p", "video.g": 2,
                     "video.crf": 30, "is_depth_map": False, "has_audio": False}},
        "action": {"dtype": "float32", "shape": [6], "names": [f"joint{i}" for i in range(6)]},
        "next.reward": {"dtype": "float32", "shape": [1], "names": None},
        "next.done": {"dtype": "bool", "shape": [1], "names": None},
        "complementary_info.discrete_penalty": {"dtype": "float32", "shape": [1], "names": ["discrete_penalty"]},
        "complementary_info.is_intervention": {"dtype": "float32", "shape": [1], "names": None},
        "timestamp": {"dtype": "float32", "shape": [1], "names": None},
        "frame_index": {"dtype": "int64", "shape": [1], "names": None},
        "episode_index": {"dtype": "int64", "shape": [1], "names": None},
        "index": {"dtype": "int64", "shape": [1], "names": None},
        "task_index": {"dtype": "int64", "shape": [1], "names": None},
    }
    info = {"codebase_version": "v3.0", "robot_type": "so100_follower", "total_episodes": len(lengths),
            "total_frames": total, "total_tasks": 1, "chunks_size": 1000, "data_files_size_in_mb": 100,
            "video_files_size_in_mb": 200, "fps": fps, "splits": {"train": f"0:{len(lengths)}"},
            "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
            "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
            "features": features}
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=4))

    video_file = root / "videos" / "observation.images.laptop" / "chunk-000" / "file-000.mp4"
    video_file.parent.mkdir(parents=True)
    with av.open(str(video_file), "w") as container:
        stream = container.add_stream("libsvtav1", rate=fps, options={"crf": "30", "g": "2", "preset": "12"})
        stream.width, stream.height, stream.pix_fmt = 96, 64, "yuv420p"
        for i, image in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            frame.pts = i
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)

    episode_rows, start = [], 0
    for episode, length in enumerate(lengths):
        rows = slice(start, start + length)
        table = pa.table({
            "observation.state": pa.array(state[rows].tolist(), pa.list_(pa.float32())),  # variable-length lists
            "action": pa.array(action[rows].tolist(), pa.list_(pa.float32())),
            "next.reward": pa.array(reward[rows]),
            "next.done": pa.array(done[rows]),
            "complementary_info.discrete_penalty": pa.array(np.zeros(length, np.float32)),
            "complementary_info.is_intervention": pa.array(intervention[rows].reshape(-1, 1).tolist(),
                                                           pa.list_(pa.float32(), 1)),
            "timestamp": pa.array((np.arange(length) / fps).astype(np.float32)),
            "frame_index": pa.array(np.arange(length)),
            "episode_index": pa.array(np.full(length, episode)),
            "index": pa.array(np.arange(start, start + length)),
            "task_index": pa.array(np.zeros(length, np.int64)),
        })
        file = root / "data" / "chunk-000" / f"file-{episode:03d}.parquet"
        file.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.take(np.arange(length)[::-1]), file)  # rows in any order: frame_index sorts them
        episode_rows.append({
            "episode_index": episode, "tasks": ["Pick up the cube"], "length": length,
            "data/chunk_index": 0, "data/file_index": episode, "dataset_from_index": start,
            "dataset_to_index": start + length,
            "videos/observation.images.laptop/chunk_index": 0, "videos/observation.images.laptop/file_index": 0,
            "videos/observation.images.laptop/from_timestamp": start / fps,
            "videos/observation.images.laptop/to_timestamp": (start + length) / fps,
            "stats/action/mean": action[rows].mean(axis=0).tolist(), "stats/action/count": [length],
            "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0,
        })
        start += length
    (root / "meta" / "episodes" / "chunk-000").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(episode_rows), root / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    pq.write_table(pa.table({"task_index": [0], "task": ["Pick up the cube"]}), root / "meta" / "tasks.parquet")
    return {"state": state, "action": action, "reward": reward, "done": done, "intervention": intervention > 0.5,
            "frames": frames, "ends": ends}


def test_import_reads_a_dataset_as_lerobot_writes_it(tmp_path):
    expected = write_dataset_like_lerobot(tmp_path / "so100")
    assert import_lerobot(tmp_path / "so100", tmp_path / "ds.zarr") == 2
    dataset = EpisodeDataset(tmp_path / "ds.zarr")
    assert dataset.task == "Pick up the cube" and dataset.fps == 30 and dataset.attrs["robot"] == "so100_follower"
    assert sorted(dataset.observation_spec) == ["images/laptop", "state"]
    np.testing.assert_array_equal(dataset.episode_ends, expected["ends"])
    np.testing.assert_array_equal(dataset.data["obs/state"], expected["state"])
    np.testing.assert_array_equal(dataset.data["action"], expected["action"])
    np.testing.assert_array_equal(dataset.data["reward"], expected["reward"])
    np.testing.assert_array_equal(dataset.data["intervention"], expected["intervention"])
    np.testing.assert_array_equal(dataset.data["terminated"], expected["done"])  # done and not truncated
    assert not dataset.data["truncated"].any()
    np.testing.assert_allclose(dataset.data["timestamp"][:3], [0, 1 / 30, 2 / 30], atol=1e-6)
    images = dataset.data["obs/images/laptop"].astype(int)
    error = np.abs(images - expected["frames"]).mean(axis=(1, 2, 3))
    assert error.max() < 6, f"AV1 decode error {error.max():.2f} grey levels"
    np.testing.assert_allclose(images[:, 5, 5, 0], 30 + 10 * np.arange(len(images)), atol=6)  # each its own frame
    assert dataset.success.tolist() == [False, False] and dataset.seeds.tolist() == [-1, -1]
    assert DatasetReader(tmp_path / "ds.zarr").verify() == []


def test_bad_lerobot_input_is_one_clear_error_and_leaves_nothing(tmp_path, sim_dataset):
    out = tmp_path / "out.zarr"
    with pytest.raises(DatasetError, match=r"meta/info.json is missing: not a LeRobot dataset"):
        import_lerobot(sim_dataset, out)  # a zarr dataset is not a LeRobot one
    with pytest.raises(DatasetError, match="no such directory"):
        import_lerobot(tmp_path / "nowhere", out)

    root = tmp_path / "lerobot"
    write_dataset_like_lerobot(root)
    info_text = (root / "meta" / "info.json").read_text()
    (root / "meta" / "info.json").write_text(info_text[:100])
    with pytest.raises(DatasetError, match=r"meta/info.json: not valid JSON .* truncated or damaged"):
        import_lerobot(root, out)
    (root / "meta" / "info.json").write_text(info_text.replace('"v3.0"', '"v2.1"'))
    with pytest.raises(DatasetError, match="codebase_version 'v2.1'; this reads LeRobot v3"):
        import_lerobot(root, out)
    (root / "meta" / "info.json").write_text(info_text)

    video = root / "videos" / "observation.images.laptop" / "chunk-000" / "file-000.mp4"
    video.rename(video.with_suffix(".bak"))
    with pytest.raises(DatasetError, match=r"file-000.mp4 is missing \(episode 0\)"):
        import_lerobot(root, out)
    video.with_suffix(".bak").rename(video)
    data = root / "data" / "chunk-000" / "file-001.parquet"
    data.write_bytes(data.read_bytes()[:50])  # episode 1's data: the import fails after episode 0 is written
    with pytest.raises(DatasetError, match=r"file-001.parquet: unreadable parquet"):
        import_lerobot(root, out)
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder either


def test_export_refuses_damaged_data_and_existing_output(sim_dataset, tmp_path):
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("mine")
    with pytest.raises(DatasetError, match="already exists; choose a new output path"):
        export_lerobot(sim_dataset, occupied)
    assert [p.name for p in occupied.iterdir()] == ["keep.txt"]

    damaged = tmp_path / "damaged.zarr"
    shutil.copytree(sim_dataset, damaged)
    (damaged / "data" / "obs" / "images" / "wrist" / "c" / "0" / "0" / "0" / "0").unlink()
    with pytest.raises(DatasetError, match=r"data/obs/images/wrist: episode 0 .* chunk .* is missing"):
        export_lerobot(damaged, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
