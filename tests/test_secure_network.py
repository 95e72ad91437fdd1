"""robot_rl's `secure` network mode between simulated hosts (tests/hosts.py: own network, mount, UTS and IPC
namespaces joined by a bridge): a robot host and a server host with certificates of one run (`robot-rl certs`)
exchange 200 kB messages on the project's weights, transitions and command topics, two processes of the robot host
talk to each other, a `local`-mode process of the server host (on the link's domain) gets the weights, a process
started on the robot host once the run is under way (the "latecomer") sees the whole graph by node name and talks
both ways with the robot host's processes and the learner, and intruders on a third host get nothing in and nothing
out:

- `intruder-lan`: the `lan` mode (Fast DDS's UDP transports) with ROS_STATIC_PEERS naming the robot and the server;
- `intruder-ca`: the `secure` mode with certificates of another run's CA (it refuses the server's certificate);
- `intruder-nocert`: TLS to the server's port without any certificate, not verifying the server (Fast DDS's own
  VERIFY_PEER + VERIFY_FAIL_IF_NO_PEER_CERT would have let it in: robot_rl.ros.net.secure sets OPENSSL_CONF);
- `intruder-cert`: the same with another CA's certificate (the server must refuse it); a probe of the server's port
  with this run's *server* certificate as a client is refused too (it is for serverAuth only).

A second test sends 1 MB messages both ways at 20 Hz over one TLS connection (it stalled with small socket buffers).
A third has an impostor take the server's address and port with a valid *robot* certificate of the run: the robot
refuses it in the handshake (one role per certificate: a robot's is for clientAuth only).

Every process here is on the learner link (the secure transport itself), as the learner and robot_rl.ros.nodes.link_node's
network half are; that the robot's own graph stays on its host is tests/test_insiders.py's. Every ROS process runs
inside a host with this test's own ROS_DOMAIN_ID; all addresses exist only inside the namespaces. Each
host gets its own /etc/machine-id (Fast DDS tells hosts apart by it). Skips (with the reason) where namespaces
cannot be made, rclpy or the openssl command is missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from hosts import hosts, hosts_unavailable, own_machine_ids, user_shell

from ros_harness import allocate_domain_id

DOMAIN_ID = allocate_domain_id()
LINK_DOMAIN_ID = DOMAIN_ID + 1  # robot_rl.ros.net.env.link_domain_id: the learner link's
SUBNET = "10.232.0"
ROBOT, SERVER, INTRUDER = f"{SUBNET}.1", f"{SUBNET}.2", f"{SUBNET}.3"  # hosts() numbers hosts in the order given
PORT = 7650
PAYLOAD_BYTES = 200_000
COUNT = 30  # messages each legitimate publisher sends once matched (at least: most go on till told), at 10 Hz
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WEIGHTS, TRANSITIONS, COMMAND = "/learner/weights", "/actor/transitions", "/command/target_pose"
TRUSTED = ("learner", "actor", "driver", "evaluator", "latecomer")
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # Fast DDS colours its log lines

# One process: publishes COUNT tagged messages per topic (after `wait_for` subscribers, or at once for an intruder,
# which keeps publishing until its deadline; with `stop_file`, it keeps publishing until that file exists), records
# who sent what it receives (printing "GOT topic sender" once it has COUNT from `expect`ed senders), then prints one
# RESULT line. With `graph`, it also records, twice a second, which nodes its graph shows subscribing to and
# publishing on those topics, and when it first showed everything in `graph` (the ros_discovery_info names too).
NODE = r"""
import faulthandler, json, os, sys, time
from robot_rl.ros.net.env import ensure_ros_environment, network_summary

ensure_ros_environment(graph="link")  # the learner link: robot_rl.ros.nodes.link_node's network half, the learner
print("NETWORK " + network_summary(graph="link"), flush=True)
import rclpy
from rclpy.duration import Duration
from std_msgs.msg import UInt8MultiArray
from robot_rl.ros.node_util import publish_refused
from robot_rl.ros.qos import topic_qos

