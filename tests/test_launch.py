"""The project's ROS 2 launcher: parsing, substitutions, argv rendering, output, signals, respawn, no orphans; and
every shipped launch file, run end to end.

The launcher tests use tiny Python scripts written to tmp_path as children (no ROS needed); the SIGINT test runs the
launcher as `python -m robot_rl.apps.cli launch` in its own subprocess, the others run a `Launcher` in-process. The
shipped files run as `robot-rl launch` in a private network namespace (only `lo`) with their own ROS_DOMAIN_ID:
sim_train (tiny budget) -> sim_eval on its policy; teleop_record with the scripted human -> robot_train on those
demos, with the sim node standing in for the robot's drivers (checked by its doctor preflight first); teleop_record
with a missing gamepad; a teleop node with device auto and no device. Every `param`
name in the shipped files is checked against the parameters its node declares. Timing figures: bench/launch.py.
"""

from __future__ import annotations

import glob
import importlib
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from ros_harness import allocate_domain_id
import yaml

from robot_rl.apps.cli import main
from robot_rl.ros.launch import Launcher
from robot_rl.ros.launch_file import (
    LaunchDescription,
    LaunchError,
    load_launch_file,
    parse_cli_arguments,
    render_param_value,
)

from robot_rl.ros.net.lan import is_lan_profile

REPO = Path(__file__).resolve().parents[1]
LAUNCH_DIR = REPO / "launch"


def _wheels_or_skip() -> None:
    from robot_rl.ros.net.env import RosEnvironmentError, find_ros_wheels

    try:
        find_ros_wheels()
    except RosEnvironmentError as exc:
        pytest.skip(str(exc))


def _write(tmp_path: Path, entries: list, name: str = "test.launch.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"launch": entries}, sort_keys=False))
    return path


def _script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    prelude = "import os, signal, sys, time\nfrom pathlib import Path\n"
    path.write_text(prelude + textwrap.dedent(body))
    return path


def _cmd(script: Path, *args: str) -> str:
    return " ".join([sys.executable, str(script), *args])


def _gone(pid: int) -> bool:
    """True if no process has this pid any more (or only a zombie someone else has to reap)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"


def _wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)


def _run(description, **kwargs) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = Launcher(description, stdout=out, stderr=err, **kwargs).run()
    return status, out.getvalue(), err.getvalue()


# A child that records its pid, reports SIGINT/SIGTERM, says it is ready and then waits.
POLITE = """
Path(sys.argv[1]).write_text(str(os.getpid()))
def on_signal(signum, frame):
    print(f"{Path(sys.argv[1]).stem} got {signal.Signals(signum).name}", flush=True)
    sys.exit(0)
signal.signal(signal.SIGINT, on_signal)
signal.signal(signal.SIGTERM, on_signal)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""

# Starts a grandchild (same process group) and records its pid in argv[2].
SPAWN_GRANDCHILD = """
import subprocess
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
Path(sys.argv[2]).write_text(str(grandchild.pid))
"""

# Exits with the status in argv[2] once the file in argv[1] exists (so the others are ready first).
EXIT_WHEN = """
while not Path(sys.argv[1]).exists():
    time.sleep(0.02)
time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 0.0)
print("leaving", flush=True)
sys.exit(int(sys.argv[2]))
"""


# ------------------------------------------------------------------------------------------------ parsing


def test_substitutions_defaults_and_command_line_overrides(tmp_path, monkeypatch):
    monkeypatch.setenv("LAUNCH_TEST_GL", "osmesa")
    monkeypatch.delenv("LAUNCH_TEST_UNSET", raising=False)
    path = _write(tmp_path, [
        {"arg": {"name": "task", "default": "PickCube-v0", "description": "task id"}},
        {"arg": {"name": "robot", "default": "robot1"}},
        {"arg": {"name": "rate", "default": 10}},
        {"arg": {"name": "config", "default": "$(dirname)/$(var robot).yaml"}},
        {"executable": {
            "cmd": "tool --task $(var task) --file '$(var config)' --gl $(env LAUNCH_TEST_GL) "
                   "--x '$(env LAUNCH_TEST_UNSET fall back)'",
            "name": "tool",
            "env": [{"name": "WHO", "value": "$(var robot)"}, {"name": "N", "value": 3}],
        }},
    ])
    description = load_launch_file(path, {"robot": "arm 2"})
    assert {a.name: a.value for a in description.arguments} == {
        "task": "PickCube-v0", "robot": "arm 2", "rate": "10", "config": f"{tmp_path}/arm 2.yaml",
    }
    (spec,) = description.processes
    # A quoted substitution stays one word, spaces and all.
    assert spec.argv == (
        "tool", "--task", "PickCube-v0", "--file", f"{tmp_path}/arm 2.yaml", "--gl", "osmesa", "--x", "fall back",
    )
    assert spec.env == {"WHO": "arm 2", "N": "3", "PYTHONUNBUFFERED": "1"}
    assert not spec.required and not spec.respawn
    assert description.commands() == [spec.command()]
    assert spec.command().startswith("WHO='arm 2' N=3 PYTHONUNBUFFERED=1 tool --task PickCube-v0 --file ")


def test_node_argv_rendering(tmp_path):
    path = _write(tmp_path, [
        {"arg": {"name": "task", "default": "PickCube-v0"}},
        {"arg": {"name": "hz", "default": "10"}},
        {"node": {
            "pkg": "robot_rl", "exec": "sim_node", "name": "sim", "namespace": "robot1",
            "param": [
                {"name": "task", "value": "$(var task)"},
                {"name": "rate_hz", "value": "$(var hz)"},  # substituted text is read as YAML: an int
                {"name": "headless", "value": True},
                {"name": "seed", "value": 7},
                {"name": "dt", "value": 0.002},
                {"name": "tiny", "value": "1e-5"},  # YAML 1.2 float, as rcl reads it
                {"name": "cameras", "value": ["front", "wrist"]},
                {"name": "gains", "value": [1, 2.5]},
                {"name": "label", "value": "42"},  # a quoted YAML string stays a string
                {"name": "phrase", "value": "hello world"},
                {"name": "limits", "value": {"x": 0.5, "y": -1}},
            ],
            "remap": [{"from": "command/target_pose", "to": "/other/target"}],
            "args": "--mode 'lock step'",
            "respawn": True, "respawn_delay": 2, "on_exit": "shutdown",
        }},
        {"node": {"module": "some.python.module"}},
    ])
    sim, bare = load_launch_file(path).processes
    assert sim.name == "robot1/sim"
    assert sim.argv == (
        sys.executable, "-m", "robot_rl.sim.node", "--mode", "lock step",
        "--ros-args", "-r", "__node:=sim", "-r", "__ns:=/robot1",
        "-p", "task:=PickCube-v0", "-p", "rate_hz:=10", "-p", "headless:=true", "-p", "seed:=7",
        "-p", "dt:=0.002", "-p", "tiny:=1e-05", "-p", "cameras:=[front, wrist]", "-p", "gains:=[1.0, 2.5]",
        "-p", "label:='42'", "-p", "phrase:='hello world'", "-p", "limits.x:=0.5", "-p", "limits.y:=-1",
        "-r", "command/target_pose:=/other/target",
    )
    assert sim.required and sim.respawn and sim.respawn_delay == 2.0
    # No name, namespace, params or remaps: no --ros-args at all; the label is the module's last part.
    assert bare.argv == (sys.executable, "-m", "some.python.module") and bare.name == "module"


def test_commands_are_split_like_a_shell_after_substitution(tmp_path):
    path = _write(tmp_path, [
        {"arg": {"name": "driver", "default": "python3 -m my.driver --fps 30 --label 'front cam'"}},
        {"arg": {"name": "node_args", "default": "--mode 'lock step'"}},
        {"arg": {"name": "folder", "default": "my data"}},
        {"executable": {"cmd": "$(var driver) --out '$(dirname)/$(var folder)'", "name": "driver"}},
        {"node": {"module": "some.node", "name": "n", "args": "$(var node_args) --in $(var folder)"}},
    ])
    driver, node = load_launch_file(path).processes
    # A substituted command line becomes words, its own quotes respected; a quoted substitution stays one word.
    assert driver.argv == ("python3", "-m", "my.driver", "--fps", "30", "--label", "front cam",
                           "--out", f"{tmp_path}/my data")
    assert node.argv == (sys.executable, "-m", "some.node", "--mode", "lock step", "--in", "my", "data",
                         "--ros-args", "-r", "__node:=n")
    # A value that cannot be split names the key and shows what the substitution made of it.
    quote = _write(tmp_path, [{"arg": {"name": "driver", "default": "it's"}}, {"executable": {"cmd": "$(var driver)"}}],
                   "quote.yaml")
    with pytest.raises(LaunchError, match=r"key 'cmd': cannot split '\$\(var driver\)' \(substituted: \"it's\"\)"):
        load_launch_file(quote)


def test_nested_and_boolean_substitutions(tmp_path):
    path = _write(tmp_path, [
        {"arg": {"name": "device", "default": "gamepad"}},
        {"arg": {"name": "sim", "default": "true"}},
        {"executable": {"cmd": "teleop --device $(var device)", "name": "teleop",
                        "unless": "$(or $(equals $(var device) scripted) $(equals $(var device) none))"}},
        {"executable": {"cmd": "human", "name": "human", "if": "$(equals $(var device) scripted)"}},
        {"executable": {"cmd": "sim", "name": "sim", "if": "$(and $(var sim) $(not-equals $(var device) none))"}},
        {"executable": {"cmd": "echo $(not $(var sim)) $(env LAUNCH_TEST_UNSET_$(var device) $(var device)-x)",
                        "name": "echo"}},
    ])

    def started(**arguments):
        return {p.name: p.argv for p in load_launch_file(path, arguments).processes}

    assert list(started()) == ["teleop", "sim", "echo"]
    assert started()["echo"] == ("echo", "false", "gamepad-x")
    assert list(started(device="scripted")) == ["human", "sim", "echo"]
    assert list(started(device="none", sim="1")) == ["echo"]
    assert list(started(device="scripted", sim="FALSE")) == ["human", "echo"]
    with pytest.raises(LaunchError, match=r"key 'if': \$\(and \$\(var sim\) .*needs true or false, got 'maybe'"):
        started(sim="maybe")


@pytest.mark.parametrize(
    "value,rendered",
    [(True, "true"), (False, "false"), (3, "3"), (-2.5, "-2.5"), ("abc", "abc"), ("/a/b_c.d", "/a/b_c.d"),
     ("yes", "'yes'"), ("3", "'3'"), ("it's", "'it''s'"), ("", "''"), ([True, False], "[true, false]"),
     (["a", "b c"], "[a, 'b c']"), ([1, 2], "[1, 2]")],
)
def test_param_values_render_as_rcl_reads_them(value, rendered):
    assert render_param_value(value) == rendered


def test_param_values_rcl_cannot_type_are_rejected():
    with pytest.raises(ValueError, match="empty list"):
        render_param_value([])
    with pytest.raises(ValueError, match="one scalar type"):
        render_param_value(["a", 1])


@pytest.mark.parametrize(
    "entries,arguments,fragments",
    [
        ([{"node": {"pkg": "robot_rl", "exec": "sim_node", "colour": "red"}}], {},
         ["entry 0 (node)", "unknown key(s) 'colour'", "allowed:"]),
        ([{"arg": {"name": "task"}}], {}, ["entry 0 (arg)", "argument 'task' has no default", "task:=VALUE"]),
        ([{"arg": {"name": "a", "default": "1"}}, {"node": {"pkg": "robot_rl", "exec": "nope_node"}}], {},
         ["entry 1 (node)", "key 'exec'", "unknown executable 'nope_node'", "sim_node", "learner_node"]),
        ([{"node": {"pkg": "other_pkg", "exec": "x"}}], {}, ["entry 0 (node)", "key 'pkg'", "other_pkg"]),
        ([{"executable": {"cmd": "x $(find pkg)"}}], {}, ["entry 0 (executable)", "key 'cmd'", "$(find pkg)"]),
        ([{"executable": {"cmd": "x $(var missing)"}}], {}, ["key 'cmd'", "undeclared argument"]),
        ([{"executable": {"cmd": "x $(var a"}}], {}, ["key 'cmd'", "unterminated"]),
        ([{"executable": {"name": "x"}}], {}, ["entry 0 (executable)", "missing required key 'cmd'"]),
        ([{"node": {"name": "x"}}], {}, ["entry 0 (node)", "missing required key 'pkg'"]),
        ([{"group": {}}], {}, ["entry 0", "unknown entry kind 'group'"]),
        ([{"executable": {"cmd": "x", "on_exit": "restart"}}], {}, ["key 'on_exit'", "'restart'"]),
        ([{"executable": {"cmd": "x", "respawn": "maybe"}}], {}, ["key 'respawn'", "true or false"]),
        ([{"node": {"module": "m", "param": [{"name": "p", "value": []}]}}], {}, ["param[0] (p)", "empty list"]),
        ([{"executable": {"cmd": "a", "name": "x"}}, {"executable": {"cmd": "b", "name": "x"}}], {},
         ["several processes are named x"]),
        ([{"arg": {"name": "a", "default": "1"}}], {"b": "2"}, ["unknown launch argument(s) b", "declared: a"]),
        ([{"arg": {"name": "steps", "default": "1"}}, {"arg": {"name": "seed", "default": "0"}}], {"step": "2"},
         ["unknown launch argument(s) step; did you mean steps? (declared: steps, seed)"]),
        ([{"executable": {"cmd": "x $(equals a)"}}], {}, ["key 'cmd'", "$(equals a) has 1 argument(s)", "A B"]),
        ([{"executable": {"cmd": "x", "if": "maybe"}}], {}, ["key 'if'", "expected true or false", "'maybe'"]),
        ([{"arg": {"name": "on", "default": "yes"}}, {"executable": {"cmd": "x", "if": "$(var on)"}}], {},
         ["entry 1 (executable)", "key 'if'", "'$(var on)' (= 'yes')"]),
        ([{"executable": {"cmd": "x 'unbalanced"}}], {}, ["key 'cmd'", "cannot split", "No closing quotation"]),
    ],
)
def test_errors_name_file_entry_and_key(tmp_path, entries, arguments, fragments):
    path = _write(tmp_path, entries)
    with pytest.raises(LaunchError) as info:
        load_launch_file(path, arguments)
    message = str(info.value)
    assert str(path) in message and "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_errors_give_the_line_of_the_entry(tmp_path):
    path = tmp_path / "lines.yaml"
    path.write_text("launch:\n- arg: {name: a, default: x}\n\n- node:\n    pkg: robot_rl\n    exec: sim_node\n"
                    "    colour: red\n")
    with pytest.raises(LaunchError) as info:
        load_launch_file(path)
    assert str(info.value).startswith(f"{path}:4:3: entry 1 (node): unknown key(s) 'colour'"), info.value


@pytest.mark.parametrize(
    "text,where,fragment",
    [
        ("launch:\n- arg: {name: a\n- node: {}\n", ":3:7:", "invalid YAML: expected ',' or '}', but got ':' "
         "(while parsing a flow mapping that starts on line 2)"),
        ("launch:\n  - arg: {name: a}\n - node: {}\n", ":3:2:", "invalid YAML: expected <block end>"),
        ("launch:\n- node:\n    pkg: robot_rl\n    exec: sim_node\n    pkg: robot_rl\n", ":5:5:",
         "invalid YAML: duplicate key 'pkg'"),
        ("launch:\n- executable:\n    cmd: \"x y\n", ":4:1:",
         "invalid YAML: found unexpected end of stream (while scanning a quoted scalar that starts on line 3)"),
        ("", ": ", "expected a mapping with one key 'launch' holding a list of entries, got an empty file"),
        ("- node: {}\n", ":1:1:", "got a list"),
        ("launch: []\nnodes: []\n", ":2:1:", "got key(s) 'nodes'"),
        ("launch:\n  node: {}\n", ":2:3:", "got a mapping"),
        ("launch:\n- arg: {name: a, default: x}\n- just text\n", ":3:3:", "entry 1: expected a mapping with one key"),
    ],
    ids=["unclosed-flow", "indentation", "duplicate-key", "unclosed-quote", "empty", "list", "other-key",
         "launch-not-a-list", "entry-not-a-mapping"],
)
def test_yaml_and_structure_errors_name_file_line_and_column(tmp_path, text, where, fragment):
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    with pytest.raises(LaunchError) as info:
        load_launch_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}{where}"), message
    assert fragment in message and "\n" not in message, message


