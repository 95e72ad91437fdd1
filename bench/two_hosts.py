"""Training across hosts: what crosses the link, how late the control loop ticks, what is lost. Prints ONE JSON line.

Each run trains PickCube in the sim mirror at the robot's rate (`launch/sim_train.yaml mode:=realtime`) for
`--seconds`: the robot side(s) (sim node, actor, scripted human) on robot host(s), the learner on a server host, as
README's "Two machines" section runs them; hosts are tests/hosts.py's namespaces (own network, /dev/shm, hostname and
IPC; two joined by a veth pair, three by a bridge), every host's outgoing traffic shaped to `rate_mbit` (tbf).
`local` is the single-host baseline (every node on one host, nothing on a link), measured in the same invocation.

Per run: ``transitions_per_s`` (the learner's intake), ``link_bytes_per_s`` (the server's interface, both ways, split
into transitions / weights / acks by the nodes' own byte counters, the rest being discovery and RTPS overhead),
``weights_per_s`` and ``weights_bytes`` (a message), ``weights_latency_ms`` (learner publishes a version -> the actor
first acts with it, p50 / p99; the hosts share one wall clock, so the bench may compare their stamps: the nodes never
do), ``tick_late_ms`` (the actor's control tick lateness over its run, p50 / p99 / max, and the ticks missed in the
measured window), ``link_use`` (the busier direction of the server's link, a fraction of its rate), ``acked_lost``
(transitions an actor let go as acknowledged that the learner does not hold) and ``unacked_at_end`` (sent, never
acknowledged, once the robots have stopped and flushed).

    python bench/two_hosts.py                                   # local, lan; 100 and 20 Mbit/s; state and pixels
    python bench/two_hosts.py --modes lan --rates 20 --robots 2 # two robot hosts, one server
    python bench/two_hosts.py --smoke                           # one short lan run at 20 Mbit/s (tests run this)

Every ROS process runs inside the namespaces (ROS_DOMAIN_ID 96); nothing reaches a real interface.
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
from pathlib import Path

import numpy as np
import tyro

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # tests/hosts.py: the namespaced hosts harness

from hosts import Host, hosts, hosts_unavailable  # noqa: E402

DOMAIN_ID = 96
SUBNET = "10.236.0"


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
    """one short lan run at 20 Mbit/s on state (a test runs this so the bench cannot rot)"""
    link_down_s: float = 0.0
    """fault drill: take the first robot host's link down this long in the middle of each (two-host) run, then
    measure how the actor held up and how soon the learner had its transitions again"""


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
    down_at = time.monotonic()
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
            "dropped": during["dropped"] - before["dropped"], "learner_has_all_s_after_up": caught_up_s}


def _launch(host: Host, side: str, args: Args, obs_mode: str, run_dir: Path, peers: list[str], log: Path,
            network: str, actor_id: str = "sim0", certs: Path | None = None, rate: float | None = None
            ) -> subprocess.Popen:
    argv = [sys.executable, "-m", "robot_rl.cli", "launch", "--grace-s", "5", "launch/sim_train.yaml",
            f"side:={side}", f"network:={network}", "mode:=realtime", f"obs_mode:={obs_mode}",
            f"image_size:={args.image_size}", "steps:=0", "demos:=5", "eval_every:=0", "eval_episodes:=0",
            "final_validation:=false", f"actor_id:={actor_id}", f"run_dir:={run_dir}"]
    return host.popen(argv, env=_environment(peers, certs, rate), cwd=REPO, stdout=open(log, "w"),
                      stderr=subprocess.STDOUT)


def run(args: Args, mode: str, rate: float, obs_mode: str, work: Path) -> dict:
    """One measured run; returns its figures."""
    names = ["server"] if mode == "local" else ["server", *(f"robot{i}" for i in range(1, args.robots + 1))]
    names = names if len(names) > 1 else ["server", "spare"]  # the harness makes two or more hosts
    with hosts(names, subnet=SUBNET, rate_mbit=None if mode == "local" else rate) as machines:
        server = machines["server"]
        server_dir = work / "server"
        robots = [machines[n] for n in names if n.startswith("robot")]
        processes = []
        certs: dict[str, Path] = {}
        if mode == "secure":
            subprocess.run([sys.executable, "-m", "robot_rl.cli", "certs", str(work / "certs"), "--server",
                            server.address, *(f"--robot={r.name}" for r in robots)], check=True, capture_output=True,
                           cwd=REPO)
            certs = {h: work / "certs" / h for h in ("server", *(r.name for r in robots))}
        if mode == "local":
            processes.append(_launch(server, "all", args, obs_mode, server_dir, [], work / "server.log", "local"))
            actor_files = [server_dir / "actor_status.json"]
        else:
            processes.append(_launch(server, "server", args, obs_mode, server_dir, [r.address for r in robots],
                                     work / "server.log", mode, certs=certs.get("server"), rate=rate))
            time.sleep(1.0 if mode == "secure" else 0.0)  # the server's port first (a client retries, later)
            for robot in robots:
                processes.append(_launch(robot, "robot", args, obs_mode, work / robot.name, [server.address],
                                         work / f"{robot.name}.log", mode, actor_id=robot.name,
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
            drill = _link_down_drill(machines, robots[0], learner_file, actor_files[0], args) \
                if args.link_down_s > 0 and robots else None
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
        lost, unacked = _acked_lost(_read(learner_file) or learner1, finals)
        link0, link1 = learner0.get("link", {}), learner1.get("link", {})
        per_s = {key: round((link1.get(key, 0) - link0.get(key, 0)) / elapsed)
                 for key in ("transitions_in_bytes", "weights_out_bytes", "acks_out_bytes")}
        received, sent = (bytes1 - bytes0) / elapsed
        total = received + sent
        published = link1.get("weights_published", 0) - link0.get("weights_published", 0)
        late = [a["tick_late_ms"] for a in actors1 if a.get("tick_late_ms")]
        return {
            "mode": mode, "rate_mbit": None if mode == "local" else rate, "obs_mode": obs_mode,
            "robots": max(1, len(robots)), "seconds": round(elapsed, 1),
            "transitions_per_s": round((learner1["received"] - learner0["received"]) / elapsed, 2),
            "link_bytes_per_s": {"total": round(total), "transitions": per_s["transitions_in_bytes"],
                                 "weights": per_s["weights_out_bytes"], "acks": per_s["acks_out_bytes"],
                                 "other": round(total - sum(per_s.values())) if mode != "local" else 0},
            "link_use": None if mode == "local" else round(8 * max(received, sent) / (rate * 1e6), 3),
            "weights_per_s": round(published / elapsed, 2),
            "weights_bytes": link1.get("weights_bytes"),
            "weights_skipped": link1.get("weights_skipped", 0) - link0.get("weights_skipped", 0),
            "weights_latency_ms": _percentiles(_weights_latency_ms(learner1, actors1, start_wall)),
            "tick_late_ms": {"p50": max((t["p50"] for t in late), default=None),
                             "p99": max((t["p99"] for t in late), default=None),
                             "max": max((t["max"] for t in late), default=None),
                             "missed": sum(a["tick_late_ms"].get("missed", 0) for a in actors1 if a.get("tick_late_ms"))
                             - sum(a["tick_late_ms"].get("missed", 0) for a in actors0 if a.get("tick_late_ms"))},
            "acked_lost": lost, "unacked_at_end": unacked,
            "dropped": sum(a["dropped"] for a in actors1) - sum(a["dropped"] for a in actors0),
            **({"link_down": drill} if drill else {}),
        }


def main(args: Args) -> dict:
    reason = hosts_unavailable()
    if reason:
        raise SystemExit(f"bench/two_hosts.py: cannot make namespaced hosts: {reason}")
    if args.smoke:
        args = dataclasses.replace(args, modes=("lan",), rates=(20.0,), obs_modes=("state",), seconds=12.0)
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
    main(tyro.cli(Args))
