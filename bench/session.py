"""A lab's training session, compressed: does anything grow, stall or get lost as the data piles up? Prints ONE JSON
line.

One long pixel run of `bench/two_hosts.py` (PickCube in the sim mirror, the sim node and the actor in lock-step as
fast as the learner takes the data, at a quarter of its usual gradient steps per transition, the learner on a server
host, two namespaced hosts set up with the standard ROS 2 variables only, so
the nodes choose `lan`), with its fault drills: the server side killed with -9 and started again on the same run
folder (`--kills` times), the robot's link down for `--outage-s` (the robot file's learner_lost.action hold) and
the robot host's link node killed with -9 once (`--kill-link`; its launch restarts it). A sampler reads the
learner's status and its run folder all along.

Figures: ``checkpoints`` (each checkpoint's seconds and bytes against the transitions received so far, every learner
start's) and ``checkpoint_growth`` (the last one's seconds and bytes over the first's); ``ack_gap_outside_faults_s``
(the longest gap between acknowledgements at the actor in the measured window, outside the drills' windows) and
``learner_away_outside_faults`` (such gaps of learner_lost.after_s or more); ``learner_rss_mb_per_10k`` and
``disk_mb_per_10k`` (least-squares slopes against received transitions; RSS within the last learner start);
``link_bytes_per_transition`` (over every learner start); ``acked_lost`` (at the end and at each kill); and the
two-host run's own figures (``run``).

    python bench/session.py --seconds 2200         # >= 30k pixel transitions, two kills, a 30 s outage (results.md)
    python bench/session.py --seconds 7200         # longer
    python bench/session.py --smoke                # a short state run, one kill, a 5 s outage, the link killed

(bench/two_hosts.py's own `--smoke` is what its stop tests start; the figures of a two-host run with its drills are
checked through this bench's smoke run.)

Every ROS process runs inside the namespaces (tests/hosts.py); nothing reaches a real interface. Stopped by SIGINT or
SIGTERM it ends what it started (bench/two_hosts.py's rule).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import tyro

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import two_hosts  # noqa: E402


@dataclasses.dataclass
class Args:
    """The session's length, data and faults."""

    seconds: float = 1800.0
    """measured seconds of the run (after the actor first acts with the learner's weights)"""
    obs_mode: str = "pixels"
    """pixels (front + wrist cameras) | state"""
    image_size: int = 64
    rate_mbit: float = 100.0
    """the link's rate (each host's outgoing traffic)"""
    kills: int = 2
    """times the server side is killed with -9 and started again"""
    dead_s: float = 10.0
    """seconds the server side stays dead at each kill"""
    outage_s: float = 30.0
    """seconds the robot's link is down (once)"""
    kill_link: bool = True
    """kill -9 the robot host's link node once (its launch restarts it)"""
    learner_lost_after_s: float = 5.0
    """the robot file's learner_lost.after_s (its action: hold)"""
    checkpoint_every: int = 500
    """the learner's checkpoint_every (received transitions between checkpoints)"""
    updates_per_transition: float = 0.25
    """the learner's steps per received transition: in lock-step the data comes as fast as the learner takes it, and
    a session's point is its data (0.25: about four times as many transitions an hour as the default 1.0)"""
    max_weight_lag: int = 40
    """the lock-step actor's max_weight_lag: above the transitions between two weights messages (the learner's 5
    steps at updates_per_transition 0.25: 20), so the actor does not wait for weights that cannot come sooner"""
    sample_every_s: float = 5.0
    out: Path = Path("runs/bench-session")
    smoke: bool = False
    """a short state run with one kill and a 5 s outage (a test runs this so the bench cannot rot)"""


class Sampler(threading.Thread):
    """Reads the learner's status and the size of its run folder every `every_s` until stopped."""

    def __init__(self, status: Path, run_dir: Path, every_s: float):
        super().__init__(daemon=True)
        self.status, self.run_dir, self.every_s = status, run_dir, every_s
        self.samples: list[dict] = []  # unix time, received, RSS, run folder bytes, learner incarnation
        self.checkpoints: dict[tuple, list] = {}  # (incarnation, received) -> [received, seconds, bytes]
        self._finished = threading.Event()

    def run(self) -> None:
        while not self._finished.wait(self.every_s):
            status = two_hosts._read(self.status)
            if not status:
                continue
            incarnation = status.get("incarnation")
            self.samples.append({"unix": time.time(), "received": status.get("received", 0),
                                 "rss_mb": status.get("rss_mb"), "incarnation": incarnation,
                                 "disk_bytes": _folder_bytes(self.run_dir),
                                 "link_in_bytes": status.get("link", {}).get("transitions_in_bytes", 0)})
            for row in status.get("checkpoints", []):
                self.checkpoints[(incarnation, row[0])] = row

    def stop(self) -> None:
        self._finished.set()
        self.join(timeout=30)


