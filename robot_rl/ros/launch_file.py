"""The launch files of the project's launcher (robot_rl.ros.launch): the subset of ROS 2's YAML launch format we need,
read, validated and resolved into a LaunchDescription. Importable without rclpy.

Example (every key shown; ``$(...)`` substitutions work in any string value)::

    launch:
    - arg: {name: task, default: PickCube-v0, description: "task id"}  # override: robot-rl launch f.yaml task:=X
    - arg: {name: ns}                                    # no default: must be given on the command line
    - arg: {name: side, default: all, choices: [all, robot, server]}  # any other value: an error before start
    - arg: {name: with_sim, default: "true"}
    - node:
        pkg: robot_rl                  # pkg + exec: one of the project's nodes (see EXECUTABLES)
        exec: sim_node
        name: sim                      # -> -r __node:=sim
        namespace: /$(var ns)          # -> -r __ns:=/robot1
        param:                         # -> -p name:=value, typed as written (a value containing a
        - {name: task, value: $(var task)}           #    substitution is read as YAML once substituted)
        - {name: rate_hz, value: 10.0}
        - {name: cameras, value: [front, wrist]}
        remap:                         # -> -r from:=to
        - {from: command/target_pose, to: /other/target}
        env:                           # added to this process's environment
        - {name: MUJOCO_GL, value: $(env MUJOCO_GL egl)}
        args: "--mode lockstep"        # substituted, split like a shell would, placed before --ros-args
        respawn: false                 # true: restart it respawn_delay seconds after it exits
        respawn_delay: 2.0
        on_exit: shutdown              # when it exits, stop the rest (ROS 2's "required"; required: true works)
        preflight: false               # true: run it to completion before starting the entries after it
        if: $(var with_sim)            # start it only if true (`unless:` the opposite)
    - node: {module: robot_rl.ros.nodes.learner_node, name: learner}  # our extension: python -m MODULE
    - executable: {cmd: "python3 $(dirname)/helper.py --flag", name: helper, env: [{name: X, value: "1"}]}
    - node: {pkg: robot_rl, exec: scripted_teleop, if: "$(equals $(var device) scripted)"}

Substitutions (they nest, as in ROS 2): ``$(var NAME)`` (a declared arg), ``$(env NAME)`` / ``$(env NAME default)``,
``$(dirname)`` (the launch file's folder), ``$(network)`` (the network mode the processes get: local, lan or
secure; our extension), ``$(equals A B)`` / ``$(not-equals A B)`` (text comparison),
``$(not X)``, ``$(and X Y)``, ``$(or X Y)``; the last five give ``true`` / ``false`` (and read true/false/1/0).
``cmd`` and ``args`` are substituted first, then split into words like a shell command line, so an argument such as
``camera_driver:="python3 -m my_driver --fps 30"`` becomes several words; quote a substitution (``'$(var path)'``)
to keep a value with spaces one word. The whole file is validated before anything starts; every problem is a
:class:`LaunchError` naming the file and line, the entry and the key (YAML syntax errors: FILE:LINE:COLUMN).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from robot_rl.core.suggest import closest

# `pkg: robot_rl` + `exec:` -> module run with `python -m`. Never imported by the launcher.
EXECUTABLES: dict[str, dict[str, str]] = {
    "robot_rl": {
        "sim_node": "robot_rl.sim.node",
        "actor_node": "robot_rl.ros.nodes.actor_node",
        "learner_node": "robot_rl.ros.nodes.learner_node",
        "teleop_node": "robot_rl.drivers.teleop_node",
        "reward_node": "robot_rl.ros.nodes.reward_node",
        "camera_node": "robot_rl.drivers.camera_node",
        "scripted_teleop": "robot_rl.sim.scripted_teleop",
        "doctor": "robot_rl.ros.doctor",
        "file_share": "robot_rl.ros.nodes.file_share_node",
        "link": "robot_rl.ros.nodes.link_node",
    }
}

_COMMON_KEYS = {"name", "env", "respawn", "respawn_delay", "on_exit", "required", "args", "if", "unless",
                "preflight"}
_NODE_KEYS = _COMMON_KEYS | {"pkg", "exec", "module", "namespace", "param", "remap"}
_EXECUTABLE_KEYS = _COMMON_KEYS | {"cmd"}
_ARG_KEYS = {"name", "default", "description", "choices"}
# A declared argument of this name sets the network mode (ROBOT_RL_NETWORK) of every process the launch starts.
NETWORK_ARGUMENT = "network"
NETWORK_AUTO = "auto"  # the network argument's value that leaves the mode to the environment
# A declared argument of this name, when true, lets lan run with a real robot's file (ROBOT_RL_ALLOW_OPEN_NETWORK).
ALLOW_OPEN_NETWORK_ARGUMENT = "allow_open_network"
_ON_EXIT_ACTIONS = ("shutdown",)
_ROS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ROS_NAMESPACE = re.compile(r"/?([A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*)?")
# Strings that rcl's YAML parser would read as something other than a string unless quoted.
_RCL_SPECIAL_WORDS = {
    "y", "yes", "n", "no", "true", "false", "on", "off", "null", "~", "nan", "inf", "infinity", ".nan", ".inf",
}
_PLAIN_STRING = re.compile(r"[A-Za-z_/][A-Za-z0-9_./\-]*")
# A process that exits with this status had a usage or configuration error (the project's nodes, argparse).


class LaunchError(Exception):
    """A launch file is invalid or cannot be started; the message names the file, the entry and the key."""


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads YAML 1.2 floats such as ``1e-5`` (PyYAML's 1.1 rules need a dot)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def _construct_mapping(loader: _Loader, node: yaml.MappingNode):
    """A mapping that refuses duplicate keys (PyYAML would silently keep the last one)."""
    mapping: dict[Any, Any] = {}
    yield mapping
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:  # unhashable: construct_mapping below reports it
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
    mapping.update(loader.construct_mapping(node))


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)


def _yaml_error(path: Path, exc: yaml.YAMLError) -> LaunchError:
    """One line: FILE:LINE:COLUMN: what PyYAML found (and while doing what)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem, context = getattr(exc, "problem", None), getattr(exc, "context", None)
    context_mark = getattr(exc, "context_mark", None)
    if context and context_mark is not None and mark is not None and context_mark.line != mark.line:
        context += f" that starts on line {context_mark.line + 1}"
    detail = (f"{problem} ({context})" if context else problem) if problem else str(exc)
    return LaunchError(f"{where}: invalid YAML: {' '.join(detail.split())}")


