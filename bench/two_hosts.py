"""Training across hosts: what crosses the link, how late the control loop ticks, what is lost. Prints ONE JSON line.

Each run trains PickCube in the sim mirror at the robot's rate (`launch/sim_train.yaml mode:=realtime`) for
`--seconds`: the robot side(s) (sim node, actor, scripted human) on robot host(s), the learner on a server host, as
docs/two_machines.md runs them; hosts are tests/hosts.py's namespaces (own network, /dev/shm, hostname and
IPC; two joined by a veth pair, three by a bridge), every host's outgoing traffic shaped to `rate_mbit` (tbf).
`local` is the single-host baseline (every node on one host, nothing on a link), measured in the same invocation.

Per run: ``transitions_per_s`` (the learner's intake), ``link_bytes_per_transition`` (transitions messages' bytes at
the learner, re-sends included, per transition it took), ``link_bytes_per_s`` (the server's interface, both ways, split
into transitions / weights / acks by the nodes' own byte counters, the rest being discovery and RTPS overhead),
``weights_per_s`` and ``weights_bytes`` (a message), ``weights_latency_ms`` (learner publishes a version -> the actor
first acts with it, p50 / p99; the hosts share one wall clock, so the bench may compare their stamps: the nodes never
do), ``tick_late_ms`` (the actor's control tick lateness over its run, p50 / p99 / max, and the ticks missed in the
measured window), ``link_use`` (the busier direction of the server's link, a fraction of its rate), ``acked_lost``
(transitions an actor let go as acknowledged that the learner does not hold) and ``unacked_at_end`` (sent, never
acknowledged, once the robots have stopped and flushed). Secure runs add a stranger on a third host with another
run's certificates (``--no-intruder``: none), which subscribes to every project topic and publishes weights,
transitions and pose commands all along: ``intruder_received`` (messages of the run it got) and
``intruder_accepted`` (its transitions the learner took plus its weights an actor used).

    python bench/two_hosts.py                                   # local, lan, secure; 100 and 20 Mbit/s; state, pixels
    python bench/two_hosts.py --modes lan --rates 20 --robots 2 # two robot hosts, one server
    python bench/two_hosts.py --modes lan --rates 100 --obs-modes state --kill-server-s 10   # kill -9 the server
    python bench/two_hosts.py --modes lan --rates 20 --obs-modes state --robots 2 --robot-dies  # a robot host dies
    python bench/two_hosts.py --smoke                           # one short lan run at 20 Mbit/s (tests run this)

Fault drills (each a JSON section of its run, with the unix times it spans): ``link_down`` (the first robot host's
link down for ``--link-down-s``), ``kill_server`` (a list: every server-host process killed with -9, the server side
started again ``--kill-server-s`` later on the same run folder; ``--kill-server-times`` in a row), ``kill_link``
(``--kill-link``: the first robot host's link node killed with -9: when a new one ran, when the actor had
acknowledgements again, its gap without them), ``robot_dies`` (the first of two or more robot hosts loses its link
and every process mid-episode); ``--learner-lost hold`` runs them with a robot file whose actor holds while the
learner is away.

Every ROS process runs inside the namespaces (ROS_DOMAIN_ID 96); nothing reaches a real interface.

Stopped by SIGINT or SIGTERM, it stops what it started as at the end of a run (each launcher SIGINT, then the hosts
with everything still in them) and exits 130 / 143; should it die by SIGKILL, the kernel ends the hosts and their
processes (tests/hosts.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tyro

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # tests/hosts.py: the namespaced hosts harness

from hosts import Host, hosts, hosts_unavailable  # noqa: E402

DOMAIN_ID = 96
SUBNET = "10.236.0"
INTRUDER_VERSION = 10**9  # the weights version an intruder's re-sent weights carry (an actor that used it took them)

# A stranger on a third host (secure runs): the secure mode with certificates of another run's CA. It subscribes to
# every project topic, and publishes weights (a real message it got, re-versioned; else junk), transitions (ones it
# got, under its own actor id; else junk) and pose commands far outside the workspace, until its time is up; then
# prints one RESULT line with what it received and sent.
INTRUDER = r"""
import dataclasses, importlib, json, sys, time
from robot_rl.ros.net.env import ensure_ros_environment
ensure_ros_environment(graph="link")  # a stranger to the learner link
import rclpy
from geometry_msgs.msg import PoseStamped
from std_msgs.msg import UInt8MultiArray
from robot_rl.ros import qos
from robot_rl.wire.protocol import make_source
from robot_rl.wire.transitions import decode_transitions, encode_transitions
from robot_rl.wire.weights import decode_weights, reversion_weights

