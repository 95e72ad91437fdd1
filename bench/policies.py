"""Policy latency at batch 1 on this machine: prints ONE JSON line.

For each policy kind, the wall time of one `act_chunk` (observation history -> action chunk) with two 64x64 cameras
and a 10-d proprio state, measured call by call after a warm-up: p50 / p99 in ms, the parameter count and the chunk
length. Kinds: `diffusion` (DDIM with --ddim-steps, default 10), `one_step` (the distilled student of the same
network, when policies/one_step.py is there), `residual_on_one_step` (a SAC residual head on the one-step student:
per control step, the base chunk every 8th), `noise_on_one_step` (a SAC noise head steering the student: per chunk)
and `gaussian` (the SAC pixel actor, JAX: the baseline measured in the same run, so a loaded machine's figures still
compare as ratios).

Targets on this 2-core CPU (one torch thread): DDIM-10 chunk p50 <= 60 ms and p99 <= 100 ms; one-step >= 8x faster
than DDIM-10 at the same chunk and model.

    python bench/policies.py              # 200 timed calls each
    python bench/policies.py --calls 50 --device cuda
    python bench/policies.py --device cuda --head-device cpu   # the JAX heads pinned to the host
    python bench/policies.py --wide --calls 20                 # Diffusion Policy's U-Net sizes (73.6 M parameters)
    python bench/policies.py --smoke      # every kind, 3 timed calls after 1 warm-up, DDIM-2 (tests run this)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CAMERAS = ("images/front", "images/wrist")
STATE_DIM = 10
ACTION_DIM = 4


def observation_spec(size: int):
    from robot_rl.core.types import ArraySpec, ObservationSpec

    return ObservationSpec.from_shapes({**{c: ArraySpec((size, size, 3), "uint8") for c in CAMERAS},
                                        "state": ArraySpec((STATE_DIM,), "float32")})


def history(rng: np.random.Generator, size: int, length: int) -> list[dict[str, np.ndarray]]:
    return [{**{c: rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for c in CAMERAS},
             "state": rng.standard_normal(STATE_DIM).astype(np.float32)} for _ in range(length)]


WARMUP = 10  # untimed calls per policy (--smoke: 1)


def per_call_ms(policy, rng: np.random.Generator, size: int, calls: int, warmup: int | None = None) -> np.ndarray:
    warmup = WARMUP if warmup is None else warmup
    histories = [history(rng, size, policy.obs_horizon) for _ in range(min(8, warmup + calls))]
    for i in range(warmup):  # the timed calls sample (deterministic=False): warm that path, its JAX compile included
        policy.act_chunk(histories[i % len(histories)], deterministic=False)
    times = np.empty(calls)
    for i in range(calls):
        start = time.perf_counter()
        policy.act_chunk(histories[i % len(histories)], deterministic=False)
        times[i] = time.perf_counter() - start
    return 1e3 * times


def stats(times_ms: np.ndarray) -> dict[str, float]:
    return {"p50_ms": round(float(np.median(times_ms)), 2), "p99_ms": round(float(np.percentile(times_ms, 99)), 2),
            "mean_ms": round(float(times_ms.mean()), 2)}


WIDE = dict(down_dims=(256, 512, 1024), middle_blocks=2, step_embedding_dim=256, image_channels=(32, 64, 128),
            image_features=128, state_features=128)  # --wide: Diffusion Policy's U-Net sizes (a GPU actor's)


def diffusion_policy(size: int, ddim_steps: int, device: str, wide: bool = False):
    from robot_rl.policies.diffusion import DiffusionConfig, DiffusionPolicy
    from robot_rl.policies.normalizer import Normalizer

    rng = np.random.default_rng(0)
    normalizer = Normalizer().fit({"state": rng.standard_normal((100, STATE_DIM)).astype(np.float32),
                                   "action": rng.uniform(-1, 1, (100, ACTION_DIM)).astype(np.float32)})
    config = DiffusionConfig(inference_steps=ddim_steps, **(WIDE if wide else {}))
    return DiffusionPolicy.create(config, observation_spec(size), ACTION_DIM, normalizer, device=device)


def gaussian_policy(size: int, device: str = "auto"):
    from robot_rl.agents.sac import SACAgent
    from robot_rl.policies.gaussian import GaussianPolicy
    from robot_rl.training.config import TrainConfig

    return GaussianPolicy(SACAgent.create(0, observation_spec(size), ACTION_DIM, TrainConfig().sac), device=device)


def heads_on_base(base, size: int, calls: int, rng: np.random.Generator, device: str = "auto") -> dict[str, dict]:
    """Residual and noise-space SAC heads (the training preset's actor) on `base`: per `act_chunk` call, i.e. per
    control step for the residual (its base chunk is computed every `base.chunk_length` steps) and per chunk for the
    noise head."""
    import dataclasses

    from robot_rl.agents.sac import SACAgent
    from robot_rl.policies.gaussian import GaussianPolicy
    from robot_rl.policies.noise import NoisePolicy, noise_dim
    from robot_rl.policies.residual import FrozenBase, ResidualPolicy, residual_observation_spec
    from robot_rl.training.config import TrainConfig

    sac = dataclasses.replace(TrainConfig().sac, actor_zero_init_last=True)
    residual = ResidualPolicy(FrozenBase(base), GaussianPolicy(SACAgent.create(
        0, residual_observation_spec(base), ACTION_DIM, dataclasses.replace(sac, residual_scale=0.1)), device=device),
        0.1)
    noise = NoisePolicy(base, GaussianPolicy(SACAgent.create(0, observation_spec(size), noise_dim(base), sac),
                                             device=device), 1.5)
    return {
        f"residual_on_{base.kind}": {**stats(per_call_ms(residual, rng, size, calls)), "chunk": 1,
                                     "base_chunk_every": base.chunk_length},
        f"noise_on_{base.kind}": {**stats(per_call_ms(noise, rng, size, calls)), "chunk": noise.chunk_length,
                                  "noise_dim": noise_dim(base)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=None, help="timed calls per policy (default 200)")
    parser.add_argument("--ddim-steps", type=int, default=None, help="(default 10)")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--device", default="cpu", help="torch device: cpu, cuda or auto")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--head-device", default="auto", choices=("auto", "cpu"),
                        help="the JAX policies (SAC Gaussian, residual and noise heads): JAX's default device, or "
                             "pinned to the host (the policies' device cpu)")
    parser.add_argument("--wide", action="store_true",
                        help="Diffusion Policy's U-Net sizes (down dims 256-512-1024, 2 middle blocks) instead of "
                             "the CPU defaults")
    parser.add_argument("--smoke", action="store_true",
                        help="every kind with 3 timed calls after 1 warm-up and DDIM-2: checks that the bench runs "
                             "(tests run this; the figures mean little)")
    args = parser.parse_args()
    args.calls = args.calls if args.calls is not None else (3 if args.smoke else 200)
    args.ddim_steps = args.ddim_steps if args.ddim_steps is not None else (2 if args.smoke else 10)
    global WARMUP
    WARMUP = 1 if args.smoke else WARMUP
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX shares a GPU with torch
    import jax
    import torch

    from robot_rl.policies.base import resolve_device

    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    rng = np.random.default_rng(0)
    results: dict[str, dict] = {}

    gaussian = gaussian_policy(args.image_size, args.head_device)
    results["gaussian"] = {**stats(per_call_ms(gaussian, rng, args.image_size, args.calls)), "chunk": 1,
                           "parameters": int(sum(np.size(x) for x in
                                                 jax.tree_util.tree_leaves(gaussian.agent.actor)))}
    diffusion = diffusion_policy(args.image_size, args.ddim_steps, device, args.wide)
    parameters = sum(p.numel() for p in diffusion.model.parameters())
    results[f"diffusion_ddim{args.ddim_steps}"] = {
        **stats(per_call_ms(diffusion, rng, args.image_size, args.calls)), "chunk": diffusion.chunk_length,
        "prediction_horizon": diffusion.config.prediction_horizon, "parameters": parameters}
    try:
        from robot_rl.policies.one_step import OneStepPolicy
    except ImportError:
        OneStepPolicy = None
    if OneStepPolicy is not None:
        student = OneStepPolicy.from_teacher(diffusion)
        results["one_step"] = {**stats(per_call_ms(student, rng, args.image_size, args.calls)),
                               "chunk": student.chunk_length, "parameters": parameters}
        results.update(heads_on_base(student, args.image_size, args.calls, rng, args.head_device))
    base = results["gaussian"]["p50_ms"]
    for row in results.values():
        row["ratio_to_gaussian_p50"] = round(row["p50_ms"] / base, 1)
    ddim = results[f"diffusion_ddim{args.ddim_steps}"]
    accelerator = torch.cuda.get_device_name() if device.startswith("cuda") else None
    summary = {"bench": "policies", "device": device, "accelerator": accelerator,
               "jax_backend": jax.default_backend(), "head_device": gaussian.device, "wide": args.wide,
               "threads": args.threads, "image_size": args.image_size,
               "cameras": len(CAMERAS), "state_dim": STATE_DIM, "calls": args.calls, "smoke": args.smoke,
               "results": results,
               "ddim_targets_met": args.ddim_steps == 10 and ddim["p50_ms"] <= 60 and ddim["p99_ms"] <= 100}
    if "one_step" in results:
        summary["one_step_speedup_p50"] = round(ddim["p50_ms"] / results["one_step"]["p50_ms"], 1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
