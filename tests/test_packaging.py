"""The top-level drivers/, policies/, sim/ folders install as robot_rl.drivers, robot_rl.policies, robot_rl.sim."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAPPED = {"robot_rl.drivers": "drivers", "robot_rl.policies": "policies", "robot_rl.sim": "sim",
          "robot_rl.robots": "robots"}


def test_installed_package_maps_top_level_folders():
    import importlib

    import robot_rl

    package_dir = Path(robot_rl.__file__).resolve().parent
    for module, folder in MAPPED.items():
        path = Path(importlib.import_module(module).__file__).resolve()
        editable, installed = ROOT / folder / "__init__.py", package_dir / module.split(".")[1] / "__init__.py"
        assert path in (editable, installed), f"{module} imported from {path}"


@pytest.mark.slow
def test_non_editable_install_imports_mapped_packages(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "wheel"), str(ROOT)],
        check=True,
        timeout=300,
    )
    wheel = next((tmp_path / "wheel").glob("robot_rl-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for module in MAPPED:
        assert f"{module.replace('.', '/')}/__init__.py" in names, names
    assert not any(name.startswith(("sim/", "drivers/", "policies/", "robots/", "tests/")) for name in names)
    assert {"robot_rl/robots/sim_panda.yaml", "robot_rl/robots/models/sim_panda.xml"} <= set(names), names
    # Every package by role (robot_rl/__init__.py) and the data files that moved with them.
    packages = {f"{path.parent.relative_to(ROOT).as_posix()}/__init__.py"
                for path in (ROOT / "robot_rl").rglob("__init__.py")}
    assert packages <= set(names), sorted(packages - set(names))
    assert {"robot_rl/ros/net/fastdds_shm.xml", "robot_rl/sim/suites/default.yaml"} <= set(names), names
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        timeout=300,
    )
    code = "import robot_rl, robot_rl.sim, robot_rl.drivers, robot_rl.policies, robot_rl.data; print(robot_rl.sim.__file__)"
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(target)!r}); {code}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(str(target)), out.stdout
