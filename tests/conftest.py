"""Settings for the whole test session, and for every process a test starts (they inherit the environment).

What a test may assert about time: nothing but generous deadlines for liveness (a failure detector many times the
time the thing takes on two idle cores: "it ended", "it arrived"). The suite runs on two cores beside the other
pytest worker, and CI machines are loaded: a count of real-time events (held commands, frames, messages received in
N seconds), a rate (Hz) or a latency bound is a figure, not a behaviour, and belongs in a `bench/` script, which
prints it as JSON against a baseline measured in the same run. A test asserts what holds whatever the load: an
ordering, a cause (a hold's reason is `policy_late`, never `stale_sensor`), an invariant (no stale action executed).
A test that needs another one's result takes it from a shared fixture and fails, never skips, when it is missing.

Skips are visible: with ROBOT_RL_REQUIRE_ROS=1 (`.ci/run` sets it) every skip is a failure that names its reason
(no ROS 2 wheels, no private network namespace, no openssl, ...), so a CI machine where ROS cannot start fails
instead of passing green without ROS coverage; without it (a laptop without ``unshare``) such tests skip, with
the reason.

JAX's persistent compilation cache: one folder per pytest session (JAX_COMPILATION_CACHE_DIR, removed when the session
ends), so a gradient step that several processes of a test compile alike (a `robot-rl train` run and its resumes, an
in-process run after another) is compiled once per session, not once per process. It only skips repeated compiles:
what runs is the same executable. Every compile is kept, however short (JAX keeps only those over 1 s by default: the
many short ones of each node, train run and policy made it again in every process). A folder given by the caller is
kept as given. Learner nodes use it too (their jax_cache_dir parameter is empty: JAX_COMPILATION_CACHE_DIR first,
else the run folder's, as in production).
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from robot_rl.core.startup import set_process_defaults

set_process_defaults()  # as every robot_rl program does at its start (headless MuJoCo, no hub, JAX beside torch)

# A session started with SIGINT ignored (a script's background job: `cmd &` without job control ignores it, and the
# pytest workers inherit that through exec) would pass it on to every program a test starts, and a Ctrl-C sent by a
# test would reach none of them while they start: tests check how programs meet a Ctrl-C, so Python's own handling.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    _JAX_CACHE = tempfile.mkdtemp(prefix="robot-rl-tests-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _JAX_CACHE
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    atexit.register(shutil.rmtree, _JAX_CACHE, ignore_errors=True)


# `make test` runs two pytest-xdist workers (-n 2 --dist loadfile): each test file goes to one worker, whole (its
# module fixtures are made once), and the files that start ROS 2 nodes (or a launch, or the private-network hosts)
# count as one file: they run on one worker, one at a time (each graph has its own network, IPC and /dev/shm
# namespaces and a domain id from tests/ros_harness.allocate_domain_id, but real-time nodes need the core), while the
# other worker takes the files that only compute.
# They come first, so that long stream starts at once and the short files fill in beside it. A file that names those
# modules but starts no node says so with a line `COMPUTES_ONLY = True` and runs beside them.
_ROS_FILE = re.compile(r"rclpy|ROS_DOMAIN_ID|domain_id|ros_harness|robot_rl\.ros|LaunchRun|unshare")
_COMPUTES_ONLY = re.compile(r"^COMPUTES_ONLY = True", re.M)
_TESTS = Path(__file__).resolve().parent
_uses_ros: dict[str, bool] = {}


def _starts_ros(file_name: str) -> bool:
    if file_name not in _uses_ros:
        path = _TESTS / file_name
        text = path.read_text() if path.is_file() else ""
        _uses_ros[file_name] = bool(_ROS_FILE.search(text)) and not _COMPUTES_ONLY.search(text)
    return _uses_ros[file_name]


REQUIRE_ROS_VARIABLE = "ROBOT_RL_REQUIRE_ROS"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and os.environ.get(REQUIRE_ROS_VARIABLE) == "1":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = f"skipped, and {REQUIRE_ROS_VARIABLE}=1 makes every skip a failure: {reason}"


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: not _starts_ros(item.path.name))  # stable: each file keeps its own order


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class RosFilesTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "ROS 2 files" if _starts_ros(Path(path).name) else path

    return RosFilesTogether(config, log)
