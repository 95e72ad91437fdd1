"""Insiders reach nothing of the robot's own graph: in `lan` and in `secure`, a process on the training server's host
and one on a third host publish to the robot's command, teleop and e-stop topics and call its reset and parameter
services, in the robot host's domain and in the learner link's, while the robot host runs its graph as
`launch/robot_train.yaml side:=robot` does (every node on the host's own graph, robot_rl.ros.nodes.link_node carrying the
learner's topics).

Hosts (tests/hosts.py, joined by a bridge; addresses that exist only inside them, each its own machine id):

- `robot`: the link (`python -m robot_rl.ros.nodes.link_node`, with the environment the launcher gives every process) and a
  stand-in for the robot's nodes, named `sim` like the sim node: it subscribes, best-effort so that it matches any
  publisher, to every command, teleop and e-stop topic, serves `/reset` (std_srvs/Trigger) and has a parameter
  `armed` (false), receives the learner's weights and acknowledgements, and publishes `/actor/transitions`.
- `server`: the strongest insider, with the learner's place: the server's certificate and TLS port in `secure`;
  in `lan` the mode's own profile, on both domains. In `secure` a second process there uses plain Fast DDS (its
  builtin transports, ROS_STATIC_PEERS naming the robot: the standard ROS 2 setup) on both domains.
- `third`: another host of the network; in `secure` with a robot certificate of the same run (`arm2`).

Checked: nothing of the insiders' commands, teleop, e-stop, reset calls or parameter calls reached the stand-in; no
insider's graph shows the stand-in or any of its services; the controls, that show the insiders were on the link:
the server's weights reached the stand-in (through the link) and the stand-in's transitions reached the server; in
`secure` the third host joined the server's graph, yet its weights reached no robot (it is no server); in `lan` the
third host's weights did reach the robot: `lan` is open (docs/two_machines.md). Skips (with the reason) where
namespaces cannot be made, rclpy or (secure) the openssl command is missing.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from hosts import hosts, hosts_unavailable, own_machine_ids, user_shell

from ros_harness import allocate_domain_id

SUBNET = "10.234.0"
ROBOT, SERVER, THIRD = f"{SUBNET}.1", f"{SUBNET}.2", f"{SUBNET}.3"  # hosts() numbers hosts in the order given
REPO_ROOT = Path(__file__).resolve().parents[1]
# The robot's own names an insider would try (robot_rl.ros.qos, robots/sim_panda.yaml's reset service).
ROBOT_TOPICS = {
    "/command/target_pose": "geometry_msgs.msg.PoseStamped", "/command/gripper": "std_msgs.msg.Float64",
    "/teleop/twist": "geometry_msgs.msg.TwistStamped", "/teleop/engaged": "std_msgs.msg.Bool",
    "/teleop/gripper": "std_msgs.msg.Float64", "/teleop/episode": "std_msgs.msg.String",
    "/safety/estop": "std_msgs.msg.Bool",
}

COMMON = r"""
import importlib, json, signal, sys, time
cfg = json.loads(sys.argv[1])
if not cfg.get("plain"):
    from robot_rl.ros.net.env import ensure_ros_environment
    ensure_ros_environment(graph=cfg["graph"])
import rclpy
from rclpy.context import Context
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions
from std_msgs.msg import UInt8MultiArray
from robot_rl.ros.qos import topic_qos

def message_class(path):
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)
"""

# The robot's stand-in (host graph): counts what reaches it until SIGINT, then prints RESULT.
STAND_IN = COMMON + r"""
from rcl_interfaces.msg import SetParametersResult
from std_srvs.srv import Trigger
stop = []
signal.signal(signal.SIGINT, lambda *_: stop.append(1))
rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
node = rclpy.create_node("sim")
node.declare_parameter("armed", False)
got = {topic: 0 for topic in cfg["topics"]}
weights, acks, resets, parameter_calls = {}, 0, [0], [0]
anything = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT, durability=DurabilityPolicy.VOLATILE)
for topic, kind in cfg["topics"].items():
    node.create_subscription(message_class(kind), topic, lambda m, t=topic: got.__setitem__(t, got[t] + 1), anything)

