"""The benches that only compute (bc, learner, learning, policies, randomize, reward_classifier, safety, sim,
validate) run with ``--smoke`` and print their figures (tests/bench_smoke.py); the ROS benches run in
tests/test_benches.py, which also fails for a bench with no smoke test. One at a time, longest first, in the
background from the first test's start: this file runs beside the ROS files, which need the other core. Output folders
go to pytest's temporary folders."""

from __future__ import annotations

import math
from pathlib import Path

from bench_smoke import Benches, fraction, positive, smoke_tests

JOBS = 1
LONGEST_FIRST = ("randomize", "bc", "policies", "reward_classifier", "validate", "learning", "learner")


def check_bc(r: dict, tmp: Path) -> None:
    (run,) = r["runs"]
    assert "error" not in run, run
    assert fraction(run["success_rate"]) and run["episodes"] == 1 and positive(run["training_s"]), run
    assert math.isfinite(run["final_train_loss"]) and run["parameters"] > 0, run
    assert fraction(r["median_success"]) and positive(r["median_training_s"]), r
    assert fraction(r["baseline_expert_success"]), r
    assert (tmp / "bc" / "demos.zarr").exists()


def check_learner(r: dict, tmp: Path) -> None:
    assert r["smoke"] and r["updates"], r
    for row in r["updates"]:
        assert positive(row["updates_per_s"]) and positive(row["rtf"]) and row["compile_s"] >= 0, row
    assert {row["obs"] for row in r["updates"]} == {"state"}, r["updates"]
    row = r["scan_vs_per_step"]["state"]
    assert positive(row["scan_ms"]) and positive(row["per_step_calls_ms"]) and positive(row["speedup"]), row
    sampling = r["replay_sample_stacked_ms"]  # from replay buffers of valid (chained) episodes, images included
    assert set(sampling) == {"state_utd2", "1x32px_utd2"} and all(map(positive, sampling.values())), sampling


def check_learning(r: dict, tmp: Path) -> None:
    assert r["seeds"] == [0] and r["env_steps"] == 20 and r["image_size"] is None, r  # the state suite
    assert r["wrench"] is False, r
    (final,) = r["final_success"]
    assert fraction(final) and fraction(r["final_success_median"]), r
    assert [step for step, _ in r["curves"]["0"]][-1] == 20, r["curves"]
    final_eval = r["per_eval"]["0"][-1]  # its failure modes count the final evaluation's failed episodes
    assert sum(final_eval["failure_modes"].values()) == round((1 - final) * r["final_eval_episodes"]), final_eval
    assert positive(r["wall_s"]["0"]) and Path(r["png"]).is_file() and Path(r["png"]).is_relative_to(tmp), r


def check_policies(r: dict, tmp: Path) -> None:
    results = r["results"]
    assert {"gaussian", "diffusion_ddim2", "one_step", "residual_on_one_step", "noise_on_one_step"} <= set(results)
    for name, row in results.items():
        assert positive(row["p50_ms"]) and positive(row["p99_ms"]) and positive(row["ratio_to_gaussian_p50"]), name
    assert positive(r["one_step_speedup_p50"]), r


def check_randomize(r: dict, tmp: Path) -> None:
    assert r["seeds"] == [0] and r["steps"] == 20 and r["obs_mode"] == "state", r
    for mode in ("nominal", "randomized"):
        run = r[mode]["runs"]["0"]
        assert fraction(run["nominal_success"]) and run["verdict"] in ("pass", "fail"), run
        assert set(run["validation"]) == {"nominal", "action_latency"}, run
        assert all(map(fraction, run["validation"].values())), run
        assert r[mode]["passes"] in (0, 1), r[mode]
    assert r["nominal"]["runs"]["0"]["conditions_trained"] == ["nominal"], r["nominal"]
    assert math.isfinite(r["nominal_success_difference"]), r


def check_reward_classifier(r: dict, tmp: Path) -> None:
    assert r["train"]["episodes"] == 4 and r["test"]["episodes"] == 4 and r["test"]["frames"] > 0, r
    assert r["train"]["success_frames"] > 0, r["train"]
    for key in ("precision", "recall", "f1"):
        value = r["per_frame_vs_true_success"][key]
        assert value is None or fraction(value), r["per_frame_vs_true_success"]
    assert [row["consecutive"] for row in r["per_episode"]] == [1, 2], r["per_episode"]
    assert positive(r["predict_ms"]["one_frame"]) and positive(r["predict_ms"]["batched_per_frame"]), r
    assert positive(r["seconds"]["record"]) and positive(r["seconds"]["train"]), r
    assert Path(r["figure"]).is_file() and (tmp / "reward" / "model").exists(), r


def check_safety(r: dict, tmp: Path) -> None:
    assert r["calls"] == 100 and positive(r["baseline_np_clip_7d"]["median_us"]), r
    for key in ("filter_7d_sensors", "filter_4d", "filter_absolute_7d"):
        assert positive(r[key]["median_us"]) and positive(r[key]["p99_us"]) and positive(r[key]["ratio_to_clip"]), r


def check_sim(r: dict, tmp: Path) -> None:
    for key in ("env_steps_per_s_state", "env_steps_per_s_state_pixels_2cams_128", "physics_steps_per_s_with_osc"):
        assert positive(r[key]), r
    assert r["steps"] == 5 and r["repeats"] == 1, r


def check_validate(r: dict, tmp: Path) -> None:
    assert r["conditions"] == 8 and r["episodes_per_condition"] == 1 and r["workers"] == 1, r
    assert len(r["success"]) == 8 and all(map(fraction, r["success"].values())), r["success"]
    assert positive(r["baseline_nominal_eval_seconds"]) and r["suite_seconds"] >= 0, r
    assert fraction(r["baseline_success"]) and r["verdict"] in ("pass", "fail"), r


BENCHES: Benches = {
    "bc": (lambda tmp: ["--keep", str(tmp / "bc")], check_bc, None),
    "learner": (lambda tmp: [], check_learner, None),
    "learning": (lambda tmp: ["--out", str(tmp / "learning")], check_learning, None),
    "policies": (lambda tmp: [], check_policies, None),
    "randomize": (lambda tmp: [], check_randomize, None),
    "reward_classifier": (lambda tmp: ["--out", str(tmp / "reward")], check_reward_classifier, None),
    "safety": (lambda tmp: [], check_safety, None),
    "sim": (lambda tmp: [], check_sim, None),
    "validate": (lambda tmp: [], check_validate, None),
}


smoke_runs, test_bench_smoke = smoke_tests(BENCHES, JOBS, LONGEST_FIRST)