seconds, version = float(sys.argv[1]), int(sys.argv[2])
rclpy.init()
node = rclpy.create_node("intruder")
received, last = {}, {}
source, sent = make_source("intruder"), 0
junk = bytes(range(256)) * 64

def own(topic, msg):
    # What this process published comes back to its own subscriptions: not received from the run.
    if isinstance(msg, PoseStamped):
        return msg.pose.position.x == 5.0
    if not isinstance(msg, UInt8MultiArray):
        return False
    data = bytes(msg.data)
    try:
        if topic == qos.LEARNER_WEIGHTS:
            return data == junk or decode_weights(data).version >= version
        if topic == qos.ACTOR_TRANSITIONS:
            return data == junk or decode_transitions(data)[0] == source
    except Exception:
        return False
    return False

def keep(topic):
    def on_message(msg):
        if own(topic, msg):
            return
        received[topic] = received.get(topic, 0) + 1
        if isinstance(msg, UInt8MultiArray):
            last[topic] = bytes(msg.data)
    return on_message

def message_class(name):
    package, _, kind = name.split("/")
    return getattr(importlib.import_module(f"{package}.msg"), kind)

subscriptions = [node.create_subscription(message_class(spec.message_type), topic, keep(topic), qos.topic_qos(topic))
                 for topic, spec in qos.TOPICS.items()]
weights = node.create_publisher(UInt8MultiArray, qos.LEARNER_WEIGHTS, qos.topic_qos(qos.LEARNER_WEIGHTS))
transitions = node.create_publisher(UInt8MultiArray, qos.ACTOR_TRANSITIONS, qos.topic_qos(qos.ACTOR_TRANSITIONS))
commands = node.create_publisher(PoseStamped, qos.COMMAND_TARGET_POSE, qos.topic_qos(qos.COMMAND_TARGET_POSE))
deadline, next_send = time.monotonic() + seconds, time.monotonic()
while time.monotonic() < deadline:
    rclpy.spin_once(node, timeout_sec=0.02)
    if time.monotonic() < next_send:
        continue
    next_send += 0.2
    try:
        payload = reversion_weights(last[qos.LEARNER_WEIGHTS], version + sent)
    except Exception:
        payload = junk
    weights.publish(UInt8MultiArray(data=payload))
    try:
        _, items = decode_transitions(last[qos.ACTOR_TRANSITIONS])
        payload = encode_transitions(source, [dataclasses.replace(item, seq=64 * sent + i)
                                              for i, item in enumerate(items)])
    except Exception:
        payload = junk
    transitions.publish(UInt8MultiArray(data=payload))
    pose = PoseStamped()
    pose.header.frame_id = "base"
    pose.pose.position.x, pose.pose.orientation.w = 5.0, 1.0
    commands.publish(pose)
    sent += 1