def _at(path: Path, node: yaml.Node | None) -> str:
    return f"{path}:{node.start_mark.line + 1}:{node.start_mark.column + 1}" if node is not None else str(path)


def _yaml_type(value: Any) -> str:
    """What a YAML value is, in YAML's words."""
    for kind, name in ((dict, "a mapping"), (list, "a list"), (str, "a string"), (bool, "a boolean")):
        if isinstance(value, kind):
            return name
    return "a number" if isinstance(value, (int, float)) else "null" if value is None else type(value).__name__


@dataclasses.dataclass(frozen=True)
class LaunchArgument:
    """A declared launch argument and the value it resolved to."""

    name: str
    value: str
    description: str = ""
    choices: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class ProcessSpec:
    """One process to run: its label, full argv, environment additions and lifecycle policy."""

    name: str
    argv: tuple[str, ...]
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    respawn: bool = False
    respawn_delay: float = 0.0
    required: bool = False
    preflight: bool = False
    """Run to completion (exit status 0) before the processes after it start."""

    @property
    def holds_stops_while_starting(self) -> bool:
        """A project node (``python -m robot_rl....``): it takes over the stop signals once its handlers are in
        (:func:`robot_rl.core.interrupts.accept_held_stops`), so the launcher may start it with them held."""
        return self.argv[:2] == (sys.executable, "-m") and self.argv[2:3] != () and self.argv[2].startswith("robot_rl.")

    def command(self) -> str:
        """The process as one shell-runnable line (environment additions first)."""
        env = [f"{k}={shlex.quote(v)}" for k, v in self.env.items()]
        return " ".join([*env, shlex.join(self.argv)])


@dataclasses.dataclass(frozen=True)
class LaunchDescription:
    """A validated launch file with every substitution resolved."""

    path: Path
    arguments: tuple[LaunchArgument, ...]
    processes: tuple[ProcessSpec, ...]

    def commands(self) -> list[str]:
        """One shell-runnable command line per process, in start order (for a dry run)."""
        return [p.command() for p in self.processes]


