"""Reward classifier benchmark: a success classifier trained on pixels in the sim mirror, scored against the sim's
TRUE success signal on held-out episodes. Prints one JSON line; writes a PNG of the classifier's probability over
held-out episodes next to the datasets and the model.

    python bench/reward_classifier.py                      # PickCube-v0, 2 cameras at 64 px, a few minutes on a CPU
    python bench/reward_classifier.py --smoke --out /tmp/x # 4 + 4 episodes at 32 px, 5 steps (tests run this)

Episodes (``--train-episodes`` to train on, ``--test-episodes`` held out, other seeds), recorded like demos on a real
robot, where a human presses "success" a moment after the task is done:
- *expert* (half of them): the scripted expert with action noise; after the first success it keeps going for
  ``--hold`` steps (it holds the cube up), then the episode ends;
- *stopped*: the expert stopped at a random step before it would succeed (hard negatives: reaching, grasping,
  lifting part way);
- *open gripper*: the expert with its gripper held open (it reaches and pushes the cube, never lifts it).
An episode's success is what the sim says, whatever its kind. The classifier is trained with the defaults of
`robot-rl train-reward` (``--success-frames`` = hold + 1: the frames from the first success on), on camera frames only.

Figures: per frame (every held-out frame, final observations included) precision / recall / F1 at the threshold
against ``is_success()`` of the sim at that frame; per episode (as the reward node would run, ``consecutive`` 1 and 2):
successful episodes detected at all and the delay of the first predicted success after the true one (negative:
early), and failed episodes with a false alarm.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import tyro

from robot_rl.data.episodes import EpisodeDataset
from robot_rl.sim.loop import make_env, writer_for_env
from robot_rl.agents.reward_classifier import RewardClassifierConfig
from robot_rl.agents.reward_classifier_training import binary_metrics, save_atomically, train_reward_classifier
from robot_rl.sim.expert import make_expert


@dataclasses.dataclass(frozen=True)
class Args:
    task: str = "PickCube-v0"
    image_size: int = 64
    train_episodes: int = 40
    """Episodes to train on (20 % of them held out for the training run's own validation)."""
    test_episodes: int = 30
    """Held-out episodes (other seeds) scored against the sim's true success."""
    hold: int = 4
    """Steps the expert keeps going after the first success."""
    noise: float = 0.1
    """Action noise of the expert."""
    steps: int = RewardClassifierConfig.steps
    """Classifier gradient steps."""
    margin: int = RewardClassifierConfig.margin
    """Frames before the success frames left out of training (0: they are failure frames)."""
    threshold: float = RewardClassifierConfig.threshold
    seed: int = 0
    out: Path = Path("runs/bench-reward")
    """Folder for the datasets, the model and the PNG (replaced)."""
    smoke: bool = False
    """Check that the bench runs (tests run this): 4 training and 4 held-out episodes (one of each kind and one
    more expert) at 32 px, 5 gradient steps, 5 timed single-frame predictions (unless overridden; the figures mean
    nothing)."""
    single_calls: int = 200
    """Timed single-frame predictions (--smoke: 5)."""


SMOKE = dict(train_episodes=4, test_episodes=4, image_size=32, steps=5, single_calls=5)


def record(env, path: Path, episodes: int, first_seed: int, args: Args) -> list[np.ndarray]:
    """Record `episodes` episodes (see the module doc) into a dataset; returns each episode's per-frame true success
    (T + 1 frames: the observations before each step, then the final one)."""
    rng = np.random.default_rng(first_seed)
    writer = writer_for_env(env, path, args.task, attrs={"policy": "bench/reward_classifier"})
    base = env.unwrapped
    limit = env.spec.max_episode_steps
    truths = []
    kinds: list[tuple[str, bool]] = []
    try:
        for index in range(episodes):
            seed = first_seed + index
            kind = ("expert", "expert", "stopped", "open gripper")[index % 4]
            stop_at = limit
            if kind == "stopped":  # a step before the one at which this episode's expert run succeeds
                succeeds_at = expert_success_step(env, seed, args.noise, limit)
                stop_at = int(rng.integers(max(1, succeeds_at // 3), max(2, succeeds_at)))
            expert = make_expert(env, noise=args.noise, seed=seed)
            obs, _ = env.reset(seed=seed)
            truth = [base.is_success()]
            succeeded_at = None
            for step in range(limit):
                action = expert.act(obs)
                if kind == "open gripper":
                    action[-1] = -1.0
                # the unwrapped env: it steps on after the success (the time limit is counted here)
                next_obs, reward, terminated, _, info = base.step(action)
                success = bool(info["success"])
                if success and succeeded_at is None:
                    succeeded_at = step
                last = step + 1 >= stop_at or step + 1 == limit or (
                    succeeded_at is not None and step - succeeded_at >= args.hold)
                writer.add_step(obs, action, reward, succeeded_at is not None and last, last and succeeded_at is None)
                truth.append(success)
                obs = next_obs
                if last:
                    break
            writer.end_episode(obs, success=succeeded_at is not None, seed=seed)
            truths.append(np.array(truth))
            kinds.append((kind, succeeded_at is not None))
    finally:
        writer.close()
    for kind in sorted({k for k, _ in kinds}):
        outcomes = [success for k, success in kinds if k == kind]
        print(f"{path.name}: {kind}: {sum(outcomes)}/{len(outcomes)} successful", file=sys.stderr)
    return truths


def expert_success_step(env, seed: int, noise: float, limit: int) -> int:
    """The step at which the expert first succeeds from this seed (`limit` if it does not)."""
    expert = make_expert(env, noise=noise, seed=seed)
    obs, _ = env.reset(seed=seed)
    for step in range(limit):
        obs, _, _, _, info = env.unwrapped.step(expert.act(obs))
        if info["success"]:
            return step
    return limit


def first_success(flags: np.ndarray, consecutive: int) -> int | None:
    """Index of the frame at which `consecutive` positive frames in a row are first complete, or None."""
    run = 0
    for index, flag in enumerate(flags):
        run = run + 1 if flag else 0
        if run >= consecutive:
            return index
    return None


def episode_figures(probabilities: list[np.ndarray], truths: list[np.ndarray], threshold: float,
                    consecutive: int) -> dict:
    delays, detected, false_alarms, successes, failures = [], 0, 0, 0, 0
    for prob, truth in zip(probabilities, truths, strict=True):
        predicted = first_success(prob >= threshold, consecutive)
        true = first_success(truth, 1)
        if true is None:
            failures += 1
            false_alarms += predicted is not None
        else:
            successes += 1
            if predicted is not None:
                detected += 1
                delays.append(predicted - true)
    return {
        "consecutive": consecutive,
        "success_episodes": successes, "detected": detected,
        "detection_rate": detected / successes if successes else None,
        "failed_episodes": failures, "false_alarms": false_alarms,
        "false_alarm_rate": false_alarms / failures if failures else None,
        "delay_steps": {"mean": float(np.mean(delays)) if delays else None,
                        "min": int(min(delays)) if delays else None, "max": int(max(delays)) if delays else None,
                        "early": int(sum(d < 0 for d in delays))},
    }


def plot(path: Path, probabilities: list[np.ndarray], truths: list[np.ndarray], threshold: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = [i for i, t in enumerate(truths) if t.any()][:3] + [i for i, t in enumerate(truths) if not t.any()][:3]
    fig, axes = plt.subplots(len(chosen), 1, figsize=(7, 1.3 * len(chosen)), sharex=True)
    for ax, index in zip(np.atleast_1d(axes), chosen, strict=False):
        truth = truths[index]
        ax.fill_between(np.arange(len(truth)), 0, truth.astype(float), step="mid", color="tab:green", alpha=0.25,
                        label="true success")
        ax.plot(probabilities[index], color="tab:blue", label="classifier")
        ax.axhline(threshold, color="grey", lw=0.8, ls="--")
        ax.set_ylim(-0.05, 1.05)
        ax.set_ylabel(f"ep {index}", rotation=0, labelpad=18)
    np.atleast_1d(axes)[0].legend(loc="upper left", fontsize=7)
    np.atleast_1d(axes)[-1].set_xlabel("frame")
    fig.suptitle("success probability on held-out episodes (shaded: the sim's true success)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(args: Args) -> dict:
    if args.smoke:  # what the command line left at its default takes the smoke size
        defaults = Args()
        args = dataclasses.replace(args, **{k: v for k, v in SMOKE.items() if getattr(args, k) == getattr(defaults, k)})
    os.environ.setdefault("MUJOCO_GL", "egl")
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    env = make_env(args.task, obs_mode="pixels", image_size=args.image_size)
    started = time.perf_counter()
    try:
        record(env, args.out / "train", args.train_episodes, args.seed * 100_000, args)
        test_truths = record(env, args.out / "test", args.test_episodes, args.seed * 100_000 + 50_000, args)
    finally:
        env.close()
    record_s = time.perf_counter() - started

    config = RewardClassifierConfig(success_frames=args.hold + 1, margin=args.margin, steps=args.steps,
                                    threshold=args.threshold, seed=args.seed)
    started = time.perf_counter()
    classifier, metrics = train_reward_classifier([args.out / "train"], config)
    train_s = time.perf_counter() - started
    save_atomically(classifier, args.out / "model", metrics)

    test = EpisodeDataset(args.out / "test")
    episodes = []
    for index in range(test.num_episodes):
        episode = test.episode(index)
        episodes.append({key: np.concatenate([episode["obs"][key], episode["final_obs"][key][None]])
                         for key in classifier.cameras})
    probabilities = [classifier.predict(frames) for frames in episodes]
    frame_count = sum(len(p) for p in probabilities)
    started = time.perf_counter()  # again, compiled: the steady state
    for frames in episodes:
        classifier.predict(frames)
    predict_ms = 1000 * (time.perf_counter() - started) / frame_count
    one = {key: np.ascontiguousarray(test.observations()[key][0]) for key in classifier.cameras}
    classifier.predict(one)
    started = time.perf_counter()
    for _ in range(args.single_calls):
        classifier.predict(one)
    single_ms = 1000 * (time.perf_counter() - started) / args.single_calls

    per_frame = binary_metrics(np.concatenate(probabilities), np.concatenate(test_truths), args.threshold)
    plot(args.out / "reward_classifier.png", probabilities, test_truths, args.threshold)
    train_success = int(sum(EpisodeDataset(args.out / "train").success))
    result = {
        "bench": "reward_classifier", "smoke": args.smoke, "task": args.task, "cameras": list(classifier.cameras),
        "image_size": args.image_size, "margin": args.margin, "success_frames": config.success_frames,
        "train": {"episodes": args.train_episodes, "successful": train_success, "frames": metrics["train"]["frames"],
                  "success_frames": metrics["train"]["success_frames"], "steps": args.steps,
                  "validation_on_labels": metrics["validation"]},
        "test": {"episodes": args.test_episodes, "successful": int(sum(t.any() for t in test_truths)),
                 "frames": frame_count},
        "per_frame_vs_true_success": per_frame,
        "per_episode": [episode_figures(probabilities, test_truths, args.threshold, c) for c in (1, 2)],
        "seconds": {"record": round(record_s, 1), "train": round(train_s, 1)},
        "predict_ms": {"one_frame": round(single_ms, 2), "batched_per_frame": round(predict_ms, 3)},
        "figure": str(args.out / "reward_classifier.png"),
    }
    return result


if __name__ == "__main__":
    print(json.dumps(main(tyro.cli(Args))))