cfg = json.loads(sys.argv[1])
faulthandler.dump_traceback_later(cfg["deadline_s"] + 10, exit=True)  # a hang shows where it is, on stderr
rclpy.init()
node = rclpy.create_node(cfg["name"].replace("-", "_"))
started = time.monotonic()
received = {}  # topic -> sender -> sequence numbers
sizes, first = set(), {}
expected = {t: s if isinstance(s, list) else [s] for t, s in cfg["expect"].items()}  # topic -> senders
announced = set()
graph = {"subscribers": {}, "publishers": {}, "nodes": [], "complete_s": None}
next_graph = started

def subscriber(topic):
    def on_message(msg):
        data = bytes(msg.data)
        sender = data[:16].rstrip(b"\0").decode(errors="replace")
        if sender != cfg["name"]:
            received.setdefault(topic, {}).setdefault(sender, set()).add(int.from_bytes(data[16:20], "little"))
            sizes.add(len(data))
            first.setdefault(topic, time.monotonic() - started)
    return on_message

# Histories as deep as the count a reader waits for: a reliable writer keeps every message of a sender that stops
# after `count` until each reader has it, however far behind a loaded machine keeps that reader.
depth = max(10, cfg["count"])
subscriptions = [node.create_subscription(UInt8MultiArray, t, subscriber(t), topic_qos(t, depth=depth))
                 for t in cfg["subscribe"]]
publishers = {t: node.create_publisher(UInt8MultiArray, t, topic_qos(t, depth=depth)) for t in cfg["publish"]}
print("READY", flush=True)
payload = bytearray(cfg["size"])
payload[:16] = cfg["name"].encode().ljust(16, b"\0")
sent, matched, next_send = {t: 0 for t in publishers}, {}, time.monotonic()
most_subscribers = {t: 0 for t in publishers}
deadline = started + cfg["deadline_s"]

def got(topic, sender):
    return len(received.get(topic, {}).get(sender, ())) >= cfg["count"]

def look_at_graph():
    for kind, info in (("subscribers", node.get_subscriptions_info_by_topic),
                       ("publishers", node.get_publishers_info_by_topic)):
        for topic in {t for names in cfg["graph"].values() for t in names}:
            graph[kind][topic] = sorted(set(graph[kind].get(topic, ())) | {i.node_name for i in info(topic)})
    graph["nodes"] = sorted(set(graph["nodes"]) | set(node.get_node_names()))
    if graph["complete_s"] is None and all(set(names) <= set(graph[kind].get(topic, ()))
                                           for kind in ("subscribers", "publishers")
                                           for topic, names in cfg["graph"].get(kind, {}).items()):
        graph["complete_s"] = time.monotonic() - started

def done():
    if cfg.get("graph") and graph["complete_s"] is None:
        return False
    if cfg.get("stop_file"):
        if not os.path.exists(cfg["stop_file"]):
            return False
    elif not expected or (any(n < cfg["count"] for n in sent.values()) and not cfg["intruder"]):
        return False
    return all(got(t, s) for t, senders in expected.items() for s in senders)

while time.monotonic() < deadline and not done():
    rclpy.spin_once(node, timeout_sec=0.01)
    for topic, senders in expected.items():
        for sender in senders:
            if (topic, sender) not in announced and got(topic, sender):
                announced.add((topic, sender))
                print(f"GOT {topic} {sender}", flush=True)
    if cfg.get("graph") and time.monotonic() >= next_graph:
        next_graph += 0.5
        look_at_graph()
    if time.monotonic() < next_send:
        continue
    next_send += 1.0 / cfg["rate_hz"]
    for topic, publisher in publishers.items():
        wanted, count = cfg["wait_for"].get(topic, 0), publisher.get_subscription_count()
        most_subscribers[topic] = max(most_subscribers[topic], count)
        if count >= max(wanted, 1):
            matched.setdefault(topic, time.monotonic() - started)
        if cfg["intruder"] or (topic in matched and (cfg.get("stop_file") or sent[topic] < cfg["count"])):
            payload[16:20] = sent[topic].to_bytes(4, "little")
            if publish_refused(publisher, UInt8MultiArray(data=bytes(payload))):  # a full TLS channel: retried
                print("publish refused", file=sys.stderr, flush=True)
                continue
            sent[topic] += 1