# ----------------------------------------------------------------------------------------------------------- parsing


@dataclasses.dataclass(frozen=True)
class _Substitution:
    """One parsed ``$(kind arg ...)``; each argument is a sequence of literal text and nested substitutions."""

    kind: str
    args: tuple[tuple[str | _Substitution, ...], ...]
    source: str


def _parse_substitutions(text: str) -> list[str | _Substitution]:
    """Split `text` into literal strings and (possibly nested) substitutions; ValueError if one is unterminated."""
    parts, _ = _parse_parts(text, 0, in_argument=False)
    return parts


def _parse_parts(text: str, i: int, in_argument: bool) -> tuple[list[str | _Substitution], int]:
    parts: list[str | _Substitution] = []
    literal_start = i
    while i < len(text):
        if text.startswith("$(", i):
            if i > literal_start:
                parts.append(text[literal_start:i])
            substitution, i = _parse_substitution(text, i)
            parts.append(substitution)
            literal_start = i
        elif in_argument and (text[i].isspace() or text[i] == ")"):
            break
        else:
            i += 1
    if i > literal_start:
        parts.append(text[literal_start:i])
    return parts, i


def _parse_substitution(text: str, start: int) -> tuple[_Substitution, int]:
    i = start + 2
    kind_end = i
    while kind_end < len(text) and not text[kind_end].isspace() and text[kind_end] != ")":
        kind_end += 1
    kind, i = text[i:kind_end], kind_end
    args = []
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            raise ValueError(f"unterminated substitution {text[start:]!r}")
        if text[i] == ")":
            return _Substitution(kind, tuple(args), text[start:i + 1]), i + 1
        arg, i = _parse_parts(text, i, in_argument=True)
        args.append(tuple(arg))


# kind: (usage, fewest arguments, most arguments)
_SUBSTITUTIONS: dict[str, tuple[str, int, float]] = {
    "var": ("$(var NAME)", 1, 1),
    "env": ("$(env NAME [default])", 1, math.inf),
    "dirname": ("$(dirname)", 0, 0),
    "network": ("$(network)", 0, 0),
    "equals": ("$(equals A B)", 2, 2),
    "not-equals": ("$(not-equals A B)", 2, 2),
    "not": ("$(not X)", 1, 1),
    "and": ("$(and X Y)", 2, 2),
    "or": ("$(or X Y)", 2, 2),
}
_TRUE_WORDS, _FALSE_WORDS = ("true", "1"), ("false", "0")


def _truth(text: str) -> bool | None:
    """`true`/`1` -> True, `false`/`0` -> False (any case), anything else None."""
    word = text.strip().lower()
    return True if word in _TRUE_WORDS else False if word in _FALSE_WORDS else None


