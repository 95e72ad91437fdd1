"""SIGINT / SIGTERM at any moment end a command with 130 / 143, one last line, no traceback and nothing half-made.

The `robot-rl` console script of the venv gets the signal at seeded random moments from 0.1 s after its stop handlers
are in (before them a signal meets the interpreter's own start-up, which no code of the project can handle): while it
imports, builds, records demos, trains or validates; the launch case runs inside a private network namespace with its
own ROS domain, as every ROS test does. Each command would run for minutes if nothing stopped it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ros_harness import allocate_domain_id

from robot_rl.apps.cli import main

ROBOT_RL = str(Path(sys.executable).with_name("robot-rl"))
REPO = Path(__file__).resolve().parents[1]
TINY_BC = ["--diffusion.down-dims", "16", "32", "--diffusion.state-features", "16",
           "--diffusion.step-embedding-dim", "16", "--diffusion.inference-steps", "4", "--batch-size", "16",
           "--eval-episodes", "1", "--no-video"]
EARLY_S = 2.0  # one moment in [0.1 s, EARLY_S] (imports, start-up), the other after it, up to the command's LATE_S:
LATE_S = {"record": 4.0, "train": 7.5, "train-bc": 6.0, "validate": 5.0}  # train: demos from ~3 s, training ~7 s


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A small state dataset (train-bc's input) and a run folder with a random SAC policy (validate's)."""
    from robot_rl.agents.sac import SACAgent, SACConfig
    from robot_rl.sim.loop import make_env
    from robot_rl.policies.gaussian import weights_message
    from robot_rl.wire.policy_file import write_policy_file

    folder = tmp_path_factory.mktemp("stop_inputs")
    demos = folder / "demos.zarr"
    main(["record", "--out", str(demos), "--episodes", "2", "--obs-mode", "state"])
    env = make_env("PickCube-v0", obs_mode="state")
    agent = SACAgent.create(1, env.observation_space, 4, SACConfig(actor_hidden_dims=(16,), critic_hidden_dims=(16,)))
    env.close()
    run = folder / "policy_run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"task": "PickCube-v0"}))
    write_policy_file(run / "policy.msgpack", weights_message(agent, version=1))
    return demos, run


def _commands(work: Path, demos: Path, policy_run: Path) -> dict[str, list[str]]:
    return {
        "record": ["record", "--obs-mode", "pixels", "--episodes", "1000", "--out", str(work / "record.zarr")],
        "train": ["train", "--obs-mode", "state", "--demos", "40", "--steps", "100000", "--eval-every", "100000",
                  "--eval-episodes", "1", "--no-video", "--run-dir", str(work / "train_run")],
        "train-bc": ["train-bc", "--dataset", str(demos), "--out", str(work / "bc"), "--steps", "100000", *TINY_BC],
        "validate": ["validate", "--policy", str(policy_run), "--episodes", "500", "--workers", "1", "--no-video"],
    }


def _check_left_behind(name: str, work: Path, stderr: str, last: str) -> None:
    """What a stopped command may leave: nothing, or a complete thing (finished episodes, a resumable run, the
    policy trained so far with its report)."""
    from robot_rl.data.episodes import EpisodeDataset
    from robot_rl.training.run_folder import load_run
    from robot_rl.actor.deploy_gate import read_records

    left = sorted(p.name for p in work.iterdir())
    if name == "record":
        assert left in ([], ["record.zarr"]), left
        if left:  # the episodes finished before the stop, each complete (verified), and said so
            dataset = EpisodeDataset(work / "record.zarr")
            assert dataset.num_episodes >= 1 and dataset.seeds.tolist() == list(range(dataset.num_episodes))
            dataset.episode(dataset.num_episodes - 1)
            assert f"kept the {dataset.num_episodes} finished episodes" in stderr
    elif name == "train":
        assert left in ([], ["train_run"]), left
        if left:  # stopped once it trained: a checkpoint to resume from and the report so far
            load_run(work / "train_run")
            assert (work / "train_run" / "report.md").exists() and "resume with" in last, last
    elif name == "train-bc":
        assert left in ([], ["bc"]), left
        if left:  # stopped after its first step: the policy trained so far, its report and summary
            for part in ("policy", "report.md", "summary.json", "config.json"):
                assert (work / "bc" / part).exists(), (part, sorted(p.name for p in (work / "bc").iterdir()))
            assert "trained so far" in last, last
    elif name == "validate":  # no report folder (nor the validation/ folder made for it) and no record
        policy_run = work / "policy_run"
        assert left == ["policy_run"] and not (policy_run / "validation").exists(), left
        assert read_records(policy_run) == []


