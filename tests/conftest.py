"""Settings for the whole test session, and for every process a test starts (they inherit the environment).

JAX's persistent compilation cache: one folder per pytest session (JAX_COMPILATION_CACHE_DIR, removed when the session
ends), so a gradient step that several processes of a test compile alike (a `robot-rl train` run and its resumes, an
in-process run after another) is compiled once per session, not once per process. It only skips repeated compiles:
what runs is the same executable. A folder given by the caller is kept as given. The learner node sets its own cache
(its jax_cache_dir parameter: the run folder's by default), as it does in production.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    _JAX_CACHE = tempfile.mkdtemp(prefix="robot-rl-tests-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _JAX_CACHE
    atexit.register(shutil.rmtree, _JAX_CACHE, ignore_errors=True)


# `make test` runs two pytest-xdist workers (--dist loadgroup). A test file that starts ROS 2 nodes (or a launch, or
# the private-network hosts) belongs to the group "ros": those run on one worker, one at a time, as they were written
# to (fixed domain ids; Fast DDS's shared-memory transport crosses network namespaces), while the other worker takes
# the files that only compute. Each other file is a group of its own (its module fixtures are made once). The ROS
# group comes first, so the long serial stream starts at once and the short files fill in beside it.
_ROS_FILE = re.compile(r"rclpy|ROS_DOMAIN_ID|domain_id|ros_harness|robot_rl\.ros|LaunchRun|unshare")
_uses_ros: dict[Path, bool] = {}


def _group(path: Path) -> str:
    if path not in _uses_ros:
        _uses_ros[path] = bool(_ROS_FILE.search(path.read_text()))
    return "ros" if _uses_ros[path] else path.name


def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group(item.path)))
    items.sort(key=lambda item: _group(item.path) != "ros")  # stable: the ROS files first, each in its own order
