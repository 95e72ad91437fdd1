"""Learner throughput benchmark: prints ONE JSON line.

updates/s (gradient steps per second, batch 256) for state and pixel observations at UTD 1 and 4, the real-time
factor RTF = updates/s / (UTD x 10 Hz), replay sampling time, and the speed-up of the scanned K-step update over
K separate jitted single-step calls. Compile time is excluded (warm-up) and reported separately; timings are medians.

    python bench/learner.py            # full grid
    python bench/learner.py --quick    # state + 2x64x64 pixels only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import jax
import numpy as np

from robot_rl.agents import SACAgent, SACConfig
from robot_rl.data.replay import ReplayBuffer
from robot_rl.train import TrainConfig
from robot_rl.types import Batch, ObservationSpec

CONTROL_HZ = 10.0
ACTION_DIM = 4


def make_spec(cameras: int, image_size: int) -> ObservationSpec:
    shapes = {"state": ((14,), np.float32)}
    if cameras == 0:
        shapes["object_state"] = ((10,), np.float32)
    for name in ("front", "wrist")[:cameras]:
        shapes[f"images/{name}"] = ((image_size, image_size, 3), np.uint8)
    return ObservationSpec.from_shapes(shapes)


def random_obs(spec: ObservationSpec, lead: tuple[int, ...], rng: np.random.Generator) -> dict:
    return {
        k: rng.integers(0, 256, lead + s.shape, dtype=np.uint8) if s.is_image else rng.normal(size=lead + s.shape).astype(np.float32)
        for k, s in spec.entries
    }


def random_batch(spec: ObservationSpec, lead: tuple[int, ...], rng: np.random.Generator) -> Batch:
    return Batch(
        observations=random_obs(spec, lead, rng),
        actions=rng.uniform(-1, 1, lead + (ACTION_DIM,)).astype(np.float32),
        rewards=rng.normal(size=lead).astype(np.float32),
        discounts=np.full(lead, 0.99, np.float32),
        masks=np.ones(lead, np.float32),
        next_observations=random_obs(spec, lead, rng),
        intervention=np.zeros(lead, bool),
        demo=np.zeros(lead, bool),
    )


def median_seconds(fn, repeats: int, calls: int) -> float:
    """Median over `repeats` of the mean wall time of `calls` back-to-back calls (fn blocks on its result)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


LIGHT_CONFIG = SACConfig(critic_ensemble_size=2)  # HIL-SERL's critic setting, for comparison with the default 10


def bench_update(
    spec: ObservationSpec, utd: int, batch_size: int, repeats: int, calls: int, rng, config: SACConfig = SACConfig()
) -> dict:
    agent = SACAgent.create(0, spec, ACTION_DIM, config)
    batch = jax.device_put(random_batch(spec, (utd, batch_size), rng))
    state = {"agent": agent}

    def scanned():
        state["agent"], info = state["agent"].update(batch, validate=False)
        jax.block_until_ready(info)

    start = time.perf_counter()
    scanned()
    compile_s = time.perf_counter() - start
    seconds = median_seconds(scanned, repeats, calls)
    updates_per_s = utd / seconds
    return {
        "obs": "state" if not spec.image_keys else f"{len(spec.image_keys)}x{spec[spec.image_keys[0]].shape[0]}px",
        "critics": config.critic_ensemble_size,
        "encoder_channels": list(config.image_encoder.channels) if spec.image_keys else None,
        "utd": utd,
        "batch": batch_size,
        "updates_per_s": round(updates_per_s, 2),
        "rtf": round(updates_per_s / (utd * CONTROL_HZ), 3),
        "ms_per_call": round(1e3 * seconds, 2),
        "compile_s": round(compile_s, 1),
    }


