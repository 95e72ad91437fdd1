"""The learned success classifier: training labels, the split by episode, learning on held-out episodes, saving and
loading, frame labels in a dataset (round trip, refusal of foreign or altered labels), and the `train-reward` /
`label` commands with their one-line errors (exit status 2)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from robot_rl.apps.cli import main
from robot_rl.data.episode_writer import EpisodeWriter
from robot_rl.data.episodes import DatasetError, DatasetReader
from robot_rl.agents.frame_labels import LABELS_FILE, FrameLabels, LabelCursor, parse_frames
from robot_rl.agents.reward_classifier import RewardClassifierConfig, RewardClassifierError, load_reward_classifier
from robot_rl.agents.reward_classifier_training import (
    episode_frame_labels,
    load_frames,
    save_atomically,
    split_by_episode,
    train_reward_classifier,
)
from robot_rl.core.types import ArraySpec

SIZE = 32
PAD_CORNER = (4, 4)  # top-left of the 8x8 green goal pad
SQUARE = 5


def scene(rng: np.random.Generator, square, camera: str = "front") -> np.ndarray:
    """A noisy table with a green goal pad and a red square at `square` (row, col); the task is done when the square
    sits on the pad. The wrist camera sees the same scene mirrored."""
    image = rng.integers(60, 110, size=(SIZE, SIZE, 3), dtype=np.uint8)
    image[PAD_CORNER[0]:PAD_CORNER[0] + 8, PAD_CORNER[1]:PAD_CORNER[1] + 8] = (40, 160, 40)
    row, col = square
    image[row:row + SQUARE, col:col + SQUARE] = (200, 30, 30)
    return image[:, ::-1].copy() if camera == "wrist" else image


def success_square() -> np.ndarray:
    return np.array([PAD_CORNER[0] + 1, PAD_CORNER[1] + 1])


def make_dataset(path, episodes: int, seed: int, cameras=("front",)) -> list[bool]:
    """Episodes in which a red square slides across the table: every other one ends on the goal pad (success, and
    the square rests there for its last 3 frames), the others end elsewhere. Returns each episode's success."""
    rng = np.random.default_rng(seed)
    specs = {f"images/{c}": ArraySpec((SIZE, SIZE, 3), "uint8") for c in cameras}
    specs["state"] = ArraySpec((2,), "float32")
    successes = []
    with EpisodeWriter(path, specs, ArraySpec((2,), "float32"), fps=10.0, task="SquareOnPad-v0") as writer:
        for episode in range(episodes):
            success = episode % 2 == 0
            steps = int(rng.integers(10, 16))
            start = rng.integers(14, SIZE - SQUARE, size=2)
            goal = success_square() if success else rng.integers(14, SIZE - SQUARE, size=2)
            squares = [np.round(start + (goal - start) * min(1.0, t / (steps - 2))).astype(int)
                       for t in range(steps + 1)]
            frames = [{f"images/{c}": scene(rng, s, c) for c in cameras} | {"state": np.zeros(2, np.float32)}
                      for s in squares]
            for t in range(steps):
                writer.add_step(frames[t], np.zeros(2, np.float32), float(success and t == steps - 1),
                                success and t == steps - 1, not success and t == steps - 1)
            writer.end_episode(frames[-1], success=success, seed=episode)
            successes.append(success)
    return successes


FAST = RewardClassifierConfig(steps=200, success_frames=3, margin=3, validation_fraction=0.25, channels=(16, 16, 16))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("reward") / "squares"
    make_dataset(path, 24, seed=0)
    return path


@pytest.fixture(scope="module")
def trained(dataset, tmp_path_factory):
    classifier, metrics = train_reward_classifier([dataset], FAST)
    out = save_atomically(classifier, tmp_path_factory.mktemp("model") / "classifier", metrics)
    return classifier, metrics, out


