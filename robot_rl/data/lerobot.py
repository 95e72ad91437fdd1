"""LeRobot v3.0 datasets: export a robot_rl dataset to LeRobot's layout and import one back.

LeRobot's v3.0 layout (written with pyarrow and PyAV; LeRobot itself is not needed)::

    meta/info.json                              codebase_version "v3.0", fps, features, path templates, totals
    meta/stats.json                             per-feature min / max / mean / std / count / q01..q99
    meta/tasks.parquet                          task_index, task (the pandas index)
    meta/episodes/chunk-000/file-000.parquet    one row per episode: length, tasks, frame range, data file,
                                                per camera its video file and from/to timestamps, stats/...
    data/chunk-000/file-000.parquet             one row per frame
    videos/<camera key>/chunk-000/file-000.mp4  every episode's frames back to back (H.264 here)

Names: ``state`` <-> ``observation.state``, ``object_state`` <-> ``observation.environment_state``,
``images/<cam>`` <-> ``observation.images.<cam>`` (a video feature), any other key ``k`` <->
``observation.k``; ``action``; ``next.reward``; ``next.done`` (terminated or truncated) with ``next.truncated``;
``next.success`` (True on the last frame of a successful episode); the intervention flag as
``complementary_info.is_intervention`` (float32 0/1, as LeRobot's RL replay buffer writes it). Episode
``success`` and ``seed`` are extra columns of the episodes table. LeRobot keeps no observation after an episode's
last step and its ``timestamp`` is ``frame_index / fps``: an import uses the last observation as ``final_obs`` and
LeRobot's timestamps.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from robot_rl.data.episode_format import UNKNOWN_SEED
from robot_rl.data.episode_writer import EpisodeWriter
from robot_rl.data.episodes import DatasetError, DatasetReader
from robot_rl.data.video import PIXEL_FORMAT, VideoEncoder
from robot_rl.core.types import ArraySpec

CODEBASE_VERSION = "v3.0"
CHUNKS_SIZE = 1000
DATA_FILE_MB = 100
VIDEO_FILE_MB = 200
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
INTERVENTION = "complementary_info.is_intervention"
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
IMAGE_STATS_FRAMES = 100
_RENAMED = {"state": "observation.state", "object_state": "observation.environment_state"}


def lerobot_key(key: str) -> str:
    """Our observation key -> LeRobot's feature name."""
    if key.startswith("images/"):
        return "observation.images." + key[len("images/") :].replace("/", ".")
    return _RENAMED.get(key, "observation." + key.replace("/", "."))


def robot_rl_key(feature: str, visual: bool) -> str:
    """LeRobot's observation feature name -> our observation key."""
    name = feature[len("observation.") :]
    if visual:
        return "images/" + (name[len("images.") :] if name.startswith("images.") else name)
    return {value: key for key, value in _RENAMED.items()}.get(feature, name)


# ----- export ----------------------------------------------------------------------------------------------------
class _FileSeries:
    """The chunk-XXX/file-YYY numbering of a series of files that each stop growing past a size."""

    def __init__(self, limit_mb: float, chunks_size: int = CHUNKS_SIZE):
        self.limit = limit_mb * 1024 * 1024
        self.chunks_size = chunks_size
        self.chunk, self.file = 0, -1

    def full(self, current_bytes: int, incoming_bytes: int = 0) -> bool:
        return current_bytes > 0 and current_bytes + incoming_bytes > self.limit

    def advance(self) -> None:
        self.file += 1
        if self.file == self.chunks_size:
            self.chunk, self.file = self.chunk + 1, 0


def _vector_column(values: np.ndarray) -> pa.Array:
    """(T,) -> a plain column; (T, D) -> fixed_size_list<D>, as LeRobot writes a (D,) feature."""
    if values.ndim == 1:
        return pa.array(values)
    flat = pa.array(np.ascontiguousarray(values).reshape(-1))
    return pa.FixedSizeListArray.from_arrays(flat, int(np.prod(values.shape[1:])))