def test_launch_file_errors_through_the_cli_are_one_line_with_status_2(tmp_path, capsys):
    path = tmp_path / "broken.yaml"
    path.write_text("launch:\n- arg: {name: a\n")
    with pytest.raises(SystemExit) as info:
        main(["launch", str(path)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}:") and "invalid YAML" in err and err.count("\n") == 1, err
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"launch: \xff\n")
    with pytest.raises(SystemExit) as info:
        main(["launch", str(binary)])
    assert info.value.code == 2 and "not UTF-8 text" in capsys.readouterr().err


def test_whole_file_is_validated_before_anything_starts(tmp_path, capsys):
    marker = tmp_path / "started"
    path = _write(tmp_path, [
        {"executable": {"cmd": f"touch {marker}"}},
        {"executable": {"cmd": "x", "bogus": 1}},
    ])
    with pytest.raises(SystemExit) as info:
        main(["launch", str(path)])
    assert info.value.code == 2
    assert capsys.readouterr().err.startswith(f"error: {path}:4:3: entry 1 (executable): unknown key(s) 'bogus'")
    assert not marker.exists()


def test_bad_documents_and_cli_arguments(tmp_path):
    with pytest.raises(LaunchError, match="cannot read launch file"):
        load_launch_file(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: []\n")
    with pytest.raises(LaunchError, match="one key 'launch'"):
        load_launch_file(bad)
    assert parse_cli_arguments(["a:=1", "b:=x:=y", "c:="]) == {"a": "1", "b": "x:=y", "c": ""}
    with pytest.raises(LaunchError, match="name:=value"):
        parse_cli_arguments(["a=1"])


def test_dry_run_through_the_cli(tmp_path, capsys):
    path = _write(tmp_path, [
        {"arg": {"name": "task", "default": "PickCube-v0"}},
        {"node": {"pkg": "robot_rl", "exec": "learner_node", "name": "learner",
                  "param": [{"name": "task", "value": "$(var task)"}]}},
        {"executable": {"cmd": "echo hi", "name": "helper", "env": [{"name": "A", "value": "b"}]}},
    ])
    main(["launch", str(path), "task:=PegInsert-v0", "--domain-id", "9", "--dry-run"])
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"[learner] PYTHONUNBUFFERED=1 {sys.executable} -m robot_rl.ros.nodes.learner_node "
        "--ros-args -r __node:=learner -p task:=PegInsert-v0",
        "[helper] A=b PYTHONUNBUFFERED=1 echo hi",
    ]
    with pytest.raises(SystemExit) as info:
        main(["launch", str(_write(tmp_path, [{"arg": {"name": "task"}}], "noarg.yaml")), "--dry-run"])
    assert info.value.code == 2
    assert "argument 'task' has no default and was not given: pass task:=VALUE" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ running