for publisher in publishers.values():  # every reader still matched has what it sent before it goes (a liveness bound)
    publisher.wait_for_all_acked(Duration(seconds=30))
for _ in range(100):  # reliable resends, acknowledgements
    rclpy.spin_once(node, timeout_sec=0.01)
print("RESULT " + json.dumps({
    "received": {t: {s: sorted(q) for s, q in senders.items()} for t, senders in received.items()},
    "sizes": sorted(sizes), "first_s": first, "matched_s": matched, "sent": sent,
    "subscribers": most_subscribers, "graph": graph,
    "nodes": sorted(node.get_node_names()), "elapsed_s": time.monotonic() - started}), flush=True)
node.destroy_node()
rclpy.shutdown()
"""


# Opens TLS connections to SERVER PORT as a client that trusts any server, with no certificate or with the one in a
# certificate folder; prints, per attempt, "accepted" (still open after 1 s) or the error that ended it.
PROBE = r"""
import json, socket, ssl, sys

server, port, attempts = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
answers = {}
for name, folder in attempts.items():
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    if folder:
        context.load_cert_chain(folder + "/cert.pem", folder + "/key.pem")
    try:
        with socket.create_connection((server, port), timeout=5) as raw, context.wrap_socket(raw) as tls:
            tls.settimeout(1.0)
            try:  # TLS 1.3: a refused client certificate shows as an alert on the first read
                answers[name] = "closed" if tls.recv(1) == b"" else "accepted"
            except (socket.timeout, TimeoutError):
                answers[name] = "accepted"
    except (ssl.SSLError, OSError) as error:
        answers[name] = f"{type(error).__name__}: {getattr(error, 'reason', None) or error}"
print(json.dumps(answers))
"""


# Listens on PORT as a TLS server with the certificate of a folder (asking for no client certificate); prints
# "LISTENING", then one line per connection: "accepted" or the error that ended the handshake.
IMPOSTOR = r"""
import socket, ssl, sys

folder, port = sys.argv[1], int(sys.argv[2])
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(folder + "/cert.pem", folder + "/key.pem")
with socket.create_server(("", port)) as listener:
    print("LISTENING", flush=True)
    while True:
        raw, _ = listener.accept()
        raw.settimeout(10)
        try:
            with context.wrap_socket(raw, server_side=True):
                print("accepted", flush=True)
        except (ssl.SSLError, OSError) as error:
            print(f"{type(error).__name__}: {getattr(error, 'reason', None) or error}", flush=True)
