"""Training across two hosts, as docs/two_machines.md runs it: the robot host starts
`robot-rl launch launch/sim_train.yaml side:=robot network:=secure` (sim node, actor, scripted human), the server host
`... side:=server network:=secure` (the learner), each host with its folder from `robot-rl certs` (TLS between the
hosts). The test can run `lan` too (each host naming the other in ROS_STATIC_PEERS); the suite runs `lan` between two
hosts in tests/test_bench_two_hosts.py. The hosts are tests/hosts.py's
namespaces (own network, /dev/shm, hostname and IPC, joined by a veth pair whose addresses exist only inside them);
where the kernel allows, the server's monotonic and boot-time clocks run a day ahead of the robot's (a time
namespace: nothing may compare stamps taken on different hosts). The harness itself is checked on the way: each host
has its own hostname and /dev/shm, and the link's addresses exist only inside the hosts.

Checked: the learner receives and acknowledges the robot's transitions and trains to its budget, its weights reach
the actor, the learner's launch ends on its own (status 0), the robot side stops on SIGINT (130), and the drivers'
topics stay on the robot host (on the learner link, the learner subscribes to the actor's transitions only, and no
node of the robot's own graph is there: robot_rl.ros.nodes.link_node carries the learner's topics). Skips (with the reason) where
namespaces cannot be made.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from hosts import hosts, hosts_unavailable, time_namespaces_unavailable, user_shell

from ros_harness import allocate_domain_id

DOMAIN_ID = allocate_domain_id()
SUBNET = "10.233.0"
STEPS = 80
CLOCK_OFFSET_S = 86400  # the server's monotonic clock, ahead of the robot's
DEADLINE_S = 200.0
REPO_ROOT = Path(__file__).resolve().parents[1]

# Lists, from the robot host, who subscribes to each topic of the learner link (the learner's host is seen by
# discovery).
GRAPH_PROBE = r"""
import json, time
from robot_rl.ros.net.env import ensure_ros_environment
ensure_ros_environment(graph="link")  # the learner link of this host's network mode, as the link's network half
import rclpy

rclpy.init()
node = rclpy.create_node("graph_probe")
start = time.monotonic()
subscribers, seen_s = {}, None  # every subscriber ever seen on each topic (a graph view can miss one for a moment)
while time.monotonic() - start < 90.0:
    rclpy.spin_once(node, timeout_sec=0.2)
    for topic, _ in node.get_topic_names_and_types():
        subscribers.setdefault(topic, set()).update(i.node_name for i in node.get_subscriptions_info_by_topic(topic))
    nodes = set().union(*subscribers.values()) if subscribers else set()
    if seen_s is None and {"learner", "link_network"} <= nodes:
        seen_s = time.monotonic() - start
    if seen_s is not None and time.monotonic() - start > seen_s + 3.0:
        break  # three more seconds for the rest of their endpoints
print("RESULT " + json.dumps({"subscribers": {t: sorted(n) for t, n in subscribers.items()}, "seen_s": seen_s}),
      flush=True)