print("RESULT " + json.dumps({"received": received, "sent": sent, "source": source}), flush=True)
node.destroy_node()
rclpy.shutdown()
"""


@dataclasses.dataclass(frozen=True)
class Args:
    """Which network modes, link rates, observation modes and robot counts to run."""

    modes: tuple[str, ...] = ("local", "lan", "secure")
    """local (one host: the baseline) | lan | secure (TLS, certificates from robot-rl certs)"""
    rates: tuple[float, ...] = (100.0, 20.0)
    """link rates in Mbit/s (each host's outgoing traffic); local ignores it"""
    obs_modes: tuple[str, ...] = ("state", "pixels")
    """state (privileged object state) | pixels (front + wrist 64x64 cameras)"""
    robots: int = 1
    """robot hosts training the one learner"""
    seconds: float = 60.0
    """measured seconds of each run (after every actor has acted with the learner's weights)"""
    image_size: int = 64
    out: Path = Path("runs/bench-two-hosts")
    """folder for the runs' logs and run folders (one sub-folder per invocation)"""
    smoke: bool = False
    """one short lan run at 20 Mbit/s on state with a 5 s link outage and learner_lost.action hold (a test runs
    this so the bench cannot rot)"""
    link_down_s: float = 0.0
    """fault drill: take the first robot host's link down this long in the middle of each (two-host) run, then
    measure how the actor held up and how soon the learner had its transitions again"""
    kill_server_s: float = 0.0
    """fault drill: kill -9 every process on the server host in the middle of each (two-host) run, start the server
    side again (same run folder) this many seconds later, and measure what was lost and how soon training resumed"""
    kill_server_times: int = 1
    """how many times the kill_server drill runs in each run (one after the other)"""
    kill_link: bool = False
    """fault drill (lan, secure): kill -9 the first robot host's link node (robot_rl.ros.nodes.link_node; its launch restarts
    it), then measure how soon the actor had acknowledgements again and how long it went without"""
    checkpoint_every: int = 500
    """the learner's checkpoint_every (received transitions between checkpoints)"""
    updates_per_transition: float = 1.0
    """the learner's updates_per_transition (learner steps per received transition: in lock-step it sets how fast the
    data comes)"""
    max_weight_lag: int = 10
    """lock-step: the actor waits for weights that trained on all but this many of its transitions"""
    control: str = "realtime"
    """realtime (the sim node and the actor at the robot file's rate, as on a robot) | lockstep (as fast as they
    go: a long session's data in less time)"""
    intruder: bool = True
    """secure runs: a third host with another run's certificates tries to read and inject all along"""
    robot_dies: bool = False
    """fault drill (--robots 2 or more): the first robot host dies mid-episode (link down, every process killed with
    -9): the learner must close that episode and keep training the other robots"""
    learner_lost: str = "act"
    """the robot file's learner_lost.action in the runs: act (as the shipped sim_panda) | hold"""
    learner_lost_after_s: float = 5.0
    """the robot file's learner_lost.after_s in the runs"""
    abandon_after_s: float = 20.0
    """the learner's abandon_after_s: it closes a silent robot's open episode after this long"""


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _environment(peers: list[str], certs: Path | None = None, rate: float | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "FASTDDS_DEFAULT_PROFILES_FILE", "ROBOT_RL_NETWORK")}
    if certs is not None:
        env["ROBOT_RL_CERTS"] = str(certs)
    if rate is not None:  # as a user sets it: the link's rate
        env["ROBOT_RL_LINK_MBIT"] = f"{rate:g}"
    env.update(ROS_DOMAIN_ID=str(DOMAIN_ID), PYTHONUNBUFFERED="1", OMP_WAIT_POLICY="PASSIVE",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p))
    if peers:
        env["ROS_STATIC_PEERS"] = ";".join(peers)
    else:  # one host: the local mode's own loopback discovery
        env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    return env


def _network_lines(work: Path) -> dict[str, str]:
    """Each node's network line (how it chose its mode), "<host log> <node>" -> the line up to its first colon."""
    lines = {}
    for log in sorted(work.glob("*.log")):
        for line in log.read_text(errors="replace").splitlines():  # [node] [INFO] [stamp] [node]: network ...
            at = line.find("]: network ")
            if line.startswith("[") and at > 0 and "[WARN]" not in line:  # not the lan mode's warning line
                lines[f"{log.stem} {line[1:line.index(']')]}"] = line[at + 3:].split(":", 1)[0]
    return lines


def _link_bytes(host: Host) -> np.ndarray:
    """Bytes the host's interface (received, sent)."""
    stats = json.loads(host.run(["ip", "-s", "-j", "link", "show", "dev", host.link]).stdout)[0]["stats64"]
    return np.array([int(stats["rx"]["bytes"]), int(stats["tx"]["bytes"])])


