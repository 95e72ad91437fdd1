"""The robot-rl command: record, info and replay on a real (small) dataset."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from robot_rl.apps.cli import main
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
    lines = capsys.readouterr().out.splitlines()
    assert any(re.match(r"episodes 4  steps \d+  success rate 100.0%  intervention rate 0.0%  episode length "
                        r"\d+/[\d.]+/\d+ \(min/mean/max\)$", line) for line in lines), lines  # one line, piped too

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
    out = subprocess.run([sys.executable, "-m", "robot_rl.apps.cli", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for sub in ("record", "info", "replay"):
        assert sub in out.stdout


def _help_texts(command: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """(option -> help text, group -> description) from tyro's boxed --help output, defaults removed."""
    import os

    out = subprocess.run([sys.executable, "-m", "robot_rl.apps.cli", *command, "--help"], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "COLUMNS": "100"})
    assert out.returncode == 0, out.stderr
    options: dict[str, list[str]] = {}
    groups: dict[str, list[str]] = {}
    group = option = None
    for line in out.stdout.splitlines():
        if line.startswith("╭─"):
            group, option = line.strip("╭─╮ ").removesuffix(" options"), None
            groups[group] = []
        elif line.startswith("│") and group is not None:
            body = line[1:].rstrip().removesuffix("│").rstrip()
            if body.strip().startswith("───"):
                continue
            if body.startswith(" -"):  # "--option METAVAR", then its text on the same line or the next ones
                head, *text = re.split(r"\s{2,}", body.strip(), maxsplit=1)
                option = head.split()[0].rstrip(",")
                options[option] = text
            elif option is not None:
                options[option].append(body.strip())
            else:
                groups[group].append(body.strip())
    def clean(words: list[str]) -> str:
        return re.sub(r"\s*\(default: [^)]*\)$", "", " ".join(words)).strip()

    return {k: clean(v) for k, v in options.items()}, {k: clean(v) for k, v in groups.items()}


def test_train_help_gives_every_option_and_group_its_own_text():
    options, groups = _help_texts(["train"])
    options.pop("-h")
    assert len(options) > 50 and {"sac", "sac.image-encoder", "learner", "human"} <= set(groups)
    missing = [name for name, text in options.items() if not text]
    assert not missing, f"options without a help text: {missing}"
    shared = {text: [k for k, v in options.items() if v == text] for text in options.values()}
    assert not {t: names for t, names in shared.items() if len(names) > 1}, "options sharing a help text"
    group_texts = [text for name, text in groups.items() if name != "options"]
    assert all(group_texts) and len(set(group_texts)) == len(group_texts), groups
    assert "Polyak" in options["--sac.tau"] and "target" in options["--sac.tau"]
    assert "temperature" in options["--sac.init-temperature"]
    assert "discount" in options["--sac.discount"]
    assert "encoder" in groups["sac.image-encoder"] and "bounds" not in groups["sac.image-encoder"]
    assert "--steps" in options["--resume"]
    assert not [name for name, text in options.items() if "(default" in text], "a default named twice"


def test_eval_help():
    options, _ = _help_texts(["eval"])
    for name in ("--policy", "--task", "--episodes", "--video", "--obs-mode", "--image-size", "--seed", "--out"):
        assert options[name], name
        assert "(default" not in options[name], name  # tyro adds the default once


def test_record_randomized_demos_under_a_suites_conditions(tmp_path, capsys):
    suite = tmp_path / "suite.yaml"
    suite.write_text("name: demo_suite\nconditions:\n  - name: nominal\n"
                     "  - name: late\n    perturbations: [{type: action_latency, steps: 1}]\n")
    out = tmp_path / "demos.zarr"
    code, stdout, stderr = run_cli(["record", "--episodes", "2", "--obs-mode", "state", "--randomize", suite,
                                    "--out", out], capsys)
    assert code == 0, stderr
    dataset = EpisodeDataset(out)
    assert dataset.attrs["randomize"] == str(suite) and dataset.num_episodes == 2


