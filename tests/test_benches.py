"""Every bench in bench/ runs with ``--smoke`` (the same code path at its smallest sizes) and prints its one JSON line
with the figures it promises, so no bench can rot. bench/two_hosts.py has its own test (test_bench_two_hosts.py).

Each bench runs as a subprocess from the repository root, as a user would run it. The ROS benches (camera, launch,
learner_startup, private_network, ros, ros_training) re-run themselves or their launches inside a private network
namespace (only ``lo``) with ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST; here they also get a test-specific
ROS_DOMAIN_ID (``--domain-id``, from tests/ros_harness.py's allocator), and they are skipped, with the reason, where no namespace can be
made or the ROS 2 wheels are missing. Output folders go to pytest's temporary folders (one per bench).

The selected benches run two at a time (JOBS), started when the first bench's test needs them, longest first: a smoke
run spends much of its time starting processes one after another and waiting on them (ROS discovery, a learner's
start-up, a real-time phase) with the second core idle. Nothing here checks a timing, only that each figure is there
and sane; each bench's test waits for its own run and checks it.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from ros_harness import allocate_domain_id

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 120
JOBS = 2  # smoke runs at once
# The order the smoke runs start in: the long ones first (the rest fill in beside them), then any other.
LONGEST_FIRST = ("learner_startup", "ros_training", "ros", "bc", "policies", "reward_classifier", "learner",
                 "learning", "validate", "launch")


def positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def fraction(value) -> bool:
    return isinstance(value, (int, float)) and 0.0 <= value <= 1.0


# ------------------------------------------------------------------------------------------------ figure checks


def check_bc(r: dict, tmp: Path) -> None:
    (run,) = r["runs"]
    assert "error" not in run, run
    assert fraction(run["success_rate"]) and run["episodes"] == 1 and positive(run["training_s"]), run
    assert math.isfinite(run["final_train_loss"]) and run["parameters"] > 0, run
    assert fraction(r["median_success"]) and positive(r["median_training_s"]), r
    assert fraction(r["baseline_expert_success"]), r
    assert (tmp / "bc" / "demos.zarr").exists()


def check_camera(r: dict, tmp: Path) -> None:
    for key in ("cv2_read_ms", "jpeg_encode_ms"):
        assert positive(r["baseline"][key]["p50"]), r["baseline"]
    for fmt in ("raw_bgr8", "jpeg"):
        row = r[fmt]
        assert row["published"] > 0 and positive(row["published_hz"]) and positive(row["captured_fps"]), row
        assert row["capture_to_publish_ms"]["n"] > 0 and positive(row["capture_to_publish_ms"]["p50"]), row
        assert row["received"] > 0 and positive(row["capture_to_received_ms"]["p50"]), row


def check_launch(r: dict, tmp: Path) -> None:
    assert "errors" not in r, r.get("errors")
    assert positive(r["launcher"]["required_exit_to_end_s"]) and positive(r["launcher"]["escalation_s"]), r
    record = r["files"]["teleop_record.yaml"]  # up, then stopped by SIGINT, no node needing SIGTERM / SIGKILL
    assert record["exit_status"] == 130 and not record["escalated"], record
    assert positive(record["start_s"]) and positive(record["stop_s"]), record
    assert {"sim", "actor", "human"} <= set(record["nodes"]), record


def check_learner(r: dict, tmp: Path) -> None:
    assert r["smoke"] and r["updates"], r
    for row in r["updates"]:
        assert positive(row["updates_per_s"]) and positive(row["rtf"]) and row["compile_s"] >= 0, row
    assert {row["obs"] for row in r["updates"]} == {"state"}, r["updates"]
    row = r["scan_vs_per_step"]["state"]
    assert positive(row["scan_ms"]) and positive(row["per_step_calls_ms"]) and positive(row["speedup"]), row
    sampling = r["replay_sample_stacked_ms"]  # from replay buffers of valid (chained) episodes, images included
    assert set(sampling) == {"state_utd2", "1x32px_utd2"} and all(map(positive, sampling.values())), sampling


def check_learner_startup(r: dict, tmp: Path) -> None:
    assert "error" not in r, (r.get("error"), r.get("learner_log_tail"))
    assert positive(r["ack_s_median"]) and len(r["ack_s"]) == 1, r
    assert positive(r["bare_node_ack_s_median"]), r
    assert r["training_starts_s_median"] is None or positive(r["training_starts_s_median"]), r
    assert r["log_batches_at_end"] > 0, r


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


def check_private_network(r: dict, tmp: Path) -> None:
    assert r["private_child_checks_passed"] is True, r
    assert positive(r["baseline_direct_ms"]["p50"]) and positive(r["private_network_ms"]["p50"]), r
    assert r["private_network_ms"]["n"] == r["runs"] == 3 and positive(r["ratio_p50"]), r


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


def check_ros(r: dict, tmp: Path) -> None:
    assert "errors" not in r, r.get("errors")
    assert r["network"]["private_namespace"] and r["network"]["discovery_range"] == "LOCALHOST", r["network"]
    assert set(r["network"]["domain_ids"].values()) == {BENCHES["ros"][2]}, r["network"]
    state = r["obs_to_command_state"]
    assert state["rtt_ms"]["n"] > 0 and positive(state["rtt_ms"]["p50"]) and positive(state["policy_ms"]["p50"])
    assert positive(state["baseline_echo_rtt_ms"]["p50"]), state
    transitions = r["transitions_pixels_2x64"]
    assert positive(transitions["acked_transitions_per_s"]) and transitions["acked_total"] > 0, transitions
    weights = r["weights_broadcast"]["pixels_2x64"]
    assert weights["publish_to_received_ms"]["n"] > 0 and positive(weights["decode_plus_apply_p50_ms"]), weights
    assert weights["lost"] == 0 and positive(weights["payload_mb"]), weights
    assert not {"obs_to_command_640x480", "camera_node", "realtime_diffusion_actor"} & set(r), sorted(r)


def check_ros_training(r: dict, tmp: Path) -> None:
    assert r["seeds"] == [0] and r["env_steps"] == 30, r
    assert set(r["final_success"]) == {"ros_sim_panda", "in_process"}, r["final_success"]
    assert all(fraction(v) for values in r["final_success"].values() for v in values), r["final_success"]
    run = r["ros_sim_panda"]["0"]
    assert run["transitions_sent"] > 0 and run["trained_on"] > 0 and run["commands"] > 0, run
    assert positive(run["wall_s"]) and positive(r["in_process"]["0"]["wall_s"]), r


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


# name: (extra arguments (tmp_path -> list), figure check, ROS domain id or None)
BENCHES: dict[str, tuple[Callable[[Path], list[str]], Callable[[dict, Path], None], int | None]] = {
    "bc": (lambda tmp: ["--keep", str(tmp / "bc")], check_bc, None),
    "camera": (lambda tmp: [], check_camera, allocate_domain_id()),
    "launch": (lambda tmp: [], check_launch, allocate_domain_id()),
    "learner": (lambda tmp: [], check_learner, None),
    "learner_startup": (lambda tmp: [], check_learner_startup, allocate_domain_id()),
    "learning": (lambda tmp: ["--out", str(tmp / "learning")], check_learning, None),
    "policies": (lambda tmp: [], check_policies, None),
    "private_network": (lambda tmp: [], check_private_network, allocate_domain_id()),
    "reward_classifier": (lambda tmp: ["--out", str(tmp / "reward")], check_reward_classifier, None),
    "ros": (lambda tmp: [], check_ros, allocate_domain_id()),
    "ros_training": (lambda tmp: ["--out", str(tmp / "ros_training")], check_ros_training, allocate_domain_id()),
    "safety": (lambda tmp: [], check_safety, None),
    "sim": (lambda tmp: [], check_sim, None),
    "validate": (lambda tmp: [], check_validate, None),
}


def test_every_bench_is_covered():
    """A new bench gets a smoke test here (two_hosts has its own)."""
    scripts = {path.stem for path in (REPO / "bench").glob("*.py") if path.stem not in ("__init__", "two_hosts")}
    assert scripts == set(BENCHES)


_running: set[subprocess.Popen] = set()  # the benches' processes under way (killed if the session ends first)
_running_lock = threading.Lock()


def run(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """(return code, stdout, stderr) of `argv` run from the repository root. On a time-out the bench gets SIGINT
    first (the ROS benches then stop the children they started in sessions of their own), then its process group
    SIGKILL, and the test fails."""
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    with _running_lock:
        _running.add(process)
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGINT)
        try:
            stdout, stderr = process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
        pytest.fail(f"{' '.join(argv[1:])} timed out after {TIMEOUT_S} s\nstdout: {stdout[-2000:]}\n"
                    f"stderr: {stderr[-4000:]}")
    finally:
        with _running_lock:
            _running.discard(process)
    return process.returncode, stdout, stderr


def ros_skip_reason() -> str | None:
    from robot_rl.ros.env import RosEnvironmentError, find_ros_wheels, network_namespace_problem

    try:
        find_ros_wheels()
    except RosEnvironmentError as error:
        return str(error)
    problem = network_namespace_problem()
    return f"cannot make a private network namespace: {problem}" if problem else None


def smoke_run(name: str, tmp_path: Path) -> tuple[int, str, str]:
    """`bench/NAME.py --smoke` (a ROS bench on its own domain id), output folders in `tmp_path`; skips a ROS bench
    (with the reason) where it cannot run."""
    arguments, _, domain_id = BENCHES[name]
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    argv = [sys.executable, f"bench/{name}.py", "--smoke", *arguments(tmp_path)]
    if domain_id is not None:
        reason = ros_skip_reason()
        if reason:
            pytest.skip(reason)
        env.update(ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", ROS_DOMAIN_ID=str(domain_id))
        argv += ["--domain-id", str(domain_id)]
    return run(argv, env)


@pytest.fixture(scope="module")
def smoke_runs(request, tmp_path_factory):
    """{bench name: (future of its smoke_run, its output folder)} for the benches this session selected, JOBS at a
    time, longest first."""
    selected = set()
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if getattr(item, "module", None) is request.module and callspec is not None and "name" in callspec.params:
            selected.add(callspec.params["name"])
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=JOBS, thread_name_prefix="bench-smoke")
    runs = {}
    for name in sorted(selected, key=lambda name: (rank.get(name, len(rank)), name)):
        folder = tmp_path_factory.mktemp(f"bench-{name}")
        runs[name] = (pool.submit(smoke_run, name, folder), folder)
    try:
        yield runs
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        with _running_lock:
            for process in _running:  # only if the session ended before a run did
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.mark.parametrize("name", sorted(BENCHES))
def test_bench_smoke(name, smoke_runs):
    _, check, _ = BENCHES[name]
    future, tmp_path = smoke_runs[name]
    returncode, stdout, stderr = future.result()
    assert returncode == 0, f"rc {returncode}\nstdout: {stdout[-2000:]}\nstderr: {stderr[-4000:]}"
    lines = stdout.strip().splitlines()
    assert lines, f"no output; stderr: {stderr[-3000:]}"
    figures = json.loads(lines[-1])
    assert figures.get("smoke") is True, figures
    check(figures, tmp_path)
