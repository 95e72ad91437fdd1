"""The machinery of the bench smoke tests (tests/test_benches.py: the ROS benches, tests/test_benches_compute.py: the
others): each bench in bench/ runs with ``--smoke`` (the same code path at its smallest sizes) as a subprocess from the
repository root, as a user would run it, and prints its one JSON line with the figures it promises, which the test
checks (never a timing: only that each figure is there and sane)."""

from __future__ import annotations

import concurrent.futures
import json
import math
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 120

# name: (extra arguments (tmp_path -> list), figure check, ROS domain id or None)
Benches = dict[str, tuple[Callable[[Path], list[str]], Callable[[dict, Path], None], "int | None"]]


def positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def fraction(value) -> bool:
    return isinstance(value, (int, float)) and 0.0 <= value <= 1.0


_running: set[subprocess.Popen] = set()  # the benches' processes under way (killed if the session ends first)
_running_lock = threading.Lock()


def run(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """(return code, stdout, stderr) of `argv` run from the repository root. On a time-out the bench gets SIGINT
    first (the ROS benches then stop the children they started in sessions of their own), then its process group
    SIGKILL, and the test fails."""
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    with _running_lock:
        _running.add(process)
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGINT)
        try:
            stdout, stderr = process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
        pytest.fail(f"{' '.join(argv[1:])} timed out after {TIMEOUT_S} s\nstdout: {stdout[-2000:]}\n"
                    f"stderr: {stderr[-4000:]}")
    finally:
        with _running_lock:
            _running.discard(process)
    return process.returncode, stdout, stderr


def ros_skip_reason() -> str | None:
    from robot_rl.ros.net.env import RosEnvironmentError, find_ros_wheels, network_namespace_problem

    try:
        find_ros_wheels()
    except RosEnvironmentError as error:
        return str(error)
    problem = network_namespace_problem()
    return f"cannot make a private network namespace: {problem}" if problem else None


def smoke_run(benches: Benches, name: str, tmp_path: Path) -> tuple[int, str, str]:
    """`bench/NAME.py --smoke` (a ROS bench on its own domain id), output folders in `tmp_path`; skips a ROS bench
    (with the reason) where it cannot run."""
    arguments, _, domain_id = benches[name]
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    argv = [sys.executable, f"bench/{name}.py", "--smoke", *arguments(tmp_path)]
    if domain_id is not None:
        reason = ros_skip_reason()
        if reason:
            pytest.skip(reason)
        env.update(ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", ROS_DOMAIN_ID=str(domain_id))
        argv += ["--domain-id", str(domain_id)]
    return run(argv, env)


def start_smoke_runs(request, tmp_path_factory, benches: Benches, jobs: int, longest_first: tuple[str, ...]):
    """{bench name: (future of its smoke_run, its output folder)} for the benches of `benches` this session selected,
    `jobs` at a time, longest first (a generator for a module fixture: the runs under way end with it)."""
    selected = set()
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if getattr(item, "module", None) is request.module and callspec is not None and "name" in callspec.params:
            selected.add(callspec.params["name"])
    rank = {name: i for i, name in enumerate(longest_first)}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="bench-smoke")
    runs = {}
    for name in sorted(selected, key=lambda name: (rank.get(name, len(rank)), name)):
        folder = tmp_path_factory.mktemp(f"bench-{name}")
        runs[name] = (pool.submit(smoke_run, benches, name, folder), folder)
    try:
        yield runs
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        with _running_lock:
            for process in _running:  # only if the session ended before a run did
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def check_smoke_run(benches: Benches, name: str, runs) -> None:
    """Wait for bench `name`'s smoke run; it exited 0 and its last line's figures pass its check."""
    _, check, _ = benches[name]
    future, tmp_path = runs[name]
    returncode, stdout, stderr = future.result()
    assert returncode == 0, f"rc {returncode}\nstdout: {stdout[-2000:]}\nstderr: {stderr[-4000:]}"
    lines = stdout.strip().splitlines()
    assert lines, f"no output; stderr: {stderr[-3000:]}"
    figures = json.loads(lines[-1])
    assert figures.get("smoke") is True, figures
    check(figures, tmp_path)


def smoke_tests(benches: Benches, jobs: int, longest_first: tuple[str, ...]):
    """A test module's (`smoke_runs` module fixture, `test_bench_smoke` test parametrized by bench name) for
    `benches`: assign both to module globals."""

    @pytest.fixture(scope="module")
    def smoke_runs(request, tmp_path_factory):
        yield from start_smoke_runs(request, tmp_path_factory, benches, jobs, longest_first)

    @pytest.mark.parametrize("name", sorted(benches))
    def test_bench_smoke(name, smoke_runs):
        check_smoke_run(benches, name, smoke_runs)

    return smoke_runs, test_bench_smoke