@pytest.mark.parametrize("args, message", [
    (["train", "--steps", "0"], "steps=0 must be >= 1"),
    (["train", "--eval-every", "0"], "eval_every=0 must be >= 1"),
    (["train", "--demos", "-3"], "demos=-3 must be >= 0"),
    (["train", "--checkpoint-every", "0"], "checkpoint_every=0 must be >= 1"),
    (["train", "--sac.discount", "1.5"], "discount=1.5 must be in (0, 1]"),
    (["train", "--sac.tau", "0"], "tau=0.0 must be in (0, 1]"),
    (["train", "--sac.actor-lr", "-1e-4"], "actor_lr=-0.0001 must be > 0"),
    (["train", "--sac.image-encoder.channels", "8", "8"], "must have the same length"),
    (["train", "--human.takeover-steps", "0"], "takeover_steps=0 must be >= 1"),
    (["train", "--learner.utd", "0"], "utd=0"),
    (["train", "--steps", "many"], "--steps"),
    (["train", "--obs-mode", "rgb"], "--obs-mode: 'rgb' is not one of state, pixels, state+pixels"),
    (["train", "--task", "Nope-v0"], "unknown task 'Nope-v0'"),
    (["train", "--demo-path", "{tmp}/missing.zarr"], "missing.zarr"),
    (["train", "--resume", "{tmp}/missing"], "no such folder"),
    (["train", "--resume", "{tmp}"], "not a training run (no config.json)"),
    (["eval", "--policy", "{tmp}/missing.msgpack"], "does not exist"),
    (["eval", "--policy", "x", "--episodes", "0"], "episodes=0 must be >= 1"),
    (["record", "--episodes", "-2"], "episodes"),
    # unknown commands and options: one line with the closest known name, not tyro's box of the whole option list
    (["trian"], "unknown command 'trian' (did you mean 'train'?); commands: train, eval, "),
    (["train", "--step", "10"], "unrecognized option --step (did you mean --steps?); see robot-rl train --help"),
    (["train", "--sac.critic-ensemble=3"], "unrecognized option --sac.critic-ensemble (did you mean "
                                           "--sac.critic-ensemble-size?)"),
    (["eval", "--polcy", "x"], "unrecognized option --polcy (did you mean --policy?); see robot-rl eval --help"),
    (["eval", "--policy", "x", "extra"], "unexpected argument 'extra'; see robot-rl eval --help"),
    (["info"], "missing PATH; see robot-rl info --help"),
])
def test_bad_input_is_one_line_exit_2_and_creates_nothing(tmp_path, capsys, args, message):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    out = tmp_path / "made"
    args += ["--run-dir", str(out)] if args[0] == "train" and "--resume" not in args else []
    args += ["--out", str(out)] if args[0] in ("eval", "record") else []
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()


