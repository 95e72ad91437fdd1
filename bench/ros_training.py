"""Training over ROS 2 vs in-process: the same task, seeds, demos, learner settings and env-step budget, trained once
by `robot-rl launch launch/sim_train.yaml` (sim node in lock-step + actor + learner as separate processes, no human)
and once by `robot_rl.train.train` in one process; both final policies are evaluated in-process on the same eval
seeds. Prints ONE JSON line.

    python bench/ros_training.py                      # PickCube state, 1500 env steps, seeds 0 1 2, 50 eval episodes
    python bench/ros_training.py --seeds 0 --steps 1000 --eval-episodes 20

ROS processes run on loopback only (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, domain id 95), inside a private network
namespace where the kernel allows it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import tyro

REPO = Path(__file__).resolve().parent.parent
DOMAIN_ID = 95


@dataclasses.dataclass(frozen=True)
class Args:
    task: str = "PickCube-v0"
    steps: int = 1500
    seeds: tuple[int, ...] = (0, 1, 2)
    demos: int = 20
    eval_episodes: int = 50
    out: Path = Path("runs/bench-ros-training")


def ros_run(args: Args, seed: int, run_dir: Path) -> dict:
    from robot_rl.ros.env import private_network_command, ros_environment

    command = private_network_command([
        sys.executable, "-m", "robot_rl.cli", "launch", str(REPO / "launch" / "sim_train.yaml"),
        f"task:={args.task}", "obs_mode:=state", f"steps:={args.steps}", f"demos:={args.demos}", f"seed:={seed}",
        "human:=false", f"eval_episodes:={args.eval_episodes}", f"run_dir:={run_dir}", "--domain-id", str(DOMAIN_ID)])
    start = time.perf_counter()
    log = run_dir.with_suffix(".log")
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        rc = subprocess.run(command, env=ros_environment(domain_id=DOMAIN_ID), stdout=out, stderr=subprocess.STDOUT,
                            cwd=REPO).returncode
    wall = time.perf_counter() - start
    result_file = run_dir / "result.json"
    if rc != 0 or not result_file.exists():
        raise RuntimeError(f"ROS training run failed (rc {rc}); see {log}")
    result = json.loads(result_file.read_text())
    actor = json.loads((run_dir / "actor_status.json").read_text())
    return {"final_success": result["final_eval_success"], "wall_s": round(wall, 1),
            "transitions_sent": actor["transitions"], "trained_on": result["trained_on"],
            "updates": result["updates"], "train_episodes": actor["episodes"]}


def in_process_run(args: Args, seed: int, run_dir: Path) -> dict:
    from robot_rl.train import TrainConfig, train

    cfg = TrainConfig(task=args.task, obs_mode="state", demos=args.demos, steps=args.steps, seed=seed,
                      eval_every=args.steps, eval_episodes=args.eval_episodes, checkpoint_every=args.steps,
                      video=False, run_dir=run_dir)
    start = time.perf_counter()
    train(cfg)
    wall = time.perf_counter() - start
    evals = json.loads((run_dir / "checkpoint" / "learner.json").read_text())["extra"]["evals"]
    return {"final_success": evals[-1]["success_rate"], "wall_s": round(wall, 1)}


def main(args: Args) -> dict:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    ros, local = {}, {}
    for seed in args.seeds:
        ros[seed] = ros_run(args, seed, args.out / f"{stamp}-ros-seed{seed}")
        local[seed] = in_process_run(args, seed, args.out / f"{stamp}-inprocess-seed{seed}")
    result = {
        "bench": "ros_training", "task": args.task, "obs_mode": "state", "env_steps": args.steps,
        "demos": args.demos, "eval_episodes": args.eval_episodes, "seeds": list(args.seeds),
        "ros": {str(s): r for s, r in ros.items()}, "in_process": {str(s): r for s, r in local.items()},
        "ros_final_success_median": statistics.median(r["final_success"] for r in ros.values()),
        "in_process_final_success_median": statistics.median(r["final_success"] for r in local.values()),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    from robot_rl.ros.env import RosEnvironmentError

    os.chdir(REPO)
    try:
        main(tyro.cli(Args))
    except RosEnvironmentError as error:  # no private network namespace here: never run on the host's network
        print(json.dumps({"bench": "ros_training", "error": str(error)}))
        sys.exit(2)