def _handles_stops(pid: int) -> bool:
    """Whether process `pid` catches SIGINT and SIGTERM (/proc/PID/status SigCgt): the `robot-rl` console script's
    handlers are in (Python itself catches only SIGINT)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next((int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigCgt:")), 0)
    return all(caught >> (int(number) - 1) & 1 for number in (signal.SIGINT, signal.SIGTERM))


def _send_at_moments(runs) -> None:
    """Send each run's signal its moment after its process's stop handlers were seen in (however long a loaded
    machine takes to get there; after 60 s without them it is sent anyway, and the outcome says what happened)."""
    due = []
    for process, moment, signum, *_ in runs:
        deadline = time.monotonic() + 60
        while not _handles_stops(process.pid) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        due.append((time.monotonic() + moment, process, signum))
    for at, process, signum in sorted(due, key=lambda item: item[0]):
        time.sleep(max(0.0, at - time.monotonic()))
        process.send_signal(signum)


@pytest.mark.parametrize("name", ["record", "train", "train-bc", "validate"])
def test_a_signal_at_any_moment_stops_a_command_cleanly(inputs, tmp_path, name):
    """Two seeded moments per command, one SIGINT and one SIGTERM, the two runs side by side: one while it starts,
    one once its job runs."""
    import shutil

    demos, policy_run = inputs
    rng = random.Random(f"{name}-stop")
    windows = [(0.1, EARLY_S), (EARLY_S, LATE_S[name])]  # importing and starting; the job under way
    rng.shuffle(windows)
    runs = []
    for signum, window in zip((signal.SIGINT, signal.SIGTERM), windows, strict=True):
        work = tmp_path / signum.name
        work.mkdir()
        if name == "validate":  # its own copy: it writes next to the policy
            shutil.copytree(policy_run, work / "policy_run")
        process = subprocess.Popen([ROBOT_RL, *_commands(work, demos, work / "policy_run")[name]], cwd=work,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   text=True)
        runs.append((process, round(rng.uniform(*window), 2), signum, work))
    _send_at_moments(runs)
    failures = []
    for process, moment, signum, work in runs:
        try:
            _, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
            failures.append(f"{name}: still running 60 s after {signum.name} at {moment} s\n{stderr[-2000:]}")
            continue
        lines = stderr.strip().splitlines()
        last = lines[-1] if lines else ""
        what = f"{name}: {signum.name} at {moment} s -> exit {process.returncode}; stderr:\n{stderr[-2500:]}"
        try:
            assert process.returncode == 128 + signum, what
            assert "Traceback" not in stderr and "Exception ignored" not in stderr, what
            word = "terminated" if signum == signal.SIGTERM else "interrupted"
            assert last == word or last.startswith("interrupted at "), what  # or what a run kept, how to resume
            _check_left_behind(name, work, stderr, last)
        except AssertionError as error:
            failures.append(what if str(error) == what else f"{error}\n{what}")
    assert not failures, "\n\n".join(failures)


def test_a_signal_at_any_moment_stops_a_launch_cleanly(tmp_path):
    """`robot-rl launch launch/sim_train.yaml` (in a private network namespace, its own ROS domain): SIGINT while
    the nodes start, SIGTERM once the learner builds its agent and records its demos. Exit 130 / 143, every node
    stopped without escalation, no traceback from any process, and the run_dir gone or resumable (its config)."""
    pytest.importorskip("rclpy")
    from ros_harness import private_network_or_skip

    from robot_rl.ros.net.env import ros_environment

    rng = random.Random("launch-stop")
    runs = []
    for signum, window in ((signal.SIGINT, (0.1, 2.5)), (signal.SIGTERM, (2.5, 6.0))):
        domain = allocate_domain_id()
        run_dir = tmp_path / signum.name / "run"
        argv = [ROBOT_RL, "launch", str(REPO / "launch" / "sim_train.yaml"), f"run_dir:={run_dir}", "steps:=60",
                "demos:=2", "eval_episodes:=1", "--domain-id", str(domain)]
        process = subprocess.Popen(private_network_or_skip(argv), cwd=REPO, env=ros_environment(domain_id=domain),
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, start_new_session=True)
        runs.append((process, round(rng.uniform(*window), 2), signum, run_dir))
    failures = []
    try:
        _send_at_moments(runs)
        for process, moment, signum, run_dir in runs:
            out, _ = process.communicate(timeout=60)
            what = f"launch: {signum.name} at {moment} s -> exit {process.returncode}; output:\n{out[-4000:]}"
            left = sorted(p.name for p in run_dir.iterdir()) if run_dir.exists() else None
            if (process.returncode != 128 + signum or "Traceback" in out or "Fatal Python error" in out
                    or "still running: sending" in out):
                failures.append(what)
            elif left is not None and "config.json" not in left:
                failures.append(f"half-made run_dir {left}\n{what}")
    finally:
        for process, *_ in runs:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
    assert not failures, "\n\n".join(failures)
