"""Launcher timings: how long each shipped launch file takes to come up and to stop after SIGINT; prints ONE JSON line.

Usage::

    python bench/launch.py              # every shipped file (about 3 minutes on 2 idle cores)
    python bench/launch.py --only sim_train.yaml sim_eval.yaml
    python bench/launch.py --smoke      # the launcher + teleop_record until SIGINT (tests run this)

What is measured (seconds, wall clock, on this machine):

1. Per shipped launch file (``files.<name>``), run as ``robot-rl launch`` in a private network namespace:
   ``start_s``: launcher start -> every node has logged that it is up (its ``... up`` line); ``stop_s``: SIGINT to the
   launcher -> the launcher has exited, every node stopped; ``exit_status`` (130 expected: stopped by SIGINT; 0 for
   ``sim_train``, which ends on its own) and ``escalated`` (whether
   any node needed SIGTERM / SIGKILL after the grace period: false expected). The files run in the order the data
   needs. ``teleop_record`` (scripted human) records one episode for ``robot_train`` (``one_episode_run_s``), then
   runs again until SIGINT for its figures. ``robot_train`` trains on those demos with the sim node standing in for
   the drivers. ``sim_train`` runs with a tiny budget to its end (``run_s``: launcher start -> exit, no ``stop_s``);
   ``sim_eval`` runs its policy (``episodes:=0``) until SIGINT.
2. The launcher alone (``launcher``), with tiny Python children instead of nodes: ``required_exit_to_end_s`` (a
   required process exits -> the launch has stopped a polite partner and returned) and ``escalation_s`` (a launch
   whose children ignore SIGINT, one also SIGTERM, with ``grace_s = term_timeout_s = 0.5``: required exit -> end;
   about 1 s of waiting by design).

These were asserts in tests/test_launch.py; on shared cores they are figures, not pass / fail. ``loadavg_1m_*`` is
recorded: compare runs on the same machine only.

``--smoke`` (what the tests run) measures the launcher and one shipped file, ``teleop_record`` (scripted human, state
observations) until SIGINT (``start_s``, ``stop_s``, ``exit_status`` 130), on ``--domain-id``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from robot_rl.core import interrupts  # noqa: E402
from robot_rl.core.interrupts import STOP_SIGNALS  # noqa: E402

LAUNCH_DIR = REPO_ROOT / "launch"
FILES = ("teleop_record.yaml", "robot_train.yaml", "sim_train.yaml", "sim_eval.yaml")
DOMAINS = {"teleop_record.yaml": 101, "robot_train.yaml": 102, "sim_train.yaml": 103, "sim_eval.yaml": 104}
UP_LINE = re.compile(r"^\[([^\]]+)\] .*\bup(:| \(|$)")
IDLE_DRIVER = """
import signal, sys
signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("robot driver stand-in up", flush=True)
while True:
    signal.pause()
