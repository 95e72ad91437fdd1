"""`robot-rl replay-in-sim`: how well the sim mirror mirrors a robot.

Each recorded episode's actions are turned back into the absolute targets the robot was commanded, the way the
actor did it: the safety layer of the robot file (`robot_rl.actor.safety.Safety`) starting from the first recorded TCP
pose. The sim mirror executes those targets through its own controller (`robot_rl.sim.robot_adapter.SimRobotAdapter`,
as in-process training does), and after every command the sim's TCP is compared with the robot's next recorded one:
position [m], orientation [deg] and gripper width [m]. (A step the robot held, e.g. on a stale sensor, left no
transition in the dataset: there the recorded pose is one control period later than the sim's.)

Where the scene starts from:

- an episode recorded in the sim (seed >= 0) is replayed from a reset with its seed: arm and objects start where they
  did, so a dataset recorded by the sim itself replays with a discrepancy of about zero;
- an episode with no seed (-1, a real robot) starts with the arm placed at the first recorded TCP pose (inverse
  kinematics) and the gripper at the recorded width. Objects are not modelled then: the task's objects are made
  weightless and contact-free, so the sim's fingers close on nothing where the robot's held an object (its gripper
  width error is the object's width there).

Output (``--out``, default ``<dataset>.replay-in-sim/``): ``replay.json`` (statistics per episode and overall, and
the per-step errors) and ``discrepancy.png`` (per-step errors of each episode).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tyro

from robot_rl.data.episodes import DatasetError, DatasetReader
from robot_rl.core.files import atomic_write_text
from robot_rl.actor.safety import ACTION_DIMS, SafeCommand, Safety, SafetyConfig
from robot_rl.sim.env import STATE_SIZE

REPLAY_JSON = "replay.json"
DISCREPANCY_PLOT = "discrepancy.png"
STATE_KEY = "state"
ERROR_KEYS = ("position_error_m", "orientation_error_deg", "gripper_error_m")
UNITS = {"position_error_m": "m", "orientation_error_deg": "deg", "gripper_error_m": "m"}
# Dataset robot names of `robot-rl record --source sim` (EpisodeWriter's default; the second from older datasets):
# the sim_panda limits.
SIM_RECORDING_ROBOTS = ("sim_panda", "robot_rl_panda_sim")


@dataclasses.dataclass(frozen=True)
class ReplayInSimConfig:
    """Replay recorded episodes' commanded targets in the sim mirror and report how far its TCP is from the robot's."""

    dataset: tyro.conf.Positional[Path]
    """Dataset directory (teleop demos from a robot, or episodes recorded in the sim)."""
    robot: str = "sim_panda"
    """Robot file (robots/x.yaml) or a shipped robot's name: the limits that turned the recorded actions into
    commanded targets (step sizes, workspace, orientation box)."""
    task: str | None = None
    """Sim task whose scene replays the episodes, e.g. PickCube-v0 (default: the dataset's task)."""
    episodes: tuple[int, ...] = ()
    """Episode indices to replay, negative counting from the end (none given: every episode)."""
    out: Path | None = None
    """Folder for replay.json and discrepancy.png (default: <dataset>.replay-in-sim next to the dataset)."""

    @property
    def out_dir(self) -> Path:
        """`out`, or the folder next to the dataset."""
        if self.out is not None:
            return self.out
        dataset = self.dataset.expanduser().resolve()
        return dataset.with_name(dataset.name + ".replay-in-sim")


@dataclasses.dataclass(frozen=True, eq=False)
class EpisodeDiscrepancy:
    """Per-step discrepancy of one replayed episode: after command t, the robot's recorded TCP vs the sim's."""

    episode: int
    seed: int
    position_error_m: np.ndarray  # (T,)
    orientation_error_deg: np.ndarray  # (T,)
    gripper_error_m: np.ndarray  # (T,)
    start_position_error_m: float
    """Distance between the recorded and the sim's TCP before the first command (the sim's reset or IK pose)."""

    @property
    def steps(self) -> int:
        return len(self.position_error_m)

    @property
    def objects_modelled(self) -> bool:
        """Whether the sim scene held the recorded episode's objects (an episode recorded in the sim, with a seed)."""
        return self.seed >= 0

    def to_json(self) -> dict[str, Any]:
        """Statistics of each error and the per-step values."""
        return {
            "episode": self.episode, "seed": self.seed, "steps": self.steps,
            "objects_modelled": self.objects_modelled, "start_position_error_m": self.start_position_error_m,
            **{key: error_statistics(getattr(self, key)) for key in ERROR_KEYS},
            "per_step": {key: getattr(self, key).tolist() for key in ERROR_KEYS},
        }


def error_statistics(values: np.ndarray) -> dict[str, float]:
    """mean, median, p95 and max of per-step errors (zeros for none)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return {"mean": 0.0, "median": 0.0, "p95": 0.0, "max": 0.0}
    return {"mean": float(values.mean()), "median": float(np.median(values)),
            "p95": float(np.percentile(values, 95)), "max": float(values.max())}


def orientation_error_deg(quats_a: np.ndarray, quats_b: np.ndarray) -> np.ndarray:
    """Angle [deg] of the rotation between two sequences of orientations (N, 4) wxyz, either quaternion sign."""
    a = np.asarray(quats_a, dtype=np.float64)
    b = np.asarray(quats_b, dtype=np.float64)
    a = a / np.linalg.norm(a, axis=-1, keepdims=True)
    b = b / np.linalg.norm(b, axis=-1, keepdims=True)
    # a * conj(b): atan2 of its vector and scalar parts stays accurate for tiny angles, where arccos does not
    w = np.sum(a * b, axis=-1)
    vector = b[..., :1] * a[..., 1:] - a[..., :1] * b[..., 1:] - np.cross(a[..., 1:], b[..., 1:])
    return np.degrees(2.0 * np.arctan2(np.linalg.norm(vector, axis=-1), np.abs(w)))


def commanded_targets(safety_config: SafetyConfig, start_position, start_quat,
                      actions: np.ndarray) -> list[SafeCommand]:
    """The absolute commands recorded delta actions stood for: the safety layer applied from the start target."""
    safety = Safety(safety_config)
    position = np.asarray(start_position, dtype=np.float64)
    quat = np.asarray(start_quat, dtype=np.float64)
    quat = quat / np.linalg.norm(quat)
    gripper = safety_config.initial_gripper
    commands = []
    for action in np.asarray(actions):
        command = safety.filter(action, position, quat, current_gripper=gripper)
        position, quat, gripper = command.target_position, command.target_quat, command.gripper
        commands.append(command)
    return commands


def replay_episode(env, safety_config: SafetyConfig, states: np.ndarray, actions: np.ndarray, seed: int,
                   episode: int = 0) -> EpisodeDiscrepancy:
    """Replay one episode's commanded targets in `env` (a sim env from `robot_rl.sim.loop.make_env`, reused across
    episodes) and compare the sim's TCP with the recorded one after every command.

    `states`: (T + 1, 14) recorded proprioception, the observations of the T steps and the final one; `actions`:
    (T, A) the recorded delta actions; `seed`: the episode's reset seed (-1: none, the arm is placed by IK and the
    objects are not modelled, see the module docstring).
    """
    from robot_rl.sim.robot_adapter import SimRobotAdapter

    states = np.asarray(states, dtype=np.float64)
    actions = np.asarray(actions)
    if states.shape != (len(actions) + 1, STATE_SIZE):
        raise ValueError(f"episode {episode}: states have shape {states.shape}; expected ({len(actions) + 1}, "
                         f"{STATE_SIZE}) for {len(actions)} actions")
    adapter = SimRobotAdapter(env)
    base = env.unwrapped
    if seed >= 0:
        start = adapter.reset(seed=seed)
        start_position, start_quat = start.tcp_position, start.tcp_quat  # the recording's controller target
    else:
        env.reset(seed=0)
        _place_arm(base, states[0, 0:3], states[0, 3:7], states[0, 13])
        _remove_task_objects(base)
        start_position, start_quat = states[0, 0:3], states[0, 3:7]
    start_position_error = float(np.linalg.norm(base.tcp_pose()[0] - states[0, 0:3]))

    simulated = np.empty((len(actions), STATE_SIZE))
    for step, command in enumerate(commanded_targets(safety_config, start_position, start_quat, actions)):
        simulated[step] = adapter.execute(command).observation[STATE_KEY]
    recorded = states[1:]
    return EpisodeDiscrepancy(
        episode=episode, seed=int(seed),
        position_error_m=np.linalg.norm(simulated[:, 0:3] - recorded[:, 0:3], axis=1),
        orientation_error_deg=orientation_error_deg(simulated[:, 3:7], recorded[:, 3:7]),
        gripper_error_m=np.abs(simulated[:, 13] - recorded[:, 13]),
        start_position_error_m=start_position_error)


def _place_arm(base, position: np.ndarray, quat: np.ndarray, gripper_width: float) -> None:
    """Put the arm at rest at a TCP pose (IK) with the fingers at a width, and make that pose the target."""
    import mujoco

    from robot_rl.sim import robot

    base.data.qpos[base._arm_qpos_adr] = base._solve_ik(position, quat / np.linalg.norm(quat), base._start_qpos)
    base.data.qpos[base._finger_qpos_adr] = np.clip(gripper_width / 2.0, 0.0, robot.FINGER_TRAVEL)
    base.data.qvel[:] = 0.0
    mujoco.mj_forward(base.model, base.data)
    base.set_target_pose(position, quat)


def _remove_task_objects(base) -> None:
    """Make every body that is neither the arm nor the fixed scene weightless and contact-free."""
    model = base.model
    arm_root = model.body_rootid[model.site_bodyid[base._tcp_site_id]]
    objects = np.flatnonzero((model.body_rootid != 0) & (model.body_rootid != arm_root))
    model.body_gravcomp[objects] = 1.0
    in_objects = np.isin(model.geom_bodyid, objects)
    model.geom_contype[in_objects] = 0
    model.geom_conaffinity[in_objects] = 0
    base.data.qvel[:] = 0.0


def replay_dataset(cfg: ReplayInSimConfig,
                   on_episode: Callable[[EpisodeDiscrepancy], None] | None = None) -> dict[str, Any]:
    """Replay the chosen episodes of a dataset, write replay.json and discrepancy.png to `cfg.out_dir` and return
    the summary (replay.json's content). Bad input raises ValueError / DatasetError before anything is written."""
    from robot_rl.actor.robot_config import load_robot_config

    reader = DatasetReader(cfg.dataset)
    robot = load_robot_config(cfg.robot)
    action_dim = _check_dataset(reader, robot.name)
    episodes = _episode_indices(reader, cfg.episodes)
    task = cfg.task or reader.task
    safety_config = robot.safety_config(action_dim=action_dim)
    loaded = [reader.read_episode(index, keys=[STATE_KEY]) for index in episodes]
    longest = max(len(episode["action"]) for episode in loaded)
    env = _make_replay_env(task, robot, action_dim, longest, reader)
    objectless_env = None
    results = []
    try:
        for index, episode in zip(episodes, loaded):
            states = np.concatenate([episode["obs"][STATE_KEY], episode["final_obs"][STATE_KEY][None]])
            if episode["seed"] < 0 and objectless_env is None:  # its model is changed: keep it apart
                objectless_env = _make_replay_env(task, robot, action_dim, longest, reader)
            replay_env = env if episode["seed"] >= 0 else objectless_env
            result = replay_episode(replay_env, safety_config, states, episode["action"], episode["seed"], index)
            results.append(result)
            if on_episode is not None:
                on_episode(result)
    finally:
        env.close()
        if objectless_env is not None:
            objectless_env.close()

    dataset_robot = reader.attrs.get("robot")
    notes = []
    if dataset_robot not in (robot.name, *SIM_RECORDING_ROBOTS, None):
        notes.append(f"the dataset was recorded by robot {dataset_robot!r}; its actions were replayed with the limits "
                     f"of {robot.name!r} (--robot)")
    if any(not result.objects_modelled for result in results):
        notes.append("episodes without a seed (a real robot) start at the recorded pose without the task's objects: "
                     "gripper errors while holding an object are its width")
    out = cfg.out_dir
    summary = {
        "dataset": str(reader.path), "robot": robot.name, "robot_file": robot.path, "dataset_robot": dataset_robot,
        "task": task, "fps": reader.fps, "action_dim": action_dim, "units": UNITS,
        "overall": {
            "episodes": len(results), "steps": sum(result.steps for result in results),
            **{key: error_statistics(np.concatenate([getattr(r, key) for r in results])) for key in ERROR_KEYS},
        },
        "episodes": [result.to_json() for result in results],
        "notes": notes,
        "files": {"json": str(out / REPLAY_JSON), "plot": str(out / DISCREPANCY_PLOT)},
    }
    out.mkdir(parents=True, exist_ok=True)
    plot_discrepancy(out / DISCREPANCY_PLOT, results, f"{reader.path.name}: sim replay with {robot.name} ({task})")
    atomic_write_text(out / REPLAY_JSON, json.dumps(summary, indent=2) + "\n")
    return summary


def _check_dataset(reader: DatasetReader, robot_name: str) -> int:
    """The dataset's action size; DatasetError / ValueError if it cannot be replayed."""
    if reader.num_episodes == 0:
        raise DatasetError(f"{reader.path}: has no episodes to replay")
    state = reader.observation_spec.get(STATE_KEY)
    if state is None or state.shape != (STATE_SIZE,):
        found = "none" if state is None else "x".join(map(str, state.shape))
        raise DatasetError(f"{reader.path}: replay needs the {STATE_SIZE}-d proprioception obs/{STATE_KEY} (TCP pose, "
                           f"gripper width) to compare with; found {found}")
    shape = reader.action_spec.shape
    if len(shape) != 1 or shape[0] not in ACTION_DIMS:
        size = f"{shape[0]}-d" if len(shape) == 1 else f"shaped {'x'.join(map(str, shape)) or '()'}"
        raise ValueError(f"{reader.path}: actions are {size}; robot {robot_name!r} takes 4-d (dx, dy, dz, gripper) or "
                         "7-d (dx, dy, dz, drx, dry, drz, gripper) delta actions")
    return int(shape[0])


def _episode_indices(reader: DatasetReader, episodes: Sequence[int]) -> list[int]:
    count = reader.num_episodes
    wrong = [index for index in episodes if not -count <= index < count]
    if wrong:
        raise ValueError(f"--episodes {' '.join(map(str, wrong))}: out of range, {reader.path} has {count} episodes")
    chosen = [index % count for index in episodes] if episodes else list(range(count))
    return list(dict.fromkeys(chosen))


def _make_replay_env(task: str, robot, action_dim: int, longest: int, reader: DatasetReader):
    """A state-only sim env of `task` taking the robot's step sizes, with room for the longest episode."""
    from robot_rl.sim.loop import make_env

    try:
        env = make_env(task, obs_mode="state", control_rotation=action_dim == 7,
                       max_translation=robot.max_translation, max_rotation=robot.max_rotation,
                       max_episode_steps=longest + 1)
    except ValueError as error:
        raise ValueError(f"{error} (the sim scene to replay {reader.path} in: choose one with --task)") from None
    rate = 1.0 / env.unwrapped.control_dt
    if not math.isclose(reader.fps, rate, rel_tol=1e-3):
        env.close()
        raise ValueError(f"{reader.path} was recorded at {reader.fps:g} steps per second; the sim mirror steps at "
                         f"{rate:g} Hz, so its steps would not line up with the recorded ones")
    return env


def plot_discrepancy(path: Path, results: Sequence[EpisodeDiscrepancy], title: str) -> Path:
    """Per-step position [mm], orientation [deg] and gripper width [mm] error of each episode, one line each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("position_error_m", 1000.0, "TCP position error [mm]"),
              ("orientation_error_deg", 1.0, "TCP orientation error [deg]"),
              ("gripper_error_m", 1000.0, "gripper width error [mm]"))
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 8), dpi=110, sharex=True)
    for ax, (key, scale, label) in zip(axes, panels):
        for result in results:
            ax.plot(np.arange(1, result.steps + 1), getattr(result, key) * scale, lw=1, alpha=0.8,
                    label=f"episode {result.episode}")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    if len(results) <= 10:
        axes[0].legend(fontsize=7, ncol=2)
    axes[-1].set_xlabel("control step (after command)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def run_replay_in_sim(cfg: ReplayInSimConfig) -> dict[str, Any]:
    """`robot-rl replay-in-sim`: replay, write the outputs, print a summary table; returns the summary."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    summary = replay_dataset(cfg)
    table = Table(title=escape(f"sim replay of {summary['dataset']} with {summary['robot']} ({summary['task']})"))
    for column in ("episode", "seed", "steps", "position [mm]\nmean/p95/max", "orient. [deg]\nmean/max",
                   "gripper [mm]\nmean/max"):
        table.add_column(escape(column), justify="right")

    def row(name: str, seed: str, stats: dict[str, Any]) -> None:
        position, orientation, gripper = (stats[key] for key in ERROR_KEYS)
        table.add_row(name, seed, str(stats["steps"]),
                      f"{position['mean'] * 1e3:.2f}/{position['p95'] * 1e3:.2f}/{position['max'] * 1e3:.2f}",
                      f"{orientation['mean']:.2f}/{orientation['max']:.2f}",
                      f"{gripper['mean'] * 1e3:.2f}/{gripper['max'] * 1e3:.2f}")

    for episode in summary["episodes"]:
        row(str(episode["episode"]), str(episode["seed"]), episode)
    table.add_section()
    row("all", "", summary["overall"])
    console = Console()
    console.print(table)
    for note in summary["notes"]:
        console.print(f"note: {note}", soft_wrap=True, markup=False)
    console.print(f"wrote {summary['files']['json']} and {summary['files']['plot']}", soft_wrap=True, markup=False)
    return summary