"""


def _base_environment() -> dict[str, str]:
    """This test process's environment without any ROS network choice (each host's process gets its own)."""
    return user_shell(ROBOT_RL_LINK_MBIT="10000")  # an unshaped link: megabyte messages at 20 Hz still fit the pace


def _environment(**variables: str) -> dict[str, str]:
    from robot_rl.ros.net.env import ros_environment

    return ros_environment(base={**_base_environment(), "ROS_DOMAIN_ID": str(DOMAIN_ID), **variables})


def _result(name: str, output: str, errors: str) -> dict:
    lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
    assert lines, f"{name} printed no RESULT line; stderr: {errors[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])


class _Graph:
    """The NODE processes of one test, each in its host, their output in log files (no pipe can fill up)."""

    def __init__(self, machines, roles: dict, logs):
        self.machines, self.roles, self.logs, self.processes = machines, roles, logs, {}
        logs.mkdir(exist_ok=True)

    def start(self, name: str, deadline_s: float) -> None:
        host, env, config = self.roles[name]
        config = {"name": name, "count": COUNT, "size": PAYLOAD_BYTES, "rate_hz": 10.0, "deadline_s": deadline_s,
                  "intruder": name.startswith("intruder"), **config}
        with open(self.logs / f"{name}.out", "w") as out, open(self.logs / f"{name}.err", "w") as err:
            self.processes[name] = self.machines[host].popen(
                [sys.executable, "-c", NODE, json.dumps(config)], env=env, cwd=REPO_ROOT, stdout=out, stderr=err)

    def start_first(self, name: str, deadline_s: float) -> None:
        """Start `name` and wait until its node exists (for the server: its port is open)."""
        self.start(name, deadline_s)
        while "READY" not in (self.logs / f"{name}.out").read_text():
            assert self.processes[name].poll() is None, (self.logs / f"{name}.err").read_text()[-3000:]
            time.sleep(0.05)

    def wait_for_line(self, name: str, line: str, timeout: float) -> None:
        """Wait until `name` printed `line` (it must not end first)."""
        deadline = time.monotonic() + timeout
        while line not in (self.logs / f"{name}.out").read_text().splitlines():
            assert self.processes[name].poll() is None, f"{name} ended: {(self.logs / f'{name}.err').read_text()}"
            assert time.monotonic() < deadline, f"{name} did not print {line!r} in {timeout} s"
            time.sleep(0.1)

    def results(self, timeout: float = 40) -> dict[str, tuple[dict, str, str]]:
        """name -> (its RESULT, stdout, stderr) once every process has ended (each must exit 0)."""
        outputs = {}
        for name, process in self.processes.items():
            process.wait(timeout=timeout)
            out, err = (self.logs / f"{name}.out").read_text(), (self.logs / f"{name}.err").read_text()
            assert process.returncode == 0, f"{name} failed ({process.returncode}): {err[-3000:]}"
            outputs[name] = (_result(name, out, err), out, err)
        return outputs


def _hostile_profile(rogue_folder, path, with_certificate: bool):
    """A client profile to the server's port that verifies nothing, with another CA's certificate or none."""
    from robot_rl.ros.net import secure

    text = secure.fastdds_profile(secure.read_host_folder(rogue_folder))
    text = re.sub(r"<verify_mode>.*?</verify_mode>", "<verify_mode><verify>VERIFY_NONE</verify></verify_mode>",
                  text, flags=re.S)
    if not with_certificate:
        text = re.sub(r"\s*<(private_key_file|cert_chain_file)>.*?</\1>", "", text)
    path.write_text(text.replace(secure.GENERATED_MARK, "hand-made for an intruder"))
    return path


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    """This run's folders (server, robots `robot` and `robot2`) and another run's (intruder), as `robot-rl certs ca /
    request / sign` make them (robot_rl.ros.net.certs.create_certificates: the three steps on one disk)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    from robot_rl.ros.net.certs import create_certificates

    root = tmp_path_factory.mktemp("secure")
    run = create_certificates(root / "run", server=SERVER, robots=["robot", "robot2"], port=PORT)
    rogue = create_certificates(root / "rogue", server=SERVER, robots=["intruder"], port=PORT)
    return {"server": run.hosts[0].folder, "robot": run.hosts[1].folder, "robot2": run.hosts[2].folder,
            "rogue": rogue.hosts[1].folder, "root": root}


def _own_addresses() -> str:
    return subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True).stdout