"""


def log(message: str) -> None:
    print(f"[bench/launch {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Launch:
    """`robot-rl launch FILE args` in a private network namespace; its output is read line by line as it comes."""

    def __init__(self, name: str, arguments: dict, domain_id: int):
        from robot_rl.ros.net.env import private_network_command

        argv = [sys.executable, "-m", "robot_rl.apps.cli", "launch", str(LAUNCH_DIR / name),
                *(f"{key}:={value}" for key, value in arguments.items()), "--domain-id", str(domain_id)]
        self.name = name
        self.started = time.monotonic()
        setpriv = shutil.which("setpriv")  # the launcher gets SIGTERM (and stops its nodes) if the bench dies
        guard = [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []
        self.process = subprocess.Popen([*guard, *private_network_command(argv)], cwd=REPO_ROOT,
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, start_new_session=True)
        self.lines: list[str] = []
        self.nodes: list[str] = []
        self.expected: int | None = None  # from the launcher's first line: "..., N process(es)"

    def _read_line(self) -> str | None:
        line = self.process.stdout.readline()
        if not line:
            return None
        line = line.rstrip("\n")
        self.lines.append(line)
        found = re.match(r"^\[launch\] started (\S+) \(pid", line)
        if found:
            self.nodes.append(found.group(1))
        found = re.match(r"^\[launch\] .* on ROS domain \d+, (\d+) process\(es\)$", line)
        if found:
            self.expected = int(found.group(1))
        return line

    def wait_until_up(self, timeout: float) -> float:
        """Seconds from start until every started node logged its `up` line."""
        up: set[str] = set()
        deadline = self.started + timeout
        while time.monotonic() < deadline:
            line = self._read_line()
            if line is None:
                raise RuntimeError(f"{self.name} ended before its nodes were up:\n" + "\n".join(self.lines[-30:]))
            found = UP_LINE.match(line)
            if found and found.group(1) != "launch":
                up.add(found.group(1))
            if self.expected is not None and len(self.nodes) == self.expected and up >= set(self.nodes):
                return time.monotonic() - self.started
        raise TimeoutError(f"{self.name}: not up after {timeout} s (up: {sorted(up)}, nodes: {self.nodes})")

    def wait_for(self, text: str, timeout: float) -> float:
        deadline = self.started + timeout
        while time.monotonic() < deadline:
            line = self._read_line()
            if line is None:
                raise RuntimeError(f"{self.name} ended before {text!r}:\n" + "\n".join(self.lines[-30:]))
            if text in line:
                return time.monotonic() - self.started
        raise TimeoutError(f"{self.name}: no {text!r} after {timeout} s")

    def finish(self, timeout: float) -> int:
        """Read to the end; the launcher's exit status."""
        deadline = time.monotonic() + timeout
        while self._read_line() is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} still running after {timeout} s")
        return self.process.wait(timeout=max(1.0, deadline - time.monotonic()))

    def stop(self, timeout: float = 60.0) -> tuple[float, int]:
        """SIGINT -> (seconds until the launcher exited, its exit status)."""
        start = time.monotonic()
        self.process.send_signal(signal.SIGINT)
        status = self.finish(timeout)
        return time.monotonic() - start, status

    def escalated(self) -> bool:
        return any("still running: sending" in line for line in self.lines)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def measure_files(only: set[str], folder: Path, figures: dict, domain_id: int | None = None,
                  smoke: bool = False) -> None:
    """Fill `figures` with one entry per measured file (entries measured before an error stay); every launch on
    `domain_id` if given, else on the file's own (DOMAINS). `smoke`: only teleop_record (state observations) until
    SIGINT."""
    python = shlex.quote(sys.executable)
    demos, policy = folder / "demos.zarr", folder / "sim_train" / "policy.msgpack"

    def run(name: str, arguments: dict, until_end: bool = False) -> dict:
        launch = None
        try:
            with interrupts.uninterrupted():  # a stop request while it starts is raised once `launch` is set
                launch = Launch(name, arguments, DOMAINS[name] if domain_id is None else domain_id)
            figure = {"nodes": launch.nodes, "start_s": round(launch.wait_until_up(timeout=300), 2)}
            if until_end:
                figure["exit_status"] = launch.finish(timeout=600)
                figure["run_s"] = round(time.monotonic() - launch.started, 2)
            else:
                stop_s, status = launch.stop()
                figure.update(stop_s=round(stop_s, 2), exit_status=status)
            figure["escalated"] = launch.escalated()
            return figure
        finally:
            if launch is not None:
                launch.kill()

    if smoke:
        log("teleop_record: until SIGINT (smoke: state observations)")
        figures["teleop_record.yaml"] = run("teleop_record.yaml", {"device": "scripted", "out": folder / "x.zarr",
                                                                   "obs_mode": "state"})
        return
    if only & {"teleop_record.yaml", "robot_train.yaml"}:
        log("teleop_record: one scripted episode (the demos robot_train trains on)")
        recorded = run("teleop_record.yaml", {"device": "scripted", "episodes": 1, "out": demos}, until_end=True)
        if "teleop_record.yaml" in only:
            log("teleop_record: until SIGINT")
            figures["teleop_record.yaml"] = run("teleop_record.yaml", {"device": "scripted", "out": folder / "x.zarr"})
            figures["teleop_record.yaml"]["one_episode_run_s"] = recorded["run_s"]
    if "robot_train.yaml" in only:
        log("robot_train: stand-in drivers, scripted human")
        idle = folder / "idle_driver.py"
        idle.write_text(IDLE_DRIVER)
        figures["robot_train.yaml"] = run("robot_train.yaml", {
            "camera_driver": f"{python} -m robot_rl.sim.node --obs-mode pixels --image-size 64 --mode realtime",
            "robot_driver": f"{python} {shlex.quote(str(idle))}", "device": "scripted", "demo_path": demos,
            "run_dir": folder / "robot_train", "critics": 2, "utd": 1})
    if only & {"sim_train.yaml", "sim_eval.yaml"}:
        log("sim_train: tiny budget, to its end")
        train = run("sim_train.yaml", {"steps": 60, "demos": 2, "eval_episodes": 1, "run_dir": policy.parent},
                    until_end=True)
        if "sim_train.yaml" in only:
            figures["sim_train.yaml"] = train
    if "sim_eval.yaml" in only:
        log("sim_eval: until SIGINT")
        figures["sim_eval.yaml"] = run("sim_eval.yaml", {"weights": policy, "episodes": 0})