def _percentiles(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    array = np.asarray(values)
    return {"n": int(array.size), "p50": round(float(np.median(array)), 1),
            "p99": round(float(np.percentile(array, 99)), 1)}


def _weights_latency_ms(learner: dict, actors: list[dict], since: float) -> list[float]:
    published = {int(v): t for v, t in learner.get("weights_published_at", [])}
    latencies = []
    for actor in actors:
        for version, used in actor.get("weights_used_at", []):
            if int(version) in published and published[int(version)] >= since:
                latencies.append(1e3 * (used - published[int(version)]))
    return latencies


def _acked_lost(learner: dict, actors: list[dict]) -> tuple[int, int]:
    """(transitions an actor dropped as acknowledged that the learner does not hold, transitions never acknowledged)."""
    lost = unacked = 0
    for actor in actors:
        held_through = learner["acks"].get(actor["source"], -1)
        lost += max(0, actor["acked_through"] - held_through)
        unacked += max(0, actor["transitions"] - 1 - held_through)
    return lost, unacked


def _link_down_drill(machines, robot: Host, learner_file: Path, actor_file: Path, args: Args) -> dict:
    """Take `robot`'s link down for args.link_down_s, then up: what the actor did meanwhile and how soon the learner
    acknowledged everything the actor had sent by the end of the outage."""
    time.sleep(max(0.0, (args.seconds - args.link_down_s) / 3))
    before = _read(actor_file)
    machines.link_down(robot)
    down_at, down_unix = time.monotonic(), time.time()
    outbox_max = 0
    while time.monotonic() - down_at < args.link_down_s:
        outbox_max = max(outbox_max, (_read(actor_file) or {}).get("outbox", 0))
        time.sleep(0.5)
    during = _read(actor_file)
    machines.link_up(robot)
    up_at = time.monotonic()
    sent = during["transitions"]
    caught_up_s = None
    while time.monotonic() - up_at < 60:
        status = _read(learner_file) or {}
        if status.get("acks", {}).get(during["source"], -1) >= sent - 1:
            caught_up_s = round(time.monotonic() - up_at, 1)
            break
        time.sleep(0.25)
    return {"seconds": args.link_down_s, "commands_while_down": during["commands"] - before["commands"],
            "held_while_down": during["held"] - before["held"], "outbox_max": outbox_max,
            "dropped": during["dropped"] - before["dropped"], "learner_has_all_s_after_up": caught_up_s,
            "unix_window": [round(down_unix, 3), round(time.time(), 3)]}


def _kill_server_drill(server: Host, restart: Callable[[], subprocess.Popen], learner_file: Path,
                       actor_files: list[Path], args: Args) -> dict:
    """Kill -9 every process on the server host, start its side again `args.kill_server_s` later: the actors'
    commands meanwhile, acknowledged transitions lost (the restarted learner must hold every one acknowledged
    before), and how soon it acknowledged again and the actors acted with newer weights."""
    time.sleep(max(0.0, (args.seconds - args.kill_server_s) / 4))
    before, learner = [_read(p) for p in actor_files], _read(learner_file)
    acked = {a["source"]: learner["acks"].get(a["source"], -1) for a in before}
    killed, killed_unix = server.kill_all(), time.time()
    time.sleep(args.kill_server_s)
    dead = [_read(p) for p in actor_files]
    restarted_at = time.monotonic()
    process = restart()
    acks_s = weights_s = None
    while time.monotonic() - restarted_at < 180 and process.poll() is None and (acks_s is None or weights_s is None):
        actors = [_read(p) or d for p, d in zip(actor_files, dead)]
        if acks_s is None and all(a["acked_through"] > d["acked_through"] for a, d in zip(actors, dead)):
            acks_s = round(time.monotonic() - restarted_at, 1)
        if weights_s is None and all(a["weights_version"] > d["weights_version"] for a, d in zip(actors, dead)):
            weights_s = round(time.monotonic() - restarted_at, 1)
        time.sleep(0.25)
    after = _read(learner_file) or {}
    return {"processes_killed": killed, "dead_s": args.kill_server_s,
            "commands_while_dead": sum(d["commands"] - b["commands"] for d, b in zip(dead, before)),
            "held_while_dead": sum(d["held"] - b["held"] for d, b in zip(dead, before)),
            "acked_before_kill": acked,
            "acked_lost": sum(max(0, through - after.get("acks", {}).get(source, -1))
                              for source, through in acked.items()),
            "acks_again_s_after_restart": acks_s, "newer_weights_at_actors_s_after_restart": weights_s,
            "restarted": process.poll() is None, "unix_window": [round(killed_unix, 3), round(time.time(), 3)]}


LINK_HOST_HALF = "robot_rl.ros.nodes.link_node --ros-args"  # the link node as the launcher starts it (not its network half)


def _kill_link_drill(robot: Host, actor_file: Path, args: Args) -> dict:
    """Kill -9 the link node of `robot` (the launcher restarts it after its respawn delay; its network half ends with
    it): how soon a new link ran and the actor had acknowledgements again. The actor's gap without them is read from
    its final status (`_ack_gap_at`)."""
    time.sleep(max(0.0, args.seconds / 8))
    killed = robot.pids(LINK_HOST_HALF)
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    killed_unix, killed_at = time.time(), time.monotonic()
    relinked_s = acks_s = None
    through = None
    while time.monotonic() - killed_at < 60 and acks_s is None:
        if relinked_s is None and set(robot.pids(LINK_HOST_HALF)) - set(killed):
            relinked_s = round(time.monotonic() - killed_at, 1)
            through = (_read(actor_file) or {}).get("acked_through", -1)  # acknowledged before the new link
        elif relinked_s is not None and (_read(actor_file) or {}).get("acked_through", -1) > through:
            acks_s = round(time.monotonic() - killed_at, 1)
        time.sleep(0.1)
    return {"killed": len(killed), "link_again_s_after_kill": relinked_s, "acks_again_s_after_kill": acks_s,
            "unix_window": [round(killed_unix, 3), round(time.time(), 3)]}


def _ack_gap_at(actor: dict, unix: float) -> float | None:
    """The actor's longest gap without acknowledgements that spans `unix` (its ack_gaps, gaps of 1 s and more)."""
    gaps = actor.get("ack_gaps", {}).get("gaps", [])
    spans = [seconds for start, seconds in gaps if start <= unix <= start + seconds]
    return round(max(spans), 2) if spans else None


def _robot_dies_drill(machines, robots: list[Host], learner_file: Path, actor_files: list[Path], args: Args
                      ) -> dict:
    """The first robot host dies mid-episode (link down, then kill -9 of its every process): when the learner closed
    its open episode, and how the other robots trained before and after."""
    time.sleep(max(0.0, (args.seconds - args.abandon_after_s) / 4))
    others = actor_files[1:]
    others0, learner0, t0 = [_read(p) for p in others], _read(learner_file), time.monotonic()
    time.sleep(5.0)
    source = _read(actor_files[0])["source"]
    learner1 = _read(learner_file)
    others1, t1 = [_read(p) for p in others], time.monotonic()
    machines.link_down(robots[0])
    killed = robots[0].kill_all()
    died_at = time.monotonic()
    time.sleep(1.5)  # the learner's next status: the dead robot's episode it holds open
    open_steps = sum(n for key, n in _read(learner_file)["staged"].items() if key.startswith(f"{source} "))
    closed_s = None
    while closed_s is None and time.monotonic() - died_at < args.abandon_after_s + 30:
        if (_read(learner_file) or learner1)["abandoned"] > learner1["abandoned"]:
            closed_s = round(time.monotonic() - died_at, 1)
        time.sleep(0.25)
    others2, learner2, t2 = [_read(p) for p in others], _read(learner_file), time.monotonic()
    time.sleep(10.0)
    others3, learner3, t3 = [_read(p) for p in others], _read(learner_file), time.monotonic()

    def per_s(a: list[dict], b: list[dict], seconds: float) -> float:
        return round(sum(y["transitions"] - x["transitions"] for x, y in zip(a, b)) / seconds, 2)

    return {"processes_killed": killed, "open_episode_steps_at_death": open_steps,
            "learner_closed_it_s_after": closed_s, "abandon_after_s": args.abandon_after_s,
            "episodes_abandoned": learner3["abandoned"] - learner0["abandoned"],
            "others_transitions_per_s_before": per_s(others0, others1, t1 - t0),
            "others_transitions_per_s_after": per_s(others2, others3, t3 - t2),
            "learner_received_per_s_after": round((learner3["received"] - learner2["received"]) / (t3 - t2), 2),
            "others_weights_versions_after": sum(y["weights_version"] - x["weights_version"]
                                                 for x, y in zip(others2, others3))}


def _intrusion(process: subprocess.Popen, work: Path, learner: dict, actors: list[dict]) -> dict:
    """What the intruder received (messages, all topics) and what of its own the run accepted (its transitions in the
    learner, its weights at an actor)."""
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    lines = [line for line in (work / "intruder.out").read_text().splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"the intruder printed no result: see {work / 'intruder.log'}")
    result = json.loads(lines[-1][len("RESULT "):])
    taken = sum(t["through"] + 1 + len(t["above"]) for s, t in learner.get("sources", {}).items()
                if s.startswith("intruder/"))
    weights = sum(1 for a in actors for v, _ in a.get("weights_used_at", []) if int(v) >= INTRUDER_VERSION)
    return {"received": sum(result["received"].values()), "accepted": taken + weights,
            "received_by_topic": result["received"], "sent_per_topic": result["sent"],
            "learner_took_transitions": taken, "actors_took_weights": weights}


def _robot_file(args: Args, work: Path) -> str:
    """The runs' robot file: the shipped sim_panda, or a copy with the asked-for learner_lost setting."""
    if (args.learner_lost, args.learner_lost_after_s) == ("act", 5.0):
        return "sim_panda"
    import yaml

    data = yaml.safe_load((REPO / "robots" / "sim_panda.yaml").read_text())
    data["learner_lost"] = {"action": args.learner_lost, "after_s": args.learner_lost_after_s}
    path = work / "sim_panda_learner_lost.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _launch(host: Host, side: str, args: Args, obs_mode: str, run_dir: Path, peers: list[str], log: Path,
            network: str, robot: str, actor_id: str = "sim0", certs: Path | None = None, rate: float | None = None
            ) -> subprocess.Popen:
    # lan: the hosts set up as a ROS user sets up any graph (ROS_STATIC_PEERS naming the other host, nothing else):
    # the nodes choose the lan mode from it (the launch files' network:=auto).
    argv = [sys.executable, "-m", "robot_rl.apps.cli", "launch", "--grace-s", "5", "launch/sim_train.yaml",
            f"side:={side}", f"network:={'auto' if network == 'lan' else network}", f"mode:={args.control}",
            f"obs_mode:={obs_mode}",
            f"image_size:={args.image_size}", "steps:=0", "demos:=5", "eval_every:=0", "eval_episodes:=0",
            "final_validation:=false", f"actor_id:={actor_id}", f"run_dir:={run_dir}", f"robot:={robot}",
            f"abandon_after_s:={args.abandon_after_s:g}", f"checkpoint_every:={args.checkpoint_every}",
            f"updates_per_transition:={args.updates_per_transition:g}", f"max_weight_lag:={args.max_weight_lag}"]
    return host.popen(argv, env=_environment(peers, certs, rate), cwd=REPO, stdout=open(log, "a"),
                      stderr=subprocess.STDOUT)