def test_console_script_reports_a_bad_number_in_one_line():
    out = subprocess.run([sys.executable, "-m", "robot_rl.apps.cli", "train", "--sac.discount", "1.5"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip() == "error: invalid SACConfig: discount=1.5 must be in (0, 1]", out.stderr


# ----- datasets: record, info, replay, export, import ---------------------------------------------------------------
def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    """main(args) as the console script runs it: (exit status, stdout, stderr)."""
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


def test_record_uses_trains_image_size_and_continues_the_seeds_when_appending(tmp_path, capsys):
    from robot_rl.training.config import TrainConfig

    out = tmp_path / "demos.zarr"
    assert run_cli(["record", "--episodes", "2", "--obs-mode", "pixels", "--out", out], capsys)[0] == 0
    code, stdout, _ = run_cli(["record", "--episodes", "2", "--obs-mode", "pixels", "--out", out], capsys)
    assert code == 0 and "seeds 2..3" in stdout and "now holds 4 episodes" in stdout
    dataset = EpisodeDataset(out)
    assert dataset.image_size == TrainConfig.image_size == 64
    assert dataset.seeds.tolist() == [0, 1, 2, 3]
    first, third = dataset.episode(0), dataset.episode(2)  # not the same episode recorded twice
    assert len(first["action"]) != len(third["action"]) or not (first["action"] == third["action"]).all()

    code, _, stderr = run_cli(["record", "--episodes", "2", "--obs-mode", "pixels", "--seed", "3", "--out", out],
                              capsys)
    assert code == 2 and stderr.strip().startswith("error: ") and len(stderr.strip().splitlines()) == 1
    assert "already holds episodes with seeds 3" in stderr and "continue at 4" in stderr
    code, stdout, _ = run_cli(["record", "--episodes", "1", "--obs-mode", "pixels", "--only-successes",
                               "--seed", "50", "--out", out], capsys)
    assert code == 0 and EpisodeDataset(out).seeds.tolist() == [0, 1, 2, 3, 50]
    assert run_cli(["record", "--episodes", "1", "--obs-mode", "pixels", "--only-successes", "--out", out],
                   capsys)[0] == 0
    assert EpisodeDataset(out).seeds.tolist()[-1] == 51


@pytest.mark.parametrize("args, message", [
    (["--episodes", "-2"], "episodes=-2 must be >= 1"),
    (["--episodes", "0"], "episodes=0 must be >= 1"),
    (["--image-size", "8"], "image_size=8 must be in [16, 640]"),
    (["--noise", "-0.1"], "noise=-0.1 must be >= 0"),
    (["--seed", "-3"], "seed=-3 must be >= 0"),
    (["--obs-mode", "depth"], "--obs-mode"),
    (["--randomize", "nosuchsuite"], "no suite 'nosuchsuite'"),
    (["--randomize", "default", "--source", "ros"], "--randomize is for --source sim"),
])
def test_record_refuses_bad_numbers_in_one_line_and_makes_nothing(tmp_path, capsys, args, message):
    code, stdout, stderr = run_cli(["record", *args, "--out", tmp_path / "demos.zarr"], capsys)
    assert code == 2 and stderr.strip().startswith("error: ") and message in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_record_to_a_place_that_cannot_hold_a_dataset_names_that_place(capsys):
    code, _, stderr = run_cli(["record", "--episodes", "1", "--obs-mode", "state", "--out", "/proc/rec.zarr"], capsys)
    assert code == 2 and stderr.strip().splitlines() == [
        "error: /proc/rec.zarr: cannot create the dataset there: No such file or directory"], stderr


def test_info_finds_missing_chunks_and_verify_finds_altered_values(tmp_path, capsys):
    import zarr

    out = tmp_path / "demos.zarr"
    run_cli(["record", "--episodes", "3", "--obs-mode", "pixels", "--out", out], capsys)
    assert zarr.open_group(str(out)).attrs["robot"] == "sim_panda"  # the robot file the sim mirrors, as over ROS
    code, stdout, _ = run_cli(["info", out, "--verify"], capsys)
    assert code == 0 and "verified: every value of all 3 episodes" in stdout and "seeds 0..2" in stdout

    zarr.open_group(str(out), mode="r+")["data/reward"][1] = 5.0  # a silent change inside a valid chunk
    assert run_cli(["info", out], capsys)[0] == 0  # every chunk file is there
    code, _, stderr = run_cli(["info", out, "--verify"], capsys)
    assert code == 2
    lines = stderr.strip().splitlines()
    assert lines[0].startswith("damaged: data/reward: episode 0 (steps 0-") and "fails its checksum" in lines[0]
    assert lines[-1].startswith(f"error: {out}: 1 of 3 episodes are damaged (episodes 0;")

    (out / "data" / "action" / "c" / "0" / "0").unlink()  # what `rm demos.zarr/data/action/c/0/0` does
    code, _, stderr = run_cli(["info", out], capsys)
    assert code == 2 and "3 of 3 episodes are damaged" in stderr
    assert "damaged: data/action: episode 2 (steps" in stderr and "chunk data/action/c/0/0 is missing" in stderr
    code, _, stderr = run_cli(["replay", out, "--out", tmp_path / "ep.mp4"], capsys)
    assert code == 2 and "data/action: episode 0" in stderr and not (tmp_path / "ep.mp4").exists()

    (out / "zarr.json").write_text((out / "zarr.json").read_text()[:30])
    code, _, stderr = run_cli(["info", out], capsys)
    assert code == 2 and f"{out / 'zarr.json'}: unreadable zarr metadata" in stderr
    code, _, stderr = run_cli(["info", tmp_path / "missing.zarr"], capsys)
    assert code == 2 and "not a robot_rl dataset (does not exist)" in stderr


def test_replay_writes_h264_with_both_cameras_and_a_step_caption(tmp_path, capsys):
    import av

    out = tmp_path / "demos.zarr"
    run_cli(["record", "--episodes", "1", "--obs-mode", "pixels", "--out", out], capsys)
    video = tmp_path / "ep.mp4"
    code, stdout, _ = run_cli(["replay", out, "--out", video], capsys)
    assert code == 0 and "cameras ['images/front', 'images/wrist']" in stdout
    length = int(EpisodeDataset(out).episode_lengths[0])
    with av.open(str(video)) as container:
        stream = container.streams.video[0]
        assert (stream.codec_context.name, stream.codec_context.pix_fmt) == ("h264", "yuv420p")
        assert (stream.codec_context.width, stream.codec_context.height) == (128, 64)
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(stream)]
    assert len(frames) == length
    stored = np.concatenate([EpisodeDataset(out).episode(0)["obs"][c] for c in ("images/front", "images/wrist")],
                            axis=2).astype(int)
    body = np.abs(np.stack(frames)[:, 16:].astype(int) - stored[:, 16:]).mean()
    caption = np.abs(np.stack(frames)[:, :10, :40].astype(int) - stored[:, :10, :40]).mean()
    assert body < 4 and caption > 4 * body  # the frames as stored, a caption drawn over the top-left corner


def test_export_and_import_through_the_command_line(tmp_path, capsys):
    out = tmp_path / "demos.zarr"
    run_cli(["record", "--episodes", "2", "--obs-mode", "pixels", "--out", out], capsys)
    code, stdout, _ = run_cli(["export", out, "--format", "lerobot", "--out", tmp_path / "lerobot"], capsys)
    assert code == 0 and "LeRobot v3.0 dataset, 2 episodes" in stdout
    assert (tmp_path / "lerobot" / "meta" / "info.json").is_file()
    code, stdout, _ = run_cli(["import", tmp_path / "lerobot", "--out", tmp_path / "back.zarr"], capsys)
    assert code == 0 and "imported 2 episodes" in stdout
    original, back = EpisodeDataset(out), EpisodeDataset(tmp_path / "back.zarr")
    np.testing.assert_array_equal(back.data["action"], original.data["action"])
    np.testing.assert_array_equal(back.episode_ends, original.episode_ends)

    code, _, stderr = run_cli(["export", out, "--out", tmp_path / "lerobot"], capsys)
    assert code == 2 and "already exists; choose a new output path" in stderr
    assert stderr.splitlines() == [stderr.strip()]  # the one error line, no blank line left by a progress bar
    code, _, stderr = run_cli(["export", out, "--crf", "60", "--out", tmp_path / "x"], capsys)
    assert code == 2 and "crf=60 must be in [0, 51]" in stderr
    code, _, stderr = run_cli(["import", out, "--out", tmp_path / "y.zarr"], capsys)
    assert code == 2 and "meta/info.json is missing: not a LeRobot dataset" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["back.zarr", "demos.zarr", "lerobot"]


def test_ctrl_c_while_recording_keeps_the_finished_episodes(tmp_path):
    import os
    import signal
    import time

    out = tmp_path / "demos.zarr"
    log = tmp_path / "record.log"  # a file, not a pipe nobody reads while the recorder runs (it would block on it)
    with open(log, "w") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "robot_rl.apps.cli", "record", "--episodes", "1000", "--obs-mode",
                                 "state", "--out", str(out)], stdout=subprocess.DEVNULL, stderr=log_file, text=True,
                                env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"},
                                # a shell's background job ignores SIGINT, and so would the recorder started from it
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    meta = out / "meta" / "zarr.json"
    while not (meta.exists() and json.loads(meta.read_text())["attributes"]["num_episodes"] >= 2):
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # what Ctrl-C in the terminal sends
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"the recorder did not stop on Ctrl-C: {log.read_text()[-3000:]}") from None
    stderr = log.read_text()
    assert proc.returncode == 130, stderr
    assert "kept the" in stderr and "Traceback" not in stderr
    dataset = EpisodeDataset(out)  # verified: nothing half-written is visible
    assert dataset.num_episodes >= 2 and dataset.seeds.tolist() == list(range(dataset.num_episodes))