def test_prefixed_output_environment_and_clean_exit(tmp_path, monkeypatch):
    _wheels_or_skip()
    monkeypatch.delenv("ROS_AUTOMATIC_DISCOVERY_RANGE", raising=False)
    monkeypatch.setenv("ROS_DOMAIN_ID", "3")  # --domain-id wins over the environment
    talker = _script(tmp_path, "talker.py", """
        for i in range(3):
            print(f"out {i}")
        print("to stderr", file=sys.stderr)
        for key in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_DOMAIN_ID", "PYTHONUNBUFFERED", "EXTRA"):
            print(f"{key}={os.environ.get(key)}")
    """)
    package = tmp_path / "pkgdir" / "dummy_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "hello.py").write_text("import sys\nprint('hello', sys.argv[1:])\n")
    path = _write(tmp_path, [
        {"executable": {"cmd": _cmd(talker), "name": "talker", "env": [{"name": "EXTRA", "value": "x y"}]}},
        {"node": {"module": "dummy_pkg.hello", "name": "hello", "namespace": "/robot1",
                  "env": [{"name": "PYTHONPATH", "value": str(tmp_path / "pkgdir")}]}},
    ])
    status, out, err = _run(load_launch_file(path), domain_id=42)
    assert status == 0, out + err
    lines = out.splitlines()
    for i in range(3):
        assert f"[talker] out {i}" in lines
    assert "[talker] to stderr" in err.splitlines()
    assert "[talker] ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST" in lines
    assert "[talker] ROS_DOMAIN_ID=42" in lines
    assert "[talker] PYTHONUNBUFFERED=1" in lines
    assert "[talker] EXTRA=x y" in lines
    assert "[robot1/hello] hello ['--ros-args', '-r', '__node:=hello', '-r', '__ns:=/robot1']" in lines
    assert any(line.startswith("[launch] ") and "all processes exited" in line for line in lines)
    assert "\x1b[" not in out  # no colour when stdout is not a terminal


def test_a_failed_process_makes_the_exit_status_1(tmp_path):
    _wheels_or_skip()
    path = _write(tmp_path, [
        {"executable": {"cmd": f"{sys.executable} -c 'pass'", "name": "ok"}},
        {"executable": {"cmd": f"{sys.executable} -c 'import sys; sys.exit(5)'", "name": "bad"}},
    ])
    status, out, _ = _run(load_launch_file(path))
    assert status == 1
    assert "[launch] bad exited with code 5" in out and "failed: bad" in out


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_to_the_launcher_stops_every_child_with_sigint(tmp_path, signum):
    _wheels_or_skip()
    polite = _script(tmp_path, "polite.py", POLITE)
    # The second child also starts a grandchild in its process group: it has to go too.
    spawner = _script(tmp_path, "spawner.py", SPAWN_GRANDCHILD + POLITE)
    pids = {name: tmp_path / f"{name}.pid" for name in ("one", "two", "grandchild")}
    path = _write(tmp_path, [
        {"executable": {"cmd": _cmd(polite, str(pids["one"])), "name": "one"}},
        {"executable": {"cmd": _cmd(spawner, str(pids["two"]), str(pids["grandchild"])), "name": "two"}},
    ])
    launcher = subprocess.Popen(
        [sys.executable, "-m", "robot_rl.apps.cli", "launch", str(path), "--domain-id", str(allocate_domain_id())],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        _wait_for(lambda: all(p.exists() and p.read_text() for p in pids.values()), timeout=30)
        time.sleep(0.3)  # let both install their handlers and print "ready"
        launcher.send_signal(signum)
        out, _ = launcher.communicate(timeout=20)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 128 + signum, out  # 130 / 143 / 129, as every command stopped by a signal
    assert "[one] one got SIGINT" in out and "[two] two got SIGINT" in out, out
    assert f"received {signum.name}, shutting down" in out
    assert "sending SIGTERM" not in out  # nobody needed more than SIGINT
    for name, pid_file in pids.items():
        pid = int(pid_file.read_text())
        _wait_for(lambda: _gone(pid), timeout=5)


def test_children_of_a_killed_launcher_are_terminated(tmp_path):
    """kill -9 of the launcher (no chance to stop anything): the kernel sends each child SIGTERM."""
    _wheels_or_skip()
    # the launcher's pipes are gone with it: each child notes the signal it got in a file
    noting = _script(tmp_path, "noting.py", POLITE.replace(
        'print(f"{Path(sys.argv[1]).stem} got {signal.Signals(signum).name}", flush=True)',
        'Path(sys.argv[1] + ".signal").write_text(signal.Signals(signum).name)'))
    pids = {name: tmp_path / f"{name}.pid" for name in ("one", "two")}
    path = _write(tmp_path, [
        {"executable": {"cmd": _cmd(noting, str(pid)), "name": name}} for name, pid in pids.items()])
    launcher = subprocess.Popen([sys.executable, "-m", "robot_rl.apps.cli", "launch", str(path), "--domain-id", str(allocate_domain_id())],
                                cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: all(p.exists() and p.read_text() for p in pids.values()), timeout=30)
        time.sleep(0.3)  # let both install their handlers
        launcher.kill()
        launcher.wait(timeout=10)
        children = [int(pid_file.read_text()) for pid_file in pids.values()]
        _wait_for(lambda: all(_gone(pid) for pid in children), timeout=10)
    finally:
        if launcher.poll() is None:
            launcher.kill()
        for pid_file in pids.values():  # whatever happened, leave no child behind
            if pid_file.exists() and pid_file.read_text() and not _gone(int(pid_file.read_text())):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert [Path(f"{pid}.signal").read_text() for pid in pids.values()] == ["SIGTERM", "SIGTERM"]


def test_required_process_exit_stops_the_others_with_its_status(tmp_path):
    _wheels_or_skip()
    polite = _script(tmp_path, "polite.py", POLITE)
    exit_when = _script(tmp_path, "exit_when.py", EXIT_WHEN)
    pid_file = tmp_path / "worker.pid"
    path = _write(tmp_path, [
        {"executable": {"cmd": _cmd(polite, str(pid_file)), "name": "worker"}},
        {"executable": {"cmd": _cmd(exit_when, str(pid_file), "3"), "name": "boss", "on_exit": "shutdown"}},
    ])
    status, out, _ = _run(load_launch_file(path), grace_s=5.0)
    assert status == 3, out
    assert "[launch] boss exited with code 3; it is required (on_exit: shutdown); shutting down" in out
    assert "[worker] worker got SIGINT" in out
    assert "sending SIGTERM" not in out  # the worker stopped on SIGINT, within the grace period
    assert out.splitlines()[-1] == "[launch] launch failed: boss exited with code 3 (exit status 3)"
    assert _gone(int(pid_file.read_text()))

    # `required: true` is accepted too; a required process killed by a signal gives status 1.
    killed = _script(tmp_path, "killed.py", "os.kill(os.getpid(), signal.SIGKILL)\n")
    path = _write(tmp_path, [{"executable": {"cmd": _cmd(killed), "name": "k", "required": True}}], "k.yaml")
    status, out, _ = _run(load_launch_file(path))
    assert status == 1 and "k died by signal SIGKILL" in out
    assert out.splitlines()[-1] == "[launch] launch failed: k died by signal SIGKILL (exit status 1)"


# A check that prints what it found, and exits with argv[2] once the file in argv[1] exists (the driver is up).
CHECK = """
while not Path(sys.argv[1]).exists():
    time.sleep(0.02)
print("checked the driver", flush=True)
if int(sys.argv[2]):
    print("first thing to fix: the camera", flush=True)
sys.exit(int(sys.argv[2]))
"""


def _preflight_file(tmp_path: Path, check_status: int, name: str) -> tuple[Path, Path, Path]:
    polite = _script(tmp_path, "polite.py", POLITE)
    check = _script(tmp_path, "check.py", CHECK)
    driver_pid, late_pid = tmp_path / f"{name}_driver.pid", tmp_path / f"{name}_late.pid"
    path = _write(tmp_path, [
        {"executable": {"cmd": _cmd(polite, str(driver_pid)), "name": "driver", "on_exit": "shutdown"}},
        {"executable": {"cmd": _cmd(check, str(driver_pid), str(check_status)), "name": "check", "preflight": True}},
        {"executable": {"cmd": _cmd(polite, str(late_pid)), "name": "late", "on_exit": "shutdown"}},
    ], f"{name}.yaml")
    return path, driver_pid, late_pid


def test_a_preflight_process_runs_before_the_entries_after_it(tmp_path):
    _wheels_or_skip()
    path, driver_pid, late_pid = _preflight_file(tmp_path, 0, "pass")
    description = load_launch_file(path)
    assert [p.preflight for p in description.processes] == [False, True, False]
    out, err = io.StringIO(), io.StringIO()
    launcher = Launcher(description, stdout=out, stderr=err, grace_s=5.0)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(launcher.run()))
    thread.start()
    try:
        _wait_for(late_pid.exists, timeout=30)
    finally:
        launcher._handle_signal(signal.SIGINT, None)  # what a Ctrl-C to the launcher does
        thread.join(timeout=30)
    assert result == [130], out.getvalue()
    lines = out.getvalue().splitlines()
    order = [next(i for i, line in enumerate(lines) if line.startswith(prefix)) for prefix in (
        "[launch] started driver", "[launch] waiting for check (preflight) before starting the rest",
        "[check] checked the driver", "[launch] check exited with code 0: preflight passed", "[launch] started late")]
    assert order == sorted(order), out.getvalue()
    assert _gone(int(driver_pid.read_text())) and _gone(int(late_pid.read_text()))


def test_a_failed_preflight_ends_the_launch_with_its_status(tmp_path):
    _wheels_or_skip()
    path, driver_pid, late_pid = _preflight_file(tmp_path, 1, "fail")
    status, out, _ = _run(load_launch_file(path), grace_s=5.0)
    assert status == 1, out
    assert "[check] first thing to fix: the camera" in out  # its output is shown
    assert "[launch] check exited with code 1: the preflight check failed; shutting down" in out
    assert "[driver] fail_driver got SIGINT" in out
    assert out.splitlines()[-1] == "[launch] launch failed: check exited with code 1 (exit status 1)"
    assert not late_pid.exists() and "started late" not in out  # what comes after a failed check never starts
    assert _gone(int(driver_pid.read_text()))


