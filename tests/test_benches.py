"""The ROS benches (camera, launch, learner_startup, private_network, ros, ros_training) run with ``--smoke`` and print
their figures (tests/bench_smoke.py); bench/two_hosts.py and bench/session.py have their own tests
(test_bench_two_hosts.py), the benches that only compute run in tests/test_benches_compute.py, and a bench without a
smoke test fails here.

The ROS benches re-run themselves or their launches inside a private network namespace (only ``lo``) with
ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST; here they also get a test-specific ROS_DOMAIN_ID (``--domain-id``, from
tests/ros_harness.py's allocator), and they are skipped, with the reason, where no namespace can be made or the ROS 2
wheels are missing. Output folders go to pytest's temporary folders (one per bench).

They run two at a time (JOBS), started when the first bench's test needs them, longest first: a smoke run spends
much of its time starting processes one after another and waiting on them (ROS discovery, a learner's start-up, a
real-time phase) with the second core idle.
"""

from __future__ import annotations

from pathlib import Path

from bench_smoke import REPO, Benches, fraction, positive, smoke_tests
from ros_harness import allocate_domain_id
from test_benches_compute import BENCHES as COMPUTE_BENCHES

JOBS = 2  # smoke runs at once
LONGEST_FIRST = ("ros_training", "ros", "learner_startup", "launch", "camera")


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


def check_learner_startup(r: dict, tmp: Path) -> None:
    assert "error" not in r, (r.get("error"), r.get("learner_log_tail"))
    assert positive(r["ack_s_median"]) and len(r["ack_s"]) == 1, r
    assert positive(r["bare_node_ack_s_median"]), r
    assert r["training_starts_s_median"] is None or positive(r["training_starts_s_median"]), r
    assert r["log_batches_at_end"] > 0, r


def check_private_network(r: dict, tmp: Path) -> None:
    assert r["private_child_checks_passed"] is True, r
    assert positive(r["baseline_direct_ms"]["p50"]) and positive(r["private_network_ms"]["p50"]), r
    assert r["private_network_ms"]["n"] == r["runs"] == 3 and positive(r["ratio_p50"]), r


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


BENCHES: Benches = {
    "camera": (lambda tmp: [], check_camera, allocate_domain_id()),
    "launch": (lambda tmp: [], check_launch, allocate_domain_id()),
    "learner_startup": (lambda tmp: [], check_learner_startup, allocate_domain_id()),
    "private_network": (lambda tmp: [], check_private_network, allocate_domain_id()),
    "ros": (lambda tmp: [], check_ros, allocate_domain_id()),
    "ros_training": (lambda tmp: ["--out", str(tmp / "ros_training")], check_ros_training, allocate_domain_id()),
}


def test_every_bench_is_covered():
    """A new bench gets a smoke test here or in test_benches_compute.py (two_hosts and session have their own)."""
    scripts = {path.stem for path in (REPO / "bench").glob("*.py")
               if path.stem not in ("__init__", "two_hosts", "session")}
    assert scripts == set(BENCHES) | set(COMPUTE_BENCHES) and not set(BENCHES) & set(COMPUTE_BENCHES)


smoke_runs, test_bench_smoke = smoke_tests(BENCHES, JOBS, LONGEST_FIRST)