def on_weights(msg):
    sender = bytes(msg.data).decode(errors="replace")
    weights[sender] = weights.get(sender, 0) + 1

def on_parameters(parameters):
    parameter_calls[0] += 1
    return SetParametersResult(successful=True)

node.add_on_set_parameters_callback(on_parameters)
node.create_subscription(UInt8MultiArray, "/learner/weights", on_weights, topic_qos("/learner/weights"))
node.create_subscription(UInt8MultiArray, "/learner/ack", lambda m: None, topic_qos("/learner/ack"))
node.create_service(Trigger, "/reset", lambda request, response: (resets.__setitem__(0, resets[0] + 1), response)[1])
transitions = node.create_publisher(UInt8MultiArray, "/actor/transitions", topic_qos("/actor/transitions"))
print("READY", flush=True)
next_send = time.monotonic()
while not stop:
    rclpy.spin_once(node, timeout_sec=0.05)
    if time.monotonic() >= next_send:
        transitions.publish(UInt8MultiArray(data=b"robot"))
        next_send += 0.2
print("RESULT " + json.dumps({"got": got, "weights": weights, "resets": resets[0], "parameter_calls":
                              parameter_calls[0], "armed": node.get_parameter("armed").value,
                              "nodes": sorted(node.get_node_names())}), flush=True)