def test_an_output_path_below_a_file_is_one_line_exit_2(tmp_path, capsys):
    data = tmp_path / "demos.zarr"
    assert run_cli(["record", "--episodes", "1", "--obs-mode", "pixels", "--out", data], capsys)[0] == 0
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    for args in (["replay", data, "--out", file / "ep.mp4"], ["export", data, "--out", file / "lerobot"],
                 ["record", "--episodes", "1", "--obs-mode", "state", "--out", file / "more.zarr"]):
        code, _, stderr = run_cli(args, capsys)
        assert code == 2 and stderr.strip().splitlines()[-1] == f"error: {file}: File exists", (args, stderr)
        assert "Traceback" not in stderr
    assert file.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["demos.zarr", "notes.txt"]


@pytest.mark.parametrize("command", ["train", "eval", "record", "info", "replay", "export", "import", "launch", "train-bc", "distill",
                                     "validate", "replay-in-sim"])
def test_help_texts_break_lines_only_where_the_terminal_is_full(command, capsys, monkeypatch):
    """tyro keeps a docstring's line breaks unless handled: at 80 columns a sentence must not stop mid-line."""
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    body = [line.removeprefix("│").removesuffix("│") for line in capsys.readouterr().out.splitlines()]
    assert sum(line.strip().startswith("--") for line in body) >= 3  # the options are there, one per line
    early = []
    def indent(line: str) -> int:
        return len(line) - len(line.lstrip())

    for line, following in zip(body, body[1:]):
        text, next_text = line.rstrip(), following.strip()
        if not text.strip() or not next_text or indent(line) <= 2 or indent(following) != indent(line):
            continue  # not two lines of one option's text
        if len(line) - len(text) > len(next_text.split()[0]) + 1:  # the next word would have fitted here
            early.append(f"{text.strip()!r} / {next_text!r}")
    assert not early, "\n".join(early)