class _Context:
    """Where we are in the file (for error messages) and what substitutions resolve to."""

    def __init__(self, path: Path, variables: dict[str, str]):
        self.path = path
        self.variables = variables
        self.where = str(path)

    def error(self, message: str) -> LaunchError:
        return LaunchError(f"{self.where}: {message}")

    def substitute(self, text: str, key: str) -> str:
        try:
            parts = _parse_substitutions(text)
        except ValueError as exc:
            raise self.error(f"key {key!r}: {exc}") from None
        return self._evaluate(parts, key)

    def _evaluate(self, parts: Sequence[str | _Substitution], key: str) -> str:
        return "".join(part if isinstance(part, str) else self._resolve(part, key) for part in parts)

    def _resolve(self, substitution: _Substitution, key: str) -> str:
        kind, source = substitution.kind, substitution.source
        if kind not in _SUBSTITUTIONS:
            supported = ", ".join(usage for usage, _, _ in _SUBSTITUTIONS.values())
            raise self.error(f"key {key!r}: unknown substitution {source}; supported: {supported}")
        usage, fewest, most = _SUBSTITUTIONS[kind]
        args = [self._evaluate(arg, key) for arg in substitution.args]
        if not fewest <= len(args) <= most:
            raise self.error(f"key {key!r}: {source} has {len(args)} argument(s); write {usage}")
        if kind == "var":
            if args[0] not in self.variables:
                known = ", ".join(sorted(self.variables)) or "none"
                raise self.error(f"key {key!r}: $(var {args[0]}) names an undeclared argument (declared: {known})")
            return self.variables[args[0]]
        if kind == "env":
            name, default = args[0], " ".join(args[1:]) if len(args) > 1 else None
            value = os.environ.get(name, default)
            if value is None:
                raise self.error(
                    f"key {key!r}: environment variable {name} is not set and $(env {name}) has no default"
                )
            return value
        if kind == "dirname":
            return str(self.path.parent)
        if kind == "network":
            return self._network_mode(key)
        if kind in ("equals", "not-equals"):
            return "true" if (args[0] == args[1]) == (kind == "equals") else "false"
        values = [_truth(arg) for arg in args]
        if None in values:
            raise self.error(f"key {key!r}: {source} needs true or false, got {', '.join(map(repr, args))}")
        result = not values[0] if kind == "not" else all(values) if kind == "and" else any(values)
        return "true" if result else "false"


    def _network_mode(self, key: str) -> str:
        """The mode the launch gives its processes: a declared ``network`` argument's, unless auto, else the
        environment's (robot_rl.ros.net.env.network_choice)."""
        from robot_rl.ros.net.env import NETWORK_VARIABLE, RosEnvironmentError, network_mode

        chosen = self.variables.get(NETWORK_ARGUMENT, "").strip()
        base = {**os.environ, NETWORK_VARIABLE: chosen} if chosen not in ("", NETWORK_AUTO) else os.environ
        try:
            return network_mode(base)
        except RosEnvironmentError as error:
            raise self.error(f"key {key!r}: $(network): {error}") from None