def test_secure_mode_connects_the_run_s_hosts_and_shuts_intruders_out(certificates):
    reason = hosts_unavailable()
    if reason:
        pytest.skip(f"cannot make simulated hosts: {reason}")
    pytest.importorskip("rclpy", reason="the ROS 2 wheels are not installed")
    assert SUBNET not in _own_addresses(), "the test subnet is already in use in the test's own namespace"
    started = time.monotonic()
    secure_robot = _environment(ROBOT_RL_NETWORK="secure", ROBOT_RL_CERTS=str(certificates["robot"]))
    secure_server = _environment(ROBOT_RL_NETWORK="secure", ROBOT_RL_CERTS=str(certificates["server"]))
    root = certificates["root"]
    intruders = {
        "intruder-lan": _environment(ROBOT_RL_NETWORK="lan", ROS_STATIC_PEERS=f"{ROBOT};{SERVER}"),
        "intruder-ca": _environment(ROBOT_RL_NETWORK="secure", ROBOT_RL_CERTS=str(certificates["rogue"])),
        "intruder-nocert": _environment(
            ROBOT_RL_NETWORK="lan", ROS_AUTOMATIC_DISCOVERY_RANGE="SYSTEM_DEFAULT",
            RMW_FASTRTPS_PUBLICATION_MODE="AUTO",
            FASTDDS_DEFAULT_PROFILES_FILE=str(_hostile_profile(certificates["rogue"], root / "nocert.xml", False))),
        "intruder-cert": _environment(
            ROBOT_RL_NETWORK="lan", ROS_AUTOMATIC_DISCOVERY_RANGE="SYSTEM_DEFAULT",
            RMW_FASTRTPS_PUBLICATION_MODE="AUTO",
            FASTDDS_DEFAULT_PROFILES_FILE=str(_hostile_profile(certificates["rogue"], root / "cert.xml", True))),
    }
    everything = [WEIGHTS, TRANSITIONS, COMMAND]
    # Every process but the latecomer publishes (once matched) until the test creates `stop`.
    stop = root / "logs" / "stop"
    until_stop = {"stop_file": str(stop)}
    roles = {  # name: (host, environment, config)
        "learner": ("server", secure_server, {"publish": [WEIGHTS], "subscribe": [TRANSITIONS],
                                              "wait_for": {WEIGHTS: 3}, "expect": {TRANSITIONS: ["actor", "latecomer"]},
                                              **until_stop}),
        # Another process of the server host, in the local mode on the link's domain: it reaches the learner through
        # shared memory (as the link's network half does on the learner's host).
        "evaluator": ("server", _environment(ROBOT_RL_NETWORK="local", ROS_DOMAIN_ID=str(LINK_DOMAIN_ID)), {
            "publish": [], "subscribe": [WEIGHTS], "wait_for": {}, "expect": {WEIGHTS: "learner"}, **until_stop}),
        "actor": ("robot", secure_robot, {"publish": [TRANSITIONS, COMMAND], "subscribe": [WEIGHTS],
                                          "wait_for": {TRANSITIONS: 1, COMMAND: 1}, "expect": {WEIGHTS: "learner"},
                                          **until_stop}),
        "driver": ("robot", secure_robot, {"publish": [], "subscribe": [COMMAND, WEIGHTS], "wait_for": {},
                                           "expect": {COMMAND: ["actor", "latecomer"], WEIGHTS: "learner"},
                                           **until_stop}),
        # A process started on the robot host once the run is under way (a recorder, a second teleop, `robot-rl
        # doctor`): it must see the whole graph (with the nodes' names) and talk both ways with the robot host's
        # processes and the learner. COMMAND: its own subscription counts too.
        "latecomer": ("robot", secure_robot, {
            "publish": [TRANSITIONS, COMMAND], "subscribe": [WEIGHTS, COMMAND],
            "wait_for": {TRANSITIONS: 1, COMMAND: 2},
            "expect": {WEIGHTS: "learner", COMMAND: "actor"},
            "graph": {"subscribers": {TRANSITIONS: ["learner"], WEIGHTS: ["actor", "driver", "latecomer"],
                                      COMMAND: ["driver", "latecomer"]},
                      "publishers": {WEIGHTS: ["learner"], TRANSITIONS: ["actor", "latecomer"],
                                     COMMAND: ["actor", "latecomer"]}}}),
        **{name: ("intruder", env, {"publish": everything, "subscribe": everything, "wait_for": {}, "expect": {},
                                    **until_stop})
           for name, env in intruders.items()},
    }
    with hosts(["robot", "server", "intruder"], subnet=SUBNET) as machines:
        own_machine_ids(machines)
        graph = _Graph(machines, roles, root / "logs")
        # Deadlines are failure detectors (the run is under way in about 10 s on two idle cores; secure start-ups
        # of six processes beside a loaded machine's other work took over 30 s).
        graph.start_first("learner", deadline_s=180)
        for name in ("evaluator", "actor", "driver", *intruders):
            graph.start(name, deadline_s=180)
        # What the learner's TLS port answers, seen from the intruder's host with Python's ssl module.
        probes = machines["intruder"].run(
            [sys.executable, "-c", PROBE, SERVER, str(PORT), json.dumps({
                "no certificate": None, "another CA's certificate": str(certificates["rogue"]),
                "this run's robot certificate": str(certificates["robot"]),
                "this run's server certificate": str(certificates["server"])})], env=_base_environment(), timeout=30)
        answers = json.loads(probes.stdout)
        # The run is under way (both ways across the hosts, and within the robot host): the latecomer joins.
        for name, line in (("learner", f"GOT {TRANSITIONS} actor"), ("actor", f"GOT {WEIGHTS} learner"),
                           ("driver", f"GOT {COMMAND} actor")):
            graph.wait_for_line(name, line, timeout=90)
        latecomer_started = time.monotonic() - started
        graph.start("latecomer", deadline_s=60)
        graph.processes["latecomer"].wait(timeout=90)
        stop.touch()
        outputs = graph.results()
        assert SUBNET not in _own_addresses()
    assert SUBNET not in _own_addresses()

    results = {name: result for name, (result, _, _) in outputs.items()}
    for name in ("learner", "actor", "driver", "latecomer"):
        network = next(line for line in outputs[name][1].splitlines() if line.startswith("NETWORK "))
        role = "server" if name == "learner" else "robot"
        assert f"network secure: TLS as {role} {role}, server {SERVER}:{PORT}" in network, network
    # Robot and server, both ways; two processes of the robot host; whole 200 kB messages.
    assert "network local: " in outputs["evaluator"][1]
    for receiver, topic, sender in (("learner", TRANSITIONS, "actor"), ("actor", WEIGHTS, "learner"),
                                    ("driver", COMMAND, "actor"), ("driver", WEIGHTS, "learner"),
                                    ("evaluator", WEIGHTS, "learner"), ("learner", TRANSITIONS, "latecomer"),
                                    ("driver", COMMAND, "latecomer"), ("latecomer", WEIGHTS, "learner"),
                                    ("latecomer", COMMAND, "actor")):
        got = results[receiver]["received"].get(topic, {}).get(sender, [])
        assert len(got) >= COUNT, f"{receiver} got {len(got)}/{COUNT} {topic} from {sender}: {results}"
        assert results[receiver]["sizes"] == [PAYLOAD_BYTES]
    # Nothing of the intruders reached the run's processes: no message, no node in their graph, no extra matches.
    for name in TRUSTED:
        senders = {s for topic in results[name]["received"].values() for s in topic}
        assert senders <= set(TRUSTED), f"{name} received from {senders - set(TRUSTED)}"
        nodes = results[name]["nodes"]
        assert not [n for n in nodes if n.startswith("intruder")], f"{name} sees intruder nodes {nodes}"
    # WEIGHTS: actor, driver, evaluator, latecomer; COMMAND: driver, latecomer.
    assert results["learner"]["subscribers"] == {WEIGHTS: 4}, results["learner"]
    assert results["actor"]["subscribers"] == {TRANSITIONS: 1, COMMAND: 2}, results["actor"]
    assert results["latecomer"]["subscribers"] == {TRANSITIONS: 1, COMMAND: 2}, results["latecomer"]
    # The latecomer's graph: every endpoint of the robot host and the learner, by node name (ros_discovery_info
    # reached it from each), and no other node (the evaluator talks to the learner's host only).
    latecomer = results["latecomer"]
    assert latecomer["graph"]["complete_s"] is not None, latecomer["graph"]
    assert latecomer["graph"]["nodes"] == ["actor", "driver", "latecomer", "learner"], latecomer["graph"]
    # Nothing of the run's processes reached the intruders, though they published all along.
    for name in intruders:
        result = results[name]
        leaked = {t: sorted(set(s) & set(TRUSTED)) for t, s in result["received"].items() if set(s) & set(TRUSTED)}
        assert not leaked, f"{name} received {leaked}"
        assert not [n for n in result["nodes"] if n in TRUSTED], f"{name} sees {result['nodes']}"
        assert all(n > 0 for n in result["sent"].values()), result
    # The server refuses a client without a certificate of this run's CA: the client gets TLS alerts saying so.
    print("the learner's port answers: " + "; ".join(f"{k}: {v}" for k, v in answers.items()))
    assert "CERTIFICATE_REQUIRED" in answers["no certificate"], answers
    assert "UNKNOWN_CA" in answers["another CA's certificate"], answers
    assert answers["this run's robot certificate"] == "accepted", answers
    assert "UNSUPPORTED_CERTIFICATE" in answers["this run's server certificate"], answers  # serverAuth only
    # A client refused by its own verification logs it (Fast DDS logs nothing on the accepting side).
    refused = outputs["intruder-ca"][2]
    assert "Handshake failed: certificate verify failed" in refused, refused[-3000:]
    actor = results["actor"]
    print(f"actor matched transitions after {actor['matched_s'][TRANSITIONS]:.2f} s, first weights after "
          f"{actor['first_s'][WEIGHTS]:.2f} s (from its node's creation); till the end, learner got "
          f"{len(results['learner']['received'][TRANSITIONS]['actor'])} transitions, actor "
          f"{len(actor['received'][WEIGHTS]['learner'])} weights, driver "
          f"{len(results['driver']['received'][COMMAND]['actor'])} commands")
    print(f"latecomer started {latecomer_started:.1f} s into the run; from its node's creation: whole graph after "
          f"{latecomer['graph']['complete_s']:.2f} s, first weights after {latecomer['first_s'][WEIGHTS]:.2f} s, "
          f"first commands after {latecomer['first_s'][COMMAND]:.2f} s; transitions matched after "
          f"{latecomer['matched_s'][TRANSITIONS]:.2f} s")
    for name in ("learner", *intruders):
        lines = sorted({_COLOUR.sub("", line) for line in outputs[name][2].splitlines() if "Error" in line})
        print(f"{name} stderr: {len(lines)} distinct Fast DDS error lines"
              + "".join(f"\n  {line}" for line in lines[:4]))
    print(f"secure network test took {time.monotonic() - started:.1f} s")


