"""The ROS benchmarks re-run themselves inside a private network namespace (only ``lo``) with the project's ROS
environment, and refuse to run where none can be made (never on the host's network).

Run as a script, it is the bench of that step: prints ONE JSON line with the wall time of `rerun_in_private_network`
(namespace, ROS environment, a Python child that checks it sees only ``lo``, LOCALHOST discovery and the domain id)
against the same child started directly (the baseline, same run), p50 / p99 in ms, and their difference.

    python bench/private_network.py               # 20 runs each
    python bench/private_network.py --smoke       # 3 runs each: checks that it runs (tests run this)

Exit status 2 with one JSON error line where no private network namespace can be made.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
INNER_FLAG = "ROBOT_RL_BENCH_PRIVATE_NETWORK_INNER"
DOMAIN_ID = 98


def rerun_in_private_network(script: str, argv: Sequence[str], *, bench: str, domain_id: int, inner_flag: str,
                             timeout_s: float, extra_env: dict[str, str] | None = None) -> int:
    """Run `python script *argv` in a private network namespace with `inner_flag` (and `extra_env`) set in its
    environment; returns its exit status (124 after `timeout_s`; 2 with one JSON error line where no namespace can be
    made). At the end its whole process group gets SIGINT, then SIGKILL, also when a stop request ends the wait (SIGINT,
    or SIGTERM where :func:`robot_rl.core.interrupts.handling` raises it, as in the benches' entry points): that one goes on
    to the caller once the inner bench is stopped. Should this process die first, even by SIGKILL, the kernel sends
    the inner bench SIGTERM (``setpriv --pdeathsig``)."""
    from robot_rl.core import interrupts
    from robot_rl.ros.net.env import RosEnvironmentError, private_network_command, ros_environment

    env = ros_environment(domain_id=domain_id)
    env[inner_flag] = "1"
    env.update(extra_env or {})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    inner = [sys.executable, str(Path(script).resolve()), *argv]
    try:
        command = private_network_command(inner)
    except RosEnvironmentError as error:
        print(json.dumps({"bench": bench, "error": str(error)}), flush=True)
        return 2
    setpriv = shutil.which("setpriv")  # the inner bench gets SIGTERM (and cleans up) if this process dies
    guard = [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []
    proc = None
    try:
        with interrupts.uninterrupted():  # a stop request while it starts is raised once `proc` is set
            proc = subprocess.Popen([*guard, *command], env=env, cwd=REPO_ROOT, start_new_session=True)
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        print(f"[{bench}] timed out after {timeout_s:.0f}s", file=sys.stderr, flush=True)
        return 124
    finally:
        # A (further) stop request now is only recorded: interrupts.requested(), seen by the benches' entry points.
        with interrupts.deferred():
            for sig in (signal.SIGINT, signal.SIGKILL) if proc is not None else ():  # the inner bench, its children
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=5.0)
                    break
                except subprocess.TimeoutExpired:
                    pass


# ------------------------------------------------------------------------------------------------ the bench


def interfaces() -> list[str]:
    """Network interfaces of this process's network namespace (/proc/self/net/dev, unlike /sys, is per namespace)."""
    lines = Path("/proc/self/net/dev").read_text().splitlines()[2:]
    return sorted(line.split(":", 1)[0].strip() for line in lines)


def role_check(domain_id: int) -> int:
    """The child: exit 0 in a private network (only lo) with LOCALHOST discovery and `domain_id`, else 3 (a reason on
    stderr)."""
    problems = []
    if interfaces() != ["lo"]:
        problems.append(f"interfaces {interfaces()}")
    if os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE") != "LOCALHOST":
        problems.append(f"ROS_AUTOMATIC_DISCOVERY_RANGE={os.environ.get('ROS_AUTOMATIC_DISCOVERY_RANGE')!r}")
    if os.environ.get("ROS_DOMAIN_ID") != str(domain_id):
        problems.append(f"ROS_DOMAIN_ID={os.environ.get('ROS_DOMAIN_ID')!r}, expected {domain_id}")
    if problems:
        print(f"[private_network] not private: {'; '.join(problems)}", file=sys.stderr, flush=True)
    return 3 if problems else 0


def percentiles_ms(seconds: Sequence[float]) -> dict:
    import statistics

    values = sorted(1e3 * s for s in seconds)
    return {"p50": round(statistics.median(values), 2), "p99": round(values[min(len(values) - 1,
                                                                               int(0.99 * len(values)))], 2),
            "n": len(values)}


def main(argv: list[str] | None = None) -> int:
    import argparse

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=None, help="timed runs of each (default 20)")
    parser.add_argument("--domain-id", type=int, default=DOMAIN_ID, help=f"ROS_DOMAIN_ID (default {DOMAIN_ID})")
    parser.add_argument("--smoke", action="store_true", help="3 runs each: checks that the bench runs (tests run this)")
    parser.add_argument("--role", choices=("check",), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == "check":
        return role_check(args.domain_id)
    from robot_rl.ros.net.env import RosEnvironmentError, network_namespace_problem, ros_environment

    try:
        ros_environment(domain_id=args.domain_id)  # the ROS wheels are there
        problem = network_namespace_problem()
        problem = problem and f"cannot make a private network namespace: {problem}"
    except RosEnvironmentError as error:
        problem = str(error)
    if problem:
        print(json.dumps({"bench": "private_network", "error": problem}))
        return 2
    runs = args.runs or (3 if args.smoke else 20)
    child = ["--role", "check", "--domain-id", str(args.domain_id)]
    direct_env = {**os.environ, "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "ROS_DOMAIN_ID": str(args.domain_id)}

    def private() -> int:
        return rerun_in_private_network(__file__, child, bench="private_network", domain_id=args.domain_id,
                                        inner_flag=INNER_FLAG, timeout_s=60.0)

    def direct() -> int:
        return subprocess.run([sys.executable, str(Path(__file__).resolve()), *child], env=direct_env,
                              cwd=REPO_ROOT, stderr=subprocess.DEVNULL).returncode  # it reports the host network

    timings: dict[str, list[float]] = {"direct": [], "private_network": []}
    statuses: dict[str, set[int]] = {"direct": set(), "private_network": set()}
    for name, run in (("direct", direct), ("private_network", private)):
        run()  # warm-up (page cache, the unshare probe)
    for _ in range(runs):  # interleaved, so a change of load hits both
        for name, run in (("direct", direct), ("private_network", private)):
            start = time.perf_counter()
            statuses[name].add(run())
            timings[name].append(time.perf_counter() - start)
    direct_ms, private_ms = percentiles_ms(timings["direct"]), percentiles_ms(timings["private_network"])
    result = {"bench": "private_network", "smoke": args.smoke, "runs": runs, "domain_id": args.domain_id,
              "cpus": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2),
              "baseline_direct_ms": direct_ms, "private_network_ms": private_ms,
              "overhead_p50_ms": round(private_ms["p50"] - direct_ms["p50"], 2),
              "ratio_p50": round(private_ms["p50"] / direct_ms["p50"], 2),
              # the child checks what it sees: only lo in the namespace (direct: the host's interfaces, exit 3)
              "private_child_checks_passed": statuses["private_network"] == {0},
              "direct_child_sees_host_network": statuses["direct"] == {3}}
    print(json.dumps(result), flush=True)
    return 0 if result["private_child_checks_passed"] else 1


if __name__ == "__main__":
    from robot_rl.core import interrupts

    sys.exit(interrupts.run_program(main))  # a stop ends what the bench started