def load_launch_file(path: str | os.PathLike[str], arguments: Mapping[str, str] | None = None) -> LaunchDescription:
    """Read, validate and resolve a YAML launch file; `arguments` override the declared args' defaults."""
    path = Path(path).resolve()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LaunchError(f"cannot read launch file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise LaunchError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        document = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as exc:
        raise _yaml_error(path, exc) from None
    finally:
        loader.dispose()
    expected = "expected a mapping with one key 'launch' holding a list of entries"
    if not isinstance(document, dict):
        got = "an empty file" if document is None else _yaml_type(document)
        raise LaunchError(f"{_at(path, root)}: {expected}, got {got}")
    key_nodes = {key.value: (key, value) for key, value in root.value if isinstance(key, yaml.ScalarNode)}
    if set(document) != {"launch"}:
        others = [key for key in document if key != "launch"]
        bad = key_nodes.get(others[0], (root, None))[0] if others else root
        got = f"key(s) {', '.join(map(repr, others))}" if others else "no 'launch' key"
        raise LaunchError(f"{_at(path, bad)}: {expected}, got {got}")
    entries_node = key_nodes["launch"][1]
    if not isinstance(document["launch"], list):
        raise LaunchError(f"{_at(path, entries_node)}: {expected}, got {_yaml_type(document['launch'])}")
    entry_nodes = entries_node.value
    given = dict(arguments or {})
    ctx = _Context(path, {})
    declared: list[LaunchArgument] = []
    processes: list[ProcessSpec] = []
    for index, (entry, entry_node) in enumerate(zip(document["launch"], entry_nodes)):
        ctx.where = f"{_at(path, entry_node)}: entry {index}"
        if not isinstance(entry, dict) or len(entry) != 1:
            raise ctx.error("expected a mapping with one key: arg, node or executable")
        kind, body = next(iter(entry.items()))
        ctx.where = f"{_at(path, entry_node)}: entry {index} ({kind})"
        if kind not in ("arg", "node", "executable"):
            raise ctx.error(f"unknown entry kind {kind!r}; expected arg, node or executable")
        if not isinstance(body, dict):
            raise ctx.error(f"expected a mapping of keys, got {_yaml_type(body)}")
        if kind == "arg":
            declared.append(_parse_arg(body, ctx, given))
        else:
            wanted = all(_parse_bool(body[key], key, ctx) == (key == "if") for key in ("if", "unless") if key in body)
            process = _parse_process(kind, body, ctx, wanted)
            if wanted:
                processes.append(process)
    undeclared = sorted(set(given) - {a.name for a in declared})
    if undeclared:
        names = [a.name for a in declared]
        close = closest(undeclared[0], names)
        hint = f"; did you mean {close}?" if close else ""
        raise LaunchError(f"{path}: unknown launch argument(s) {', '.join(undeclared)}{hint} (declared: "
                          f"{', '.join(names) or 'none'})")
    labels = [p.name for p in processes]
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise LaunchError(f"{path}: several processes are named {', '.join(duplicates)}; give each a unique name")
    return LaunchDescription(path=path, arguments=tuple(declared), processes=tuple(processes))


def _check_keys(body: dict[str, Any], allowed: set[str], required: Sequence[str], ctx: _Context) -> None:
    unknown = sorted(str(k) for k in body if k not in allowed)
    if unknown:
        raise ctx.error(f"unknown key(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(sorted(allowed))}")
    for key in required:
        if key not in body:
            raise ctx.error(f"missing required key {key!r}")


def _scalar_text(value: Any, key: str, ctx: _Context) -> str:
    """A scalar as the string it stands for (YAML may have typed it), substitutions resolved."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return ctx.substitute(value, key)
    raise ctx.error(f"key {key!r}: expected a string or number, got {_yaml_type(value)}")


def _parse_arg(body: dict[str, Any], ctx: _Context, given: Mapping[str, str]) -> LaunchArgument:
    _check_keys(body, _ARG_KEYS, ["name"], ctx)
    name = body["name"]
    if not isinstance(name, str) or not _ROS_NAME.fullmatch(name):
        raise ctx.error(f"key 'name': {name!r} is not a valid argument name")
    if name in ctx.variables:
        raise ctx.error(f"key 'name': argument {name!r} is declared twice")
    choices: tuple[str, ...] = ()
    if "choices" in body:
        if not isinstance(body["choices"], list) or not body["choices"]:
            raise ctx.error("key 'choices': expected a non-empty list of values")
        choices = tuple(_scalar_text(choice, "choices", ctx) for choice in body["choices"])
    if name in given:
        value = str(given[name])
    elif body.get("default") is not None:
        value = _scalar_text(body["default"], "default", ctx)
    else:
        raise ctx.error(f"argument {name!r} has no default and was not given: pass {name}:=VALUE")
    if choices and value not in choices:
        close = closest(value, choices)
        hint = f" (did you mean {close}?)" if close else ""
        raise LaunchError(f"{ctx.path}: launch argument {name}:={value!r} is not one of {', '.join(choices)}{hint}")
    ctx.variables[name] = value
    description = body.get("description", "")
    return LaunchArgument(name=name, value=value, description=str(description), choices=choices)


def _parse_bool(value: Any, key: str, ctx: _Context) -> bool:
    if isinstance(value, bool):
        return value
    text = ctx.substitute(value, key) if isinstance(value, str) else value
    truth = _truth(text) if isinstance(text, str) else None
    if truth is None:
        shown = f"{value!r}" + (f" (= {text!r})" if text != value else "")
        raise ctx.error(f"key {key!r}: expected true or false, got {shown}")
    return truth


def _parse_delay(value: Any, ctx: _Context) -> float:
    text = _scalar_text(value, "respawn_delay", ctx)
    try:
        delay = float(text)
    except ValueError:
        delay = math.nan
    if not math.isfinite(delay) or delay < 0:
        raise ctx.error(f"key 'respawn_delay': expected a number of seconds >= 0, got {value!r}")
    return delay


def _name_value_list(body: dict[str, Any], key: str, first: str, second: str, ctx: _Context) -> list[tuple[str, Any]]:
    items = body.get(key, [])
    if not isinstance(items, list):
        raise ctx.error(f"key {key!r}: expected a list of {{{first}: ..., {second}: ...}} mappings")
    pairs = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or set(item) != {first, second}:
            got = sorted(item) if isinstance(item, dict) else type(item).__name__
            raise ctx.error(f"key {key!r}, item {i}: expected exactly the keys {first!r} and {second!r}, got {got}")
        name = _scalar_text(item[first], f"{key}[{i}].{first}", ctx)
        pairs.append((name, item[second]))
    return pairs


def _split_command(text: str, key: str, ctx: _Context) -> list[str]:
    """Substitute, then split like a shell command line: quote a substituted value that must stay one word."""
    substituted = ctx.substitute(text, key)
    try:
        return shlex.split(substituted)
    except ValueError as exc:
        shown = repr(text) if substituted == text else f"{text!r} (substituted: {substituted!r})"
        raise ctx.error(f"key {key!r}: cannot split {shown} into words: {exc}") from None


def _parse_process(kind: str, body: dict[str, Any], ctx: _Context, wanted: bool = True) -> ProcessSpec:
    """One node or executable entry; an executable left out by its if / unless may have an empty command (an optional
    driver command whose argument was not given)."""
    if kind == "node":
        _check_keys(body, _NODE_KEYS, [], ctx)
    else:
        _check_keys(body, _EXECUTABLE_KEYS, ["cmd"], ctx)
    name = _scalar_text(body["name"], "name", ctx) if "name" in body else None
    if name is not None and not _ROS_NAME.fullmatch(name):
        raise ctx.error(f"key 'name': {name!r} is not a valid name (letters, digits and _, not starting with a digit)")
    env = {k: _scalar_text(v, f"env {k}", ctx) for k, v in _name_value_list(body, "env", "name", "value", ctx)}
    bad_names = [k for k in env if not _ROS_NAME.fullmatch(k)]
    if bad_names:
        raise ctx.error(f"key 'env': {bad_names[0]!r} is not a valid environment variable name")
    env["PYTHONUNBUFFERED"] = env.get("PYTHONUNBUFFERED", "1")
    extra = _split_command(body["args"], "args", ctx) if isinstance(body.get("args"), str) else []
    if "args" in body and not isinstance(body["args"], str):
        raise ctx.error(f"key 'args': expected a string, got {_yaml_type(body['args'])}")
    required = _parse_bool(body.get("required", False), "required", ctx)
    if "on_exit" in body:
        action = _scalar_text(body["on_exit"], "on_exit", ctx)
        if action not in _ON_EXIT_ACTIONS:
            raise ctx.error(f"key 'on_exit': unknown action {action!r}; supported: {', '.join(_ON_EXIT_ACTIONS)}")
        required = True
    respawn = _parse_bool(body.get("respawn", False), "respawn", ctx)
    delay = _parse_delay(body.get("respawn_delay", 0.0), ctx)
    preflight = _parse_bool(body.get("preflight", False), "preflight", ctx)
    if preflight and (respawn or required):
        other = "respawn" if respawn else "on_exit" if "on_exit" in body else "required"
        raise ctx.error(f"key 'preflight': a preflight process runs once and must exit 0 before the entries after it "
                        f"start; it cannot also be {other}")

    if kind == "executable":
        if not isinstance(body["cmd"], str):
            raise ctx.error(f"key 'cmd': expected a string, got {_yaml_type(body['cmd'])}")
        argv = _split_command(body["cmd"], "cmd", ctx) + extra
        if not argv and wanted:
            raise ctx.error(f"key 'cmd': the command {body['cmd']!r} is empty: give the launch argument(s) it uses")
        label = name or re.sub(r"\W", "_", Path(argv[0] if argv else "executable").name)
    else:
        module = _node_module(body, ctx)
        namespace = _scalar_text(body["namespace"], "namespace", ctx) if "namespace" in body else None
        if namespace is not None:
            namespace = "/" + namespace.strip("/")
            if not _ROS_NAMESPACE.fullmatch(namespace):
                raise ctx.error(f"key 'namespace': {namespace!r} is not a valid ROS namespace")
        ros_args: list[str] = []
        if name is not None:
            ros_args += ["-r", f"__node:={name}"]
        if namespace is not None:
            ros_args += ["-r", f"__ns:={namespace}"]
        params = _name_value_list(body, "param", "name", "value", ctx)
        for i, (pname, value) in enumerate(params):
            ctx_key = f"param[{i}] ({pname})"
            for flat_name, rendered in _flatten_param(pname, value, ctx_key, ctx):
                ros_args += ["-p", f"{flat_name}:={rendered}"]
        for i, (source, target) in enumerate(_name_value_list(body, "remap", "from", "to", ctx)):
            ros_args += ["-r", f"{source}:={_scalar_text(target, f'remap[{i}].to', ctx)}"]
        argv = [sys.executable, "-m", module, *extra]
        if ros_args:
            argv += ["--ros-args", *ros_args]
        base = name or (body.get("exec") or module.rsplit(".", 1)[-1])
        label = f"{namespace.strip('/')}/{base}" if namespace and namespace != "/" else base
    return ProcessSpec(
        name=label, argv=tuple(argv), env=env, respawn=respawn, respawn_delay=delay, required=required,
        preflight=preflight,
    )


def _node_module(body: dict[str, Any], ctx: _Context) -> str:
    if "module" in body:
        if "pkg" in body or "exec" in body:
            raise ctx.error("give either 'module' or 'pkg' + 'exec', not both")
        module = _scalar_text(body["module"], "module", ctx)
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", module):
            raise ctx.error(f"key 'module': {module!r} is not a Python module name")
        return module
    for key in ("pkg", "exec"):
        if key not in body:
            raise ctx.error(f"missing required key {key!r} (or give 'module: some.python.module')")
    pkg, exe = _scalar_text(body["pkg"], "pkg", ctx), _scalar_text(body["exec"], "exec", ctx)
    if pkg not in EXECUTABLES:
        raise ctx.error(f"key 'pkg': unknown package {pkg!r}; known: {', '.join(sorted(EXECUTABLES))}")
    if exe not in EXECUTABLES[pkg]:
        known = ", ".join(sorted(EXECUTABLES[pkg]))
        raise ctx.error(f"key 'exec': unknown executable {exe!r} in {pkg}; known: {known}")
    return EXECUTABLES[pkg][exe]


# --------------------------------------------------------------------------------------------- parameter rendering


def _flatten_param(name: str, value: Any, key: str, ctx: _Context) -> list[tuple[str, str]]:
    """Render one parameter as `-p` values; a mapping becomes dotted names, as in a ROS 2 params file."""
    if isinstance(value, dict):
        out: list[tuple[str, str]] = []
        for sub, subvalue in value.items():
            out += _flatten_param(f"{name}.{sub}", subvalue, f"{key}.{sub}", ctx)
        return out
    if isinstance(value, str) and "$(" in value:
        # A substitution yields text; read it as YAML (as launch_ros does) so $(var rate) can be a number.
        text = ctx.substitute(value, key)
        try:
            parsed = yaml.load(text, Loader=_Loader)
        except yaml.YAMLError:
            parsed = text
        value = parsed if _is_param_value(parsed) else text
    elif isinstance(value, str):
        value = ctx.substitute(value, key)
    try:
        return [(name, render_param_value(value))]
    except ValueError as exc:
        raise ctx.error(f"key {key!r}: {exc}") from None


def _is_param_value(value: Any) -> bool:
    scalar = (bool, int, float, str)
    if isinstance(value, list):
        return bool(value) and all(isinstance(v, scalar) for v in value)
    return isinstance(value, scalar)


def render_param_value(value: Any) -> str:
    """Render a parameter value as rcl's ``-p name:=value`` parser reads it back with the same type."""
    if isinstance(value, list):
        if not value:
            raise ValueError("an empty list has no parameter type; give at least one element")
        kinds = {_kind(v) for v in value}
        if kinds == {"int", "float"}:
            value, kinds = [float(v) for v in value], {"float"}
        if len(kinds) != 1 or "list" in kinds:
            raise ValueError(f"a list parameter needs elements of one scalar type, got {value!r}")
        return "[" + ", ".join(render_param_value(v) for v in value) + "]"
    kind = _kind(value)
    if kind == "bool":
        return "true" if value else "false"
    if kind == "int":
        return str(value)
    if kind == "float":
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        return repr(value)
    if kind == "str":
        plain = (
            _PLAIN_STRING.fullmatch(value) is not None
            and value.lower() not in _RCL_SPECIAL_WORDS
            and yaml.load(value, Loader=_Loader) == value
        )
        return value if plain else "'" + value.replace("'", "''") + "'"
    raise ValueError(f"unsupported parameter value {value!r} ({type(value).__name__})")


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "list"
    return type(value).__name__


# --------------------------------------------------------------------------------------------------------- running




def parse_cli_arguments(items: Sequence[str]) -> dict[str, str]:
    """Parse ``name:=value`` words from the command line into a dict; raise LaunchError on anything else."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition(":=")
        if not sep or not _ROS_NAME.fullmatch(name):
            raise LaunchError(f"launch arguments are written name:=value, got {item!r}")
        out[name] = value
    return out
