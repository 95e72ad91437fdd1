"""Benchmark the MuJoCo sim: env steps/s (state, state+pixels with 2 cameras) and physics steps/s with the OSC.

Prints one JSON line. Usage:

    python bench/sim.py [--steps N] [--repeats R]
    python bench/sim.py --smoke        # 5 env steps, 1 repeat: checks that it runs (tests run this)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import robot_rl.sim  # noqa: F401  (first: sets MUJOCO_GL before mujoco loads; registers the tasks)

import gymnasium as gym
import mujoco
import numpy as np


def env_steps_per_second(obs_mode: str, steps: int, repeats: int, image_size: int = 128) -> float:
    env = gym.make("robot_rl/PickCube-v0", obs_mode=obs_mode, image_size=image_size).unwrapped
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, size=(steps, 4)).astype(np.float32)
    env.reset(seed=0)
    for action in actions[:10]:  # warm-up (renderer creation, caches)
        env.step(action)
    rates = []
    for _ in range(repeats):
        env.reset(seed=0)
        start = time.perf_counter()
        for action in actions:
            env.step(action)
        rates.append(steps / (time.perf_counter() - start))
    env.close()
    return statistics.median(rates)


def physics_steps_per_second(steps: int, repeats: int) -> float:
    env = gym.make("robot_rl/PickCube-v0").unwrapped
    env.reset(seed=0)
    model, data, controller = env.model, env.data, env.controller
    arm = env._ctrl_arm_slice
    rates = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        for _ in range(steps):
            mujoco.mj_step1(model, data)
            data.ctrl[arm] = controller.compute(data)
            mujoco.mj_step2(model, data)
        rates.append(steps / (time.perf_counter() - start))
    env.close()
    return statistics.median(rates[1:])  # first run is the warm-up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=None, help="env steps per repeat (default 200)")
    parser.add_argument("--repeats", type=int, default=None, help="(default 3)")
    parser.add_argument("--smoke", action="store_true",
                        help="5 env steps, 1 repeat: checks that the bench runs (tests run this)")
    args = parser.parse_args()
    args.steps = args.steps if args.steps is not None else (5 if args.smoke else 200)
    args.repeats = args.repeats if args.repeats is not None else (1 if args.smoke else 3)
    result = {
        "bench": "sim",
        "env_steps_per_s_state": round(env_steps_per_second("state", args.steps, args.repeats), 1),
        "env_steps_per_s_state_pixels_2cams_128": round(
            env_steps_per_second("state+pixels", args.steps, args.repeats), 1),
        "physics_steps_per_s_with_osc": round(physics_steps_per_second(args.steps * 50, args.repeats), 1),
        "physics_steps_per_env_step": 50,
        "steps": args.steps,
        "repeats": args.repeats,
        "smoke": args.smoke,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