def _stats(values: np.ndarray, *, image: bool = False) -> dict[str, np.ndarray]:
    """LeRobot's per-feature statistics: per dimension, or per channel as (3, 1, 1) in [0, 1] for images."""
    if image:
        values = values.astype(np.float64).transpose(0, 3, 1, 2) / 255.0  # (N, C, H, W)
        flat = values.transpose(1, 0, 2, 3).reshape(values.shape[1], -1).T  # (N*H*W, C)
        shape = (values.shape[1], 1, 1)
    else:
        flat = values.astype(np.float64).reshape(len(values), -1)
        shape = (flat.shape[1],)
    stats = {
        "min": flat.min(axis=0), "max": flat.max(axis=0), "mean": flat.mean(axis=0), "std": flat.std(axis=0),
        "count": np.array([len(values)]),
    }
    stats.update({f"q{round(q * 100):02d}": np.quantile(flat, q, axis=0) for q in QUANTILES})
    return {k: v if k == "count" else v.reshape(shape) for k, v in stats.items()}


def _aggregate_stats(episodes: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Dataset statistics from per-episode ones (count-weighted; quantiles averaged, as LeRobot does)."""
    counts = np.array([float(e["count"][0]) for e in episodes])
    weights = (counts / counts.sum()).reshape(-1, *([1] * episodes[0]["mean"].ndim))
    means = np.stack([e["mean"] for e in episodes])
    mean = (weights * means).sum(axis=0)
    variance = (weights * (np.stack([e["std"] for e in episodes]) ** 2 + (means - mean) ** 2)).sum(axis=0)
    stats = {
        "min": np.min([e["min"] for e in episodes], axis=0), "max": np.max([e["max"] for e in episodes], axis=0),
        "mean": mean, "std": np.sqrt(variance), "count": np.array([int(counts.sum())]),
    }
    for key in episodes[0]:
        if key.startswith("q"):
            stats[key] = (weights * np.stack([e[key] for e in episodes])).sum(axis=0)
    return stats


def _json_ready(stats: Mapping[str, Mapping[str, np.ndarray]]) -> dict:
    return {feature: {k: np.asarray(v).tolist() for k, v in values.items()} for feature, values in stats.items()}


def _tasks_table(tasks: list[str]) -> pa.Table:
    """meta/tasks.parquet as pandas writes LeRobot's DataFrame: `task_index` with the task strings as index."""
    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), "task": pa.array(tasks, pa.string())})
    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
                            "metadata": {"encoding": "UTF-8"}}],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
             "metadata": None},
            {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object",
             "metadata": None},
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3",
    }
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