def bench_scan_speedup(spec: ObservationSpec, steps: int, batch_size: int, repeats: int, rng) -> dict:
    """Same K minibatches: one scanned call vs K jitted single-step calls."""
    agent = SACAgent.create(0, spec, ACTION_DIM, SACConfig())
    batch = jax.device_put(random_batch(spec, (steps, batch_size), rng))
    slices = [jax.tree.map(lambda x, k=k: x[k], batch) for k in range(steps)]
    jax.block_until_ready(slices)
    state = {"agent": agent}

    def scanned():
        state["agent"], info = state["agent"].update(batch, validate=False)
        jax.block_until_ready(info)

    def stepped():
        for minibatch in slices:
            state["agent"], info = state["agent"].update_step(minibatch, validate=False)
        jax.block_until_ready(info)

    scanned(), stepped()
    calls = 5 if not spec.image_keys else 2
    scan_s, step_s = median_seconds(scanned, repeats, calls), median_seconds(stepped, repeats, calls)
    return {"k": steps, "scan_ms": round(1e3 * scan_s, 2), "per_step_calls_ms": round(1e3 * step_s, 2),
            "speedup": round(step_s / scan_s, 3)}


def bench_sampling(spec: ObservationSpec, utd: int, batch_size: int, repeats: int, rng) -> float:
    """ms for one `sample_stacked(utd, batch)` from a 20k-step buffer (the learner's host-side cost per call)."""
    buffer = ReplayBuffer(spec, ACTION_DIM, capacity=20_000)
    obs = random_obs(spec, (), rng)
    for t in range(20_000 - 200):
        next_obs = random_obs(spec, (), rng) if t % 1000 == 0 else obs  # content does not matter for timing
        buffer.insert(obs, np.zeros(ACTION_DIM, np.float32), 0.0, False, t % 100 == 99, next_obs)
    sample_rng = np.random.default_rng(0)
    return round(1e3 * median_seconds(lambda: buffer.sample_stacked(utd, batch_size, sample_rng), repeats, 5), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="state and 2x64x64 pixels only, fewer repeats")
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    repeats = 3 if args.quick else 5
    pixel_cases = [(2, 64)] if args.quick else [(1, 64), (2, 64), (1, 128), (2, 128)]

    results = []
    for utd in (1, 4):
        results.append(bench_update(make_spec(0, 0), utd, args.batch, repeats, 20, rng))
        results.append(bench_update(make_spec(0, 0), utd, args.batch, repeats, 20, rng, LIGHT_CONFIG))
    for cameras, size in pixel_cases:
        for utd in (1, 4):
            results.append(bench_update(make_spec(cameras, size), utd, args.batch, repeats, 3 if size == 64 else 2, rng))
    for utd in (1, 4):  # the CPU training preset (TrainConfig: 2 critics, 16-channel encoder) on 2x64x64 pixels
        results.append(bench_update(make_spec(2, 64), utd, args.batch, repeats, 3, rng, TrainConfig().sac))

    speedup = {"state": bench_scan_speedup(make_spec(0, 0), 4, args.batch, repeats, rng)}
    speedup["2x64px"] = bench_scan_speedup(make_spec(2, 64), 4, args.batch, repeats, rng)
    sampling_ms = {"state_utd4": bench_sampling(make_spec(0, 0), 4, args.batch, repeats, rng)}
    sampling_ms["2x64px_utd4"] = bench_sampling(make_spec(2, 64), 4, args.batch, repeats, rng)

    print(json.dumps({
        "bench": "learner",
        "backend": jax.default_backend(),
        "device": jax.devices()[0].device_kind,
        "cpu_count": os.cpu_count(),
        "load_avg_1min": round(os.getloadavg()[0], 2),
        "config": "SACConfig() defaults (actor/critic 256x256, 10 LayerNorm critics, subset 2, patch-conv encoder) unless critics says otherwise",
        "control_hz": CONTROL_HZ,
        "updates": results,
        "scan_vs_per_step": speedup,
        "replay_sample_stacked_ms": sampling_ms,
        "quick": args.quick,
    }))


if __name__ == "__main__":
    main()
