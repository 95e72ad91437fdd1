"""Learner throughput benchmark: prints ONE JSON line.

updates/s (gradient steps per second, batch 256) for state and pixel observations at UTD 1 and 4, the real-time
factor RTF = updates/s / (UTD x 10 Hz), replay sampling time, and the speed-up of the scanned K-step update over
K separate jitted single-step calls. Compile time is excluded (warm-up) and reported separately; timings are medians.

    python bench/learner.py            # full grid
    python bench/learner.py --quick    # state + 2x64x64 pixels only
    python bench/learner.py --smoke    # each measurement once at the smallest sizes (tests run this; no figures)

The replay sampling buffer is filled with valid episodes: each transition's observation is the previous one's
next_observation (frames taken in turn from a small pool of random observations), 100-step episodes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import jax
import numpy as np

from robot_rl.agents.sac import SACAgent, SACConfig
from robot_rl.data.replay import ReplayBuffer
from robot_rl.training.config import TrainConfig
from robot_rl.core.types import Batch, ObservationSpec

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


def bench_scan_speedup(spec: ObservationSpec, steps: int, batch_size: int, repeats: int, rng,
                       calls: int | None = None) -> dict:
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
    calls = calls or (5 if not spec.image_keys else 2)
    scan_s, step_s = median_seconds(scanned, repeats, calls), median_seconds(stepped, repeats, calls)
    return {"k": steps, "scan_ms": round(1e3 * scan_s, 2), "per_step_calls_ms": round(1e3 * step_s, 2),
            "speedup": round(step_s / scan_s, 3)}


SAMPLING_CAPACITY = 20_000
EPISODE_STEPS = 100
FRAME_POOL = 16


def bench_sampling(spec: ObservationSpec, utd: int, batch_size: int, repeats: int, rng,
                   capacity: int = SAMPLING_CAPACITY) -> float:
    """ms for one `sample_stacked(utd, batch)` from a 20k-step buffer (the learner's host-side cost per call).

    The buffer holds valid episodes of EPISODE_STEPS transitions: within an episode each observation is the previous
    transition's next_observation (as ReplayBuffer.insert requires); frames cycle through a pool of FRAME_POOL random
    observations (their content does not matter for timing, and making a fresh one per step would dominate the fill).
    """
    buffer = ReplayBuffer(spec, ACTION_DIM, capacity=capacity)
    pool = [random_obs(spec, (), rng) for _ in range(FRAME_POOL)]
    action = np.zeros(ACTION_DIM, np.float32)
    frame = 0
    for t in range(capacity - 200):
        step = t % EPISODE_STEPS
        if step == 0:
            frame += 1  # a new episode starts from a new frame
        observation, next_observation = pool[frame % FRAME_POOL], pool[(frame + 1) % FRAME_POOL]
        buffer.insert(observation, action, 0.0, False, step == EPISODE_STEPS - 1, next_observation)
        frame += 1
    sample_rng = np.random.default_rng(0)
    return round(1e3 * median_seconds(lambda: buffer.sample_stacked(utd, batch_size, sample_rng), repeats, 5), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="state and 2x64x64 pixels only, fewer repeats")
    parser.add_argument("--smoke", action="store_true",
                        help="each kind of measurement once at the smallest sizes (the state update at UTD 2, "
                             "batch 8, one call; K 2 scan vs steps on state; sampling state and one 32x32 camera from "
                             "a 500-slot buffer): checks that the bench runs (tests run this), its figures mean "
                             "nothing")
    parser.add_argument("--batch", type=int, default=None, help="minibatch size (default 256; --smoke 8)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    batch = args.batch or (8 if args.smoke else 256)
    if args.smoke:  # two compiles: the state update at UTD 2 is the scan-speedup's scanned call (K 2); pixels are
        # sampled from replay only (each pixel update would compile for seconds more)
        repeats, calls, utds, capacity, scan_k, configs = 1, 1, (2,), 500, 2, (SACConfig(),)
        pixel_cases, speedup_specs, preset_cameras, preset_updates = [], ("state",), (1, 32), False
    else:
        repeats, calls, utds, capacity, scan_k = (3 if args.quick else 5), None, (1, 4), SAMPLING_CAPACITY, 4
        configs = (SACConfig(), LIGHT_CONFIG)
        pixel_cases = [(2, 64)] if args.quick else [(1, 64), (2, 64), (1, 128), (2, 128)]
        speedup_specs, preset_cameras, preset_updates = ("state", "2x64px"), (2, 64), True
    preset_key = f"{preset_cameras[0]}x{preset_cameras[1]}px"

    results = []
    for utd in utds:
        for config in configs:
            results.append(bench_update(make_spec(0, 0), utd, batch, repeats, calls or 20, rng, config))
    for cameras, size in pixel_cases:
        for utd in utds:
            results.append(bench_update(make_spec(cameras, size), utd, batch, repeats, 3 if size == 64 else 2, rng))
    for utd in utds if preset_updates else ():  # the CPU training preset (TrainConfig: 2 critics, 16 channels)
        results.append(bench_update(make_spec(*preset_cameras), utd, batch, repeats, calls or 3, rng,
                                    TrainConfig().sac))

    speedup = {}
    for key, spec in (("state", make_spec(0, 0)), ("2x64px", make_spec(2, 64))):
        if key in speedup_specs:
            speedup[key] = bench_scan_speedup(spec, scan_k, batch, repeats, rng, calls)
    utd = 4 if 4 in utds else utds[-1]
    sampling_ms = {f"state_utd{utd}": bench_sampling(make_spec(0, 0), utd, batch, repeats, rng, capacity)}
    sampling_ms[f"{preset_key}_utd{utd}"] = bench_sampling(make_spec(*preset_cameras), utd, batch, repeats, rng,
                                                           capacity)

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
        "smoke": args.smoke,
        "batch": batch,
    }))


if __name__ == "__main__":
    main()
