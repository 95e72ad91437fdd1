"""Validation suite timing: the default suite (8 conditions x 50 episodes) on a policy, against a plain in-process
evaluation of the same number of nominal episodes measured in the same run.

    python bench/validate.py --policy runs/pick                       # e.g. a pixel SAC PickCube run folder
    python bench/validate.py --policy runs/pick --episodes 10 --workers 1

Prints one JSON line: the suite's wall time, the baseline's, their ratio, and the per-condition success rates.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import tyro  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Args:
    policy: Path
    """Policy (run folder, policy.msgpack or policy folder) to validate."""
    task: str = "PickCube-v0"
    suite: str = "default"
    episodes: int | None = None
    """Episodes per condition (default: the suite's)."""
    workers: int | None = None
    """Worker processes of the suite (default: one per core)."""


def main(args: Args) -> dict:
    import torch

    from robot_rl.policies.checkpoint import load_policy
    from robot_rl.sim.evaluate import evaluate_policy
    from robot_rl.validate import ValidateConfig, load_suite, validate

    torch.set_num_threads(1)
    suite = load_suite(args.suite)
    episodes = args.episodes or suite.episodes
    total = episodes * len(suite.conditions)
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        summary = validate(ValidateConfig(args.policy, task=args.task, suite=args.suite, episodes=args.episodes,
                                          workers=args.workers, out=Path(out) / "suite", video=False))
        suite_seconds = time.perf_counter() - start
        start = time.perf_counter()
        baseline = evaluate_policy(load_policy(args.policy, device="cpu"), args.task, total)
        baseline_seconds = time.perf_counter() - start
    result = {
        "bench": "validate", "policy": str(args.policy), "task": args.task, "suite": suite.name,
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
    main(tyro.cli(Args))