def test_sigterm_during_an_export_cleans_up_and_exits_143(tmp_path, capsys):
    """`timeout`, a batch scheduler or systemd stop a job with SIGTERM: no staging folder may be left behind."""
    import textwrap

    data = tmp_path / "demos.zarr"
    assert run_cli(["record", "--episodes", "2", "--obs-mode", "pixels", "--out", data], capsys)[0] == 0
    script = textwrap.dedent(f"""
        import os, signal, rich.progress
        from robot_rl.apps.cli import main

        def advance(self, task_id, advance=1):  # after the first episode is written
            os.kill(os.getpid(), signal.SIGTERM)

        rich.progress.Progress.advance = advance
        main(["export", {str(data)!r}, "--out", {str(tmp_path / "lerobot")!r}])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 143, (done.returncode, done.stderr)
    assert done.stderr.strip().splitlines()[-1] == "terminated" and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demos.zarr"]  # no output, no hidden staging folder


def test_ctrl_c_while_the_console_script_imports_is_one_line_and_exit_130(monkeypatch, capsys):
    """The commands take seconds to import; a Ctrl-C then must not print an import traceback."""
    import importlib.abc

    from robot_rl.apps import console

    class InterruptedImport(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "robot_rl.apps.cli":
                raise KeyboardInterrupt
            return None

    from robot_rl.core import interrupts

    monkeypatch.delitem(sys.modules, "robot_rl.apps.cli", raising=False)
    monkeypatch.delitem(sys.modules, "jax", raising=False)  # else it leaves with os._exit (an XLA thread may run)
    monkeypatch.setattr(interrupts, "install_for_process", lambda: None)  # not this test process's handlers
    monkeypatch.setattr(sys, "meta_path", [InterruptedImport(), *sys.meta_path])
    with pytest.raises(SystemExit) as exit_info:
        console.main()
    assert exit_info.value.code == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_several_datasets_are_given_one_way_for_every_command():
    """`--dataset A B` and `--dataset A --dataset B` mean the same to train-bc and train-reward (argparse alone keeps
    only the last of a repeated option)."""
    from robot_rl.apps.cli import Command, parse_args

    for command in (["train-bc", "--out", "o"], ["train-reward", "--out", "o"]):
        for given in (["--dataset", "a", "b"], ["--dataset", "a", "--dataset", "b"]):
            assert parse_args(Command, [*command, *given, "--steps", "3"]).dataset == (Path("a"), Path("b"))