def test_a_driver_that_dies_during_the_preflight_ends_the_launch(tmp_path):
    _wheels_or_skip()
    check = _script(tmp_path, "check.py", CHECK)
    crash = _script(tmp_path, "crash.py", "time.sleep(0.3)\nsys.exit(4)\n")
    never = tmp_path / "never"
    path = _write(tmp_path, [
        {"executable": {"cmd": _cmd(crash), "name": "driver", "on_exit": "shutdown"}},
        {"executable": {"cmd": _cmd(check, str(never), "0"), "name": "check", "preflight": True}},
    ])
    status, out, _ = _run(load_launch_file(path), grace_s=5.0)
    assert status == 4, out
    assert out.splitlines()[-1] == "[launch] launch failed: driver exited with code 4 (exit status 4)", out


@pytest.mark.parametrize("other", [{"respawn": True}, {"on_exit": "shutdown"}, {"required": True}])
def test_a_preflight_process_cannot_respawn_or_be_required(tmp_path, other):
    path = _write(tmp_path, [{"executable": {"cmd": "check", "name": "check", "preflight": True, **other}}])
    with pytest.raises(LaunchError, match=r"test\.launch\.yaml:2:\d+: entry 0 \(executable\): key 'preflight': a "
                                          r"preflight process runs once and must exit 0 before the entries after it "
                                          rf"start; it cannot also be {next(iter(other))}"):
        load_launch_file(path)


def test_a_process_that_cannot_start_stops_the_others_cleanly(tmp_path):
    """A mistyped driver command: the processes already started get SIGINT (no SIGKILL mid-start-up), then the error."""
    _wheels_or_skip()
    polite = _script(tmp_path, "polite.py", POLITE)
    path = _write(tmp_path, [
        {"executable": {"cmd": _cmd(polite, str(tmp_path / "worker.pid")), "name": "worker"}},
        {"executable": {"cmd": f"{tmp_path}/no_such_driver --fps 30", "name": "driver"}},
    ])
    out = io.StringIO()
    with pytest.raises(LaunchError, match="cannot start driver .*no_such_driver --fps 30.*: .*no_such_driver is "
                                          "not found or not executable"):
        Launcher(load_launch_file(path), stdout=out, stderr=io.StringIO()).run()
    lines = out.getvalue().splitlines()
    assert any(line.startswith("[launch] cannot start driver") and "shutting down" in line for line in lines), lines
    assert any(line.startswith("[launch] worker ") and ("exited" in line or "SIGINT" in line) for line in lines), lines
    assert not any("sending SIGTERM" in line or "SIGKILL" in line for line in lines), lines


def test_respawn_restarts_a_process_until_shutdown(tmp_path):
    _wheels_or_skip()
    counter = tmp_path / "runs.txt"
    flaky = _script(tmp_path, "flaky.py", f"""
        with open({str(counter)!r}, "a") as f:
            f.write("run\\n")
        sys.exit(1)
    """)
    exit_when = _script(tmp_path, "exit_when.py", EXIT_WHEN)
    path = _write(tmp_path, [
        {"executable": {"cmd": _cmd(flaky), "name": "flaky", "respawn": True, "respawn_delay": 0.1}},
        # Ends the launch (status 0) once flaky has run 4 times.
        {"executable": {"cmd": _cmd(exit_when, str(tmp_path / "go"), "0"), "name": "timer", "required": True}},
    ])
    description = load_launch_file(path)

    def release():
        _wait_for(lambda: counter.exists() and len(counter.read_text().split()) >= 4, timeout=20)
        (tmp_path / "go").write_text("")

    thread = threading.Thread(target=release)
    thread.start()
    status, out, _ = _run(description)
    thread.join()
    assert status == 0, out
    runs = len(counter.read_text().split())
    assert runs >= 4
    assert "[launch] flaky exited with code 1; respawning in 0.1 s (restart 1)" in out
    # every run was a start; one more start may have been stopped by the shutdown before it wrote its line
    assert runs <= out.count("[launch] started flaky") <= runs + 1, out


def test_a_respawning_process_with_a_configuration_error_ends_the_launch(tmp_path):
    """Exit status 2 (bad parameters, a missing device) would repeat on every restart: the launch stops instead."""
    _wheels_or_skip()
    counter = tmp_path / "runs.txt"
    misconfigured = _script(tmp_path, "misconfigured.py", f"""
        while not Path(sys.argv[1]).exists():
            time.sleep(0.02)
        with open({str(counter)!r}, "a") as f:
            f.write("run\\n")
        print("error: unknown parameter 'utd_typo'", file=sys.stderr, flush=True)
        sys.exit(2)
    """)
    polite = _script(tmp_path, "polite.py", POLITE)
    pid_file = tmp_path / "worker.pid"
    path = _write(tmp_path, [
        {"executable": {"cmd": _cmd(polite, str(pid_file)), "name": "worker"}},
        {"executable": {"cmd": _cmd(misconfigured, str(pid_file)), "name": "learner", "respawn": True,
                        "respawn_delay": 0.1}},
    ])
    status, out, err = _run(load_launch_file(path))
    assert status == 2, out
    assert counter.read_text().split() == ["run"]  # not respawned
    assert "[learner] error: unknown parameter 'utd_typo'" in err
    assert ("[launch] learner exited with code 2, a configuration error that a restart would repeat: not respawning "
            "it; shutting down") in out
    assert "[worker] worker got SIGINT" in out
    assert out.splitlines()[-1] == "[launch] launch failed: learner exited with code 2 (exit status 2)"
    assert _gone(int(pid_file.read_text()))


def test_a_child_ignoring_sigint_is_terminated_then_killed(tmp_path):
    _wheels_or_skip()
    stubborn = _script(tmp_path, "stubborn.py", """
        Path(sys.argv[1]).write_text(str(os.getpid()))
        signal.signal(signal.SIGINT, lambda *_: print("ignoring SIGINT", flush=True))
        if sys.argv[2] == "deaf":
            signal.signal(signal.SIGTERM, lambda *_: print("ignoring SIGTERM", flush=True))
        while True:
            time.sleep(0.05)
    """)
    exit_when = _script(tmp_path, "exit_when.py", EXIT_WHEN)
    pid_stubborn, pid_deaf = tmp_path / "stubborn.pid", tmp_path / "deaf.pid"
    path = _write(tmp_path, [
        {"executable": {"cmd": _cmd(stubborn, str(pid_stubborn), "stubborn"), "name": "stubborn"}},
        {"executable": {"cmd": _cmd(stubborn, str(pid_deaf), "deaf"), "name": "deaf"}},
        {"executable": {"cmd": _cmd(exit_when, str(pid_deaf), "0", "0.3"), "name": "boss", "on_exit": "shutdown"}},
    ])
    status, out, _ = _run(load_launch_file(path), grace_s=0.5, term_timeout_s=0.5)
    assert status == 0, out  # the required process exited 0
    assert "[stubborn] ignoring SIGINT" in out and "[deaf] ignoring SIGINT" in out
    assert "[launch] stubborn, deaf still running: sending SIGTERM" in out
    assert "[deaf] ignoring SIGTERM" in out
    assert "[launch] deaf still running: sending SIGKILL" in out
    assert "stubborn died by signal SIGTERM" in out and "deaf died by signal SIGKILL" in out
    assert out.splitlines()[-1] == "[launch] launch finished: boss exited with code 0 (exit status 0)"
    assert _gone(int(pid_stubborn.read_text())) and _gone(int(pid_deaf.read_text()))


RCLPY_NODE = """
import sys
import rclpy
from rclpy.node import Node

rclpy.init(args=sys.argv)
node = Node("default_name", automatically_declare_parameters_from_overrides=True)
print("fqn", node.get_fully_qualified_name())
for name in sorted(node._parameters):
    if name not in ("use_sim_time", "start_type_description_service"):
        parameter = node.get_parameter(name)
        print("param", name, type(parameter.value).__name__, repr(parameter.value))
node.destroy_node()
rclpy.shutdown()
"""


def test_a_real_rclpy_node_reads_the_rendered_names_and_parameters(tmp_path):
    """The contract with rcl's `-p name:=value` parser, checked with a real node (in a private network namespace)."""
    _wheels_or_skip()
    pytest.importorskip("rclpy")
    from ros_harness import private_network_or_skip

    (tmp_path / "probe_node.py").write_text(RCLPY_NODE)
    path = _write(tmp_path, [
        {"arg": {"name": "hz", "default": "10"}},
        {"node": {"module": "probe_node", "name": "probe", "namespace": "/robot1",
                  "env": [{"name": "PYTHONPATH", "value": str(tmp_path)}],
                  "param": [
                      {"name": "rate_hz", "value": "$(var hz)"}, {"name": "flag", "value": False},
                      {"name": "dt", "value": 1e-5}, {"name": "label", "value": "42"},
                      {"name": "word", "value": "yes"}, {"name": "phrase", "value": "it's: #here"},
                      {"name": "cams", "value": ["front", "wrist"]}, {"name": "gains", "value": [1, 2.5]},
                  ]}},
    ])
    out = subprocess.run(
        private_network_or_skip([sys.executable, "-m", "robot_rl.apps.cli", "launch", str(path), "--domain-id", str(allocate_domain_id())]),
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("[robot1/probe] ")]
    assert [line.split(" ", 1)[1] for line in lines] == [
        "fqn /robot1/probe",
        "param cams list ['front', 'wrist']",
        "param dt float 1e-05",
        "param flag bool False",
        "param gains list [1.0, 2.5]",
        "param label str '42'",
        "param phrase str \"it's: #here\"",
        "param rate_hz int 10",
        "param word str 'yes'",
    ]


# ------------------------------------------------------------------------------------------ the shipped launch files

ROBOT_DRIVERS = {"robot": "sim_panda", "camera_driver": "cam_driver", "robot_driver": "arm_driver",
                 "demo_path": "demos.zarr"}
ROBOT_RUN = {"robot": "sim_panda", "camera_driver": "cam_driver", "robot_driver": "arm_driver",
             "policy": "runs/x/policy.msgpack"}
