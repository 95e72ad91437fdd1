"""Validation suite timing: the default suite (8 conditions x 50 episodes) on a policy, against a plain in-process
evaluation of the same number of nominal episodes measured in the same run.

    python bench/validate.py --policy runs/pick                       # e.g. a pixel SAC PickCube run folder
    python bench/validate.py --policy runs/pick --episodes 10 --workers 1
    python bench/validate.py --smoke      # a random tiny state policy, 1 episode per condition, 1 worker (tests)

Prints one JSON line: the suite's wall time, the baseline's, their ratio, and the per-condition success rates.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import tyro  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Args:
    policy: Path | None = None
    """Policy (run folder, policy.msgpack or policy folder) to validate (required unless --smoke)."""
    task: str = "PickCube-v0"
    suite: str = "default"
    episodes: int | None = None
    """Episodes per condition (default: the suite's)."""
    workers: int | None = None
    """Worker processes of the suite (default: one per core)."""
    smoke: bool = False
    """Check that the bench runs (tests run this): one episode per condition in one worker, and without --policy a
    random tiny SAC state policy made in a temporary folder (the figures mean little)."""


def tiny_policy(folder: Path, task: str) -> Path:
    """A run folder holding a random SAC policy (16-unit layers) on `task`'s state observations."""
    from robot_rl.agents.sac import SACAgent, SACConfig
    from robot_rl.sim.loop import make_env
    from robot_rl.policies.gaussian import weights_message
    from robot_rl.wire.policy_file import write_policy_file

    env = make_env(task, obs_mode="state")
    try:
        agent = SACAgent.create(0, env.observation_space, env.action_space.shape[0],
                                SACConfig(actor_hidden_dims=(16,), critic_hidden_dims=(16,)))
    finally:
        env.close()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"task": task}))
    write_policy_file(folder / "policy.msgpack", weights_message(agent, version=1))
    return folder


def main(args: Args) -> dict:
    import torch

    from robot_rl.policies.checkpoint import load_policy
    from robot_rl.sim.evaluate import evaluate_policy
    from robot_rl.sim.validation import ValidateConfig, load_suite, validate

    torch.set_num_threads(1)
    if args.policy is None and not args.smoke:
        raise SystemExit("bench/validate.py: --policy is required (or --smoke)")
    if args.smoke:
        args = dataclasses.replace(args, episodes=args.episodes or 1, workers=args.workers or 1)
    suite = load_suite(args.suite)
    episodes = args.episodes or suite.episodes
    total = episodes * len(suite.conditions)
    with tempfile.TemporaryDirectory() as out:
        policy = args.policy or tiny_policy(Path(out) / "policy", args.task)
        start = time.perf_counter()
        summary = validate(ValidateConfig(policy, task=args.task, suite=args.suite, episodes=args.episodes,
                                          workers=args.workers, out=Path(out) / "suite", video=False))
        suite_seconds = time.perf_counter() - start
        start = time.perf_counter()
        baseline = evaluate_policy(load_policy(policy, device="cpu"), args.task, total)
        baseline_seconds = time.perf_counter() - start
    result = {
        "bench": "validate", "policy": str(args.policy) if args.policy else "random tiny state policy (--smoke)",
        "smoke": args.smoke, "task": args.task, "suite": suite.name,
        "conditions": len(suite.conditions), "episodes_per_condition": episodes, "workers": summary["workers"],
        "cpus": os.cpu_count(), "suite_seconds": round(suite_seconds, 1),
        "baseline_nominal_eval_seconds": round(baseline_seconds, 1),
        "ratio_suite_to_baseline": round(suite_seconds / baseline_seconds, 2),
        "baseline_success": baseline["success_rate"], "verdict": summary["verdict"],
        "success": {c["condition"]: c["success_rate"] for c in summary["conditions"]},
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    from robot_rl.core import interrupts

    sys.exit(interrupts.run_program(lambda: main(tyro.cli(Args))))  # a stop ends what the bench started