def run(args: Args, mode: str, rate: float, obs_mode: str, work: Path) -> dict:
    """One measured run; returns its figures."""
    names = ["server"] if mode == "local" else ["server", *(f"robot{i}" for i in range(1, args.robots + 1))]
    names = names if len(names) > 1 else ["server", "spare"]  # the harness makes two or more hosts
    with_intruder = mode == "secure" and args.intruder
    names += ["intruder"] if with_intruder else []
    with hosts(names, subnet=SUBNET, rate_mbit=None if mode == "local" else rate) as machines:
        server = machines["server"]
        server_dir = work / "server"
        robots = [machines[n] for n in names if n.startswith("robot")]
        processes = []
        certs: dict[str, Path] = {}
        if mode == "secure":
            from robot_rl.ros.net.certs import create_certificates  # robot-rl certs ca / request / sign, one disk

            create_certificates(work / "certs", server=server.address, robots=[r.name for r in robots])
            certs = {h: work / "certs" / h for h in ("server", *(r.name for r in robots))}
            if with_intruder:  # another run's CA: the stranger has certificates, just not this run's
                create_certificates(work / "other-certs", server=server.address, robots=["intruder"])
        robot_file = _robot_file(args, work)
        if mode == "local":
            processes.append(_launch(server, "all", args, obs_mode, server_dir, [], work / "server.log", "local",
                                     robot_file))
            actor_files = [server_dir / "actor_status.json"]
        else:
            def start_server() -> subprocess.Popen:
                return _launch(server, "server", args, obs_mode, server_dir, [r.address for r in robots],
                               work / "server.log", mode, robot_file, certs=certs.get("server"), rate=rate)

            processes.append(start_server())
            time.sleep(1.0 if mode == "secure" else 0.0)  # the server's port first (a client retries, later)
            for robot in robots:
                processes.append(_launch(robot, "robot", args, obs_mode, work / robot.name, [server.address],
                                         work / f"{robot.name}.log", mode, robot_file, actor_id=robot.name,
                                         certs=certs.get(robot.name), rate=rate))
            actor_files = [work / r.name / "actor_status.json" for r in robots]
        learner_file = server_dir / "learner_status.json"
        try:
            deadline = time.monotonic() + 300
            while True:  # every actor acts with learner weights: the measured window starts
                actors = [_read(p) for p in actor_files]
                if all(a and a["weights_version"] >= 1 and a["transitions"] > 0 for a in actors):
                    break
                ended = [p.args for p in processes if p.poll() is not None]
                if ended or time.monotonic() > deadline:
                    raise RuntimeError(f"{mode} {rate} Mbit/s {obs_mode}: the graph did not start ({ended}); "
                                       f"see {work}")
                time.sleep(0.5)
            learner0, actors0 = _read(learner_file), [_read(p) for p in actor_files]
            bytes0, start_wall, start = (np.zeros(2) if mode == "local" else _link_bytes(server)), time.time(), \
                time.monotonic()
            intruder = None
            if with_intruder:
                env = {**_environment([server.address]), "ROBOT_RL_NETWORK": "secure",
                       "ROBOT_RL_CERTS": str(work / "other-certs" / "intruder")}
                intruder = machines["intruder"].popen(
                    [sys.executable, "-c", INTRUDER, f"{max(5.0, args.seconds - 5.0):g}", str(INTRUDER_VERSION)],
                    env=env, cwd=REPO, stdout=open(work / "intruder.out", "w"), stderr=open(work / "intruder.log", "w"))
            drills = {}
            if args.link_down_s > 0 and robots:
                drills["link_down"] = _link_down_drill(machines, robots[0], learner_file, actor_files[0], args)
            if args.kill_server_s > 0 and robots:
                def restart() -> subprocess.Popen:
                    processes[0] = start_server()
                    return processes[0]

                drills["kill_server"] = [_kill_server_drill(server, restart, learner_file, actor_files, args)
                                         for _ in range(args.kill_server_times)]
            if args.kill_link and robots and mode != "local":
                drills["kill_link"] = _kill_link_drill(robots[0], actor_files[0], args)
            if args.robot_dies and len(robots) >= 2:
                drills["robot_dies"] = _robot_dies_drill(machines, robots, learner_file, actor_files, args)
            time.sleep(max(0.0, args.seconds - (time.monotonic() - start)))
            learner1, actors1 = _read(learner_file), [_read(p) for p in actor_files]
            bytes1, elapsed = (np.zeros(2) if mode == "local" else _link_bytes(server)), time.monotonic() - start
        finally:
            for process in reversed(processes):  # robots first: their last transitions go out
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGINT)
                    try:
                        process.wait(timeout=40)
                    except subprocess.TimeoutExpired:
                        os.killpg(process.pid, signal.SIGKILL)
                        process.wait()
        finals = [_read(p) or a for p, a in zip(actor_files, actors1)]  # written as the actors stopped
        if "kill_link" in drills:
            drills["kill_link"]["ack_gap_s"] = _ack_gap_at(finals[0], drills["kill_link"]["unix_window"][0])
        intrusion = _intrusion(intruder, work, _read(learner_file) or learner1, finals) if intruder else None
        lost, unacked = _acked_lost(_read(learner_file) or learner1, finals)
        link0, link1 = learner0.get("link", {}), learner1.get("link", {})
        # The learner's own counters begin at 0 at each start: across a kill drill they cover only its last start.
        one_start = learner0.get("incarnation") == learner1.get("incarnation")
        per_s = {key: round((link1.get(key, 0) - link0.get(key, 0)) / elapsed) if one_start else None
                 for key in ("transitions_in_bytes", "weights_out_bytes", "acks_out_bytes")}
        received, sent = (bytes1 - bytes0) / elapsed
        total = received + sent
        published = link1.get("weights_published", 0) - link0.get("weights_published", 0)
        late = [a["tick_late_ms"] for a in actors1 if a.get("tick_late_ms")]
        return {
            "mode": mode, "rate_mbit": None if mode == "local" else rate, "obs_mode": obs_mode,
            "robots": max(1, len(robots)), "seconds": round(elapsed, 1),
            "unix_window": [round(start_wall, 3), round(start_wall + elapsed, 3)],  # the measured window
            "transitions_per_s": round((learner1["received"] - learner0["received"]) / elapsed, 2),
            "link_bytes_per_transition": (  # None across a kill drill (bench/session.py sums every start's)
                round(per_s["transitions_in_bytes"] * elapsed / max(1, learner1["received"] - learner0["received"]))
                if one_start else None),
            "link_bytes_per_s": {"total": round(total), "transitions": per_s["transitions_in_bytes"],
                                 "weights": per_s["weights_out_bytes"], "acks": per_s["acks_out_bytes"],
                                 "other": (round(total - sum(per_s.values())) if mode != "local" and one_start
                                           else 0 if mode == "local" else None)},
            "link_use": None if mode == "local" else round(8 * max(received, sent) / (rate * 1e6), 3),
            "weights_per_s": round(published / elapsed, 2) if one_start else None,
            "weights_bytes": link1.get("weights_bytes"),
            "weights_skipped": link1.get("weights_skipped", 0) - link0.get("weights_skipped", 0) if one_start else None,
            "weights_latency_ms": _percentiles(_weights_latency_ms(learner1, actors1, start_wall)),
            "tick_late_ms": {"p50": max((t["p50"] for t in late), default=None),
                             "p99": max((t["p99"] for t in late), default=None),
                             "max": max((t["max"] for t in late), default=None),
                             "missed": sum(a["tick_late_ms"].get("missed", 0) for a in actors1 if a.get("tick_late_ms"))
                             - sum(a["tick_late_ms"].get("missed", 0) for a in actors0 if a.get("tick_late_ms"))},
            "network_lines": _network_lines(work),
            "acked_lost": lost, "unacked_at_end": unacked,
            "dropped": sum(a["dropped"] for a in actors1) - sum(a["dropped"] for a in actors0),
            **({"intruder_received": intrusion["received"], "intruder_accepted": intrusion["accepted"],
                "intruder": intrusion} if intrusion else {}),
            **drills,
        }