# Each shipped file with arguments that, together, start every node it can start.
SHIPPED_VARIANTS = {
    "sim_train.yaml": [{}, {"human": "false"}, {"side": "robot"}, {"side": "server"}],
    "sim_eval.yaml": [{"weights": "runs/x/policy.msgpack"}],
    "teleop_record.yaml": [{"out": "demos.zarr", "device": device} for device in ("auto", "gamepad", "scripted",
                                                                                   "none")],
    "robot_train.yaml": [{**ROBOT_DRIVERS, "device": device} for device in ("auto", "spacemouse", "scripted", "none")]
    + [{"robot": "sim_panda", "demo_path": "demos.zarr", "side": "server"}, {**ROBOT_DRIVERS, "side": "robot"}],
    "robot_run.yaml": [{**ROBOT_RUN, "device": device} for device in ("auto", "scripted", "none")],
}
VARIANTS = [(name, arguments) for name, variants in SHIPPED_VARIANTS.items() for arguments in variants]
VARIANT_IDS = [f"{name[:-5]}-{'-'.join(a.get('side', a.get('device', a.get('human', 'default'))) for a in [args])}"
               for name, args in VARIANTS]


@pytest.mark.parametrize("name,arguments", [("sim_train.yaml", {}), ("robot_train.yaml", ROBOT_DRIVERS)])
def test_a_side_starts_the_robots_nodes_or_the_learner(name, arguments):
    every = {spec.name for spec in load_launch_file(LAUNCH_DIR / name, arguments).processes}
    robot = {spec.name for spec in load_launch_file(LAUNCH_DIR / name, {**arguments, "side": "robot"}).processes}
    server = {spec.name for spec in load_launch_file(LAUNCH_DIR / name, {**arguments, "side": "server"}).processes}
    shared = {"file_share"} if name == "robot_train.yaml" else set()  # offers the demos to the server
    assert server == {"learner"} and robot == (every - {"learner"}) | shared and "actor" in robot
    with pytest.raises(LaunchError, match=r"side:='servr' is not one of all, robot, server \(did you mean server\?\)"):
        load_launch_file(LAUNCH_DIR / name, {**arguments, "side": "servr"})


def test_the_robot_side_needs_its_driver_commands():
    with pytest.raises(LaunchError, match=r"'\$\(var camera_driver\)' is empty: give the launch argument"):
        load_launch_file(LAUNCH_DIR / "robot_train.yaml", {"robot": "sim_panda", "demo_path": "d.zarr",
                                                           "side": "robot"})