def _fresh_output(out: Path, what: str) -> Path:
    """Check `out` can be created; return the staging folder the output is built in before it is renamed."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DatasetError(f"{out} already exists; choose a new output path for the {what}")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.with_name(f".{out.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    return staging


def _publish(staging: Path, out: Path) -> None:
    try:
        os.rename(staging, out)  # replaces an empty directory
    except OSError as exc:
        raise DatasetError(f"{out}: cannot move the finished output into place: {exc.strerror}") from None


def export_lerobot(
    path: str | Path,
    out: str | Path,
    *,
    crf: int = 18,
    data_file_mb: float = DATA_FILE_MB,
    video_file_mb: float = VIDEO_FILE_MB,
    on_episode: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Write the dataset at `path` as a LeRobot v3.0 dataset in `out` (created; nothing is left on failure).

    Every episode is read verified; returns the written `meta/info.json`.
    """
    reader = DatasetReader(path)
    out = Path(out)
    if not 0 <= crf <= 51:
        raise ValueError(f"crf must be in [0, 51] (H.264 quality), got {crf}")
    if reader.num_episodes == 0:
        raise DatasetError(f"{reader.path} holds no episodes; nothing to export")
    fps = round(reader.fps)
    if not math.isclose(fps, reader.fps, rel_tol=1e-6):
        raise DatasetError(f"{reader.path} is recorded at {reader.fps:g} fps; LeRobot datasets need a whole fps")
    cameras = [key for key, spec in reader.observation_spec.items() if spec.is_image]
    for key in cameras:
        height, width = reader.observation_spec[key].shape[:2]
        if height % 2 or width % 2:
            raise DatasetError(f"{reader.path}: {key} is {height}x{width}; H.264 (yuv420p) needs even sizes")
    vectors = [key for key in reader.observation_spec if key not in cameras]

    features: dict[str, dict[str, Any]] = {}
    for key in vectors:
        spec = reader.observation_spec[key]
        features[lerobot_key(key)] = {"dtype": spec.dtype, "shape": list(spec.shape) or [1], "names": None}
    for key in cameras:
        height, width, channels = reader.observation_spec[key].shape
        features[lerobot_key(key)] = {
            "dtype": "video", "shape": [height, width, channels], "names": ["height", "width", "channels"],
            "info": {"video.height": height, "video.width": width, "video.codec": "h264",
                     "video.pix_fmt": PIXEL_FORMAT, "is_depth_map": False, "video.fps": fps,
                     "video.channels": channels, "video.crf": crf, "video.g": 2, "has_audio": False},
        }
    features["action"] = {"dtype": reader.action_spec.dtype, "shape": list(reader.action_spec.shape), "names": None}
    features.update({
        "next.reward": {"dtype": "float32", "shape": [1], "names": None},
        "next.done": {"dtype": "bool", "shape": [1], "names": None},
        "next.truncated": {"dtype": "bool", "shape": [1], "names": None},
        "next.success": {"dtype": "bool", "shape": [1], "names": None},
        INTERVENTION: {"dtype": "float32", "shape": [1], "names": None},
        "timestamp": {"dtype": "float32", "shape": [1], "names": None},
        "frame_index": {"dtype": "int64", "shape": [1], "names": None},
        "episode_index": {"dtype": "int64", "shape": [1], "names": None},
        "index": {"dtype": "int64", "shape": [1], "names": None},
        "task_index": {"dtype": "int64", "shape": [1], "names": None},
    })
    for name, feature in features.items():
        if feature["dtype"] != "video":
            feature["fps"] = fps

    staging = _fresh_output(out, "LeRobot dataset")
    try:
        info = _write_lerobot(reader, staging, features, vectors, cameras, fps, crf, data_file_mb, video_file_mb,
                              on_episode)
        _publish(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return info


def _write_lerobot(reader: DatasetReader, root: Path, features, vectors, cameras, fps, crf, data_file_mb,
                   video_file_mb, on_episode) -> dict[str, Any]:
    data_files = _FileSeries(data_file_mb)
    video_files = {key: _FileSeries(video_file_mb) for key in cameras}
    encoders: dict[str, VideoEncoder] = {}
    offsets = dict.fromkeys(cameras, 0)  # frames already in each camera's current video file
    data_writer: pq.ParquetWriter | None = None
    data_bytes = 0
    episode_rows: list[dict[str, Any]] = []
    episode_stats: list[dict[str, dict[str, np.ndarray]]] = []
    frame = 0
    try:
        for index in range(reader.num_episodes):
            episode = reader.read_episode(index)
            length = len(episode["action"])
            done = episode["terminated"] | episode["truncated"]
            success = np.zeros(length, dtype=bool)
            success[-1] = episode["success"]
            columns: dict[str, np.ndarray] = {lerobot_key(key): episode["obs"][key] for key in vectors}
            columns.update({
                "action": episode["action"],
                "next.reward": episode["reward"].astype(np.float32),
                "next.done": done,
                "next.truncated": episode["truncated"],
                "next.success": success,
                INTERVENTION: episode["intervention"].astype(np.float32),
                "timestamp": (np.arange(length) / fps).astype(np.float32),
                "frame_index": np.arange(length, dtype=np.int64),
                "episode_index": np.full(length, index, dtype=np.int64),
                "index": np.arange(frame, frame + length, dtype=np.int64),
                "task_index": np.zeros(length, dtype=np.int64),
            })
            table = pa.table({name: _vector_column(values) for name, values in columns.items()})
            if data_writer is None or data_files.full(data_bytes, table.nbytes):
                if data_writer is not None:
                    data_writer.close()
                data_files.advance()
                file = root / DATA_PATH.format(chunk_index=data_files.chunk, file_index=data_files.file)
                file.parent.mkdir(parents=True, exist_ok=True)
                data_writer, data_bytes = pq.ParquetWriter(file, table.schema, compression="snappy"), 0
            data_writer.write_table(table)  # one row group per episode
            data_bytes += table.nbytes
            row: dict[str, Any] = {
                "episode_index": index, "tasks": [reader.task], "length": length,
                "data/chunk_index": data_files.chunk, "data/file_index": data_files.file,
                "dataset_from_index": frame, "dataset_to_index": frame + length,
            }
            stats = {name: _stats(values) for name, values in columns.items()}
            for key in cameras:
                frames = episode["obs"][key]
                files = video_files[key]
                if key not in encoders or files.full(encoders[key].encoded_bytes):
                    if key in encoders:
                        encoders.pop(key).close()
                    files.advance()
                    file = root / VIDEO_PATH.format(video_key=lerobot_key(key), chunk_index=files.chunk,
                                                    file_index=files.file)
                    file.parent.mkdir(parents=True, exist_ok=True)
                    encoders[key] = VideoEncoder(file, frames.shape[2], frames.shape[1], fps, crf=crf, gop=2)
                    offsets[key] = 0
                for image in frames:
                    encoders[key].write(image)
                video_key = lerobot_key(key)
                row.update({
                    f"videos/{video_key}/chunk_index": files.chunk, f"videos/{video_key}/file_index": files.file,
                    f"videos/{video_key}/from_timestamp": offsets[key] / fps,
                    f"videos/{video_key}/to_timestamp": (offsets[key] + length) / fps,
                })
                offsets[key] += length
                sample = np.linspace(0, length - 1, min(length, IMAGE_STATS_FRAMES)).round().astype(int)
                stats[video_key] = _stats(frames[sample], image=True)
            row.update({"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0,
                        "success": episode["success"], "seed": episode["seed"]})
            row.update({f"stats/{name}/{stat}": value.tolist() for name, values in stats.items()
                        for stat, value in values.items()})
            episode_rows.append(row)
            episode_stats.append(stats)
            frame += length
            if on_episode is not None:
                on_episode(index)
    finally:
        if data_writer is not None:
            data_writer.close()
        for encoder in encoders.values():
            encoder.close()

    episodes_file = root / EPISODES_PATH.format(chunk_index=0, file_index=0)
    episodes_file.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(episode_rows), episodes_file)
    pq.write_table(_tasks_table([reader.task]), root / "meta" / "tasks.parquet")
    names = [name for name in features if name in episode_stats[0]]
    stats = {name: _aggregate_stats([e[name] for e in episode_stats]) for name in names}
    (root / "meta" / "stats.json").write_text(json.dumps(_json_ready(stats), indent=2))
    info = {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": reader.attrs.get("robot"),
        "total_episodes": reader.num_episodes,
        "total_frames": frame,
        "total_tasks": 1,
        "chunks_size": CHUNKS_SIZE,
        "data_files_size_in_mb": data_file_mb,
        "video_files_size_in_mb": video_file_mb,
        "fps": fps,
        "splits": {"train": f"0:{reader.num_episodes}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if cameras else None,
        "features": features,
    }
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=4))
    return info