node.destroy_node()
rclpy.shutdown()
"""


def _host_environment(peer_address: str, certs: Path | None = None) -> dict[str, str]:
    """A user's shell on one host: the domain id, the peer named (lan) or the host's certificates (secure)."""
    env = user_shell(ROS_DOMAIN_ID=str(DOMAIN_ID))
    if certs is None:
        env["ROS_STATIC_PEERS"] = peer_address
    else:
        env.update(ROBOT_RL_NETWORK="secure", ROBOT_RL_CERTS=str(certs))
    return env


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _wait(condition, what: str, deadline: float, logs: dict[str, Path], running: dict[str, subprocess.Popen]):
    problem = f"timed out waiting for {what}"
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        ended = {name: p.returncode for name, p in running.items() if p.poll() is not None}
        if ended:
            problem = f"{what}: a launch ended first ({ended})"
            break
        time.sleep(0.5)
    tails = "\n".join(f"--- {name}\n{path.read_text()[-2500:]}" for name, path in logs.items())
    pytest.fail(f"{problem}\n{tails}")


# `lan` between two hosts runs in tests/test_bench_two_hosts.py (bench/two_hosts.py --smoke, with a link outage).
@pytest.mark.parametrize("network", ["secure"])
def test_robot_host_and_server_host_train_one_policy(network):
    reason = hosts_unavailable()
    if reason:
        pytest.skip(f"cannot make simulated hosts: {reason}")
    pytest.importorskip("rclpy", reason="the ROS 2 wheels are not installed")
    work = Path(tempfile.mkdtemp(prefix="two-hosts-training-"))
    logs = {"robot": work / "robot.log", "server": work / "server.log"}
    deadline = time.monotonic() + DEADLINE_S
    launch = [sys.executable, "-m", "robot_rl.apps.cli", "launch", "--grace-s", "5", "launch/sim_train.yaml",
              f"network:={network}",
              f"steps:={STEPS}", "demos:=3", "eval_episodes:=0", "final_validation:=false"]
    clock_problem = time_namespaces_unavailable()
    if clock_problem:
        print(f"both hosts on one monotonic clock: {clock_problem}")
    offsets = {} if clock_problem else {"server": CLOCK_OFFSET_S}
    with hosts(["robot", "server"], subnet=SUBNET, clock_offsets=offsets) as machines, \
            open(logs["robot"], "w") as robot_log, open(logs["server"], "w") as server_log:
        robot, server = machines["robot"], machines["server"]
        certs = {}
        if network == "secure":
            from robot_rl.ros.net.certs import create_certificates  # robot-rl certs ca / request / sign, one disk

            create_certificates(work / "certs", server=server.address, robots=["robot"])
            certs = {"robot": work / "certs" / "robot", "server": work / "certs" / "server"}
        # Each host has its own hostname and /dev/shm (no shared-memory shortcut between them); its address exists in
        # the hosts only.
        assert [h.run(["cat", "/proc/sys/kernel/hostname"]).stdout.strip() for h in (robot, server)] == ["robot",
                                                                                                      "server"]
        marker = f"/dev/shm/two-hosts-{os.getpid()}"
        robot.run(["sh", "-c", f"echo robot > {marker}"])
        assert server.run(["test", "-e", marker], check=False).returncode != 0 and not os.path.exists(marker)
        assert f"{robot.address}/24" in robot.run(["ip", "-o", "addr"]).stdout
        assert SUBNET not in subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
        clocks = [float(h.run([sys.executable, "-c", "import time; print(time.monotonic())"]).stdout)
                  for h in (robot, server)]
        assert clocks[1] - clocks[0] > 0.9 * offsets.get("server", 0), clocks
        server_launch = server.popen([*launch, "side:=server", f"run_dir:={work / 'server'}"],
                                     env=_host_environment(robot.address, certs.get("server")), cwd=REPO_ROOT,
                                     stdout=server_log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        robot_launch = robot.popen([*launch, "side:=robot", f"run_dir:={work / 'robot'}"],
                                   env=_host_environment(server.address, certs.get("robot")), cwd=REPO_ROOT,
                                   stdout=robot_log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        # Started with the launches: the learner must still be up when the probe's discovery finds it (it ends at
        # its budget; a probe started once training was under way could come too late).
        probe = robot.popen([sys.executable, "-c", GRAPH_PROBE],
                            env={**_host_environment(server.address, certs.get("robot")),
                                 "ROBOT_RL_NETWORK": network},  # as the launch's network:= gives its nodes
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            learner_status = work / "server" / "learner_status.json"
            actor_status = work / "robot" / "actor_status.json"

            def training():
                status = _read(learner_status)
                return status if status and status["received"] >= 10 else None

            _wait(training, "the learner on the server host to receive transitions", deadline, logs,
                  {"robot": robot_launch, "server": server_launch})
            probe_output, _ = probe.communicate(timeout=max(1.0, deadline - time.monotonic()))
            assert "RESULT " in probe_output, probe_output[-3000:]
            graph = json.loads(probe_output.split("RESULT ", 1)[1])
            subscribers = graph["subscribers"]
            learner_topics = sorted(t for t, names in subscribers.items() if "learner" in names)
            assert learner_topics == ["/actor/transitions"], graph
            # On the link: the learner and the link's network half only; the robot's nodes are on its own graph.
            named = set().union(*subscribers.values()) - {"_NODE_NAME_UNKNOWN_"}  # a name not yet discovered
            assert named <= {"learner", "link_network"}, graph
            assert "link_network" in subscribers.get("/learner/weights", []), graph

            server_rc = server_launch.wait(timeout=max(1.0, deadline - time.monotonic()))
            assert server_rc == 0, logs["server"].read_text()[-3000:]
            status = _read(learner_status)
            assert status["received"] >= STEPS and status["rejected"] == 0, status
            actor = _wait(lambda: (s := _read(actor_status)) and s["weights_version"] >= 2 and s, "weights at the actor",
                          deadline, logs, {"robot": robot_launch})
            source = actor["source"]
            assert status["acks"][source] >= STEPS - 1, (status["acks"], source)
            assert actor["acked_through"] >= STEPS - 1 - 64, actor  # the last batch's ack may still be on its way
        finally:
            for process in (robot_launch, server_launch):
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGINT)
            robot_rc = robot_launch.wait(timeout=30)
            server_launch.wait(timeout=30)
    robot_text = logs["robot"].read_text()
    assert robot_rc == 130, robot_text[-3000:]
    assert f"network {network}" in robot_text and f"network {network}" in logs["server"].read_text()
    assert "Traceback" not in robot_text, robot_text[-3000:]