def test_secure_mode_carries_megabyte_messages_both_ways_at_once(certificates):
    """1 MB weights down and 1 MB transitions up at 20 Hz each, on one TLS connection. Fast DDS's TLS channel writes
    and reads on one thread: with the kernel's usual 208 KiB socket buffers both ends ended blocked in a write, for
    good (measured: every try); robot_rl.ros.net.secure sizes the buffers to what the kernel allows (4 MiB here)."""
    reason = hosts_unavailable()
    if reason:
        pytest.skip(f"cannot make simulated hosts: {reason}")
    pytest.importorskip("rclpy", reason="the ROS 2 wheels are not installed")
    megabyte, count = 1_000_000, 60
    roles = {
        "learner": ("server", _environment(ROBOT_RL_NETWORK="secure", ROBOT_RL_CERTS=str(certificates["server"])),
                    {"publish": [WEIGHTS], "subscribe": [TRANSITIONS], "wait_for": {WEIGHTS: 1},
                     "expect": {TRANSITIONS: "actor"}, "size": megabyte, "count": count, "rate_hz": 20.0}),
        "actor": ("robot", _environment(ROBOT_RL_NETWORK="secure", ROBOT_RL_CERTS=str(certificates["robot"])),
                  {"publish": [TRANSITIONS], "subscribe": [WEIGHTS], "wait_for": {TRANSITIONS: 1},
                   "expect": {WEIGHTS: "learner"}, "size": megabyte, "count": count, "rate_hz": 20.0}),
    }
    started = time.monotonic()
    with hosts(["robot", "server"], subnet=SUBNET) as machines:
        own_machine_ids(machines)
        graph = _Graph(machines, roles, certificates["root"] / "logs-megabyte")
        graph.start_first("learner", deadline_s=15)
        graph.start("actor", deadline_s=15)
        results = {name: result for name, (result, _, _) in graph.results(timeout=30).items()}
    for receiver, topic, sender in (("learner", TRANSITIONS, "actor"), ("actor", WEIGHTS, "learner")):
        got = results[receiver]["received"].get(topic, {}).get(sender, [])
        assert len(got) == count, f"{receiver} got {len(got)}/{count} {topic}: {results[receiver]}"
        assert results[receiver]["sizes"] == [megabyte]
    print(f"1 MB both ways at 20 Hz: learner got {len(results['learner']['received'][TRANSITIONS]['actor'])}/"
          f"{count}, actor {len(results['actor']['received'][WEIGHTS]['learner'])}/{count}; took "
          f"{time.monotonic() - started:.1f} s")


