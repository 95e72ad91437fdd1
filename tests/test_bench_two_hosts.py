"""bench/two_hosts.py --smoke runs (one short lan run at 20 Mbit/s between two namespaced hosts, the link down for
5 s in the middle) and its figures say that training went across: transitions reached the learner, weights reached
the actor through the paced link, the actor held while the learner was away (the robot file's learner_lost.action
hold), and no acknowledged transition was lost. Skips (with the reason) where namespaces cannot be made."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hosts import hosts_unavailable

REPO = Path(__file__).resolve().parents[1]


def test_two_hosts_bench_smoke(tmp_path):
    reason = hosts_unavailable()
    if reason:
        pytest.skip(f"cannot make simulated hosts: {reason}")
    pytest.importorskip("rclpy", reason="the ROS 2 wheels are not installed")
    result = subprocess.run([sys.executable, "bench/two_hosts.py", "--smoke", "--out", str(tmp_path / "bench")],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = json.loads(result.stdout.strip().splitlines()[-1])["runs"]
    assert (run["mode"], run["rate_mbit"]) == ("lan", 20.0)
    assert run["transitions_per_s"] > 2 and run["weights_per_s"] > 0 and run["weights_latency_ms"]["n"] > 0, run
    assert run["acked_lost"] == 0 and 0 < run["link_use"] < 0.9, run
    # The link went down for 5 s with learner_lost.action hold (after 1.5 s): the actor held the policy's commands,
    # kept its transitions, and the learner had all of them soon after the link came back.
    down = run["link_down"]
    assert down["held_while_down"] >= 10 and down["dropped"] == 0, down
    assert down["learner_has_all_s_after_up"] is not None and down["learner_has_all_s_after_up"] < 10, down