def main(args: Args) -> dict:
    reason = hosts_unavailable()
    if reason:
        raise SystemExit(f"bench/two_hosts.py: cannot make namespaced hosts: {reason}")
    if args.smoke:
        args = dataclasses.replace(args, modes=("lan",), rates=(20.0,), obs_modes=("state",), seconds=11.0,
                                   link_down_s=5.0, learner_lost="hold", learner_lost_after_s=1.5)
    args.out.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="run-", dir=args.out))  # each run's logs and run folders
    runs = []
    for obs_mode in args.obs_modes:
        for mode in args.modes:
            for rate in (args.rates[:1] if mode == "local" else args.rates):
                work = root / f"{mode}-{int(rate)}-{obs_mode}"
                work.mkdir(parents=True)
                runs.append(run(args, mode, rate, obs_mode, work))
                print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    baseline = {r["obs_mode"]: r["tick_late_ms"]["p99"] for r in runs if r["mode"] == "local"}
    for r in runs:
        base = baseline.get(r["obs_mode"])
        r["tick_late_p99_vs_local_ms"] = (None if base is None or r["tick_late_ms"]["p99"] is None
                                          else round(r["tick_late_ms"]["p99"] - base, 2))
    result = {"bench": "two_hosts", "robots": args.robots, "runs": runs, "work": str(root)}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    from robot_rl.core import interrupts

    sys.exit(interrupts.run_program(lambda: main(tyro.cli(Args))))  # a stop ends what the bench started