def _folder_bytes(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*"):
        try:
            total += path.stat().st_size if path.is_file() else 0
        except OSError:  # removed meanwhile (a checkpoint's old copy, a log entry)
            pass
    return total


def _slope_per_10k(samples: list[dict], key: str) -> float | None:
    """Least-squares growth of `key` per 10k received transitions (None: too few samples)."""
    rows = [(s["received"], s[key]) for s in samples if s.get(key) is not None]
    if len(rows) < 3 or len({r for r, _ in rows}) < 2:
        return None
    received, value = np.asarray(rows, float).T
    return round(float(np.polyfit(received, value, 1)[0]) * 1e4, 3)


def _link_bytes_per_transition(samples: list[dict]) -> int | None:
    """Transitions messages' bytes at the learner (re-sends included) per transition it took, over every learner
    start (each one's counters begin at 0; the received count goes on from the checkpoint)."""
    received = max((sample["received"] for sample in samples), default=0)
    if not received:
        return None
    most_bytes: dict = {}
    for sample in samples:
        most_bytes[sample["incarnation"]] = max(most_bytes.get(sample["incarnation"], 0), sample["link_in_bytes"])
    return round(sum(most_bytes.values()) / received)


def _outside(gaps: list[list[float]], windows: list[list[float]]) -> list[list[float]]:
    """The gaps ([start unix, seconds]) that overlap no fault window ([start, end] unix)."""
    return [[start, seconds] for start, seconds in gaps
            if not any(start < end and start + seconds > begin for begin, end in windows)]


def main(args: Args) -> dict:
    reason = two_hosts.hosts_unavailable()
    if reason:
        raise SystemExit(f"bench/session.py: cannot make namespaced hosts: {reason}")
    if args.smoke:
        args = dataclasses.replace(args, seconds=30.0, obs_mode="state", kills=1, dead_s=3.0, outage_s=5.0,
                                   learner_lost_after_s=1.5, checkpoint_every=25, sample_every_s=1.0)
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="session-", dir=args.out))
    hosts_args = two_hosts.Args(
        modes=("lan",), rates=(args.rate_mbit,), obs_modes=(args.obs_mode,), seconds=args.seconds,
        image_size=args.image_size, out=args.out, link_down_s=args.outage_s, kill_server_s=args.dead_s,
        kill_server_times=args.kills, checkpoint_every=args.checkpoint_every, control="lockstep", learner_lost="hold",
        learner_lost_after_s=args.learner_lost_after_s, updates_per_transition=args.updates_per_transition,
        max_weight_lag=args.max_weight_lag, kill_link=args.kill_link)
    sampler = Sampler(work / "server" / "learner_status.json", work / "server", args.sample_every_s)
    sampler.start()
    try:
        run = two_hosts.run(hosts_args, "lan", args.rate_mbit, args.obs_mode, work)
    finally:
        sampler.stop()
    actor = two_hosts._read(work / "robot1" / "actor_status.json") or {}
    windows = [run["link_down"]["unix_window"], *(kill["unix_window"] for kill in run.get("kill_server", [])),
               *([run["kill_link"]["unix_window"]] if "kill_link" in run else [])]
    begin, end = run["unix_window"]  # from the actor's first step with the learner's weights
    gaps = _outside([gap for gap in actor.get("ack_gaps", {}).get("gaps", []) if begin <= gap[0] < end], windows)
    checkpoints = sorted(sampler.checkpoints.values())
    samples = sampler.samples
    last_start = [s for s in samples if s["incarnation"] == (samples[-1]["incarnation"] if samples else None)]
    result = {
        "bench": "session", "smoke": args.smoke, "obs_mode": args.obs_mode, "image_size": args.image_size,
        "updates_per_transition": args.updates_per_transition, "max_weight_lag": args.max_weight_lag,
        "seconds": run["seconds"], "received": max((s["received"] for s in samples), default=None),
        "checkpoints": [{"transitions": r, "seconds": s, "bytes": b} for r, s, b in checkpoints],
        "checkpoint_growth": ({"seconds": round(checkpoints[-1][1] / max(checkpoints[0][1], 1e-6), 2),
                               "bytes": round(checkpoints[-1][2] / max(checkpoints[0][2], 1), 2),
                               "from_transitions": checkpoints[0][0], "to_transitions": checkpoints[-1][0]}
                              if len(checkpoints) >= 2 else None),
        "ack_gap_longest_s": actor.get("ack_gaps", {}).get("longest_s"),
        "ack_gap_outside_faults_s": max((seconds for _, seconds in gaps), default=0.0),
        "learner_away_outside_faults": sum(1 for _, seconds in gaps if seconds >= hosts_args.learner_lost_after_s),
        "learner_rss_mb_per_10k": _slope_per_10k(last_start, "rss_mb"),
        "learner_rss_mb_last": last_start[-1]["rss_mb"] if last_start else None,
        "disk_mb_per_10k": (None if (slope := _slope_per_10k(samples, "disk_bytes")) is None else round(slope / 1e6, 2)),
        "link_bytes_per_transition": _link_bytes_per_transition(samples),
        "acked_lost": run["acked_lost"] + sum(kill["acked_lost"] for kill in run.get("kill_server", [])),
        "fault_windows": windows, "run": run, "work": str(work),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    from robot_rl.core import interrupts

    sys.exit(interrupts.run_program(lambda: main(tyro.cli(Args))))  # a stop ends what the bench started
