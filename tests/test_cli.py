"""The robot-rl command: record, info and replay on a real (small) dataset."""

from __future__ import annotations

import json
import subprocess
import sys

import cv2
import pytest

from robot_rl.cli import main
from robot_rl.data.episodes import EpisodeDataset


def test_record_info_replay(tmp_path, capsys):
    out = tmp_path / "demos.zarr"
    main(["record", "--task", "PickCube-v0", "--episodes", "3", "--image-size", "64", "--out", str(out)])
    assert "recorded 3 episodes" in capsys.readouterr().out
    main(["record", "--task", "PickCube-v0", "--episodes", "1", "--image-size", "64", "--seed", "10", "--out", str(out)])
    assert "dataset now holds 4 episodes" in capsys.readouterr().out

    main(["info", str(out), "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] == 4 and summary["success_rate"] == 1.0
    assert summary["keys"]["obs/images/wrist"]["shape"][1:] == [64, 64, 3]
    main(["info", str(out)])
    assert "success rate 100.0%" in capsys.readouterr().out

    video = tmp_path / "ep.mp4"
    main(["replay", str(out), "--episode", "-1", "--out", str(video)])
    capture = cv2.VideoCapture(str(video))
    assert capture.get(cv2.CAP_PROP_FRAME_WIDTH) == 128  # front and wrist side by side
    assert capture.get(cv2.CAP_PROP_FRAME_COUNT) == EpisodeDataset(out).episode_lengths[-1]


def test_errors_are_one_clear_line(tmp_path):
    state_only = tmp_path / "state.zarr"
    main(["record", "--episodes", "1", "--obs-mode", "state", "--out", str(state_only)])
    with pytest.raises(SystemExit, match="stores no camera frames"):
        main(["replay", str(state_only), "--out", str(tmp_path / "x.mp4")])
    with pytest.raises(SystemExit, match="episode 5 out of range"):
        main(["replay", str(state_only), "--episode", "5"])
    with pytest.raises(SystemExit, match="not a robot_rl dataset"):
        main(["info", str(tmp_path / "missing.zarr")])
    with pytest.raises(SystemExit, match="unknown task 'Nope-v0'"):
        main(["record", "--task", "Nope-v0", "--out", str(tmp_path / "n.zarr")])


def test_console_script_help():
    out = subprocess.run([sys.executable, "-m", "robot_rl.cli", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for sub in ("record", "info", "replay"):
        assert sub in out.stdout
