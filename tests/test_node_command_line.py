"""A node's parameters checked from its command line before anything heavy starts (robot_rl.ros.ros_args reads rcl's
arguments without rclpy; robot_rl.ros.node_util.check_command_line applies the node's rules to them). No ROS: the
values rcl gives were measured with the wheels' rclpy 9.1.2 (rclpy.init(args=...), create_node, its
_parameter_overrides), and this reader agreed with it on every case below."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from robot_rl.ros import ros_args
from robot_rl.ros.node_util import NodeStartupError, accepted_value, check_command_line


@pytest.mark.parametrize("text, value", [
    ("010", 8), ("0x1f", 31), ("-0x10", -16), ("+3", 3), ("-5", -5), ("08", 8.0), ("1e3", 1000.0), ("-.5", -0.5),
    ("1.", 1.0), ("0x1p3", 8.0), ("99999999999999999999", 1e20), (".inf", math.inf), ("-.inf", -math.inf),
    ("infinity", math.inf), ("Yes", True), ("on", True), ("y", True), ("OFF", False), ("true ", True),
    ('"5"', "5"), ("'010'", "010"), ("''", ""), ("~", "~"), ("null", "null"), ("abc", "abc"), ("a b", "a b"),
    ("0x", "0x"), ("1e999", "1e999"), ("1_000", "1_000"), ("http://x/y", "http://x/y"), ("a:b", "a:b"),
    ("1.2.3", "1.2.3"), ("[1,2]", [1, 2]), ("[a, 'b']", ["a", "b"]),
])
def test_a_value_is_typed_as_rcl_types_it(text, value):
    got = ros_args.parse_value(text)
    assert type(got) is type(value) and got == value, (text, got)


def test_nan_and_what_rcl_refuses():
    assert math.isnan(ros_args.parse_value("nan")) and math.isnan(ros_args.parse_value(".NaN"))
    # rcl refuses these (rclpy.init fails): nothing is said about them here
    for text in ("", "[1, 2.0]", "[]", "a: b", "-", "---", "|\n  x", "1e-400"):
        assert ros_args.parse_value(text) is ros_args.UNSURE, text


def test_ros_arguments_are_the_sections_after_ros_args():
    argv = ["prog", "--mode", "lockstep", "--ros-args", "-p", "a:=1", "-r", "__ns:=/x", "--", "--seed", "3",
            "--ros-args", "-p", "--", "--ros-args", "-p", "b:=2"]
    plain, ros = ros_args.split_ros_args(argv)
    assert plain == ["prog", "--mode", "lockstep", "--seed", "3"]
    assert ros == ["-p", "a:=1", "-r", "__ns:=/x", "-p", "--", "-p", "b:=2"]  # -p takes the next argument, even --
    assert ros_args.remove_ros_args(argv) == plain


def node(argv: list[str], name: str = "actor") -> ros_args.NodeCommandLine:
    return ros_args.node_command_line(["prog", "--ros-args", *argv], name)


PARAMS_FILE = """\
/**:
  ros__parameters:
    everywhere: 1
    shared: from_all
actor:
  ros__parameters:
    shared: from_node
    nested: {x: 2.5, y: {z: "3"}}
    keys: [state, images/front]
/ns:
  actor:
    ros__parameters:
      in_ns: yes
other:
  ros__parameters:
    not_mine: 1
/*:
  ros__parameters:
    wild: 1
"""


@pytest.fixture()
def params_file(tmp_path) -> str:
    path = tmp_path / "params.yaml"
    path.write_text(PARAMS_FILE)
    return str(path)


def test_a_parameters_file_gives_the_entries_of_all_nodes_and_of_this_one(params_file):
    given = node(["--params-file", params_file])
    assert given.values == {"everywhere": 1, "shared": "from_node", "nested.x": 2.5, "nested.y.z": "3",
                            "keys": ["state", "images/front"]}
    assert given.unsure == {"wild"}  # a wildcard entry: rclpy may or may not apply it
    in_ns = node(["--params-file", params_file, "-r", "__ns:=/ns"])
    assert in_ns.full_name == "/ns/actor" and in_ns.values == {"everywhere": 1, "shared": "from_all", "in_ns": True}
    assert node(["--params-file", params_file, "-r", "__node:=renamed"]).values == {"everywhere": 1,
                                                                                       "shared": "from_all"}


def test_the_entry_that_first_appeared_later_wins(params_file):
    # rclpy takes the entries in the order each first appeared, so a later entry's value wins; within one entry the
    # last value given does
    assert node(["-p", "shared:=cli", "--params-file", params_file]).values["shared"] == "from_node"
    assert node(["--params-file", params_file, "-p", "shared:=cli"]).values["shared"] == "from_node"
    assert node(["-p", "shared:=1", "-p", "actor:shared:=2"]).values["shared"] == 2
    assert node(["-p", "actor:shared:=2", "-p", "shared:=1"]).values["shared"] == 1
    assert node(["-p", "a:=1", "-p", "a:=2"]).values["a"] == 2
    assert node(["-p", "other:a:=1"]).values == {}
    assert node(["-p", "actor:a:=1", "-r", "__ns:=/ns"]).values == {}  # `actor` is /actor


def test_the_first_remap_rule_that_applies_names_the_node():
    assert node(["-r", "actor:__node:=x", "-r", "__node:=y"]).name == "x"
    assert node(["-r", "other:__node:=x", "-r", "__name:=y", "-r", "__node:=z"]).name == "y"
    renamed = node(["-r", "__node:=y", "-r", "actor:__ns:=/a", "-r", "y:__ns:=/b"])
    assert renamed.full_name == "/b/y"  # a scoped namespace rule names the node as renamed
    assert node(["-r", "__ns:=/a/b", "-r", "__node:=y", "-p", "y:v:=1"]).values == {}


def test_an_unreadable_parameters_file_is_left_to_rcl(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("actor: [")
    with pytest.raises(ros_args.ParamsFileError):
        node(["--params-file", str(bad)])
    assert check_command_line(["prog", "--ros-args", "--params-file", str(bad), "-p", "typo:=1"], "actor",
                              [("episodes", 0, "")]) is None
    assert check_command_line(["prog", "--ros-args", "--params-file", str(tmp_path / "none.yaml")], "actor",
                              [("episodes", 0, "")]) is None


@pytest.mark.parametrize("default, given, value", [
    (1.5, 2, 2.0), ("text", 3, "3"), ("text", 0.5, "0.5"), (True, False, False), (3, 4, 4), (["a"], ["b", "c"], ["b", "c"]),
])
def test_an_integer_is_accepted_for_a_float_and_a_number_for_text(default, given, value):
    got = accepted_value("p", default, given, "n")
    assert type(got) is type(value) and got == value


@pytest.mark.parametrize("default, given, kind", [
    (0, "abc", "an integer"), (0, 1.0, "an integer"), (0, True, "an integer"), (1.5, "x", "a number"),
    (False, 1, "true or false"), ("text", True, "a string"), (["a"], [1], "a list"), (["a"], "a", "a list"),
])
def test_a_value_of_another_type_is_the_nodes_error(default, given, kind):
    with pytest.raises(NodeStartupError) as error:
        accepted_value("p", default, given, "n")
    assert str(error.value) == f"parameter 'p' of node n must be {kind} (default {default!r}), got {given!r}"
    assert error.value.status == 2


TABLE = [("episodes", 0, ""), ("rate", 1.5, ""), ("task", "PickCube-v0", "")]


def test_types_come_before_unknown_names_and_the_node_check_last():
    calls = []

    def check(node_name, values):
        calls.append((node_name, values("episodes"), values("rate"), values("task"), values("use_sim_time")))

    argv = ["prog", "--ros-args", "-p", "episode:=3", "-p", "episodes:=abc"]
    with pytest.raises(NodeStartupError, match="parameter 'episodes' of node actor must be an integer"):
        check_command_line(argv, "actor", TABLE, check)
    with pytest.raises(NodeStartupError) as error:
        check_command_line(["prog", "--ros-args", "-p", "episode:=3", "-r", "__node:=a2"], "actor", TABLE, check)
    assert str(error.value) == ("unknown parameter 'episode' for node a2 (did you mean 'episodes'?); known: "
                                "episodes, rate, start_type_description_service, task, use_sim_time")
    assert not calls
    values = check_command_line(["prog", "--ros-args", "-p", "rate:=2", "-p", "task:=3", "-p", "use_sim_time:=true",
                                 "-p", "qos_overrides./x.publisher.depth:=3"], "actor", TABLE, check)
    assert calls == [("actor", 0, 2.0, "3", True)] and values["rate"] == 2.0


def test_the_node_check_is_left_to_the_node_when_a_value_is_unsure(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("/*:\n  ros__parameters:\n    episodes: -1\n    episode: 3\n")

    def check(node_name, values):
        raise AssertionError("not called")

    assert check_command_line(["prog", "--ros-args", "--params-file", str(path)], "actor", TABLE, check) is not None


def learner(*params: str) -> list[str]:
    return ["prog", "--ros-args", "-p", "run_dir:=/nonexistent/never", *params]


@pytest.mark.parametrize("argv, words", [
    (learner("-p", "obs_mode:=pixels", "-p", "image_size:=4"), "invalid TrainConfig: image_size=4 must be in [16, 640]"),
    (learner("-p", "step:=10"), "unknown parameter 'step' for node learner (did you mean 'steps'?)"),
    (learner("-p", "steps:=-5"), "steps=-5 must be >= 0 (steps:=0 means run until stopped)"),
    (learner("-p", "final_eval_episodes:=-1"), "final_eval_episodes=-1 must be >= 0"),
    (learner("-p", "policy:=residual"), "policy='residual' needs --base"),
    (learner("-p", "policy:=residual", "-p", "base:=b", "-p", "base_execute:=-1"),  # a kind's option: the registry's
     "base_execute=-1 must be >= 1 (base_execute:=0 means the base's whole chunk)"),
    (learner("-p", "noise_aliasing:=true"), "--noise-aliasing is only used with --policy noise"),
    (learner("-p", "obs_mode:=rgb"), "obs_mode='rgb' must be one of 'state', 'pixels', 'state+pixels'"),
    (learner("-p", "updates_per_transition:=-1"), "updates_per_transition=-1.0 must be >= 0"),
    (learner("-p", "eval_every:=-2"), "eval_every=-2 must be >= -1"),
])
def test_the_learner_checks_its_parameters_by_its_twins_rules_without_jax(argv, words):
    from robot_rl.ros.nodes.learner_params import NODE_NAME, PARAMETERS, check_parameters

    with pytest.raises(NodeStartupError) as error:
        check_command_line(argv, NODE_NAME, PARAMETERS, check_parameters)
    assert words in str(error.value) and error.value.status == 2, str(error.value)


def test_a_resumed_learner_run_is_not_held_to_a_new_runs_settings(tmp_path):
    from robot_rl.learner.server import checkpoint_dir
    from robot_rl.ros.nodes.learner_params import NODE_NAME, PARAMETERS, check_parameters

    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "learner.json").write_text("{}")
    if not checkpoint_dir(tmp_path):
        pytest.fail("this test's stand-in checkpoint is not one: update it to what robot_rl.learner.server reads")
    argv = ["prog", "--ros-args", "-p", f"run_dir:={tmp_path}", "-p", "policy:=residual"]  # its base: in the checkpoint
    assert check_command_line(argv, NODE_NAME, PARAMETERS, check_parameters) is not None
    check_command_line(learner("-p", "obs_mode:=state"), NODE_NAME, PARAMETERS, check_parameters)  # a new run


@pytest.mark.parametrize("module, argv, words", [
    ("robot_rl.ros.nodes.actor_node", ["-p", "episodes:=-1", "-p", "weight_wait_s:=0.0"],
     "invalid parameters of node actor: episodes=-1 must be >= 1 (0: run until stopped); weight_wait_s=0.0 must be > 0"),
    ("robot_rl.ros.nodes.actor_node", ["-p", "mode:=fast"], "mode='fast' must be one of '', 'lockstep', 'realtime'"),
    ("robot_rl.ros.nodes.actor_node", ["-p", "action_dim:=5"], "action_dim=5 must be 4"),
    ("robot_rl.ros.nodes.actor_node", ["-p", "eval_out:=auto"], "eval_out='auto' evaluates a saved policy"),
    ("robot_rl.drivers.teleop_node", ["-p", "rate_hz:=0.0"], "rate_hz=0.0 must be a finite number > 0"),
    ("robot_rl.ros.nodes.reward_node", ["-p", "model:=m", "-p", "reward:=dense"], "parameter 'reward' must be one of"),
    ("robot_rl.drivers.camera_node", ["-p", "jpeg_quality:=0"], "parameter 'jpeg_quality' of node camera: must be in"),
])
def test_each_node_checks_its_values_by_the_rules_it_uses_once_built(module, argv, words):
    import importlib

    node_module = importlib.import_module(module)
    with pytest.raises(NodeStartupError) as error:
        check_command_line(["prog", "--ros-args", *argv], node_module.NODE_NAME, node_module.PARAMETERS,
                           node_module.check_parameters)
    assert words in str(error.value), str(error.value)


def test_the_sim_checks_its_values_with_the_command_lines_defaults():
    from robot_rl.sim.node import SimNodeConfig, check_parameters, parameter_table

    table = parameter_table(SimNodeConfig(image_size=4))  # --image-size 4
    with pytest.raises(NodeStartupError, match=r"image_size=4 must be an int in \[16, 640\]"):
        check_command_line(["prog"], "sim", table, check_parameters)
    check_command_line(["prog", "--ros-args", "-p", "image_size:=32"], "sim", table, check_parameters)
    with pytest.raises(NodeStartupError, match="seed=-2 must be an int >= 0"):
        check_command_line(["prog", "--ros-args", "-p", "seed:=-2"], "sim", table, check_parameters)


STARTS = """
import sys
from robot_rl.ros.nodes import actor_node, learner_node
from robot_rl.drivers import teleop_node
for main, argv in ((learner_node.main, ["learner_node", "--ros-args", "-p", "run_dir:=/nonexistent/never",
                                        "-p", "obs_mode:=pixels", "-p", "image_size:=4"]),
                   (actor_node.main, ["actor_node", "--ros-args", "-p", "episode:=3"]),
                   (teleop_node.main, ["teleop_node", "--device", "keyboard", "--ros-args", "-p", "rate_hz:=0"])):
    print("exit", main(argv), flush=True)
print("imported", sorted(m for m in ("rclpy", "jax", "torch", "mujoco", "cv2") if m in sys.modules))
"""


def test_a_bad_parameter_is_one_error_line_before_ros_jax_or_torch_start():
    env = {**os.environ, "RCUTILS_COLORIZED_OUTPUT": "0"}
    env.pop("RCUTILS_CONSOLE_OUTPUT_FORMAT", None)
    result = subprocess.run([sys.executable, "-c", STARTS], capture_output=True, text=True, timeout=120, env=env,
                            cwd=Path(__file__).resolve().parent.parent)
    assert result.stdout.splitlines() == ["exit 2", "exit 2", "exit 2", "imported []"], (result.stdout, result.stderr)
    errors = result.stderr.splitlines()
    assert len(errors) == 3, result.stderr
    for line, (name, words) in zip(errors, [
            ("learner", "invalid TrainConfig: image_size=4 must be in [16, 640]"),
            ("actor", "unknown parameter 'episode' for node actor (did you mean 'episodes'?)"),
            ("teleop", "TeleopConfig.rate_hz=0.0 must be a finite number > 0")]):
        prefix, _, message = line.partition(f" [{name}]: ")
        assert prefix.startswith("[ERROR] [") and prefix.endswith("]") and message.startswith(words), line
    assert not Path("/nonexistent/never").exists()