def test_a_robot_certificate_of_the_run_cannot_pose_as_the_server(certificates):
    """An impostor holding robot2's valid certificate takes the server's address and listens on its port as a TLS
    server: the robot's process refuses it in the handshake (its OpenSSL wants serverAuth of a server; a robot's
    certificate is for clientAuth only), and the impostor gets the alert for an unsuitable certificate."""
    reason = hosts_unavailable()
    if reason:
        pytest.skip(f"cannot make simulated hosts: {reason}")
    pytest.importorskip("rclpy", reason="the ROS 2 wheels are not installed")
    started = time.monotonic()
    logs = certificates["root"] / "logs-impostor"
    roles = {"actor": ("robot", _environment(ROBOT_RL_NETWORK="secure", ROBOT_RL_CERTS=str(certificates["robot"])),
                       {"publish": [TRANSITIONS], "subscribe": [WEIGHTS], "wait_for": {TRANSITIONS: 1},
                        "expect": {WEIGHTS: "learner"}})}
    with hosts(["robot", "server"], subnet=SUBNET) as machines:  # the second host has the server's address
        own_machine_ids(machines)
        graph = _Graph(machines, roles, logs)
        answers_file = logs / "impostor.out"
        with open(answers_file, "w") as out, open(logs / "impostor.err", "w") as err:
            impostor = machines["server"].popen([sys.executable, "-c", IMPOSTOR, str(certificates["robot2"]),
                                                 str(PORT)], env=_base_environment(), stdout=out, stderr=err)
        deadline = time.monotonic() + 20
        while "LISTENING" not in answers_file.read_text():
            assert impostor.poll() is None and time.monotonic() < deadline, (logs / "impostor.err").read_text()
            time.sleep(0.05)
        graph.start("actor", deadline_s=120)  # a failure detector: the test ends it once it has refused
        deadline = time.monotonic() + 90
        while True:  # the actor's connection attempts: the impostor's answers, the actor's log
            answers = answers_file.read_text().splitlines()[1:]
            refused = "Handshake failed" in (logs / "actor.err").read_text()
            if answers and refused:
                break
            assert graph.processes["actor"].poll() is None, (logs / "actor.err").read_text()[-3000:]
            assert time.monotonic() < deadline, f"impostor: {answers}; actor refused: {refused}"
            time.sleep(0.2)
        network = next(line for line in (logs / "actor.out").read_text().splitlines() if line.startswith("NETWORK"))
    assert f"network secure: TLS as robot robot, server {SERVER}:{PORT}" in network, network
    assert "Handshake failed: certificate verify failed" in _COLOUR.sub("", (logs / "actor.err").read_text())
    assert "accepted" not in answers and all("UNSUPPORTED_CERTIFICATE" in answer for answer in answers), answers
    print(f"the impostor's answers: {answers}; took {time.monotonic() - started:.1f} s")