# ----- import ----------------------------------------------------------------------------------------------------
def _read_json(file: Path) -> dict:
    if not file.is_file():
        raise DatasetError(f"{file} is missing: not a LeRobot dataset")
    try:
        value = json.loads(file.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{file}: not valid JSON ({exc}); the file is truncated or damaged") from None
    if not isinstance(value, dict):
        raise DatasetError(f"{file}: expected a JSON object")
    return value


def _read_parquet(file: Path, columns: list[str] | None = None) -> pa.Table:
    if not file.is_file():
        raise DatasetError(f"{file} is missing")
    try:
        return pq.read_table(file, columns=columns)
    except (pa.ArrowException, OSError) as exc:
        raise DatasetError(f"{file}: unreadable parquet ({exc})") from None


def _column(table: pa.Table, name: str, file: Path) -> np.ndarray:
    """A column as a numpy array: (N,) for scalars, (N, ...) for (nested) lists of equal lengths."""
    if name not in table.column_names:
        raise DatasetError(f"{file}: column {name!r} is missing")
    column = table.column(name).combine_chunks()
    shape: list[int] = []
    while pa.types.is_list(column.type) or pa.types.is_large_list(column.type) or \
            pa.types.is_fixed_size_list(column.type):
        lengths = set(pc.list_value_length(column).to_pylist()) if len(column) else {0}
        if len(lengths) != 1 or None in lengths:
            raise DatasetError(f"{file}: column {name!r} holds lists of different lengths")
        shape.append(lengths.pop())
        column = column.flatten()
    return column.to_numpy(zero_copy_only=False).reshape(len(table), *shape)


def _scalars(table: pa.Table, name: str, file: Path, dtype) -> np.ndarray:
    """A per-frame scalar column (plain or a shape-(1,) list) as (N,); zeros where the dataset lacks it."""
    if name not in table.column_names:
        return np.zeros(len(table), dtype=dtype)
    return _column(table, name, file).reshape(len(table)).astype(dtype)


class _VideoFrames:
    """Decodes the frames at given timestamps from mp4 files, keeping each file open for the next episode."""

    def __init__(self, fps: float):
        self.tolerance = 0.4 / fps
        self._open: dict[Path, Any] = {}

    def read(self, file: Path, start: float, times: np.ndarray, what: str) -> np.ndarray:
        if file not in self._open:
            if not file.is_file():
                raise DatasetError(f"{file} is missing ({what})")
            try:
                self._open[file] = av.open(str(file))
            except av.FFmpegError as exc:
                raise DatasetError(f"{file}: unreadable video ({exc})") from None
        container = self._open[file]
        stream = container.streams.video[0]
        wanted = start + times
        decoded_times, decoded = [], []
        try:
            container.seek(max(0, int((wanted[0] - self.tolerance) / stream.time_base)), stream=stream,
                           backward=True, any_frame=False)
            for frame in container.decode(stream):
                if frame.time is None:
                    continue
                if frame.time > wanted[-1] + self.tolerance:
                    break
                if frame.time >= wanted[0] - self.tolerance:
                    decoded_times.append(frame.time)
                    decoded.append(frame.to_ndarray(format="rgb24"))
        except av.FFmpegError as exc:
            raise DatasetError(f"{file}: cannot decode {what} ({exc})") from None
        if not decoded:
            raise DatasetError(f"{file} has no frames between {wanted[0]:.3f} s and {wanted[-1]:.3f} s ({what})")
        decoded_times = np.asarray(decoded_times)
        order = np.argsort(decoded_times, kind="stable")
        sorted_times = decoded_times[order]
        right = np.clip(np.searchsorted(sorted_times, wanted), 0, len(order) - 1)
        left = np.clip(right - 1, 0, len(order) - 1)
        closer_left = np.abs(sorted_times[left] - wanted) < np.abs(sorted_times[right] - wanted)
        nearest = order[np.where(closer_left, left, right)]
        missing = np.abs(decoded_times[nearest] - wanted) > self.tolerance
        if missing.any():
            first = int(np.argmax(missing))
            raise DatasetError(f"{file} has no frame at {wanted[first]:.3f} s ({what}, frame {first})")
        return np.stack([decoded[i] for i in nearest])

    def close(self) -> None:
        for container in self._open.values():
            container.close()
        self._open.clear()


def _decode_images(values: Iterable[Any], file: Path, name: str) -> np.ndarray:
    """LeRobot `image` features: structs of encoded image bytes (PNG) -> (N, H, W, 3) RGB uint8."""
    frames = []
    for value in values:
        data = value.get("bytes") if isinstance(value, dict) else None
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) if data else None
        if image is None:
            raise DatasetError(f"{file}: column {name!r} holds an image that cannot be decoded")
        frames.append(cv2.cvtColor(image, cv2.COLOR_BGR2RGB))
    return np.stack(frames)