def copy_dataset(dataset: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(dataset, target)
    return target


# ----------------------------------------------------------------------------------------------- training frames


def test_episode_frame_labels_take_final_frames_leave_a_margin_and_obey_humans():
    # a successful episode of 10 steps has 11 frames: the last 3 success, 2 before them left out, the rest failure
    np.testing.assert_array_equal(episode_frame_labels(10, True, {}, success_frames=3, margin=2),
                                  [0, 0, 0, 0, 0, 0, -1, -1, 1, 1, 1])
    # a human's labels win: frame 1 success, frame 7 (in the margin) failure, frame 10 (final) failure
    np.testing.assert_array_equal(episode_frame_labels(10, True, {1: True, 7: False, 10: False}, 3, 2),
                                  [0, 1, 0, 0, 0, 0, -1, 0, 1, 1, 0])
    np.testing.assert_array_equal(episode_frame_labels(4, False, {2: True}, 3, 2), [0, 0, 1, 0, 0])
    np.testing.assert_array_equal(episode_frame_labels(1, True, {}, 5, 5), [1, 1])  # shorter than success_frames


def test_load_frames_and_the_split_by_episode(dataset):
    frames = load_frames([dataset], FAST)
    reader = DatasetReader(dataset)
    # 12 successful episodes x 3 success frames; margin frames are left out of every successful episode
    assert int(frames.labels.sum()) == 12 * 3
    assert len(frames) == reader.num_steps + reader.num_episodes - 12 * 3  # every frame (final ones too) but margins
    final_obs = reader.read_array("meta/final_obs/images/front")
    last = (frames.episode == 0) & (frames.frame == reader.episode_lengths[0])
    np.testing.assert_array_equal(frames.images["images/front"][last][0], final_obs[0])
    train, validation = split_by_episode(frames, 0.25, seed=0)
    assert not set(frames.episode[train]) & set(frames.episode[validation])  # never an episode on both sides
    held_out = set(frames.episode[validation])
    assert len(held_out) == 6 and {e % 2 for e in held_out} == {0, 1}  # stratified: successes and failures
    assert not split_by_episode(frames, 0.0, seed=0)[1].any()


# ---------------------------------------------------------------------------------------------------- learning


def test_classifier_learns_success_on_held_out_episodes(trained, dataset):
    classifier, metrics, out = trained
    validation = metrics["validation"]
    assert validation["episodes"] == 6 and validation["success_frames"] == 3 * 3, validation
    assert validation["precision"] >= 0.85 and validation["recall"] >= 0.85, validation
    # on fresh episodes (other seeds): the frames with the square on the pad, and only those, are success
    rng = np.random.default_rng(123)
    on_pad = np.stack([scene(rng, success_square()) for _ in range(20)])
    elsewhere = np.stack([scene(rng, rng.integers(14, SIZE - SQUARE, size=2)) for _ in range(40)])
    assert classifier.success({"images/front": on_pad}).mean() >= 0.9
    assert classifier.success({"images/front": elsewhere}).mean() <= 0.1

    # saved and loaded: the same numbers, one frame or a batch
    loaded = load_reward_classifier(out)
    assert loaded.cameras == ("images/front",) and loaded.threshold == FAST.threshold
    batch = loaded.predict({"images/front": on_pad[:3]})
    np.testing.assert_allclose(batch, classifier.predict({"images/front": on_pad[:3]}), atol=1e-6)
    single = loaded.predict({"images/front": on_pad[0]})
    assert isinstance(single, float) and single == pytest.approx(float(batch[0]), abs=1e-5)
    assert loaded.success({"images/front": on_pad[0]}) is True
    stored = json.loads((out / "metrics.json").read_text())
    assert stored["validation"]["precision"] == validation["precision"]
    assert {p.name for p in out.iterdir()} == {"reward_classifier.msgpack", "config.json", "metrics.json"}
    with pytest.raises(ValueError, match=r"observation\['images/front'\] has shape \(16, 16, 3\)"):
        loaded.predict({"images/front": np.zeros((16, 16, 3), np.uint8)})
    with pytest.raises(ValueError, match="has no 'images/front'"):
        loaded.predict({"images/wrist": on_pad[0]})


def test_loading_a_damaged_or_missing_classifier_names_the_file(trained, tmp_path):
    _, _, out = trained
    with pytest.raises(RewardClassifierError, match="does not exist"):
        load_reward_classifier(tmp_path / "nothing")
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    (broken / "reward_classifier.msgpack").write_bytes(b"\x92\x01")
    with pytest.raises(RewardClassifierError, match="reward_classifier.msgpack: not this classifier's parameters"):
        load_reward_classifier(broken)
    (broken / "reward_classifier.msgpack").unlink()
    with pytest.raises(RewardClassifierError, match="reward_classifier.msgpack is missing"):
        load_reward_classifier(broken)


# ------------------------------------------------------------------------------------------------- frame labels


def run_cli(argv, capsys) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_label_round_trip_leaves_the_dataset_verified(dataset, tmp_path, capsys):
    data = copy_dataset(dataset, tmp_path)
    code, out, err = run_cli(["label", str(data), "--episode", "1", "--frames", "2:5", "--success"], capsys)
    assert code == 0, err
    assert "labelled success: 3 frames of episode 1 (2..4)" in out
    imports = tmp_path / "labels.json"
    imports.write_text(json.dumps([{"episode": 3, "frames": "-2:", "label": "success"},
                                   {"episode": 0, "frames": [0, "5:7"], "label": "failure"},
                                   {"episode": 1, "frames": 4, "label": "none"}]))
    code, out, err = run_cli(["label", str(data), "--import", str(imports)], capsys)
    assert code == 0, err
    labels = FrameLabels.load(data)
    frames3 = labels.frames(3)
    assert labels.labels == {1: {2: True, 3: True}, 3: {frames3 - 2: True, frames3 - 1: True},
                             0: {0: False, 5: False, 6: False}}
    code, out, err = run_cli(["label", str(data), "--episode", "-24", "--frames", "6", "--clear"], capsys)
    assert code == 0 and "cleared 1 frames of episode 0" in out, err
    assert FrameLabels.load(data).labels[0] == {0: False, 5: False}

    # the zarr arrays and their checksums are untouched
    reader = DatasetReader(data)
    assert reader.verify() == []
    # and training uses the labels: failed episode 3 now has 2 success frames, episode 0 frame 0 stays failure
    frames = load_frames([data], FAST)
    assert int(frames.labels[frames.episode == 3].sum()) == 2
    assert int(frames.labels[frames.episode == 1].sum()) == 2
    assert not frames.labels[(frames.episode == 0) & (frames.frame == 0)].any()


def test_labels_of_another_recording_or_an_altered_file_are_refused(dataset, tmp_path, capsys):
    data = copy_dataset(dataset, tmp_path)
    assert run_cli(["label", str(data), "--episode", "2", "--frames", ":", "--failure"], capsys)[0] == 0
    other = tmp_path / "other"
    make_dataset(other, 4, seed=7)
    shutil.copy(data / LABELS_FILE, other / LABELS_FILE)
    with pytest.raises(DatasetError, match="episode 2 were made for another recording"):
        FrameLabels.load(other)
    text = (data / LABELS_FILE).read_text()
    (data / LABELS_FILE).write_text(text.replace('"failure": [[0,', '"failure": [[1,'))
    code, _, err = run_cli(["train-reward", "--dataset", str(data), "--out", str(tmp_path / "m")], capsys)
    assert code == 2 and "fails its checksum" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "m").exists()
    (data / LABELS_FILE).write_text(text[: len(text) // 2])
    with pytest.raises(DatasetError, match="unreadable frame labels"):
        FrameLabels.load(data)


def test_label_cursor_keys():
    class Reader:  # the two facts a cursor needs of a dataset: 2 episodes of 3 and 1 steps
        path = Path("x")
        num_episodes = 2
        episode_lengths = np.array([3, 1])
        checksums = None

    labels = FrameLabels(Reader())
    cursor = LabelCursor(labels)
    for key in "snfbb":
        assert cursor.press(key)
    assert labels.labels == {0: {0: True, 2: False}} and cursor.frame == 1
    for key in "nnnn":
        cursor.press(key)
    assert cursor.frame == 3 and "final observation" in cursor.caption()
    cursor.press("s")  # labelling the last frame stays on it
    assert cursor.frame == 3 and labels.get(0, 3) is True
    cursor.press("]")
    assert (cursor.episode, cursor.frame) == (1, 0)
    cursor.press("]")
    assert cursor.episode == 1
    cursor.press("[")
    cursor.press("c")  # clear frame 0 of episode 0
    assert labels.get(0, 0) is None and labels.get(0, 3) is True
    assert not cursor.press("q")


def test_parse_frames():
    assert parse_frames("40:50", 60) == range(40, 50)
    assert parse_frames("-3:", 10) == range(7, 10)
    assert parse_frames(":", 4) == range(4)
    assert parse_frames("-1", 10) == range(9, 10)
    for bad, match in (("0:99", "99 is out of range"), ("12", "frame 12 out of range"), ("a:b", "not a frame"),
                       ("5:2", "selects no frame"), ("1:2:3", "not a frame")):
        with pytest.raises(RewardClassifierError, match=match):
            parse_frames(bad, 10)


# ---------------------------------------------------------------------------------------------------- commands


def test_train_reward_command_writes_the_classifier_and_one_summary_line(dataset, tmp_path, capsys):
    out_dir = tmp_path / "model"
    code, out, err = run_cli(["train-reward", "--dataset", str(dataset), "--dataset", str(dataset),
                              "--out", str(out_dir), "--steps", "30", "--cameras", "front"], capsys)
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trained reward classifier on ") and str(out_dir) in lines[0]
    metrics = json.loads((out_dir / "metrics.json").read_text())
    assert metrics["datasets"] == [str(dataset)] * 2 and metrics["cameras"] == ["images/front"]
    for key in ("precision", "recall", "f1", "tp", "fp", "tn", "fn", "episodes"):
        assert key in metrics["validation"]
    assert metrics["train"]["episodes"] + metrics["validation"]["episodes"] == 48
    assert load_reward_classifier(out_dir / "config.json").config.steps == 30
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no staging folder left


@pytest.mark.parametrize("argv, message", [
    (["train-reward", "--dataset", "{missing}", "--out", "{out}"], "not a robot_rl dataset (does not exist)"),
    (["train-reward", "--out", "{out}"], "missing --dataset"),
    (["train-reward", "--dataset", "{data}", "--out", "{out}", "--cameras", "wrist"],
     "--cameras: images/wrist is not a camera of"),
    (["train-reward", "--dataset", "{data}", "--out", "{out}", "--threshold", "1.5"],
     "threshold=1.5 must be in (0, 1)"),
    (["train-reward", "--dataset", "{data}", "--out", "{out}", "--steps", "0"], "steps=0 must be >= 1"),
    (["train-reward", "--dataset", "{data}", "--out", "{data}"], "exists and is not an empty folder"),
    (["label", "{data}", "--episode", "30", "--frames", "1", "--success"], "episode 30 out of range"),
    (["label", "{data}", "--episode", "1", "--frames", "1:3"], "--frames needs --episode N and one of"),
    (["label", "{data}", "--frames", "1:3", "--success"], "--frames needs --episode N"),
    (["label", "{data}", "--success"], "--success needs --episode N --frames A:B"),
    (["label", "{data}", "--episode", "1", "--frames", "1", "--success", "--failure"], "give one of"),
    (["label", "{data}", "--import", "{missing}"], "--import"),
    (["label", "{data}"], "no display"),
    (["label", "{missing}", "--episode", "0", "--frames", "1", "--success"], "not a robot_rl dataset"),
])
def test_bad_input_is_one_line_and_exit_status_2(argv, message, dataset, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    places = {"missing": str(tmp_path / "missing"), "out": str(tmp_path / "out"), "data": str(dataset)}
    before = sorted(os.listdir(dataset))
    code, out, err = run_cli([a.format(**places) for a in argv], capsys)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err
    assert not (tmp_path / "out").exists()
    assert sorted(os.listdir(dataset)) == before  # no labels file written by a refused command


def test_training_needs_both_classes(tmp_path):
    data = tmp_path / "failures"
    with EpisodeWriter(data, {"images/front": ArraySpec((SIZE, SIZE, 3), "uint8")}, ArraySpec((2,), "float32"),
                       fps=10.0, task="SquareOnPad-v0") as writer:
        for seed in range(3):
            for _ in range(4):
                writer.add_step({"images/front": np.zeros((SIZE, SIZE, 3), np.uint8)}, np.zeros(2), 0.0, False, False)
            writer.end_episode({"images/front": np.zeros((SIZE, SIZE, 3), np.uint8)}, success=False, seed=seed)
    with pytest.raises(RewardClassifierError, match="no success frames to train on"):
        train_reward_classifier([data], FAST)


@pytest.mark.parametrize("command", ["train-reward", "label"])
def test_help_texts_break_lines_only_where_the_terminal_is_full(command, capsys, monkeypatch):
    from test_cli import test_help_texts_break_lines_only_where_the_terminal_is_full as check_help

    check_help(command, capsys, monkeypatch)


def _record_transform(path: Path, fit: str) -> None:
    import zarr

    root = zarr.open_group(str(path), mode="r+")
    root.attrs["image_transforms"] = {"images/front": {"size": SIZE, "fit": fit, "roi": None}}


def test_datasets_cut_two_ways_are_refused_and_the_transform_travels_with_the_classifier(dataset, tmp_path):
    center, squashed = copy_dataset(dataset, tmp_path / "a"), copy_dataset(dataset, tmp_path / "b")
    _record_transform(center, "crop")
    _record_transform(squashed, "resize")
    with pytest.raises(RewardClassifierError, match="images/front was recorded with image transform .*cropped / "
                                                    "resized one way"):
        load_frames([center, squashed], FAST)
    assert load_frames([center, dataset], FAST).image_transforms == {
        "images/front": {"size": SIZE, "fit": "crop", "roi": None}}  # a dataset that recorded none is not a conflict
    config = RewardClassifierConfig(**{**FAST.to_json(), "steps": 2})
    classifier, metrics = train_reward_classifier([center], config)
    out = save_atomically(classifier, tmp_path / "classifier", metrics)
    assert load_reward_classifier(out).image_transforms == {"images/front": {"size": SIZE, "fit": "crop",
                                                                             "roi": None}}
