"""Training over ROS 2 vs in-process: the same task, seeds, demos, learner settings and env-step budget, trained by
`robot-rl launch launch/sim_train.yaml` (sim node in lock-step + actor + learner as separate processes, no human) once
per robot file, and once by `robot_rl.apps.train.train` in one process; every final policy is evaluated in-process on the
same eval seeds. Prints ONE JSON line: per robot file and seed the final success (in-process evaluation) and how the
policy did while it acted over that robot's topics during training (``train_success_rate``, successes of the last 10
training episodes, the actor's holds, rejected messages and waits).

Robot files (``--robots``): ``sim_panda`` (the sim node's native topics: TCP pose and twist, gripper state, pose
commands) and ``sim_panda_driver`` (the sim node publishing like real drivers: joint_states with finger joints and no
TCP pose or twist, so the actor derives the pose by forward kinematics and the twist from successive poses, and
commands as JointTrajectory by differential IK). Both run in lock-step whatever the file's mode.

    python bench/ros_training.py                      # PickCube state, 1500 env steps, seeds 0 1 2, 50 eval episodes
    python bench/ros_training.py --seeds 0 --steps 1000 --eval-episodes 20 --no-in-process
    python bench/ros_training.py --robots sim_panda_driver
    python bench/ros_training.py --smoke --out /tmp/x   # sim_panda, seed 0, 1 demo, 30 steps, 1 eval episode (tests)

ROS processes run on loopback only (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, domain id 95 or ``--domain-id``), inside
a private network namespace (refused where the kernel does not allow one).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import tyro

from robot_rl.core import interrupts

REPO = Path(__file__).resolve().parent.parent
DOMAIN_ID = 95
STOP_GRACE_S = 60.0  # a stopped bench's launcher: this long to stop its nodes, then SIGKILL


@dataclasses.dataclass(frozen=True)
class Args:
    """What to train and over which robot files."""

    task: str = "PickCube-v0"
    """sim task"""
    steps: int = 1500
    """env steps (transitions) each run trains on"""
    seeds: tuple[int, ...] = (0, 1, 2)
    """seeds: each is trained over every robot file and in-process"""
    demos: int = 20
    """scripted demos each run starts with"""
    eval_episodes: int = 50
    """final in-process evaluation episodes of each run (the same eval seeds for all)"""
    robots: tuple[str, ...] = ("sim_panda", "sim_panda_driver")
    """robot files (path or shipped name) to train over, one ROS run per robot and seed"""
    in_process: bool = True
    """also train in-process (the baseline; --no-in-process saves its time)"""
    out: Path = Path("runs/bench-ros-training")
    domain_id: int = DOMAIN_ID
    """ROS_DOMAIN_ID of the ROS runs"""
    smoke: bool = False
    """check that the bench runs (tests run this): over sim_panda only, seed 0, 1 demo, 30 env steps, 1 evaluation
    episode (unless overridden; the figures mean nothing)"""


SMOKE = dict(steps=30, seeds=(0,), demos=1, eval_episodes=1, robots=("sim_panda",))


def ros_run(args: Args, robot: str, seed: int, run_dir: Path) -> dict:
    from robot_rl.ros.net.env import private_network_command, ros_environment

    command = private_network_command([
        sys.executable, "-m", "robot_rl.apps.cli", "launch", str(REPO / "launch" / "sim_train.yaml"),
        f"robot:={robot}", f"task:={args.task}", "obs_mode:=state", f"steps:={args.steps}", f"demos:={args.demos}",
        f"seed:={seed}", "human:=false", f"eval_episodes:={args.eval_episodes}", f"run_dir:={run_dir}",
        # evaluations as the in-process baseline's (at the start and the end), no validation (it has none)
        f"eval_every:={args.steps}", "final_validation:=false",
        "--domain-id", str(args.domain_id)])
    start = time.perf_counter()
    log = run_dir.with_suffix(".log")
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    setpriv = shutil.which("setpriv")  # the launcher gets SIGTERM (and stops its nodes) if the bench dies
    guard = [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []
    with open(log, "w") as out:
        process = None
        try:
            with interrupts.uninterrupted():  # a stop request while it starts is raised once `process` is set
                process = subprocess.Popen([*guard, *command], env=ros_environment(domain_id=args.domain_id),
                                           stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
            rc = process.wait()
        except BaseException:  # a stop (SIGINT / SIGTERM) or an error: the launcher stops its nodes and is waited for
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            raise
    wall = time.perf_counter() - start
    result_file = run_dir / "result.json"
    if rc != 0 or not result_file.exists():
        raise RuntimeError(f"ROS training run failed (rc {rc}); see {log}")
    result = json.loads(result_file.read_text())
    actor = json.loads((run_dir / "actor_status.json").read_text())
    return {"final_success": result["final_eval_success"], "wall_s": round(wall, 1),
            "transitions_sent": actor["transitions"], "trained_on": result["trained_on"],
            "updates": result["updates"], "train_episodes": actor["episodes"],
            "train_successes": actor["successes"],
            "train_success_last10": sum(e["success"] for e in actor["results"][-10:]),
            "commands": actor["commands"], "held": actor["held"],
            "holds": actor["holds"], "rejected": actor["rejected"],
            "waits_s": {reason: round(s, 1) for reason, s in actor["waits_s"].items()}}


def in_process_run(args: Args, seed: int, run_dir: Path) -> dict:
    from robot_rl.training.config import TrainConfig
    from robot_rl.apps.train import train

    cfg = TrainConfig(task=args.task, obs_mode="state", demos=args.demos, steps=args.steps, seed=seed,
                      eval_every=args.steps, eval_episodes=args.eval_episodes, checkpoint_every=args.steps,
                      video=False, run_dir=run_dir)
    start = time.perf_counter()
    train(cfg)
    wall = time.perf_counter() - start
    evals = json.loads((run_dir / "checkpoint" / "learner.json").read_text())["extra"]["evals"]
    return {"final_success": evals[-1]["success_rate"], "wall_s": round(wall, 1)}


def robot_names(robots: tuple[str, ...]) -> dict[str, str]:
    """{robot file's name: the file as given}; RobotConfigError (one line naming the file and key) before any run."""
    from robot_rl.actor.robot_config import RobotConfigError, load_robot_config

    names = {load_robot_config(robot).name: robot for robot in robots}
    if len(names) != len(robots) or not robots:
        raise RobotConfigError(f"--robots {' '.join(robots)}: give one or more robot files with different names")
    return names


def main(args: Args) -> dict:
    if args.smoke:  # what the command line left at its default takes the smoke size
        defaults = Args()
        args = dataclasses.replace(args, **{k: v for k, v in SMOKE.items() if getattr(args, k) == getattr(defaults, k)})
    robots = robot_names(args.robots)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    ros: dict[str, dict[str, dict]] = {name: {} for name in robots}
    local: dict[str, dict] = {}
    for seed in args.seeds:
        for name, robot in robots.items():
            ros[name][str(seed)] = ros_run(args, robot, seed, args.out / f"{stamp}-ros-{name}-seed{seed}")
        if args.in_process:
            local[str(seed)] = in_process_run(args, seed, args.out / f"{stamp}-inprocess-seed{seed}")
    runs = {**{f"ros_{name}": by_seed for name, by_seed in ros.items()},
            **({"in_process": local} if args.in_process else {})}
    result = {
        "bench": "ros_training", "smoke": args.smoke, "task": args.task, "obs_mode": "state", "env_steps": args.steps,
        "demos": args.demos, "eval_episodes": args.eval_episodes, "seeds": list(args.seeds),
        "final_success": {name: [r["final_success"] for r in by_seed.values()] for name, by_seed in runs.items()},
        "final_success_median": {name: statistics.median(r["final_success"] for r in by_seed.values())
                                 for name, by_seed in runs.items()},
        # The policy acting over the robot's own topics while it trains (the final evaluation runs in-process).
        "train_success_rate": {f"ros_{name}": [round(r["train_successes"] / max(r["train_episodes"], 1), 3)
                                               for r in by_seed.values()] for name, by_seed in ros.items()},
        **runs,
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    from robot_rl.actor.robot_config import RobotConfigError
    from robot_rl.ros.net.env import RosEnvironmentError

    os.chdir(REPO)
    with interrupts.handling():  # SIGTERM unwinds as SIGINT does: what the bench started is stopped on the way out
        try:
            main(tyro.cli(Args))
        except (RosEnvironmentError, RobotConfigError) as error:  # never run on the host's network; a bad robot file
            print(json.dumps({"bench": "ros_training", "error": str(error)}))
            sys.exit(2)
        except KeyboardInterrupt as stopped:  # also Terminated (SIGTERM)
            interrupts.exit_stopped(stopped)
        except Exception as error:  # noqa: BLE001 - the in-process run's TrainingInterrupted: stopped, checkpointed
            if interrupts.requested() is None:
                raise
            print(error, file=sys.stderr)
            interrupts.exit_stopped()
