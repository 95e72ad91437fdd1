"""`robot-rl record --source ros` records teleoperated demos from a running graph: the sim node (lock-step, cameras,
seed 0: the recorder waits for the human's command answering each frame, so the run is repeatable), the scripted teleop node as the human (it takes over at once and keeps control), and the recorder. The dataset
must hold the episodes with camera frames, intervention flags and increasing timestamps, and the demos must be
useful: the recorded human actions, replayed open-loop in a fresh in-process env from the same seed, move the arm
along the recorded TCP trajectory, and they are the scripted expert's actions for the states they were taken in.
Corrupted copies of the same demos (no motion, axes swapped, half speed) fail those checks. Runs in a private network
namespace with its own ROS_DOMAIN_ID (tests/ros_harness.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from ros_harness import allocate_domain_id

DOMAIN_ID = allocate_domain_id()
DEADLINE_S = 150.0
EPISODES = 2
IMAGE_SIZE = 32
TASK = "PickCube-v0"
SIM_SEED = 0
MAX_RESETS = 12  # the recorder resets the sim once per episode (more if a reset call had to be repeated)
TRACKING_TOLERANCE_M = 0.005


def client() -> dict:
    out = Path(tempfile.mkdtemp(prefix="ros-record-")) / "demos.zarr"
    python = sys.executable
    nodes = [
        subprocess.Popen([python, "-m", "robot_rl.sim.node", "--task", TASK, "--mode", "lockstep",
                          "--obs-mode", "pixels", "--image-size", str(IMAGE_SIZE), "--seed", str(SIM_SEED)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True),
        subprocess.Popen([python, "-m", "robot_rl.sim.scripted_teleop", "--ros-args", "-p", "stuck_window:=2",
                          "-p", "stuck_distance:=10.0", "-p", "takeover_steps:=1000", "-p", "episode_budget:=1000"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True),
    ]
    start = time.monotonic()
    try:
        for line in nodes[1].stderr:  # the human must be watching before the first episode starts
            if "scripted teleop up" in line or time.monotonic() - start > DEADLINE_S / 2:
                break
        threading.Thread(target=nodes[1].stderr.read, daemon=True).start()  # keep its pipe from filling up
        recorder = subprocess.run(
            [python, "-m", "robot_rl.apps.cli", "record", "--source", "ros", "--mode", "lockstep", "--obs-mode", "pixels",
             "--episodes", str(EPISODES), "--out", str(out), "--image-size", str(IMAGE_SIZE)],
            capture_output=True, text=True, timeout=DEADLINE_S)
    finally:
        for node in nodes:
            os.killpg(node.pid, signal.SIGTERM)
        for node in nodes:
            try:
                node.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(node.pid, signal.SIGKILL)
    summary = {"rc": recorder.returncode, "seconds": time.monotonic() - start, "log": recorder.stderr[-2500:],
               "out": str(out)}
    if recorder.returncode == 0:
        from robot_rl.data.episodes import EpisodeDataset

        dataset = EpisodeDataset(out)
        summary["episodes"] = dataset.num_episodes
        summary["per_episode"] = []
        for index in range(dataset.num_episodes):
            episode = dataset.episode(index)
            summary["per_episode"].append({
                "steps": int(len(episode["action"])), "success": bool(episode["success"]),
                "interventions": int(np.sum(episode["intervention"])),
                # the human's recorded actions move the arm (a hold would be all-zero translation)
                "human_moves": int(np.sum(np.abs(episode["action"][episode["intervention"], :3]).max(axis=-1) > 1e-3)),
                "timestamps_increase": bool(np.all(np.diff(episode["timestamp"]) > 0)),
                "image_shape": list(episode["obs"]["images/front"].shape[1:]),
                "keys": sorted(episode["obs"]),
            })
    return summary


class Replay:
    """The sim env in-process, reset like the sim node (seeded, then once per episode), with the scripted expert."""

    def __init__(self):
        from robot_rl.sim.loop import make_env
        from robot_rl.sim.expert import make_expert

        self.env = make_env(TASK, obs_mode="state")
        self.expert = make_expert(self.env)

    def _reset(self, resets: int) -> None:
        self.env.reset(seed=SIM_SEED)
        for _ in range(resets):
            self.env.reset()

    def find_start(self, tcp_position, after: int) -> int:
        """How many resets after the seeded one start where the recorded episode began (the first after `after`)."""
        for resets in range(after + 1, MAX_RESETS + 1):
            self._reset(resets)
            if np.linalg.norm(self.env.unwrapped.tcp_pose()[0] - tcp_position) < 1e-3:
                return resets
        raise AssertionError(f"no reset {after + 1}..{MAX_RESETS} of seed {SIM_SEED} starts at {tcp_position}")

    def check(self, episode: dict, actions: np.ndarray, resets: int) -> dict:
        """Replay `actions` open-loop from the episode's start (after `resets` resets); compare with the recording."""
        recorded_tcp = np.concatenate([episode["obs"]["state"][:, :3], episode["final_obs"]["state"][None, :3]])
        self._reset(resets)
        tcp, expert = [self.env.unwrapped.tcp_pose()[0].copy()], []
        success = False
        for action in actions:
            expert.append(self.expert.act())
            *_, info = self.env.step(action)
            tcp.append(self.env.unwrapped.tcp_pose()[0].copy())
            success = success or bool(info.get("success", False))
        tcp, expert = np.array(tcp), np.array(expert)
        # A recorded frame may be one step off the replay (the sim applies a gripper command at its next step).
        distance = np.linalg.norm(recorded_tcp[:, None] - tcp[None], axis=-1)
        steps = np.arange(len(tcp))
        near = np.abs(steps[:, None] - steps[None]) <= 1
        lagged_error = np.where(near, distance, np.inf).min(axis=1)
        human = episode["intervention"]
        matches = (np.abs(expert[:, :3] - episode["action"][:, :3]).max(axis=1) < 0.25) \
            & (np.sign(expert[:, 3]) == np.sign(episode["action"][:, 3]))
        return {
            "tracked": float(np.mean(lagged_error < TRACKING_TOLERANCE_M)),
            "max_error_mm": float(1000 * lagged_error.max()),
            "path_m": float(np.linalg.norm(np.diff(recorded_tcp, axis=0), axis=1).sum()),
            "expert_agreement": float(np.mean(matches[human])) if human.any() else 0.0,
            "replay_success": success,
            "errors_mm": np.round(1000 * lagged_error, 1).tolist(),
            "disagreeing_steps": np.flatnonzero(human & ~matches).tolist(),
        }