def test_the_network_argument_sets_every_processs_network_mode(tmp_path, monkeypatch):
    _wheels_or_skip()
    for name in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "FASTDDS_DEFAULT_PROFILES_FILE", "ROBOT_RL_NETWORK"):
        monkeypatch.delenv(name, raising=False)
    path = _write(tmp_path, [{"arg": {"name": "network", "default": "auto"}},
                             {"executable": {"cmd": "true", "name": "x"}}])
    local = Launcher(load_launch_file(path)).base_env
    assert local["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST" and local["FASTDDS_DEFAULT_PROFILES_FILE"]
    # Every process gets the host graph's environment; the learner and the link's network half make the link's.
    from robot_rl.ros.net.env import FASTDDS_PROFILE_PATH, network_mode, ros_environment

    lan = Launcher(load_launch_file(path, {"network": "lan"})).base_env
    assert lan["ROBOT_RL_NETWORK"] == "lan" and lan["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    assert lan["FASTDDS_DEFAULT_PROFILES_FILE"] == str(FASTDDS_PROFILE_PATH)
    link = ros_environment(base=lan, graph="link")
    assert is_lan_profile(link["FASTDDS_DEFAULT_PROFILES_FILE"]) and link["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SUBNET"
    monkeypatch.setenv("ROBOT_RL_NETWORK", "lan")  # auto: the variable decides
    assert network_mode(Launcher(load_launch_file(path)).base_env) == "lan"
    # The training launches start the link where there are robot nodes in lan and secure, never in local.
    for name, arguments in (("sim_train.yaml", {}), ("robot_train.yaml", ROBOT_DRIVERS)):
        for side, network, linked in (("all", "lan", True), ("robot", "secure", True), ("server", "lan", False),
                                      ("all", "local", False)):
            names = [p.name for p in load_launch_file(LAUNCH_DIR / name, {**arguments, "side": side,
                                                                         "network": network}).processes]
            assert ("link" in names) == linked, (name, side, network, names)
    with pytest.raises(LaunchError, match="ROBOT_RL_NETWORK='wan' is not a network mode"):
        Launcher(load_launch_file(path, {"network": "wan"}))


def test_shipped_launch_files_are_all_covered():
    assert sorted(p.name for p in LAUNCH_DIR.glob("*.yaml")) == sorted(SHIPPED_VARIANTS)


def declared_parameters(module_name: str) -> set[str]:
    """The ROS parameter names a node module declares: its PARAMETERS table of (name, default, description)."""
    return {row[0] for row in importlib.import_module(module_name).PARAMETERS}


def undeclared_parameters(description: LaunchDescription) -> list[str]:
    """One line per `param` of a project node that its module does not declare."""
    problems = []
    for spec in description.processes:
        if spec.argv[1:2] != ("-m",) or not spec.argv[2].startswith("robot_rl."):
            continue  # not one of the project's nodes
        module, argv = spec.argv[2], list(spec.argv)
        ros_args = argv[argv.index("--ros-args") + 1:] if "--ros-args" in argv else []
        names = [value.split(":=", 1)[0] for flag, value in zip(ros_args, ros_args[1:]) if flag == "-p"]
        if not names:
            continue  # e.g. the doctor, a command-line tool with no ROS parameters
        known = declared_parameters(module)
        problems += [f"{spec.name}: {name!r} is not a parameter of {module} (it declares {', '.join(sorted(known))})"
                     for name in names if name not in known]
    return problems


@pytest.mark.parametrize("name,arguments", VARIANTS, ids=VARIANT_IDS)
def test_shipped_files_set_only_parameters_their_nodes_declare(name, arguments):
    description = load_launch_file(LAUNCH_DIR / name, arguments)
    modules = [spec.argv[2] for spec in description.processes if spec.argv[1:2] == ("-m",)]
    assert modules and all(m.startswith("robot_rl.") for m in modules), description.commands()
    assert undeclared_parameters(description) == []


def test_the_parameter_check_finds_a_typo(tmp_path):
    path = _write(tmp_path, [
        {"node": {"pkg": "robot_rl", "exec": "learner_node", "name": "learner",
                  "param": [{"name": "utd", "value": 1}, {"name": "critcs", "value": 2}]}},
        {"node": {"pkg": "robot_rl", "exec": "scripted_teleop", "name": "human",
                  "param": [{"name": "stuck", "value": {"window": 2}}]}},
        {"node": {"module": "robot_rl.drivers.teleop_node", "args": "--device gamepad",
                  "param": [{"name": "rate_hz", "value": 50.0}]}},
    ])
    problems = undeclared_parameters(load_launch_file(path))
    assert len(problems) == 2, problems
    assert problems[0].startswith("learner: 'critcs' is not a parameter of robot_rl.ros.nodes.learner_node (it declares ")
    assert "critics" in problems[0]
    assert problems[1].startswith("human: 'stuck.window' is not a parameter of robot_rl.sim.scripted_teleop")


@pytest.mark.parametrize("name,arguments", VARIANTS, ids=VARIANT_IDS)
def test_no_shipped_process_can_leave_the_others_waiting(name, arguments):
    """Every process either ends the launch when it exits (required), is restarted (respawn), or is a preflight check
    that the launch waits for (its failure ends the launch)."""
    for spec in load_launch_file(LAUNCH_DIR / name, arguments).processes:
        assert spec.required or spec.respawn or spec.preflight, \
            f"{name}: {spec.name} may exit while the others wait for it"


@pytest.mark.parametrize("name", ["teleop_record.yaml", "robot_train.yaml"])
def test_the_teleop_device_picks_the_teleop_node(name):
    from robot_rl.drivers.teleop import DEVICES

    base = {"out": "demos.zarr"} if name == "teleop_record.yaml" else ROBOT_DRIVERS
    default = {p.name: p for p in load_launch_file(LAUNCH_DIR / name, base).processes}
    assert default["teleop"].argv[3:5] == ("--device", "auto")  # a missing device does not end the launch
    for device in (*DEVICES, "auto"):
        processes = {p.name: p for p in load_launch_file(LAUNCH_DIR / name, {**base, "device": device}).processes}
        assert "human" not in processes
        assert processes["teleop"].argv[3:5] == ("--device", device)
    scripted = {p.name: p for p in load_launch_file(LAUNCH_DIR / name, {**base, "device": "scripted"}).processes}
    assert "teleop" not in scripted and scripted["human"].argv[2] == "robot_rl.sim.scripted_teleop"
    none = [p.name for p in load_launch_file(LAUNCH_DIR / name, {**base, "device": "none"}).processes]
    assert "teleop" not in none and "human" not in none


@pytest.mark.parametrize("name", ["teleop_record.yaml", "robot_train.yaml", "sim_train.yaml"])
def test_the_robot_file_reaches_the_nodes(name):
    base = {"teleop_record.yaml": {"out": "demos.zarr"}, "sim_train.yaml": {}}.get(name, ROBOT_DRIVERS)
    processes = {p.name: p for p in load_launch_file(LAUNCH_DIR / name, {**base, "robot": "robots/my arm.yaml"})
                 .processes}
    takers = {"teleop_record.yaml": ("sim", "actor"), "robot_train.yaml": ("learner", "actor")}.get(
        name, ("sim", "learner", "actor", "human"))
    for node in takers:
        assert "robot:='robots/my arm.yaml'" in processes[node].argv, processes[node].argv
    if name == "sim_train.yaml":  # lock-step whatever the robot file's mode (sim_panda_driver's is realtime)
        assert all("mode:=lockstep" in processes[node].argv for node in ("sim", "actor"))
    if name != "robot_train.yaml":
        defaults = {p.name: p for p in load_launch_file(LAUNCH_DIR / name, base).processes}
        assert all("robot:=sim_panda" in defaults[node].argv for node in takers)
    else:
        missing = {k: v for k, v in ROBOT_DRIVERS.items() if k != "robot"}
        with pytest.raises(LaunchError, match="argument 'robot' has no default and was not given: pass robot:=VALUE"):
            load_launch_file(LAUNCH_DIR / name, missing)


def test_robot_train_checks_the_drivers_before_the_nodes_start():
    processes = load_launch_file(LAUNCH_DIR / "robot_train.yaml", {**ROBOT_DRIVERS, "robot": "robots/my arm.yaml",
                                                                   "doctor_wait": "5"}).processes
    assert [p.name for p in processes] == ["cameras", "robot", "doctor", "learner", "actor", "teleop"]
    doctor = processes[2]
    assert doctor.preflight and not doctor.required and not doctor.respawn
    assert doctor.argv[1:] == ("-m", "robot_rl.ros.doctor", "robots/my arm.yaml", "--wait", "5", "--duration", "3",
                                "--timing", "fail")
    skipped = load_launch_file(LAUNCH_DIR / "robot_train.yaml", {**ROBOT_DRIVERS, "doctor": "false"}).processes
    assert "doctor" not in [p.name for p in skipped]


@pytest.mark.parametrize("name", ["robot_train.yaml", "robot_run.yaml"])
def test_robot_launches_give_the_nodes_no_sim_task_by_default(name):
    """On a robot the robot file decides the observations and the episode length: `task` is a name only, empty
    unless given, and no demos unless given; only the scripted human (a sim stand-in) gets a sim task."""
    train = name == "robot_train.yaml"
    base = {k: v for k, v in ROBOT_DRIVERS.items() if k != "demo_path"} if train else ROBOT_RUN
    takers = ("learner", "actor") if train else ("actor",)
    default = {p.name: p for p in load_launch_file(LAUNCH_DIR / name, {**base, "device": "scripted"}).processes}
    for node in takers:
        assert "task:=''" in default[node].argv, default[node].argv
    assert "task:=PickCube-v0" in default["human"].argv, default["human"].argv
    if train:
        assert "demo_path:=''" in default["learner"].argv and "demos:=0" in default["learner"].argv
    given = {p.name: p for p in load_launch_file(LAUNCH_DIR / name, {
        **base, "device": "scripted", "task": "pick", "scripted_task": "PegInsert-v0"}).processes}
    assert all("task:=pick" in given[node].argv for node in takers)
    assert "task:=PegInsert-v0" in given["human"].argv, given["human"].argv


def test_robot_train_driver_commands_are_split_like_a_shell():
    processes = {p.name: p for p in load_launch_file(LAUNCH_DIR / "robot_train.yaml", {
        **ROBOT_DRIVERS, "camera_driver": "cmd --arg x --label 'front cam'",
        "robot_driver": 'ros2 launch franka_bringup franka.launch.py robot_ip:="172.16.0.2"'}).processes}
    assert processes["cameras"].argv == ("cmd", "--arg", "x", "--label", "front cam")
    assert processes["robot"].argv == ("ros2", "launch", "franka_bringup", "franka.launch.py", "robot_ip:=172.16.0.2")


def test_robot_run_acts_with_the_gated_policy_and_no_learner():
    processes = {p.name: p for p in load_launch_file(LAUNCH_DIR / "robot_run.yaml", {
        **ROBOT_RUN, "robot": "robots/my arm.yaml", "episodes": "3"}).processes}
    assert list(processes) == ["cameras", "robot", "doctor", "actor", "teleop"]
    actor = processes["actor"].argv
    for param in ("weights_path:=runs/x/policy.msgpack", "allow_unvalidated:=false", "stream_transitions:=false",
                  "robot:='robots/my arm.yaml'", "episodes:=3", "deterministic:=true"):
        assert param in actor, actor
    override = {p.name: p for p in load_launch_file(LAUNCH_DIR / "robot_run.yaml", {
        **ROBOT_RUN, "allow_unvalidated": "true"}).processes}
    assert "allow_unvalidated:=true" in override["actor"].argv
    trained = {p.name: p for p in load_launch_file(LAUNCH_DIR / "robot_train.yaml", {
        **ROBOT_DRIVERS, "policy": "residual", "base": "runs/dp/policy"}).processes}
    assert "base:=runs/dp/policy" in trained["learner"].argv and "allow_unvalidated:=false" in trained["actor"].argv


def test_sim_train_evaluation_and_validation_arguments_reach_the_learner():
    default = {p.name: p for p in load_launch_file(LAUNCH_DIR / "sim_train.yaml", {}).processes}["learner"].argv
    for param in ("eval_every:=-1", "eval_episodes:=20", "final_eval_episodes:=20", "final_validation:=true"):
        assert param in default, default
    given = {p.name: p for p in load_launch_file(LAUNCH_DIR / "sim_train.yaml", {
        "final_validation": "false", "eval_every": "0", "eval_episodes": "5"}).processes}["learner"].argv
    for param in ("eval_every:=0", "eval_episodes:=5", "final_eval_episodes:=5", "final_validation:=false"):
        assert param in given, given
    evaluation = {p.name: p for p in load_launch_file(LAUNCH_DIR / "sim_eval.yaml", {
        "weights": "runs/x/policy.msgpack"}).processes}["actor"].argv
    assert "eval_out:=auto" in evaluation, evaluation


def test_sim_train_human_can_be_switched_off():
    with_human = load_launch_file(LAUNCH_DIR / "sim_train.yaml", {})
    without = load_launch_file(LAUNCH_DIR / "sim_train.yaml", {"human": "false"})
    assert [p.name for p in with_human.processes] == ["sim", "learner", "actor", "human"]
    assert [p.name for p in without.processes] == ["sim", "learner", "actor"]


def test_teleop_record_uses_the_training_image_size():
    from robot_rl.training.config import TrainConfig

    (sim,) = [p for p in load_launch_file(LAUNCH_DIR / "teleop_record.yaml", {"out": "d.zarr"}).processes
              if p.name == "sim"]
    assert f"image_size:={TrainConfig().image_size}" in sim.argv


# -------------------------------------------------------------------------------- the shipped files, end to end


class LaunchRun:
    """`robot-rl launch FILE name:=value ...` as a subprocess in a private network namespace, output in a log file."""

    def __init__(self, name: str, arguments: dict, log: Path):
        from ros_harness import private_network_or_skip

        self.name, self.log = name, log
        argv = [sys.executable, "-m", "robot_rl.apps.cli", "launch", str(LAUNCH_DIR / name),
                *(f"{key}:={value}" for key, value in arguments.items()), "--domain-id", str(allocate_domain_id())]
        with open(log, "w") as out:
            self.process = subprocess.Popen(private_network_or_skip(argv), cwd=REPO, stdin=subprocess.DEVNULL,
                                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def output(self) -> str:
        return self.log.read_text()

    def wait(self, timeout: float) -> int:
        """The launcher's exit status; a launch still running after `timeout` (a failure detector) fails the test."""
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            pytest.fail(f"{self.name} still running after {timeout:.0f} s; output:\n{self.output()[-4000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # the launcher stops its children
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def _launcher_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("[launch] ")]


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def tiny_diffusion_base(folder: Path) -> Path:
    """A small diffusion policy for PickCube's state observation, fitted to nothing: a base for a noise head."""
    import numpy as np

    from robot_rl.sim.loop import make_env
    from robot_rl.policies.config import DiffusionConfig
    from robot_rl.policies.diffusion import DiffusionPolicy
    from robot_rl.policies.normalizer import Normalizer
    from robot_rl.core.types import ObservationSpec

    env = make_env("PickCube-v0", obs_mode="state")
    spec = ObservationSpec.from_space(env.observation_space)
    env.close()
    rng = np.random.default_rng(0)
    data = {key: rng.normal(size=(50, int(np.prod(spec[key].shape)))) for key in spec.vector_keys}
    data["action"] = rng.uniform(-1, 1, (50, 4))
    tiny = DiffusionConfig(obs_horizon=2, prediction_horizon=8, action_horizon=4, down_dims=(16, 32), groups=4,
                           step_embedding_dim=16, state_features=16, train_timesteps=20, inference_steps=5)
    return DiffusionPolicy.create(tiny, spec, 4, Normalizer().fit(data), seed=0).save(folder)


@pytest.fixture(scope="module")
def sim_train_run(tmp_path_factory):
    """One sim_train launch, the richest kind: a noise head with aliasing (policy:=noise noise_aliasing:=true) on a
    diffusion base, evaluated during the run and validated at its end. Returns (run folder, status, output, base)."""
    _wheels_or_skip()
    folder = tmp_path_factory.mktemp("sim_train")
    base = tiny_diffusion_base(folder / "base")
    run = LaunchRun("sim_train.yaml", {"steps": 60, "demos": 2, "eval_episodes": 1, "policy": "noise",
                                       "noise_aliasing": "true", "base": base, "run_dir": folder / "run"},
                    log=folder / "launch.log")
    status = run.wait(timeout=300)
    return folder / "run", status, run.output(), base


def test_sim_train_trains_evaluates_and_ends(sim_train_run):
    from robot_rl.wire.policy_file import read_policy_file

    run_dir, status, out, _ = sim_train_run
    assert status == 0, out[-4000:]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["received"] >= 60 and result["updates"] > 0 and result["final_eval_episodes"] == 1, result
    assert read_policy_file(run_dir / "policy.msgpack").version >= 1
    # The run ended in the sim: the learner validated its final policy and wrote the record next to it.
    from robot_rl.actor.deploy_gate import policy_digest, read_records

    records = read_records(run_dir / "policy.msgpack")
    assert len(records) == 1 and records[0]["robot_name"] == "sim_panda" and records[0]["suite"] == "default", records
    assert records[0]["policy_sha256"] == policy_digest(run_dir / "policy.msgpack")
    assert [c["episodes"] for c in records[0]["conditions"]] == [1] * 8, records
    assert result["validation"]["verdict"] == records[0]["verdict"], result
    # Sized to the 60-step run (1 episode per condition), said so with how to skip it and how to get a verdict.
    learner = [line for line in out.splitlines() if line.startswith("[learner] ")]
    assert any("final validation: default suite, 8 conditions x 1 episodes (sized to the run's 60 transitions; a "
               "verdict needs 20 per condition: `robot-rl validate " in line
               and line.endswith("skip it with final_validation:=false") for line in learner), out[-4000:]
    # The same report as an in-process run: report.md with evaluations every eval_every transitions (a fifth of the
    # run, from the first policy on) and the final one, both plots and the eval video. One count of env steps: the
    # transitions trained on, in the eval rows, the report's totals and result.json.
    report = (run_dir / "report.md").read_text()
    assert "over ROS 2" in report and re.search(r"Final eval success: \*\*\d+ % \([01]/1 episodes", report), report
    assert "Git commit:" in report and "Wall-clock time:" in report, report
    rows = [int(m) for m in re.findall(r"^\| (\d+) \| \d+ % \| 1 \|", report, re.M)]
    assert rows[0] == 0 and rows[-1] == result["trained_on"] == 60 and rows == sorted(set(rows)), report
    assert f"at env step {result['trained_on']} " in report and f"Env steps: {result['trained_on']}," in report
    evals = [line for line in learner if re.search(r"\]: env step \d+: eval success \d+ % \([01]/1 episodes", line)]
    assert len(evals) == len(rows) - 1 and "env step 0: eval success" in evals[0], learner  # + the final one's
    assert any(": final evaluation: env step 60: eval success" in line for line in learner), learner
    progress = [line for line in learner if "]: progress: " in line]
    assert progress and re.search(r"progress: \d+/60 transitions \(\d+%\).*, \d+ updates .*, weights v\d+, "
                                  r"\d+ episodes.*; last eval ", progress[-1]), learner
    # The actor heard that the weights were final: no "learner away?" wait while the learner evaluated at the end
    # (before that, a lock-step actor may wait for fresher weights whenever the learner is slower than the sim).
    actor = [line for line in out.splitlines() if line.startswith("[actor] ")]
    final = next((i for i, line in enumerate(actor) if "the learner reached its training budget: final weights" in line),
                 None)
    assert final is not None, actor
    assert not any("learner away?" in line or "max_weight_lag" in line for line in actor[final:]), actor[final:]
    # `robot-rl status` on the run folder: both nodes, the learner done, the robot's counts.
    from robot_rl.apps.run_status import format_status, read_run_status

    status = read_run_status(run_dir)
    assert [(n["node"], n["name"], n["stale"]) for n in status["nodes"]] == [("learner", "learner", False),
                                                                             ("actor", "sim0", False)], status
    assert status["learner"]["phase"] == "done" and status["learner"]["trained_on"] == 60, status
    (robot,) = status["robots"]
    assert robot["robot"] == "sim0" and robot["episodes"] >= 1 and robot["intervention_rate"] is not None, status
    assert "learner: done; trained on 60/60 (100%) transitions" in format_status(status)
    for name in ("learning_curve.png", "training_curves.png"):
        assert (run_dir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    import av

    with av.open(str(run_dir / "eval.mp4")) as video:
        assert video.streams.video[0].codec_context.name == "h264"
        assert sum(1 for _ in video.decode(video=0)) >= 2
    launcher = _launcher_lines(out)
    assert "[launch] learner exited with code 0; it is required (on_exit: shutdown); shutting down" in launcher, out
    assert launcher[-1] == "[launch] launch finished: learner exited with code 0 (exit status 0)", out[-4000:]
    for node in ("sim", "actor", "human"):  # stopped with SIGINT, each cleanly
        assert f"[launch] {node} exited with code 0" in launcher, out[-4000:]


def test_sim_train_trains_a_noise_aliasing_head_on_a_diffusion_base(sim_train_run):
    """policy:=noise noise_aliasing:=true over ROS: the actor holds the (torch) base and the (JAX) head, its
    transitions carry the robot's action, the head's noise, the chunk step and the aliases, the learner accepts every
    one (none rejected) and trains, and its policy file is the noise head naming the base."""
    from robot_rl.wire.policy_file import read_policy_file

    run_dir, status, out, base = sim_train_run
    assert status == 0, out[-4000:]
    learner = json.loads((run_dir / "learner_status.json").read_text())
    assert learner["received"] >= 60 and learner["rejected"] == 0 and learner["steps"] > 0, learner
    weights = read_policy_file(run_dir / "policy.msgpack")
    assert weights.policy_kind == "noise" and weights.policy_config["base"] == str(base.resolve())
    assert weights.policy_config["sac"]["aliased_chunk_dim"] == 4 * 4, weights.policy_config


def test_sim_eval_runs_the_trained_policy(sim_train_run, tmp_path):
    run_dir, status, out, _ = sim_train_run
    assert status == 0, f"the sim_train launch this test evaluates failed:\n{out[-4000:]}"
    run = LaunchRun("sim_eval.yaml", {"weights": run_dir / "policy.msgpack", "episodes": 1},
                    log=tmp_path / "launch.log")
    status = run.wait(timeout=180)
    out = run.output()
    assert status == 0, out[-4000:]
    episodes = [line for line in out.splitlines() if line.startswith("[actor] ") and "episode 0: success=" in line]
    assert len(episodes) == 1, out[-4000:]
    assert any(line.startswith("[actor] ") and "/1 episodes successful" in line for line in out.splitlines()), out
    assert _launcher_lines(out)[-1] == "[launch] launch finished: actor exited with code 0 (exit status 0)", out
    # robot-rl eval's eval.json (in an eval folder next to the policy): the same fields, computed the same way.
    from robot_rl.sim.evaluate import evaluate_policy_file

    written = json.loads((run_dir / "eval" / "eval.json").read_text())
    in_process = evaluate_policy_file(run_dir / "policy.msgpack", episodes=1, out=tmp_path / "in-process")
    assert set(in_process) <= set(written) and written["episodes"] == 1, (written, in_process)
    assert written["success_rate"] == written["successes"] and len(written["success_ci95"]) == 2, written
    assert written["policy"] == in_process["policy"] and written["weights_version"] == in_process["weights_version"]
    assert any(line.startswith("[actor] ") and "eval: success " in line and "eval.json" in line
               for line in out.splitlines()), out


@pytest.fixture(scope="module")
def recorded_demos(tmp_path_factory):
    _wheels_or_skip()
    folder = tmp_path_factory.mktemp("teleop_record")
    run = LaunchRun("teleop_record.yaml", {"device": "scripted", "episodes": 1, "out": folder / "demos.zarr"},
                    log=folder / "launch.log")
    status = run.wait(timeout=180)
    return folder / "demos.zarr", status, run.output()


def test_teleop_record_with_the_scripted_human(recorded_demos):
    import numpy as np

    from robot_rl.data.episodes import EpisodeDataset

    path, status, out = recorded_demos
    assert status == 0, out[-4000:]
    dataset = EpisodeDataset(path)
    assert dataset.num_episodes == 1
    episode = dataset.episode(0)
    assert episode["obs"]["images/front"].shape[1:] == (64, 64, 3)
    assert np.mean(episode["intervention"]) >= 0.5  # the scripted human drove it
    launcher = _launcher_lines(out)
    assert "[launch] started human" in " ".join(launcher) and "started teleop" not in " ".join(launcher)
    assert launcher[-1] == "[launch] launch finished: actor exited with code 0 (exit status 0)", out[-4000:]


def test_teleop_record_ends_when_the_teleop_device_is_missing(tmp_path):
    """A required partner that dies (no gamepad here: exit 2) ends the launch instead of leaving the actor waiting."""
    _wheels_or_skip()
    if glob.glob("/dev/input/js*"):
        pytest.skip("a gamepad is connected")
    run = LaunchRun("teleop_record.yaml", {"device": "gamepad", "out": tmp_path / "demos.zarr"},
                    log=tmp_path / "launch.log")
    status = run.wait(timeout=120)
    out = run.output()
    assert status == 2, out[-4000:]
    assert any(line.startswith("[teleop] ") and "no gamepad found" in line for line in out.splitlines()), out
    launcher = _launcher_lines(out)
    assert "[launch] teleop exited with code 2; it is required (on_exit: shutdown); shutting down" in launcher, out
    assert launcher[-1] == "[launch] launch failed: teleop exited with code 2 (exit status 2)", out[-4000:]
    assert not (tmp_path / "demos.zarr").exists()


def test_without_a_teleop_device_auto_keeps_the_launch_going(tmp_path):
    """device:=auto (the default) with no device: the teleop node says so once and stays up, so its required
    on_exit: shutdown does not end the launch; Ctrl-C stops it cleanly."""
    _wheels_or_skip()
    from ros_harness import private_network_or_skip

    from robot_rl.drivers.teleop import find_spacemice

    if glob.glob("/dev/input/js*") or find_spacemice():
        pytest.skip("a teleop device is connected")
    path = _write(tmp_path, [{"node": {"pkg": "robot_rl", "exec": "teleop_node", "name": "teleop",
                                       "args": "--device auto", "on_exit": "shutdown"}}])
    log = tmp_path / "launch.log"
    argv = [sys.executable, "-m", "robot_rl.apps.cli", "launch", str(path), "--domain-id", str(allocate_domain_id())]
    with open(log, "w") as out:
        process = subprocess.Popen(private_network_or_skip(argv), cwd=REPO, stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_for(lambda: "no teleop device found" in log.read_text(), timeout=60)
        time.sleep(2.5)  # past one more look for a device
        assert process.poll() is None, log.read_text()
        process.send_signal(signal.SIGINT)
        status = process.wait(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    out = log.read_text()
    assert status == 130, out  # stopped by Ctrl-C (its nodes each stopped cleanly: see below)
    line = next(line for line in out.splitlines() if "no teleop device found" in line)
    for fragment in ("gamepad: no gamepad found", "keyboard: keyboard teleop needs an interactive terminal",
                     "running without a teleop device", "teleop_node --device keyboard", "teleop/episode"):
        assert fragment in line, line
    assert out.count("no teleop device found") == 1, out  # said once, not at every look
    assert "[launch] teleop exited with code 0" in out, out


IDLE_DRIVER = """
import signal, sys
signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("robot driver stand-in up", flush=True)
while True:
    signal.pause()
"""


def diffusion_policy_folder(folder: Path, robot: str) -> Path:
    """An untrained pixel diffusion policy (default network) for the robot file's two cameras and the state."""
    import numpy as np

    from robot_rl.policies.config import DiffusionConfig
    from robot_rl.policies.diffusion import DiffusionPolicy
    from robot_rl.policies.normalizer import Normalizer
    from robot_rl.ros.nodes.learner_params import robot_task_spaces

    spec, action_dim = robot_task_spaces(robot, "pixels", 64)
    rng = np.random.default_rng(0)
    normalizer = Normalizer().fit({"state": rng.standard_normal((50, spec["state"].shape[0])).astype(np.float32),
                                   "action": rng.uniform(-0.3, 0.3, (50, action_dim)).astype(np.float32)})
    return DiffusionPolicy.create(DiffusionConfig(), spec, action_dim, normalizer).save(folder)


def test_robot_run_acts_with_a_saved_policy_on_stand_in_drivers(tmp_path):
    """robot_run.yaml with the sim node in driver mode (robots/sim_panda_driver.yaml: 640x480 bgr8 best-effort camera,
    JPEG wrist camera, joint_states, JointTrajectory commands; real time at 10 Hz) standing in for the drivers and no
    teleop device: the doctor passes the drivers, the actor runs a saved diffusion policy folder for the episodes
    asked, and the launch ends. The actor computes chunks in a worker thread while the current one executes; what
    holds whatever the load: every step executed the policy's action due at it or held the robot, and each hold
    names its cause: the policy's chunk not ready yet (`policy_late`, every tick that found no action due) or a
    sensor reading older than the robot file's age limit (the safe reaction to a late frame) - never a missing sensor,
    a safety or learner hold. How often it holds is a timing figure: bench/ros.py. (Demos recorded through the same
    driver: tests/test_ros_foreign_driver.py; the doctor against other drivers: tests/test_ros_doctor.py.)"""
    _wheels_or_skip()
    robot = "sim_panda_driver"
    policy = diffusion_policy_folder(tmp_path / "run" / "policy", robot)
    python = shlex.quote(sys.executable)
    idle = tmp_path / "idle_driver.py"
    idle.write_text(IDLE_DRIVER)
    stats_path = tmp_path / "actor.json"
    run = LaunchRun("robot_run.yaml", {
        "robot": robot, "policy": policy, "episodes": 1, "device": "none", "stats_path": stats_path,
        "torch_device": "cpu", "inference_steps": 3, "doctor_duration": 2,
        "doctor_timing": "warn",  # this machine's load is no driver's timing: the wiring and content are checked
        "camera_driver": f"{python} -m robot_rl.sim.node --task PickCube-v0 --seed 1 --mode realtime "
                         f"--ros-args -p robot:={robot}",
        "robot_driver": f"{python} {shlex.quote(str(idle))}",
    }, log=tmp_path / "launch.log")
    status = run.wait(timeout=240)
    out = run.output()
    assert status == 0, out[-4000:]
    # The doctor passed the foreign driver's streams and saw what it sends.
    doctor = "\n".join(line for line in out.splitlines() if line.startswith("[doctor] "))
    assert doctor.splitlines()[-1].startswith("[doctor] all checks passed"), out
    for fragment in ("bgr8", "640x480", "jpeg", "CompressedImage", "forward kinematics", "inside the workspace box",
                     "/joint_trajectory_controller/joint_trajectory: 1 subscriber(s) (sim)"):
        assert fragment in doctor, doctor
    actor_log = "\n".join(line for line in out.splitlines() if line.startswith("[actor] "))
    assert "policy diffusion (DDIM-3) loaded from" in actor_log and "worker thread" in actor_log, actor_log
    assert "episode 0: success=" in actor_log, actor_log
    assert "[launch] launch finished: actor exited with code 0 (exit status 0)" in out, out[-4000:]
    actor = json.loads(stats_path.read_text())
    assert actor["robot"] == robot and actor["episodes"] == 1, actor
    episode = actor["results"][0]
    # the episode ran to the task's 50 steps (or its success); a held step is no step
    assert actor["transitions"] == episode["steps"] and (episode["steps"] == 50 or episode["success"]), actor
    # every command either executed a step or held the robot (a held command starts no transition)
    assert actor["commands"] - actor["held"] == actor["transitions"], actor
    # every held command names its cause, each one allowed here: the chunk not ready yet, or a late sensor frame
    holds = actor["holds"]
    assert all(reason == "policy_late" or reason.startswith("stale:") for reason in holds), holds
    assert sum(holds.values()) >= actor["held"] and holds.get("policy_late", 0) == actor["policy_late"], actor
    # the steps' actions came from chunks (computed in the worker thread); a tick with no action due held
    # (`empty`), and an action whose time had passed when its chunk arrived was dropped, never executed
    chunks = actor["chunks"]
    assert chunks["added"] >= 1 and chunks["executed"] >= actor["transitions"], chunks
    assert chunks.get("empty", 0) == actor["policy_late"], actor
    assert actor["rejected"] == {} and actor["incompatible_qos"] == {}, actor
    assert actor["outbox"] == 0 and actor["dropped"] == 0, actor  # nothing kept for a learner that isn't there


def test_robot_train_with_stand_in_drivers(tmp_path):
    """robot_train.yaml with its defaults (no task, no demos) on a robot file like a third-party driver's: cameras
    `scene` and `hand` (640x480 bgr8, best-effort), 80-step episodes (tests/ros_harness.third_party_robot_file). The
    sim node (real time) serving a `sim: true` copy of that file stands in for the camera driver, an idle process for
    the arm driver (the sim node drives the arm too), and there is no teleop device, so every command is the
    policy's. The doctor passes the drivers; the learner builds its policy for the robot file's keys, whatever the
    task, so the actor takes its weights and commands the robot; the learner acknowledges the transitions; episodes
    have the robot file's length, not a sim task's; SIGINT stops everything cleanly."""
    _wheels_or_skip()
    from ros_harness import third_party_robot_file

    robot = third_party_robot_file(tmp_path / "arm.yaml", sim=False, max_episode_steps=80)
    stand_in = third_party_robot_file(tmp_path / "arm_stand_in.yaml", sim=True, max_episode_steps=80)
    python = shlex.quote(sys.executable)
    idle = tmp_path / "idle_driver.py"
    idle.write_text(IDLE_DRIVER)
    run_dir = tmp_path / "run"
    run = LaunchRun("robot_train.yaml", {
        "robot": robot,
        "camera_driver": f"{python} -m robot_rl.sim.node --task PickCube-v0 --mode realtime --seed 0 "
                         f"--ros-args -p robot:={shlex.quote(str(stand_in))}",
        "robot_driver": f"{python} {shlex.quote(str(idle))}",
        "device": "none", "run_dir": run_dir, "critics": 2, "utd": 1, "doctor_duration": 2,
        "doctor_timing": "warn",  # this machine's load is no driver's timing: the wiring and content are checked
    }, log=tmp_path / "launch.log")
    try:
        deadline = time.monotonic() + 240

        def running():
            actor = _read_json(run_dir / "actor_status.json")
            learner = _read_json(run_dir / "learner_status.json")
            return actor is not None and learner is not None and actor["episodes"] >= 1 \
                and actor["acked_through"] >= 10 and actor["weights_version"] >= 1 \
                and learner["robots"].get("robot0", {}).get("episodes", 0) >= 1

        while not running():
            assert run.process.poll() is None, f"robot_train ended early:\n{run.output()[-4000:]}"
            assert time.monotonic() < deadline, f"robot_train did not get going:\n{run.output()[-4000:]}"
            time.sleep(0.5)
        actor = _read_json(run_dir / "actor_status.json")
        learner = _read_json(run_dir / "learner_status.json")
        run.process.send_signal(signal.SIGINT)
        status = run.wait(timeout=60)
    finally:
        run.stop()
    out = run.output()
    assert status == 130, out[-4000:]  # stopped by Ctrl-C; every node exited 0 (below)
    launcher = _launcher_lines(out)
    assert "[launch] received SIGINT, shutting down" in launcher, out[-4000:]
    assert not any("still running: sending" in line for line in launcher), out[-4000:]
    for name in ("cameras", "robot", "learner", "actor"):
        assert f"[launch] {name} exited with code 0" in launcher, out[-4000:]
    assert "started teleop" not in " ".join(launcher) and "started human" not in " ".join(launcher), launcher
    # The doctor checked the drivers before the learner and the actor started.
    assert any(line.startswith("[doctor] all checks passed") for line in out.splitlines()), out
    assert launcher.index("[launch] doctor exited with code 0: preflight passed") < \
        next(i for i, line in enumerate(launcher) if line.startswith("[launch] started actor")), out[-4000:]
    # The actor builds the robot file's keys and episode length, and took the learner's policy for them.
    actor_log = "\n".join(line for line in out.splitlines() if line.startswith("[actor] "))
    assert "keys=['state', 'images/scene', 'images/hand']" in actor_log and "max_episode_steps=80" in actor_log, \
        actor_log
    assert "rejected weights" not in out, actor_log
    assert "policy weights v" in actor_log and "loaded from learner" in actor_log, actor_log
    # The policy commanded the robot (no human), and its steps reached the learner.
    assert actor["commands"] - actor["held"] >= 1 and actor["interventions"] == 0, actor
    assert actor["rejected"] == {} and actor["incompatible_qos"] == {}, actor
    assert actor["acked_through"] >= 10 and learner["received"] >= 10, (actor, learner)
    # Episodes of the robot file's 80 steps (a sim task's 50 would have ended them sooner); one that ended by
    # success is shorter. The learner stored the same episodes.
    assert all(r["steps"] == 80 or r["success"] for r in actor["results"]), actor["results"]
    robot0 = learner["robots"]["robot0"]
    assert robot0["successes"] or robot0["steps"] == 80 * robot0["episodes"], robot0
