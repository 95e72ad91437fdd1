"""bench/session.py --smoke runs (a short lan run of bench/two_hosts.py between two namespaced hosts set up with the
standard ROS 2 variables only: the server side killed with -9 and started again, the link down for 5 s) and its
figures say that training went across: every node chose the lan mode from ROS_STATIC_PEERS, transitions reached the
learner, weights reached the actor, the actor held while the learner was away (the robot file's learner_lost.action
hold), and no acknowledged transition was lost. Skips (with the reason) where namespaces cannot be made.

What the bench and the hosts harness (tests/hosts.py) start ends with them, however they end: the bench stopped by
SIGTERM with its whole graph up (two launchers, learner, actor, sim node, human, in two namespaced hosts), or by SIGINT
while its launchers start, and a script holding hosts stopped by SIGTERM, SIGINT or SIGKILL, leave no process behind.
Their processes are told apart by a marker in their environment (inherited through unshare, nsenter, setpriv, the
launcher and exec), found in /proc/*/environ."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from hosts import hosts_unavailable

REPO = Path(__file__).resolve().parents[1]
MARK = "ROBOT_RL_TEST_PROCESS_MARK"  # environment variable whose value tells one test's processes apart
NODES = ("robot_rl.ros.", "robot_rl.sim.")  # a node's command line: python -m robot_rl.ros.nodes.learner_node, ...


def test_session_bench_smoke(tmp_path):
    """bench/session.py --smoke: a short lock-step run of bench/two_hosts.py between two namespaced hosts set up with
    the standard ROS 2 variables only, its server side killed with -9 and started again, the robot's link down for
    5 s, and a sampler beside it."""
    reason = hosts_unavailable()
    if reason:
        pytest.skip(f"cannot make simulated hosts: {reason}")
    pytest.importorskip("rclpy", reason="the ROS 2 wheels are not installed")
    result = subprocess.run([sys.executable, "bench/session.py", "--smoke", "--out", str(tmp_path / "bench")],
                            cwd=REPO, capture_output=True, text=True, timeout=400,
                            env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    assert result.returncode == 0, result.stderr[-3000:]
    session = json.loads(result.stdout.strip().splitlines()[-1])
    run = session["run"]
    assert (run["mode"], run["rate_mbit"], session["smoke"]) == ("lan", 100.0, True)
    assert run["transitions_per_s"] > 2, run
    assert run["weights_per_s"] is None and run["link_bytes_per_transition"] is None, run  # counters of two starts
    # The hosts were set up with the standard ROS 2 variables only (ROS_STATIC_PEERS): every node chose lan from them.
    lines = run["network_lines"]
    assert {"server learner", "robot1 actor", "robot1 sim"} <= set(lines), lines
    assert all(line.startswith("network lan (from ROS_STATIC_PEERS") for line in lines.values()), lines
    # The link went down for 5 s with learner_lost.action hold (after 1.5 s): the actor kept its transitions, and the
    # learner had all of them after the link came back.
    down = run["link_down"]
    assert down["dropped"] == 0, down
    assert down["learner_has_all_s_after_up"] is not None, down
    # The server side died (kill -9) and came back on its run folder: nothing acknowledged was lost, it acknowledged
    # again and the actor acted with its newer weights.
    (kill,) = run["kill_server"]
    assert kill["restarted"] and kill["acks_again_s_after_restart"] is not None, kill
    assert kill["newer_weights_at_actors_s_after_restart"] is not None, kill
    # The robot's link node died (kill -9): its launch started a new one, and acknowledgements came back through it.
    link = run["kill_link"]
    assert link["killed"] == 1 and link["link_again_s_after_kill"] is not None, link
    assert link["acks_again_s_after_kill"] is not None, link
    assert session["acked_lost"] == 0 and run["acked_lost"] == 0, session
    # The session's own figures: checkpoints timed and sized, the sampler's slopes, the actor's acknowledgement gaps.
    assert session["checkpoints"], session  # every 25 transitions: some before the kill, some after
    assert all(c["seconds"] >= 0 and c["bytes"] > 0 for c in session["checkpoints"]), session
    assert session["received"] > 0 and session["link_bytes_per_transition"] > 0, session
    assert session["ack_gap_longest_s"] >= session["ack_gap_outside_faults_s"] >= 0, session
    assert len(session["fault_windows"]) == 3, session


def _marked(marker: str) -> dict[int, str]:
    """pid -> command line of every process (zombies aside: they have no environment) that carries `marker`."""
    needle = f"{MARK}={marker}".encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if needle not in environ.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                found[int(entry)] = cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def _wait_for(marker: str, ready, what: str, process: subprocess.Popen, timeout: float) -> dict[int, str]:
    """Poll the marked processes until `ready(them)`; fails if `process` ends first or after `timeout` (liveness)."""
    deadline = time.monotonic() + timeout
    while True:
        found = _marked(marker)
        if ready(found):
            return found
        assert process.poll() is None, f"ended ({process.returncode}) before {what}: {process.stderr.read()[-3000:]}"
        assert time.monotonic() < deadline, f"no {what} after {timeout:.0f} s: {sorted(found.values())}"
        time.sleep(0.2)


def _stop_and_check(marker: str, process: subprocess.Popen, signum: int, status: int | None,
                    timeout: float) -> str:
    """Send `signum` to `process` alone (as `timeout` or a kill would), wait for it and check its exit status
    (`status`, None: not checked) and that no marked process is left (a liveness deadline for the ones killed just
    now to be gone); returns its stderr."""
    os.kill(process.pid, signum)
    try:
        _, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {timeout:.0f} s after {signal.Signals(signum).name}: "
                    f"{sorted(_marked(marker).values())}")
    if status is not None:
        assert process.returncode == status, stderr[-3000:]
    deadline = time.monotonic() + 10
    while (left := _marked(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"left running after {signal.Signals(signum).name}: {sorted(left.values())}"
    return stderr


def _kill_marked(marker: str) -> None:
    """A failed test's leftovers: SIGKILL every process that carries its marker (and only those)."""
    for pid in _marked(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_two_hosts_bench_stopped_leaves_nothing(tmp_path, signum):
    """SIGTERM once the graph's nodes exist (the incident: a `timeout` around the bench left the hosts and a whole
    graph running), SIGINT as soon as both launchers exist: the bench stops what it started and exits 143 / 130."""
    reason = hosts_unavailable()
    if reason:
        pytest.skip(f"cannot make simulated hosts: {reason}")
    pytest.importorskip("rclpy", reason="the ROS 2 wheels are not installed")
    marker = uuid.uuid4().hex
    process = subprocess.Popen([sys.executable, "bench/two_hosts.py", "--smoke", "--out", str(tmp_path / "bench")],
                               cwd=REPO, env={**os.environ, MARK: marker, "OMP_WAIT_POLICY": "PASSIVE"},
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        if signum == signal.SIGTERM:  # learner, actor, sim node and human: 4 nodes across the two hosts
            _wait_for(marker, lambda found: sum(any(n in c for n in NODES) for c in found.values()) >= 4,
                      "graph of 4 nodes", process, timeout=180)
        else:
            _wait_for(marker, lambda found: sum("robot_rl.apps.cli launch" in c for c in found.values()) >= 2,
                      "two launchers", process, timeout=120)
        stderr = _stop_and_check(marker, process, signum, 128 + signum, timeout=120)
        assert ("terminated" if signum == signal.SIGTERM else "interrupted") in stderr.splitlines(), stderr[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        _kill_marked(marker)


HOLDING = """
import sys, time
sys.path.insert(0, sys.argv[1])
from hosts import hosts
with hosts(["a", "b"], subnet="10.238.0") as machines:
    machines["a"].popen(["sleep", "1000"])
    # in b: one process in its own session (out of reach of the popen's session) and one that outlives its parent
    machines["b"].popen(["sh", "-c", "setsid -f sleep 1000; sleep 1000 & exec sleep 1000"])
    print("up", flush=True)
    time.sleep(1000)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL],
                         ids=["SIGTERM", "SIGINT", "SIGKILL"])
def test_hosts_stopped_leave_nothing(signum):
    """A script inside `hosts()` stopped by SIGTERM or SIGINT cleans up as on a normal exit (143 / 130 is not its
    business: it dies with the exception); killed by SIGKILL, the kernel and the sweeper end the holders and every
    process in the hosts, also those in sessions of their own and orphans."""
    reason = hosts_unavailable()
    if reason:
        pytest.skip(f"cannot make simulated hosts: {reason}")
    marker = uuid.uuid4().hex
    process = subprocess.Popen([sys.executable, "-c", HOLDING, str(REPO / "tests")], cwd=REPO,
                               env={**os.environ, MARK: marker}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    try:
        found = _wait_for(marker, lambda found: sum(c == "sleep 1000" for c in found.values()) >= 4,
                          "four sleeps in the hosts", process, timeout=60)
        assert sum(c == "sleep infinity" for c in found.values()) == 2, found  # the holders
        _stop_and_check(marker, process, signum, None if signum != signal.SIGKILL else -signal.SIGKILL, timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        _kill_marked(marker)
