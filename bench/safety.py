"""Safety layer cost per command: prints ONE JSON line.

Median and p99 wall time of one `Safety.filter` call (7-d action with the stale-sensor check, 4-d action) and one
`Safety.filter_absolute` call, each timed call by call, and their ratio to a baseline measured in the same run: a bare
`np.clip` of a 7-d action (so figures from a loaded or slower machine can still be compared). At a 10 Hz control
rate the budget is 100 ms per step; the filter should cost well under 1 % of it.

    python bench/safety.py              # 20000 calls each
    python bench/safety.py --calls 2000
    python bench/safety.py --smoke         # 100 calls each (tests run this; the figures mean little)
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from robot_rl.actor.safety import Safety, SafetyConfig

POSITION = np.array([0.5, 0.0, 0.2])


def per_call_seconds(fn, calls: int) -> np.ndarray:
    """Wall time of each of `calls` calls (after 100 warm-up calls)."""
    for _ in range(100):
        fn()
    times = np.empty(calls)
    clock = time.perf_counter
    for i in range(calls):
        start = clock()
        fn()
        times[i] = clock() - start
    return times


def summary(times: np.ndarray, baseline_median: float) -> dict:
    median = float(np.median(times))
    return {"median_us": round(1e6 * median, 2), "p99_us": round(1e6 * float(np.percentile(times, 99)), 2),
            "ratio_to_clip": round(median / baseline_median, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=None, help="timed calls per measurement (default 20000)")
    parser.add_argument("--smoke", action="store_true",
                        help="100 calls per measurement: checks that the bench runs (tests run this)")
    args = parser.parse_args()
    args.calls = args.calls if args.calls is not None else (100 if args.smoke else 20_000)

    config_7d = SafetyConfig(action_dim=7, required_sensors=("images/front", "state"))
    quat = np.array(config_7d.nominal_quat)
    action_7d = np.array([0.3, -0.2, 0.1, 0.05, -0.1, 0.2, 0.5])
    action_4d = np.array([0.3, -0.2, 0.1, 0.5])
    stamps = {"images/front": 0.99, "state": 0.99}
    safety_7d, safety_4d = Safety(config_7d), Safety(SafetyConfig(action_dim=4))

    baseline = per_call_seconds(lambda: np.clip(action_7d, -1.0, 1.0), args.calls)
    baseline_median = float(np.median(baseline))
    results = {
        "filter_7d_sensors": per_call_seconds(lambda: safety_7d.filter(action_7d, POSITION, quat, 1.0, stamps),
                                              args.calls),
        "filter_4d": per_call_seconds(lambda: safety_4d.filter(action_4d, POSITION, quat), args.calls),
        "filter_absolute_7d": per_call_seconds(
            lambda: safety_7d.filter_absolute(POSITION + 0.01, quat, 0.5, POSITION, quat, 1.0, stamps), args.calls),
    }
    print(json.dumps({
        "bench": "safety",
        "calls": args.calls,
        "smoke": args.smoke,
        "baseline_np_clip_7d": {"median_us": round(1e6 * baseline_median, 3),
                                "p99_us": round(1e6 * float(np.percentile(baseline, 99)), 3)},
        **{name: summary(times, baseline_median) for name, times in results.items()},
    }))


if __name__ == "__main__":
    main()
