"""Domain randomisation against the validation gate: the same task trained with and without `--randomize SUITE` (and,
for pixels, colour jitter of the training images), each run validated with the default suite at its default
thresholds (what a robot's gate asks for).

    python bench/randomize.py                        # pixel PickCube, seeds 0 1 2, 2000 env steps, 2 runs at a time
    python bench/randomize.py --obs-mode state --steps 1000
    python bench/randomize.py --smoke                # state, 1 seed, 20 env steps, 2 conditions x 1 episode (tests)

Every run is `robot-rl train` then `robot-rl validate` as a user would type them (subprocesses, `--jobs` at a time).
Prints one JSON line: per mode (nominal, randomized) and seed the final nominal evaluation, the validation verdict and
per-condition success; per mode the median nominal success and how many seeds PASS.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import tyro  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Args:
    task: str = "PickCube-v0"
    obs_mode: str = "pixels"
    """Observations of the trained policies (pixels: proprioception and cameras, what a robot has)."""
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int = 2000
    """Env steps of each training run."""
    demos: int = 20
    randomize: str = "default"
    """Suite the randomized runs train under."""
    colour: float = 0.2
    """Colour jitter of the randomized pixel runs' images (--sac.image-encoder.augment-colour; 0: the suite's
    randomisation alone, which left lighting and colours at 66-82 % in docs/results.md)."""
    normalisation: str = "per_image"
    """How the pixel runs' encoders scale pixels (--sac.image-encoder.normalisation: fixed or per_image)."""
    suite: str = "default"
    """Suite every run is validated with (at its own thresholds)."""
    validation_episodes: int = 50
    """Episodes per condition of the validation (the default suite's own count; 20 is its fewest for a verdict)."""
    eval_episodes: int = 20
    """Episodes of each run's final nominal evaluation."""
    modes: tuple[str, ...] = ("nominal", "randomized")
    """Which runs to make: nominal (no randomisation), randomized (--randomize)."""
    jobs: int = 2
    """Runs at a time (each uses about one core)."""
    out: Path | None = None
    """Folder for the runs (default: a temporary one, removed at the end)."""
    smoke: bool = False
    """Check that the bench runs (tests run this): state observations, one seed, 20 env steps, 1 demo, a suite of
    nominal and one step of latency for training and validation, 1 episode each (the figures mean nothing)."""


SMOKE_SUITE = """name: smoke
conditions:
  - name: nominal
  - name: action_latency
    perturbations: [{type: action_latency, steps: 1}]
"""


def run(argv: list[str], log: Path) -> None:
    with open(log, "a") as out:
        status = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if status.returncode not in (0, 1):  # validate exits 1 on a FAIL verdict: a result, not an error
        raise RuntimeError(f"{' '.join(argv[1:4])} ... exited {status.returncode}; log: {log}")


def one_run(args: Args, mode: str, seed: int, folder: Path) -> dict:
    """Train one seed (randomized or not), validate it; the figures of both."""
    run_dir = folder / f"{mode}-s{seed}"
    log = folder / f"{mode}-s{seed}.log"
    train = [sys.executable, "-m", "robot_rl.apps.cli", "train", "--task", args.task, "--obs-mode", args.obs_mode,
             "--demos", str(args.demos), "--steps", str(args.steps), "--eval-every", str(args.steps),
             "--eval-episodes", str(args.eval_episodes), "--seed", str(seed), "--no-video", "--run-dir", str(run_dir)]
    if "pixels" in args.obs_mode:
        train += ["--sac.image-encoder.normalisation", args.normalisation]
    if mode == "randomized":
        train += ["--randomize", args.randomize]
        if args.colour and "pixels" in args.obs_mode:
            train += ["--sac.image-encoder.augment-colour", str(args.colour)]
    run(train, log)
    validate = [sys.executable, "-m", "robot_rl.apps.cli", "validate", "--policy", str(run_dir), "--suite", args.suite,
                "--episodes", str(args.validation_episodes), "--workers", "1", "--no-video",
                "--out", str(run_dir / "validation")]
    run(validate, log)
    learner = json.loads((run_dir / "checkpoint" / "learner.json").read_text())["extra"]
    final = learner["evals"][-1]
    results = json.loads((run_dir / "validation" / "results.json").read_text())
    return {"nominal_success": final["success_rate"], "verdict": results["verdict"],
            "validation": {c["condition"]: c["success_rate"] for c in results["conditions"]},
            "conditions_trained": sorted({e.get("condition", "nominal") for e in learner["episodes_log"]})}


def main(args: Args) -> dict:
    unknown = sorted(set(args.modes) - {"nominal", "randomized"})
    if unknown or not args.modes:
        raise SystemExit(f"bench/randomize.py: --modes takes nominal and/or randomized, not {unknown or 'nothing'}")
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.out or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        if args.smoke:  # two conditions of the default suite, for training and validation alike
            suite = folder / "smoke_suite.yaml"
            suite.write_text(SMOKE_SUITE)
            args = dataclasses.replace(args, obs_mode="state", seeds=(0,), steps=20, demos=1, eval_episodes=1,
                                       validation_episodes=1, randomize=str(suite), suite=str(suite))
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = {(mode, seed): pool.submit(one_run, args, mode, seed, folder)
                       for seed in args.seeds for mode in args.modes}
            runs = {key: future.result() for key, future in futures.items()}
    result = {"bench": "randomize", "smoke": args.smoke, "task": args.task, "obs_mode": args.obs_mode,
              "steps": args.steps, "seeds": list(args.seeds), "randomize": args.randomize, "colour": args.colour,
              "normalisation": args.normalisation,
              "suite": args.suite}
    for mode in args.modes:
        rows = {str(seed): runs[(mode, seed)] for seed in args.seeds}
        result[mode] = {"runs": rows,
                        "median_nominal_success": statistics.median(r["nominal_success"] for r in rows.values()),
                        "passes": sum(r["verdict"] == "pass" for r in rows.values())}
    if {"nominal", "randomized"} <= set(args.modes):
        result["nominal_success_difference"] = round(result["randomized"]["median_nominal_success"]
                                                     - result["nominal"]["median_nominal_success"], 3)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    from robot_rl.core import interrupts

    sys.exit(interrupts.run_program(lambda: main(tyro.cli(Args))))  # a stop ends what the bench started