"""

# An insider: on each of its domains, publishes to the robot's names (reliable, transient-local: it matches every
# subscriber) and its weights (tagged with its name), calls /reset and /sim/set_parameters, and watches what it
# gets and sees, until it has what it waits for, if anything (then `linger_s` more), or the stop file exists.
INSIDER = COMMON + r"""
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters
from std_srvs.srv import Trigger
from pathlib import Path
latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
armed = Parameter(name="armed", value=ParameterValue(type=ParameterType.PARAMETER_BOOL, bool_value=True))
graphs, received = [], {"transitions": 0}
for domain in cfg["domains"]:
    context = Context()
    rclpy.init(context=context, domain_id=domain, signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node("insider_" + cfg["name"], context=context)
    publishers = {topic: node.create_publisher(message_class(kind), topic, latched)
                  for topic, kind in cfg["topics"].items()}
    weights = node.create_publisher(UInt8MultiArray, "/learner/weights", topic_qos("/learner/weights"))
    acks = node.create_publisher(UInt8MultiArray, "/learner/ack", topic_qos("/learner/ack"))
    node.create_subscription(UInt8MultiArray, "/actor/transitions",
                             lambda m: received.__setitem__("transitions", received["transitions"] + 1),
                             topic_qos("/actor/transitions"))
    clients = {"/reset": node.create_client(Trigger, "/reset"),
               "/sim/set_parameters": node.create_client(SetParameters, "/sim/set_parameters")}
    executor = rclpy.executors.SingleThreadedExecutor(context=context)
    executor.add_node(node)
    graphs.append({"domain": domain, "node": node, "executor": executor, "publishers": publishers,
                   "weights": weights, "acks": acks, "clients": clients, "futures": []})
started = time.monotonic()
seen_nodes, services_ready, sent, answers = set(), set(), 0, 0
complete_at = None
while time.monotonic() - started < cfg["cap_s"] and not Path(cfg["stop_file"]).exists():
    for graph in graphs:
        graph["executor"].spin_once(timeout_sec=0.02)
    if time.monotonic() - started >= sent * 0.2:  # 5 Hz
        sent += 1
        for graph in graphs:
            for topic, publisher in graph["publishers"].items():
                publisher.publish(publisher.msg_type())
            graph["weights"].publish(UInt8MultiArray(data=cfg["name"].encode()))
            graph["acks"].publish(UInt8MultiArray(data=cfg["name"].encode()))
            if sent % 5 == 1:  # once a second: the services, and who is in the graph
                for name, client in graph["clients"].items():
                    if client.service_is_ready():
                        services_ready.add(name)
                    request = client.srv_type.Request()
                    if name.endswith("set_parameters"):
                        request.parameters = [armed]
                    graph["futures"].append(client.call_async(request))
                seen_nodes |= {f"{n} (domain {graph['domain']})" for n in graph["node"].get_node_names()}
    have = received["transitions"] > 0 or not cfg["wait_for_transitions"]
    have = have and all(any(n.startswith(w + " ") for n in seen_nodes) for w in cfg["wait_for_nodes"])
    if have and complete_at is None and (cfg["wait_for_transitions"] or cfg["wait_for_nodes"]):
        complete_at = time.monotonic()
    if complete_at is not None and time.monotonic() - complete_at >= cfg["linger_s"]:
        break
answers = sum(1 for graph in graphs for future in graph["futures"] if future.done())
print("RESULT " + json.dumps({"transitions": received["transitions"], "nodes": sorted(seen_nodes),
                              "services_ready": sorted(services_ready), "answers": answers, "sent": sent,
                              "complete_s": None if complete_at is None else complete_at - started}), flush=True)
for graph in graphs:
    graph["executor"].shutdown()
    graph["node"].destroy_node()
"""


def _shell(domain_id: int, **variables: str) -> dict[str, str]:
    """A user's shell on one host: this test's domain and the variables its mode takes."""
    return user_shell(ROS_DOMAIN_ID=str(domain_id), ROBOT_RL_LINK_MBIT="1000", **variables)


def _plain_fast_dds(domain_id: int, peer: str) -> dict[str, str]:
    """The standard ROS 2 setup of a lab's machine: Fast DDS's own transports, SUBNET, a static peer."""
    from robot_rl.ros.net.env import ros_environment

    env = ros_environment(base=_shell(domain_id, ROS_STATIC_PEERS=peer, ROS_AUTOMATIC_DISCOVERY_RANGE="SUBNET"),
                          graph="link")
    for name in ("FASTDDS_DEFAULT_PROFILES_FILE", "RMW_FASTRTPS_PUBLICATION_MODE"):
        env.pop(name, None)
    return env


def _result(log: Path) -> dict:
    lines = [line for line in log.read_text().splitlines() if line.startswith("RESULT ")]
    assert lines, f"{log.name} printed no RESULT line:\n{log.read_text()[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])


@pytest.mark.parametrize("network", ["lan", "secure"])
def test_insiders_on_the_server_host_and_a_third_host_reach_nothing_of_the_robot_s_graph(network):
    reason = hosts_unavailable()
    if reason:
        pytest.skip(f"cannot make simulated hosts: {reason}")
    pytest.importorskip("rclpy", reason="the ROS 2 wheels are not installed")
    if network == "secure" and shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    from robot_rl.ros.net.env import link_domain_id, ros_environment

    domain = allocate_domain_id()
    link_domain = link_domain_id({"ROS_DOMAIN_ID": str(domain)})
    work = Path(tempfile.mkdtemp(prefix=f"insiders-{network}-"))
    stop_file = work / "stop"
    if network == "secure":
        from robot_rl.ros.net.certs import create_certificates  # robot-rl certs ca / request / sign, on one disk

        create_certificates(work / "certs", server=SERVER, robots=["robot", "arm2"])
        shells = {name: _shell(domain, ROBOT_RL_NETWORK="secure", ROBOT_RL_CERTS=str(work / "certs" / folder))
                  for name, folder in (("robot", "robot"), ("server", "server"), ("third", "arm2"))}
    else:
        shells = {"robot": _shell(domain, ROS_STATIC_PEERS=SERVER), "server": _shell(domain, ROS_STATIC_PEERS=ROBOT),
                  "third": _shell(domain, ROS_STATIC_PEERS=f"{ROBOT};{SERVER}")}
    robot_env = ros_environment(base=shells["robot"])  # what the launcher gives every process of the robot host
    # lan: the mode's own profile reaches any domain; secure: one TLS listener per process, on the link's domain.
    ours = [domain, link_domain] if network == "lan" else [link_domain]
    insider = {"topics": ROBOT_TOPICS, "graph": "link", "stop_file": str(stop_file), "cap_s": 90.0, "linger_s": 2.5,
               "wait_for_transitions": False, "wait_for_nodes": []}
    insiders = {  # name: (host, environment, config)
        "server": ("server", ros_environment(base=shells["server"]),
                   {**insider, "name": "server", "domains": ours, "wait_for_transitions": True,
                    "wait_for_nodes": ["insider_third"]}),
        "third": ("third", ros_environment(base=shells["third"]), {**insider, "name": "third", "domains": ours}),
    }
    if network == "secure":
        insiders["server_plain"] = ("server", _plain_fast_dds(domain, ROBOT),
                                    {**insider, "name": "server_plain", "domains": [domain, link_domain],
                                     "plain": True})
    logs = {name: work / f"{name}.log" for name in ("link", "stand_in", *insiders)}
    with hosts(["robot", "server", "third"], subnet=SUBNET) as machines:
        own_machine_ids(machines)
        processes = {}

        def start(name, host, argv, env):
            with open(logs[name], "w") as log:
                processes[name] = machines[host].popen(argv, env=env, cwd=REPO_ROOT, stdout=log,
                                                       stderr=subprocess.STDOUT)

        start("link", "robot", [sys.executable, "-m", "robot_rl.ros.nodes.link_node"], robot_env)
        start("stand_in", "robot", [sys.executable, "-c", STAND_IN, json.dumps({"topics": ROBOT_TOPICS,
                                                                               "graph": "host"})], robot_env)
        for name, (host, env, config) in insiders.items():
            start(name, host, [sys.executable, "-c", INSIDER, json.dumps(config)], env)
        try:
            processes["server"].wait(timeout=120)
            stop_file.touch()
            for name in insiders:
                processes[name].wait(timeout=30)
            for name in ("stand_in", "link"):
                assert processes[name].poll() is None, logs[name].read_text()[-3000:]
                processes[name].send_signal(signal.SIGINT)
                processes[name].wait(timeout=30)
        finally:
            for process in processes.values():
                if process.poll() is None:
                    process.kill()
    for name, process in processes.items():
        assert process.returncode == 0, f"{name} exited {process.returncode}:\n{logs[name].read_text()[-3000:]}"
    robot = _result(logs["stand_in"])
    results = {name: _result(logs[name]) for name in insiders}
    print(f"{network}: robot stand-in {robot}; insiders " + json.dumps(results))
    # Nothing reached the robot's graph: no command, teleop or e-stop message, no reset, no parameter call.
    assert robot["got"] == {topic: 0 for topic in ROBOT_TOPICS}, robot
    assert robot["resets"] == 0 and robot["parameter_calls"] == 0 and robot["armed"] is False, robot
    assert not [n for n in robot["nodes"] if n.startswith("insider")], robot["nodes"]
    for name, result in results.items():
        assert result["sent"] > 10, result
        assert result["services_ready"] == [] and result["answers"] == 0, (name, result)
        robot_nodes = [n for n in result["nodes"] if not n.startswith(("insider_", "link_network "))]
        assert robot_nodes == [], f"{name} sees {robot_nodes} of the robot's graph"
    # The controls: the insiders were on the link, and the link carried the learner's topics both ways.
    server = results["server"]
    assert server["complete_s"] is not None and server["transitions"] > 0, server
    assert f"link_network (domain {link_domain})" in server["nodes"], server["nodes"]
    assert robot["weights"].get("server", 0) > 0, robot
    if network == "lan":  # open: any host of the network can send the robot weights
        assert robot["weights"].get("third", 0) > 0 and results["third"]["transitions"] > 0, (robot, results)
    else:  # only the server's certificate serves: the third host's weights reach no robot
        assert "third" not in robot["weights"] and results["third"]["transitions"] == 0, (robot, results)
        assert "server_plain" not in robot["weights"], robot
    link_log = logs["link"].read_text()
    assert "relayed" in link_log and "Traceback" not in link_log, link_log[-3000:]