def test_record_teleoperated_demos_from_a_running_graph():
    from ros_harness import run_ros_script

    from robot_rl.data.episodes import EpisodeDataset

    summary, stderr, _ = run_ros_script(__file__, "client", DOMAIN_ID, DEADLINE_S + 30)
    assert summary["rc"] == 0, summary
    assert summary["episodes"] == EPISODES, summary
    for episode in summary["per_episode"]:
        assert episode["keys"] == ["images/front", "images/wrist", "state"], summary
        assert episode["image_shape"] == [IMAGE_SIZE, IMAGE_SIZE, 3], summary
        assert episode["timestamps_increase"], summary
        # the human takes over after a few steps (the stuck rule needs two frames) and keeps control: most are flagged
        assert episode["interventions"] >= episode["steps"] / 2 > 0, summary
        assert episode["human_moves"] >= episode["interventions"] / 2, summary
    # Whether the scripted expert finishes the task within 50 steps is reported, not required (it does not always).

    # The demos reproduce the expert's motion: replayed open-loop from the same start, the recorded actions move the
    # arm along the recorded trajectory, and they are the expert's actions for the states they were taken in.
    dataset = EpisodeDataset(summary["out"])
    replay = Replay()
    results, resets = [], 0
    for index in range(dataset.num_episodes):
        episode = dataset.episode(index)
        resets = replay.find_start(episode["obs"]["state"][0, :3], after=resets)
        actions = episode["action"]
        candidates = {
            "recorded": actions,
            "no motion": np.concatenate([np.zeros_like(actions[:, :3]), actions[:, 3:]], axis=1),
            "x and y swapped": actions[:, [1, 0, 2, 3]],
            "half speed": actions * np.array([0.5, 0.5, 0.5, 1.0], dtype=actions.dtype),
        }
        results.append({name: replay.check(episode, candidate, resets) for name, candidate in candidates.items()})
    context = (summary["per_episode"], results)
    (Path(summary["out"]).parent / "replay.json").write_text(json.dumps(context))  # for a look when it fails
    for checks in results:
        recorded = checks["recorded"]
        assert recorded["path_m"] > 0.1, context  # the arm went somewhere
        # lock-step replays exactly until the fingers touch the cube; contact can then drift a few mm over the last
        # steps of a short (~18-step) successful episode
        assert recorded["tracked"] >= 0.85, context
        assert recorded["expert_agreement"] >= 0.75, context
        for name, check in checks.items():  # useless demos would not pass
            if name != "recorded":
                assert check["tracked"] < 0.6 and check["expert_agreement"] < 0.6, (name, context)
    shutil.rmtree(Path(summary["out"]).parent)  # kept for a look when the test fails


if __name__ == "__main__":
    if sys.argv[1:] == ["client"]:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        print("RESULT " + json.dumps(client()))
