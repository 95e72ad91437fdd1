"""The suite's own rules: a skip is a failure where CI requires ROS (ROBOT_RL_REQUIRE_ROS=1), and one allocator hands
out every ROS domain id (tests/conftest.py, tests/ros_harness.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from ros_harness import allocate_domain_id

TESTS = Path(__file__).resolve().parent

SKIPPING = '''
import pytest

def test_without_what_it_needs():
    pytest.skip("the ROS 2 wheels are not installed")

def test_that_runs():
    pass
'''


def _run_skipping_suite(tmp_path: Path, require: str | None) -> subprocess.CompletedProcess:
    (tmp_path / "test_skipping.py").write_text(SKIPPING)
    env = {k: v for k, v in os.environ.items() if k != "ROBOT_RL_REQUIRE_ROS" and not k.startswith("PYTEST_")}
    if require is not None:
        env["ROBOT_RL_REQUIRE_ROS"] = require
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env["COLUMNS"] = "400"  # the summary line whole
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q", "-rA",
                           "-o", "addopts=", str(tmp_path / "test_skipping.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_skip_is_a_failure_naming_its_reason_where_ros_is_required(tmp_path):
    required = _run_skipping_suite(tmp_path, "1")
    assert required.returncode == 1 and "1 failed, 1 passed" in required.stdout, required.stdout
    assert "ROBOT_RL_REQUIRE_ROS=1 makes every skip a failure: the ROS 2 wheels are not installed" in required.stdout


def test_a_skip_stays_a_skip_with_its_reason_elsewhere(tmp_path):
    laptop = _run_skipping_suite(tmp_path, None)
    assert laptop.returncode == 0 and "1 passed, 1 skipped" in laptop.stdout, laptop.stdout
    assert "the ROS 2 wheels are not installed" in laptop.stdout


def test_ci_requires_ros():
    ci = (TESTS.parent / ".ci" / "run").read_text()
    assert re.search(r"^export ROBOT_RL_REQUIRE_ROS=1$", ci, re.M), ci


def test_domain_ids_come_from_one_allocator_and_differ():
    ids = [allocate_domain_id() for _ in range(20)]
    assert len(set(ids)) == len(ids) and all(1 <= i <= 232 for i in ids), ids
    # test_ros_env.py tests the variable's handling itself; a dry run or a launch of plain executables starts no graph
    fixed = [f"{path.name}:{number}" for path in sorted(TESTS.glob("test_*.py")) if path.name != "test_ros_env.py"
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"(^\s*[A-Z_]*DOMAIN_ID\s*=\s*\d|domain_id=\d|--domain-id\", \"\d|getpid\(\) %)", line)
             and "--dry-run" not in line and "_run(load_launch_file(path), domain_id=42)" not in line]
    assert not fixed, f"domain ids not from tests/ros_harness.py's allocate_domain_id: {fixed}"
