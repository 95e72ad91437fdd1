"""Human success / failure labels of single frames of a dataset, and the labelling tool of ``robot-rl label``.

A human label always wins over the automatic one of the training frames (robot_rl.agents.reward_classifier_training).
The labels live in the dataset folder, in ``frame_labels.json`` (see :class:`FrameLabels`): the zarr arrays and their
checksums stay untouched, each labelled episode is tied to the checksums it was recorded with (labels never land on
another recording's frames), and the file carries its own CRC-32. :func:`label_interactively` is the OpenCV
labelling window (its keys: :data:`LABEL_KEYS`, its state: :class:`LabelCursor`).
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.agents.reward_classifier import RewardClassifierError, resolve_cameras
from robot_rl.core.files import atomic_write_text
from robot_rl.data.episodes import DatasetError, DatasetReader

LABELS_FILE = "frame_labels.json"
LABELS_FORMAT = "robot_rl/frame_labels"
LABELS_VERSION = 1


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
