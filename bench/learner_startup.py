"""Respawn time of the learner node: from process start to the first acknowledged transition; prints ONE JSON line.

Usage::

    python bench/learner_startup.py                 # 5 respawns, state PickCube (about 2 min on 2 loaded cores)
    python bench/learner_startup.py --runs 9 --obs-mode pixels
    python bench/learner_startup.py --smoke         # 1 demo, 1 episode streamed, 1 respawn: checks that it runs

What happens:

1. *Prepare* a run folder as a kill -9 drill leaves it: a learner node starts fresh (``demos`` scripted demos), a
   stand-in actor (this process) streams ``--transitions`` transitions in episodes of 25 steps (the last one left
   open), the node checkpoints every ``--checkpoint-every`` transitions and trains; then it is killed with SIGKILL.
2. *Respawn* ``--runs`` times: ``python -m robot_rl.ros.nodes.learner_node`` starts on that run folder while the stand-in
   actor re-sends its next transition every 50 ms (an actor re-sends what is not acknowledged). Measured from just
   before the process is spawned: the arrival of the acknowledgement of that transition (``ack_s``) and the moment
   the node starts training (``training_starts_s``: agent built, checkpoint restored, gradient step compiled, logged
   transitions staged; from its status file). After each run the node is killed with SIGKILL again, so every
   respawn restores a checkpoint and replays the transition log.
3. The same respawns of a bare rclpy node that acknowledges at once (``bare_node_ack_s``): the middleware's floor.
   After a participant was killed, Fast DDS takes 1.5-3 s here before the first message reaches a new one (about
   0.4 s for a first start), whatever the new process does.

``stages_s`` is the node's own breakdown (``startup`` in ``learner_status.json``; seconds from the spawn):
``interpreter_imports`` (interpreter start and module imports), ``node`` (rclpy node and parameters), ``listening``
(transitions are logged and acknowledged from here on), then, in a background thread: ``spaces`` (observation spec,
from the checkpoint), ``learner`` (JAX import and agent init), ``restore`` (checkpoint), ``compile`` (gradient step
compiled, or loaded from the persistent cache), and on the node loop ``replay`` (the transition log staged; training
starts). A node that does not report stages (an older version) gives the end-to-end figures only. Figures are
medians over the runs (and every run's values); ``loadavg_1m`` shows how loaded the machine was.

Network rule: the script re-executes itself inside a private network namespace (``unshare -n``, only ``lo``) and
refuses to run without one; every ROS process gets ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` and domain id 95
(``--domain-id``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from robot_rl.core import interrupts  # noqa: E402

INNER_FLAG = "ROBOT_RL_BENCH_STARTUP_INNER"
DOMAIN_ID = 95
EPISODE_LENGTH = 25
BATCH = 8
RESEND_S = 0.05


def log(message: str) -> None:
    print(f"[bench/learner_startup {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class StandInActor:
    """One actor source on /actor/transitions (zero observations of the run's spec) and the acks it gets back."""

    def __init__(self, spec, action_dim: int):
        from robot_rl.ros.net.env import ensure_ros_environment

        ensure_ros_environment()
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from std_msgs.msg import UInt8MultiArray

        from robot_rl.ros import qos
        from robot_rl.wire.protocol import make_source

        self.rclpy = rclpy
        rclpy.init()
        self.node = rclpy.create_node("bench_stand_in_actor")
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self.source = make_source("bench")
        self.spec, self.action_dim = spec, action_dim
        self.next_seq = 0
        self.acked = -1
        self.ack_times: dict[int, float] = {}
        self._msg_type = UInt8MultiArray
        self._pub = self.node.create_publisher(UInt8MultiArray, qos.ACTOR_TRANSITIONS,
                                               qos.topic_qos(qos.ACTOR_TRANSITIONS))
        self.node.create_subscription(UInt8MultiArray, qos.LEARNER_ACK, self._on_ack, qos.topic_qos(qos.LEARNER_ACK))

    def _on_ack(self, msg) -> None:
        from robot_rl.ros.convert import msg_to_bytes
        from robot_rl.wire.transitions import decode_ack

        through = decode_ack(msg_to_bytes(msg)).get(self.source, -1)
        if through > self.acked:
            now = time.monotonic()
            for seq in range(self.acked + 1, through + 1):
                self.ack_times[seq] = now
            self.acked = through

    def _transition(self, seq: int):
        from robot_rl.wire.transitions import StampedTransition

        step = seq % EPISODE_LENGTH
        obs = {k: np.zeros(s.shape, s.dtype) for k, s in self.spec.entries}
        last = step == EPISODE_LENGTH - 1
        return StampedTransition(seq=seq, episode=seq // EPISODE_LENGTH, step=step, observation=obs,
                                 action=np.zeros(self.action_dim, np.float32), reward=float(last), terminated=last,
                                 truncated=False, next_observation=obs, success=last)

    def send(self, seqs) -> None:
        from robot_rl.ros.convert import bytes_to_msg
        from robot_rl.wire.transitions import encode_transitions

        self._pub.publish(bytes_to_msg(encode_transitions(self.source, [self._transition(s) for s in seqs])))

    def spin(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while True:
            self.executor.spin_once(timeout_sec=max(0.0, min(0.01, end - time.monotonic())))
            if time.monotonic() >= end:
                return

    def stream(self, count: int, timeout_s: float, alive) -> None:
        """Send `count` more transitions in batches, re-sending what stays unacknowledged, until all are acked."""
        target = self.next_seq + count - 1
        deadline = time.monotonic() + timeout_s
        last_send = -1.0
        while self.acked < target:
            if time.monotonic() > deadline or not alive():
                raise RuntimeError(f"acks stopped at seq {self.acked} of {target}")
            if self.next_seq <= target and self.next_seq - self.acked <= 4 * BATCH:
                self.send(range(self.next_seq, min(self.next_seq + BATCH, target + 1)))
                self.next_seq = min(self.next_seq + BATCH, target + 1)
            elif time.monotonic() - last_send > 1.0:
                self.send(range(self.acked + 1, min(self.acked + 1 + BATCH, self.next_seq)))
                last_send = time.monotonic()
            self.spin(0.02)

    def close(self) -> None:
        self.node.destroy_node()
        self.rclpy.try_shutdown()


def role_echo() -> int:
    """A bare rclpy node that acknowledges every transition at once: the middleware's floor for a respawn."""
    from robot_rl.ros.net.env import ensure_ros_environment

    ensure_ros_environment()
    import rclpy
    from std_msgs.msg import UInt8MultiArray

    from robot_rl.ros import qos
    from robot_rl.ros.convert import bytes_to_msg, msg_to_bytes
    from robot_rl.wire.transitions import decode_transitions, encode_ack

    rclpy.init()
    node = rclpy.create_node("bench_echo_learner")
    acks = node.create_publisher(UInt8MultiArray, qos.LEARNER_ACK, qos.topic_qos(qos.LEARNER_ACK))

    def on_transitions(msg) -> None:
        source, items = decode_transitions(msg_to_bytes(msg))
        acks.publish(bytes_to_msg(encode_ack({source: max(item.seq for item in items)})))

    node.create_subscription(UInt8MultiArray, qos.ACTOR_TRANSITIONS, on_transitions,
                             qos.topic_qos(qos.ACTOR_TRANSITIONS))
    while True:
        rclpy.spin_once(node, timeout_sec=0.05)


def start_learner(run_dir: Path, args, log_file) -> subprocess.Popen:
    command = [sys.executable, "-m", "robot_rl.ros.nodes.learner_node", "--ros-args",
               "-p", f"run_dir:={run_dir}", "-p", f"obs_mode:={args.obs_mode}", "-p", f"demos:={args.demos}",
               "-p", f"checkpoint_every:={args.checkpoint_every}", "-p", f"image_size:={args.image_size}"]
    return subprocess.Popen([*orphan_guard(), *command], stdout=log_file, stderr=subprocess.STDOUT, cwd=REPO_ROOT,
                            start_new_session=True)


def orphan_guard() -> list[str]:
    """Command prefix: the kernel kills the node should the bench die without a word (SIGKILL)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def read_status(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "learner_status.json").read_text())
    except (OSError, ValueError):
        return {}


def measure_ack(actor: StandInActor, seq: int, spawn: float, process: subprocess.Popen) -> float | None:
    """Seconds from `spawn` to the ack of `seq`, re-sending what is unacknowledged every RESEND_S."""
    last_send = -1.0
    while time.monotonic() - spawn < 120.0 and process.poll() is None:
        if actor.acked >= seq:
            return round(actor.ack_times[seq] - spawn, 3)
        if time.monotonic() - last_send >= RESEND_S:
            actor.send(range(actor.acked + 1, seq + 1))
            last_send = time.monotonic()
        actor.spin(0.005)
    return None


def status_mtime(run_dir: Path) -> float:
    try:
        return (run_dir / "learner_status.json").stat().st_mtime
    except OSError:
        return 0.0


def median(values) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def run_inner(args) -> int:
    from robot_rl.wire.weights import decode_weights

    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="bench-learner-startup-"))
    run_dir = tmp / "run"
    node_log = open(tmp / "learner.log", "w+")
    result: dict = {"bench": "learner_startup", "smoke": args.smoke, "obs_mode": args.obs_mode, "runs": args.runs,
                    "prepare_transitions": args.transitions, "cpus": os.cpu_count(),
                    "loadavg_1m_start": round(os.getloadavg()[0], 2)}
    actor = None
    process = None
    try:
        log("prepare: fresh learner, demos, streamed transitions, then kill -9")
        with interrupts.uninterrupted():  # a stop request while it starts is raised once `process` is set
            process = start_learner(run_dir, args, node_log)
        deadline = time.monotonic() + args.timeout / 2
        while not (run_dir / "policy.msgpack").exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the fresh learner never wrote its policy file")
            time.sleep(0.2)
        policy = decode_weights((run_dir / "policy.msgpack").read_bytes())
        actor = StandInActor(policy.observation_spec, policy.action_dim)
        actor.stream(args.transitions, args.timeout / 2, lambda: process.poll() is None)
        # leave an episode open, as a running actor would, then let the node train a little before the kill
        actor.stream(EPISODE_LENGTH // 2, 60.0, lambda: process.poll() is None)
        while read_status(run_dir).get("steps", 0) < args.transitions // 2 and time.monotonic() < deadline:
            actor.spin(0.2)
        kill(process)
        runs = []
        for index in range(args.runs):
            seq = actor.next_seq
            actor.next_seq += 1
            spawn_wall, spawn = time.time(), time.monotonic()
            with interrupts.uninterrupted():
                process = start_learner(run_dir, args, node_log)
            ack_s = measure_ack(actor, seq, spawn, process)
            training_starts_s, stages = None, {}
            while time.monotonic() - spawn < 60.0 and process.poll() is None:
                status = read_status(run_dir)
                startup = status.get("startup") or {}
                if status and "startup" not in status and status_mtime(run_dir) > spawn_wall:
                    break  # a node version that does not report its stages
                if startup.get("pid") == process.pid and startup.get("replay") is not None:
                    stages = {k: round(v - spawn_wall, 3) for k, v in startup.items() if k != "pid"}
                    training_starts_s = stages["replay"]
                    break
                actor.spin(0.1)
            kill(process)
            if ack_s is None:
                raise RuntimeError(f"respawn {index}: no ack within 120 s")
            run = {"ack_s": ack_s, "training_starts_s": training_starts_s, "stages_s": stages}
            log(f"respawn {index}: {json.dumps(run)}")
            runs.append(run)
        floor = []  # the same respawn of a bare rclpy node that acknowledges at once (also killed with SIGKILL)
        for _ in range(args.runs):
            seq = actor.next_seq
            actor.next_seq += 1
            with interrupts.uninterrupted():
                process = subprocess.Popen([*orphan_guard(), sys.executable, str(Path(__file__).resolve()), "--role",
                                            "echo"], stdout=node_log, stderr=subprocess.STDOUT, cwd=REPO_ROOT,
                                           start_new_session=True)
            floor.append(measure_ack(actor, seq, time.monotonic(), process))
            kill(process)
        result["bare_node_ack_s_median"] = median(floor)
        result["bare_node_ack_s"] = floor
        result["ack_s_median"] = median(r["ack_s"] for r in runs)
        result["training_starts_s_median"] = median(r["training_starts_s"] for r in runs)
        stage_names = [k for k in runs[0]["stages_s"]] if runs[0]["stages_s"] else []
        result["stages_s_median"] = {k: median(r["stages_s"].get(k) for r in runs) for k in stage_names}
        result["ack_s"] = [r["ack_s"] for r in runs]
        result["training_starts_s"] = [r["training_starts_s"] for r in runs]
        result["log_batches_at_end"] = len(list((run_dir / "transition_log").glob("*.msgpack")))
        code = 0
    except Exception as error:  # noqa: BLE001 - reported in the JSON line
        result["error"] = repr(error)
        node_log.seek(0)
        result["learner_log_tail"] = node_log.read()[-3000:]
        code = 1
    finally:
        if process is not None:
            kill(process)
        if actor is not None:
            actor.close()
        node_log.close()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    result["loadavg_1m_end"] = round(os.getloadavg()[0], 2)
    result["wall_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(result), flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=None, help="respawns to measure (default 5)")
    parser.add_argument("--obs-mode", default="state", choices=("state", "pixels", "state+pixels"))
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--demos", type=int, default=None, help="scripted demos of the fresh run (default 5)")
    parser.add_argument("--transitions", type=int, default=None,
                        help="transitions streamed before the first kill (default 300)")
    parser.add_argument("--checkpoint-every", type=int, default=None, help="(default 200)")
    parser.add_argument("--keep", action="store_true", help="keep the run folder and the node log")
    parser.add_argument("--timeout", type=float, default=900.0, help="kill everything after this many seconds")
    parser.add_argument("--domain-id", type=int, default=DOMAIN_ID, help=f"ROS_DOMAIN_ID (default {DOMAIN_ID})")
    parser.add_argument("--smoke", action="store_true",
                        help=f"1 demo, {EPISODE_LENGTH} transitions streamed (checkpoint every {EPISODE_LENGTH}), 1 "
                             "respawn and 1 bare-node respawn: checks that the bench runs (tests run this)")
    parser.add_argument("--role", choices=("echo",), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name, full, smoke in (("runs", 5, 1), ("demos", 5, 1), ("transitions", 300, EPISODE_LENGTH),
                              ("checkpoint_every", 200, EPISODE_LENGTH)):
        if getattr(args, name) is None:
            setattr(args, name, smoke if args.smoke else full)
    if args.role == "echo":
        return role_echo()
    if not os.environ.get(INNER_FLAG):
        from private_network import rerun_in_private_network

        return rerun_in_private_network(__file__, argv, bench="learner_startup", domain_id=args.domain_id,
                                        inner_flag=INNER_FLAG, timeout_s=args.timeout)
    return run_inner(args)


if __name__ == "__main__":
    sys.exit(interrupts.run_program(main))  # a stop ends what the bench started
