"""The package layout's rules (robot_rl/__init__.py): every import, at module level or inside a function, points down
the layers; the actor's side and the learner's never import each other; only the ROS shell and node modules import
rclpy; no module is over 800 lines; each package's ``__init__`` says what it holds and what it may import."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

COMPUTES_ONLY = True  # names robot_rl.ros modules, starts no ROS 2 node (tests/conftest.py)
ROOT = Path(__file__).resolve().parents[1]
SOURCES = {"robot_rl": ROOT / "robot_rl", "robot_rl.sim": ROOT / "sim", "robot_rl.policies": ROOT / "policies",
           "robot_rl.drivers": ROOT / "drivers"}
LAYERS = {"core": 0, "data": 1, "agents": 2, "wire": 3, "policies": 4, "actor": 5, "learner": 5, "sim": 6,
          "training": 7, "ros": 8, "drivers": 9, "apps": 10}
NODE_MODULES = {"robot_rl.sim.node", "robot_rl.sim.scripted_teleop"}  # node programs that live in the sim folder
PEERS_APART = {frozenset({"actor", "learner"})}
MAX_LINES = 800


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            if "models" in path.relative_to(folder).parts:
                continue
            name = ".".join((package, *path.relative_to(folder).with_suffix("").parts)).removesuffix(".__init__")
            found[name] = path
    return found


def role(module: str) -> str | None:
    """The layer a robot_rl module belongs to (None: the root package)."""
    if module in NODE_MODULES:
        return "ros"
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, wherever the import statement is (absolute imports only: the tree has no
    relative ones)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def violations() -> set[tuple[str, str]]:
    known = modules()
    found = set()
    for module, path in known.items():
        mine = role(module)
        if mine is None:
            continue
        for target in imports(path):
            if target not in known or role(target) in (None, mine):
                continue
            theirs = role(target)
            if LAYERS[theirs] >= LAYERS[mine] or frozenset({mine, theirs}) in PEERS_APART:
                found.add((module, target))
        if module.startswith("robot_rl.ros.net."):
            found.update((module, t) for t in imports(path) if t in known and role(t) != "core"
                         and not t.startswith("robot_rl.ros.net"))
    return found


# Imports against the rules still in the tree, each with the step that removes it. The list only shrinks: a pair that
# is gone must leave it (the test says so), a new one fails.
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {
}


def test_imports_point_down_the_layers():
    found = violations()
    new = sorted(found - set(KNOWN_EXCEPTIONS))
    assert not new, "imports against the layout's rules (robot_rl/__init__.py):\n" + "\n".join(
        f"  {a} imports {b}" for a, b in new)
    gone = sorted(set(KNOWN_EXCEPTIONS) - found)
    assert not gone, "no longer imported; remove from KNOWN_EXCEPTIONS:\n" + "\n".join(f"  {a} -> {b}" for a, b in gone)


def test_every_module_belongs_to_a_layer():
    assert {role(m) for m in modules()} - {None} <= set(LAYERS)


def test_only_the_ros_shell_and_node_modules_import_rclpy():
    users = sorted(m for m, p in modules().items() if role(m) not in ("ros", "drivers")
                   and any(t == "rclpy" or t.startswith("rclpy.") for t in imports(p)))
    assert users == []


def test_no_module_is_over_the_line_limit():
    over = {m: n for m, p in modules().items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert over == {}


@pytest.mark.parametrize("package", sorted(m for m, p in modules().items() if p.name == "__init__.py"))
def test_each_package_says_what_it_holds(package):
    doc = ast.get_docstring(ast.parse(modules()[package].read_text()))
    assert doc, f"{package}/__init__.py has no docstring"
    if package.count(".") == 1 and role(package) in LAYERS and role(package) not in ("policies", "sim", "drivers"):
        assert "May import" in doc, f"{package}: its docstring does not say what it may import"


def test_importing_robot_rl_changes_nothing_in_the_process():
    """The defaults a program sets (robot_rl.core.startup) are not set by an import; nor is SIGINT's handling."""
    import os
    import subprocess
    import sys

    from robot_rl.core.startup import PROCESS_DEFAULTS

    code = ("import os, signal, sys; handler = signal.getsignal(signal.SIGINT); "
            "import robot_rl, robot_rl.core.files, robot_rl.actor.safety, robot_rl.wire.outbox, robot_rl.apps.console; "
            f"set_here = sorted(set({sorted(PROCESS_DEFAULTS)!r}) & set(os.environ)); assert not set_here, set_here; "
            "assert signal.getsignal(signal.SIGINT) is handler; "
            "heavy = sorted({'jax', 'torch', 'mujoco', 'rclpy'} & set(sys.modules)); assert not heavy, heavy")
    env = {k: v for k, v in os.environ.items() if k not in PROCESS_DEFAULTS}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


def test_a_program_sets_its_defaults_without_overriding_the_users(monkeypatch):
    import os

    from robot_rl.core.startup import PROCESS_DEFAULTS, set_process_defaults

    for name in PROCESS_DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    set_process_defaults()
    assert os.environ["MUJOCO_GL"] == "osmesa"
    assert os.environ["HF_HUB_OFFLINE"] == PROCESS_DEFAULTS["HF_HUB_OFFLINE"]