# A child that reports SIGINT / SIGTERM and exits, or ignores them (argv[2]: polite | stubborn | deaf).
CHILD = """
import signal, sys, time
from pathlib import Path
Path(sys.argv[1]).write_text("ready")
def on_signal(signum, frame):
    if sys.argv[2] == "polite" or (sys.argv[2] == "stubborn" and signum == signal.SIGTERM):
        sys.exit(0)
signal.signal(signal.SIGINT, on_signal)
signal.signal(signal.SIGTERM, on_signal)
while True:
    time.sleep(0.05)
"""
# Exits with status 3 once the file argv[1] exists.
BOSS = """
import sys, time
from pathlib import Path
while not Path(sys.argv[1]).exists():
    time.sleep(0.02)
sys.exit(3)
"""


def measure_launcher(folder: Path) -> dict:
    """The launcher's own reaction times, with tiny Python children (no ROS nodes)."""
    import yaml

    from robot_rl.ros.launch import Launcher
    from robot_rl.ros.launch_file import load_launch_file

    child, boss = folder / "child.py", folder / "boss.py"
    child.write_text(textwrap.dedent(CHILD))
    boss.write_text(textwrap.dedent(BOSS))

    def timed(children: list[str], **kwargs) -> float:
        ready = [folder / f"{kind}{i}.ready" for i, kind in enumerate(children)]
        for marker in ready:
            marker.unlink(missing_ok=True)
        entries = [{"executable": {"cmd": f"{sys.executable} {child} {marker} {kind}", "name": f"{kind}{i}"}}
                   for i, (kind, marker) in enumerate(zip(children, ready))]
        go = folder / "go"
        go.unlink(missing_ok=True)
        entries.append({"executable": {"cmd": f"{sys.executable} {boss} {go}", "name": "boss", "on_exit": "shutdown"}})
        path = folder / "bench.launch.yaml"
        path.write_text(yaml.safe_dump({"launch": entries}))
        launcher = Launcher(load_launch_file(path), stdout=io.StringIO(), stderr=io.StringIO(), **kwargs)

        released: list[float] = []

        def release() -> None:
            while not all(marker.exists() for marker in ready):
                time.sleep(0.01)
            time.sleep(0.2)  # let them install their handlers
            released.append(time.monotonic())
            go.write_text("")

        thread = threading.Thread(target=release, daemon=True)
        thread.start()
        status = launcher.run()
        end = time.monotonic()
        if status > 128 and status - 128 in STOP_SIGNALS:  # the launcher took a stop meant for the bench
            interrupts.note(status - 128)
            raise interrupts.interrupt_for(status - 128)
        thread.join()
        assert status == 3, status
        return round(end - released[0], 3)

    return {"required_exit_to_end_s": timed(["polite", "polite"], grace_s=5.0),
            "escalation_s": timed(["stubborn", "deaf"], grace_s=0.5, term_timeout_s=0.5)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=FILES, default=list(FILES), help="shipped files to measure")
    parser.add_argument("--domain-id", type=int, default=None,
                        help="ROS_DOMAIN_ID of every launch (default: one per file, "
                             f"{min(DOMAINS.values())}-{max(DOMAINS.values())})")
    parser.add_argument("--smoke", action="store_true",
                        help="the launcher and teleop_record (state) until SIGINT only: checks that the bench runs "
                             "(tests run this)")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    result: dict = {"benchmark": "launch", "smoke": args.smoke, "cpus": os.cpu_count(),
                    "loadavg_1m_start": round(os.getloadavg()[0], 2)}
    errors = []
    with tempfile.TemporaryDirectory(prefix="bench-launch-") as tmp:
        folder = Path(tmp)
        try:
            result["launcher"] = measure_launcher(folder)
        except Exception as error:  # noqa: BLE001 - reported with the figures we have
            errors.append(f"launcher: {error!r}")
        result["files"] = {}
        try:
            measure_files(set(args.only), folder, result["files"], args.domain_id, args.smoke)
        except Exception as error:  # noqa: BLE001 - reported with the figures we have
            errors.append(f"files: {error!r}")
    result["loadavg_1m_end"] = round(os.getloadavg()[0], 2)
    if errors:
        result["errors"] = errors
    print(json.dumps(result), flush=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(interrupts.run_program(main))  # a stop ends what the bench started