def import_lerobot(
    path: str | Path,
    out: str | Path,
    *,
    task: str | None = None,
    on_episode: Callable[[int], None] | None = None,
) -> int:
    """Read the LeRobot v3.0 dataset at `path` into a new robot_rl dataset `out`; returns the number of episodes.

    Nothing is left at `out` on failure.
    """
    path = Path(path)
    if not path.is_dir():
        raise DatasetError(f"{path}: no such directory (expected a LeRobot dataset)")
    info_file = path / "meta" / "info.json"
    info = _read_json(info_file)
    version = str(info.get("codebase_version", ""))
    if not version.startswith("v3"):
        raise DatasetError(
            f"{info_file}: codebase_version {version!r}; this reads LeRobot v3.x datasets (convert older ones with "
            "LeRobot's convert_dataset_v21_to_v30 script)"
        )
    for key in ("fps", "features", "data_path"):
        if key not in info:
            raise DatasetError(f"{info_file}: key {key!r} is missing")
    fps = float(info["fps"])
    features: dict[str, dict] = info["features"]
    if "action" not in features:
        raise DatasetError(f"{info_file}: feature 'action' is missing; robot_rl datasets need actions")

    observation_spec: dict[str, ArraySpec] = {}
    sources: dict[str, tuple[str, str]] = {}  # our key -> (feature, "video" | "image" | "vector")
    for name, feature in features.items():
        if not name.startswith("observation."):
            continue
        dtype, shape = feature.get("dtype"), tuple(int(d) for d in feature.get("shape", ()))
        if dtype in ("video", "image"):
            if len(shape) == 3 and shape[0] in (1, 3) and shape[-1] not in (1, 3):
                shape = (shape[1], shape[2], shape[0])  # channels first in info.json
            if len(shape) != 3 or shape[2] != 3:
                raise DatasetError(f"{info_file}: {name} has shape {list(shape)}; only RGB cameras are supported")
            key = robot_rl_key(name, visual=True)
            observation_spec[key] = ArraySpec(shape, "uint8")
            sources[key] = (name, dtype)
        elif dtype in ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"):
            key = robot_rl_key(name, visual=False)
            observation_spec[key] = ArraySpec(shape, "float32")  # non-image observations are float vectors
            sources[key] = (name, "vector")
    if not observation_spec:
        raise DatasetError(f"{info_file}: no observation.* features to import")
    action_shape = tuple(int(d) for d in features["action"]["shape"])
    action_spec = ArraySpec(action_shape, "float32")

    task_file = path / "meta" / "tasks.parquet"
    tasks_table = _read_parquet(task_file)
    task_column = "task" if "task" in tasks_table.column_names else next(
        (n for n in tasks_table.column_names if pa.types.is_string(tasks_table.schema.field(n).type)), None)
    if task_column is None or "task_index" not in tasks_table.column_names:
        raise DatasetError(f"{task_file}: expected columns task_index and task")
    task_names = dict(zip(tasks_table.column("task_index").to_pylist(), tasks_table.column(task_column).to_pylist(),
                          strict=True))
    if task is None:
        if len(task_names) != 1:
            raise DatasetError(
                f"{task_file} lists {len(task_names)} tasks ({list(task_names.values())[:3]}...); pass --task NAME "
                "to import them under one name"
            )
        task = str(next(iter(task_names.values())))

    episode_files = sorted((path / "meta" / "episodes").glob("*/*.parquet"))
    if not episode_files:
        raise DatasetError(f"{path / 'meta' / 'episodes'} has no parquet files: not a LeRobot v3 dataset")
    episodes: list[dict[str, Any]] = []
    for file in episode_files:
        table = _read_parquet(file)
        table = table.select([c for c in table.column_names if not c.startswith("stats/")])
        for row in table.to_pylist():
            row["_file"] = file
            episodes.append(row)
    if not episodes:
        raise DatasetError(f"{path / 'meta' / 'episodes'} lists no episodes; nothing to import")
    episodes.sort(key=lambda row: row["episode_index"])
    cameras = {key: source for key, source in sources.items() if source[1] == "video"}
    for row in episodes:
        needed = ["episode_index", "data/chunk_index", "data/file_index"]
        for key, (name, _) in cameras.items():
            needed += [f"videos/{name}/{field}" for field in ("chunk_index", "file_index", "from_timestamp")]
        missing = [column for column in needed if row.get(column) is None]
        if missing:
            raise DatasetError(f"{row['_file']}: episode {row.get('episode_index')} lacks {missing}")
    if cameras and not info.get("video_path"):
        raise DatasetError(f"{info_file}: video features {sorted(cameras)} but no video_path")
    for row in episodes:  # every file is there before anything is written
        files = [path / info["data_path"].format(chunk_index=row["data/chunk_index"],
                                                 file_index=row["data/file_index"])]
        files += [path / info["video_path"].format(video_key=name, chunk_index=row[f"videos/{name}/chunk_index"],
                                                   file_index=row[f"videos/{name}/file_index"])
                  for name, _ in cameras.values()]
        for file in files:
            if not file.is_file():
                raise DatasetError(f"{file} is missing (episode {row['episode_index']})")

    out = Path(out)
    staging = _fresh_output(out, "imported dataset")
    videos = _VideoFrames(fps)
    try:
        writer = EpisodeWriter(staging, observation_spec, action_spec, fps=fps, task=task,
                               robot=str(info.get("robot_type") or "lerobot"),
                               attrs={"imported_from": str(path.resolve()), "lerobot_version": version})
        data_table, data_file = None, None
        for row in episodes:
            index = row["episode_index"]
            file = path / info["data_path"].format(chunk_index=row["data/chunk_index"],
                                                   file_index=row["data/file_index"])
            if file != data_file:
                data_table, data_file = _read_parquet(file), file
            if "episode_index" not in data_table.column_names:
                raise DatasetError(f"{file}: column 'episode_index' is missing")
            frames = data_table.filter(pc.equal(data_table.column("episode_index"), index))
            if len(frames) == 0:
                raise DatasetError(f"{file} has no frames of episode {index}")
            if "frame_index" in frames.column_names:
                frames = frames.sort_by("frame_index")
            length = len(frames)
            times = (_column(frames, "timestamp", file).astype(np.float64) if "timestamp" in frames.column_names
                     else np.arange(length) / fps)
            obs: dict[str, np.ndarray] = {}
            for key, (name, kind) in sources.items():
                what = f"{name}, episode {index}"
                if kind == "video":
                    video = path / info["video_path"].format(video_key=name,
                                                             chunk_index=row[f"videos/{name}/chunk_index"],
                                                             file_index=row[f"videos/{name}/file_index"])
                    obs[key] = videos.read(video, float(row[f"videos/{name}/from_timestamp"]), times, what)
                elif kind == "image":
                    if name not in frames.column_names:
                        raise DatasetError(f"{file}: column {name!r} is missing")
                    obs[key] = _decode_images(frames.column(name).to_pylist(), file, name)
                else:
                    obs[key] = _column(frames, name, file).astype(np.float32).reshape(length, *observation_spec[key].shape)
                if obs[key].shape[1:] != observation_spec[key].shape:
                    raise DatasetError(f"{file}: {what} has shape {obs[key].shape[1:]}, info.json says "
                                       f"{observation_spec[key].shape}")
            action = _column(frames, "action", file).astype(np.float32).reshape(length, *action_shape)
            reward = _scalars(frames, "next.reward", file, np.float32)
            done = _scalars(frames, "next.done", file, bool)
            if "next.truncated" in frames.column_names:
                truncated = _scalars(frames, "next.truncated", file, bool)
            else:  # the data ends where the episode ends: a time limit unless it is marked done
                truncated = np.zeros(length, dtype=bool)
                truncated[-1] = not done[-1]
            terminated = done & ~truncated
            intervention = _scalars(frames, INTERVENTION, file, np.float64) > 0.5
            success = bool(row["success"]) if row.get("success") is not None else bool(
                _scalars(frames, "next.success", file, bool).any())
            for t in range(length):
                writer.add_step({key: values[t] for key, values in obs.items()}, action[t], reward[t], terminated[t],
                                truncated[t], intervention[t], float(times[t]))
            seed = row.get("seed")
            writer.end_episode({key: values[-1] for key, values in obs.items()}, success,
                               seed=None if seed is None or seed == UNKNOWN_SEED else int(seed))
            if on_episode is not None:
                on_episode(index)
        count = writer.num_episodes
        writer.close()
        videos.close()
        _publish(staging, out)
    finally:
        videos.close()
        shutil.rmtree(staging, ignore_errors=True)
    return count

