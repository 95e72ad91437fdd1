"""bench/two_hosts.py --smoke runs (one short lan run at 20 Mbit/s between two namespaced hosts) and its figures say
that training went across: transitions reached the learner, weights reached the actor through the paced link, and
no acknowledged transition was lost. Skips (with the reason) where namespaces cannot be made."""

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
