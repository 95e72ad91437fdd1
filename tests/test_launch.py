"""The project's ROS 2 launcher: parsing, substitutions, argv rendering, output, signals, respawn, no orphans.

The children are tiny Python scripts written to tmp_path (no ROS needed); the SIGINT test runs the launcher as
`python -m robot_rl.cli launch` in its own subprocess, the others run a `Launcher` in-process.
"""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import yaml

from robot_rl.cli import main
from robot_rl.ros.launch import (
    LaunchError,
    Launcher,
    load_launch_file,
    parse_cli_arguments,
    render_param_value,
)

REPO = Path(__file__).resolve().parents[1]


def _wheels_or_skip() -> None:
    from robot_rl.ros.env import RosEnvironmentError, find_ros_wheels

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


def _run(description, **kwargs) -> tuple[int, str, str, float]:
    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    status = Launcher(description, stdout=out, stderr=err, **kwargs).run()
    return status, out.getvalue(), err.getvalue(), time.monotonic() - start


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
                   "--x $(env LAUNCH_TEST_UNSET fall back)",
            "name": "tool",
            "env": [{"name": "WHO", "value": "$(var robot)"}, {"name": "N", "value": 3}],
        }},
    ])
    description = load_launch_file(path, {"robot": "arm 2"})
    assert {a.name: a.value for a in description.arguments} == {
        "task": "PickCube-v0", "robot": "arm 2", "rate": "10", "config": f"{tmp_path}/arm 2.yaml",
    }
    (spec,) = description.processes
    # A substituted value with spaces stays one word; so does $(env NAME default with spaces).
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
    ],
)
def test_errors_name_file_entry_and_key(tmp_path, entries, arguments, fragments):
    path = _write(tmp_path, entries)
    with pytest.raises(LaunchError) as info:
        load_launch_file(path, arguments)
    message = str(info.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, message


def test_whole_file_is_validated_before_anything_starts(tmp_path):
    marker = tmp_path / "started"
    path = _write(tmp_path, [
        {"executable": {"cmd": f"touch {marker}"}},
        {"executable": {"cmd": "x", "bogus": 1}},
    ])
    with pytest.raises(SystemExit, match=r"error: .*entry 1 \(executable\).*'bogus'"):
        main(["launch", str(path)])
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
        f"[learner] PYTHONUNBUFFERED=1 {sys.executable} -m robot_rl.ros.learner_node "
        "--ros-args -r __node:=learner -p task:=PegInsert-v0",
        "[helper] A=b PYTHONUNBUFFERED=1 echo hi",
    ]
    with pytest.raises(SystemExit, match="error: .*argument 'task'.*task:=VALUE"):
        main(["launch", str(_write(tmp_path, [{"arg": {"name": "task"}}], "noarg.yaml")), "--dry-run"])


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
    status, out, err, _ = _run(load_launch_file(path), domain_id=42)
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
    status, out, _, _ = _run(load_launch_file(path))
    assert status == 1
    assert "[launch] bad exited with code 5" in out and "failed: bad" in out


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
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
        [sys.executable, "-m", "robot_rl.cli", "launch", str(path), "--domain-id", "77"],
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
    assert launcher.returncode == 0, out
    assert "[one] one got SIGINT" in out and "[two] two got SIGINT" in out, out
    assert f"received {signum.name}, shutting down" in out
    assert "sending SIGTERM" not in out  # nobody needed more than SIGINT
    for name, pid_file in pids.items():
        pid = int(pid_file.read_text())
        _wait_for(lambda: _gone(pid), timeout=5)


def test_required_process_exit_stops_the_others_with_its_status(tmp_path):
    _wheels_or_skip()
    polite = _script(tmp_path, "polite.py", POLITE)
    exit_when = _script(tmp_path, "exit_when.py", EXIT_WHEN)
    pid_file = tmp_path / "worker.pid"
    path = _write(tmp_path, [
        {"executable": {"cmd": _cmd(polite, str(pid_file)), "name": "worker"}},
        {"executable": {"cmd": _cmd(exit_when, str(pid_file), "3"), "name": "boss", "on_exit": "shutdown"}},
    ])
    status, out, _, elapsed = _run(load_launch_file(path), grace_s=5.0)
    assert status == 3, out
    assert elapsed < 5.0
    assert "[launch] boss exited with code 3; it is required" in out
    assert "[worker] worker got SIGINT" in out
    assert _gone(int(pid_file.read_text()))

    # `required: true` is accepted too; a required process killed by a signal gives status 1.
    killed = _script(tmp_path, "killed.py", "os.kill(os.getpid(), signal.SIGKILL)\n")
    path = _write(tmp_path, [{"executable": {"cmd": _cmd(killed), "name": "k", "required": True}}], "k.yaml")
    status, out, _, _ = _run(load_launch_file(path))
    assert status == 1 and "k died by signal SIGKILL" in out


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
    status, out, _, _ = _run(description)
    thread.join()
    assert status == 0, out
    runs = len(counter.read_text().split())
    assert runs >= 4
    assert "[launch] flaky exited with code 1; respawning in 0.1 s (restart 1)" in out
    assert out.count("[launch] started flaky") == runs


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
    status, out, _, elapsed = _run(load_launch_file(path), grace_s=0.5, term_timeout_s=0.5)
    assert status == 0, out  # the required process exited 0
    assert "[stubborn] ignoring SIGINT" in out and "[deaf] ignoring SIGINT" in out
    assert "[launch] stubborn, deaf still running: sending SIGTERM" in out
    assert "[deaf] ignoring SIGTERM" in out
    assert "[launch] deaf still running: sending SIGKILL" in out
    assert "stubborn died by signal SIGTERM" in out and "deaf died by signal SIGKILL" in out
    assert 1.0 <= elapsed < 5.0
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
    from robot_rl.ros.env import private_network_command

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
        private_network_command([sys.executable, "-m", "robot_rl.cli", "launch", str(path), "--domain-id", "91"]),
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


SHIPPED_ARGUMENTS = {
    "sim_train.yaml": {},
    "sim_eval.yaml": {"weights": "runs/x/policy.msgpack"},
    "teleop_record.yaml": {"out": "demos.zarr"},
    "robot_train.yaml": {"camera_driver": "cam_driver", "robot_driver": "arm_driver", "demo_path": "demos.zarr"},
}


@pytest.mark.parametrize("name", sorted(SHIPPED_ARGUMENTS))
def test_shipped_launch_files_resolve_to_existing_modules(name):
    import importlib.util

    description = load_launch_file(REPO / "launch" / name, SHIPPED_ARGUMENTS[name])
    modules = [spec.argv[2] for spec in description.processes if spec.argv[1:2] == ("-m",)]
    assert modules, description.commands()
    for module in modules:
        assert importlib.util.find_spec(module) is not None, f"{name}: module {module} does not exist"


def test_shipped_launch_files_are_all_covered():
    assert sorted(p.name for p in (REPO / "launch").glob("*.yaml")) == sorted(SHIPPED_ARGUMENTS)


def test_sim_train_human_can_be_switched_off():
    with_human = load_launch_file(REPO / "launch" / "sim_train.yaml", {})
    without = load_launch_file(REPO / "launch" / "sim_train.yaml", {"human": "false"})
    assert [p.name for p in with_human.processes] == ["sim", "learner", "actor", "human"]
    assert [p.name for p in without.processes] == ["sim", "learner", "actor"]
