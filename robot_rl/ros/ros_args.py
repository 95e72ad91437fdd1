"""rcl's command-line arguments read without rclpy (no ROS import, no DDS participant): the parameter values a node is
given (``--ros-args -p name:=value`` and ``--params-file FILE``), its name and namespace after ``-r __node:=`` /
``-r __ns:=``, and the arguments that are not ROS's. A node checks its parameters from these before anything heavy
starts (robot_rl.ros.node_util.check_command_line); rclpy reads the same arguments again when the node is made.

What it follows (rcl of ROS 2 Kilted, measured with the wheels' rclpy 9.1.2):

- ROS arguments are those after ``--ros-args`` up to ``--`` (or the end), in any number of such sections; ``-p`` /
  ``--param``, ``-r`` / ``--remap``, ``--params-file``, ``-e`` / ``--enclave``, ``--log-level``,
  ``--log-file-name`` and ``--log-config-file`` take the next argument, whatever it is.
- ``-p [node:]name:=value``: the value is YAML, typed as rcl's parser types it (rcl_yaml_param_parser get_value):
  unquoted ``true`` / ``yes`` / ``on`` / ``y`` (and ``false`` / ``no`` / ``off`` / ``n``, each also Capitalised
  and UPPER) are booleans; then an integer as C ``strtol(text, 0)`` reads one (so ``010`` is 8 and ``0x1f`` 31;
  one out of int64's range is a double); then a double as ``strtod`` reads one (``1e3``, ``nan``, ``.inf``, hex
  floats; ``08`` is 8.0); anything else, and any quoted value, is text. A flow sequence of one such type is a list.
- A parameters file maps node names (nested namespaces allowed) to ``ros__parameters``; nested mappings there make
  dotted names. ``-p name:=value`` belongs to the entry ``/**``, ``-p node:name:=value`` to ``node``.
- The entries that apply to a node are ``/**`` and its full name (an entry name without a leading slash is in the
  root namespace). rclpy takes their values entry by entry, in the order each entry first appeared on the command
  line, so a value of a later entry wins; within one entry the last value given wins.
- Remapping: the first rule that applies wins (``-r __node:=x`` or ``-r __name:=x``, ``-r node:__node:=x``); a
  node-scoped namespace rule (``-r node:__ns:=/x``) names the node as renamed.

What it cannot read as rcl does (a malformed rule, an unreadable parameters file, an entry with a wildcard other
than ``/**``, a block scalar) is left to rcl: the names concerned are `unsure` (nothing is said about them here), and
an unreadable parameters file makes the whole command line unreadable; rcl reports either when the node starts.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence

ROS_ARGS = "--ros-args"
ROS_ARGS_END = "--"
PARAM_FLAGS = ("-p", "--param")
REMAP_FLAGS = ("-r", "--remap")
PARAMS_FILE_FLAG = "--params-file"
_TAKES_VALUE = (*PARAM_FLAGS, *REMAP_FLAGS, PARAMS_FILE_FLAG, "-e", "--enclave", "--log-level", "--log-file-name",
                "--log-config-file")
ALL_NODES = "/**"
PARAMETERS_KEY = "ros__parameters"

_TRUE = frozenset({"Y", "y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"})
_FALSE = frozenset({"N", "n", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"})
_SPECIAL_DOUBLES = {".nan": math.nan, ".NaN": math.nan, ".NAN": math.nan, **{
    f"{sign}{word}": (-math.inf if sign == "-" else math.inf)
    for sign in ("", "+", "-") for word in (".inf", ".Inf", ".INF")}}
_C_SPACE = "[ \t\n\v\f\r]*"  # isspace() in the C locale: what strtol / strtod skip first
_INTEGER = re.compile(_C_SPACE + r"([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")
_DECIMAL = re.compile(_C_SPACE + r"[+-]?((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
                      r"|inf(?:inity)?|nan(?:\([0-9A-Za-z_]*\))?)", re.IGNORECASE)
_HEX_DOUBLE = re.compile(_C_SPACE + r"([+-]?)(0x(?:[0-9a-f]+\.?[0-9a-f]*|\.[0-9a-f]+)(?:p[+-]?[0-9]+)?)", re.IGNORECASE)
_INT64 = (-(2 ** 63), 2 ** 63 - 1)
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME_REMAP = re.compile(r"(?:([A-Za-z_][A-Za-z0-9_]*):)?(__node|__name|__ns):=(.*)", re.DOTALL)


class _Unsure:
    """A value rcl reads in a way this module does not follow (or refuses): nothing is said about it here."""

    def __repr__(self) -> str:
        return "UNSURE"


UNSURE = _Unsure()


def split_ros_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the arguments that are not ROS's, in order; the ROS arguments, in order, without the section markers)."""
    plain: list[str] = []
    ros: list[str] = []
    inside = False
    take_next = False
    for arg in argv:
        if take_next:  # a flag's value, whatever it looks like
            ros.append(arg)
            take_next = False
        elif not inside:
            if arg == ROS_ARGS:
                inside = True
            else:
                plain.append(arg)
        elif arg == ROS_ARGS_END:
            inside = False
        elif arg != ROS_ARGS:  # another --ros-args inside a section is ignored
            ros.append(arg)
            take_next = arg in _TAKES_VALUE
    return plain, ros


def remove_ros_args(argv: Sequence[str]) -> list[str]:
    """rclpy.utilities.remove_ros_args without rclpy: the arguments outside the ``--ros-args`` sections."""
    return split_ros_args(argv)[0]


def scalar_value(text: str):
    """The value rcl gives the unquoted YAML scalar `text` (bool, int, float or str; UNSURE where rcl refuses it)."""
    if text == "":
        return UNSURE  # rcl: "No value"
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    match = _INTEGER.fullmatch(text)
    if match:
        sign, digits = match.groups()
        if digits[:2] in ("0x", "0X"):
            number = int(digits[2:], 16)
        elif digits.startswith("0"):
            number = int(digits, 8)
        else:
            number = int(digits)
        number = -number if sign == "-" else number
        if _INT64[0] <= number <= _INT64[1]:
            return number
        # out of range (ERANGE): rcl tries a double
    if text in _SPECIAL_DOUBLES:
        return _SPECIAL_DOUBLES[text]
    double = _c_double(text)
    return text if double is None else double


def _c_double(text: str):
    """strtod's reading of all of `text`, or None where it does not read all of it or reports ERANGE (rcl then takes
    the text); UNSURE for a result near the underflow edge, whose ERANGE this does not follow."""
    match = _DECIMAL.fullmatch(text)
    if match:
        body = match.group(1).lower()
        negative = text.lstrip(" \t\n\v\f\r").startswith("-")
        if body.startswith("nan"):
            return -math.nan if negative else math.nan
        if body.startswith("inf"):
            return -math.inf if negative else math.inf
        value = float(text.strip(" \t\n\v\f\r"))
        mantissa = re.split(r"[eE]", body)[0]
    else:
        match = _HEX_DOUBLE.fullmatch(text)
        if not match:
            return None
        sign, body = match.groups()
        value = float.fromhex(body)
        value = -value if sign == "-" else value
        mantissa = re.split(r"[pP]", body[2:])[0]
    if math.isinf(value):
        return None  # overflow: ERANGE
    if abs(value) < 2.2250738585072014e-308 and any(c not in "0." for c in mantissa):
        return UNSURE  # underflow: glibc may report ERANGE
    return value


def yaml_value(node):
    """The value rcl gives a YAML node (from yaml.compose) of a parameter: a scalar or a flow sequence of scalars of
    one type. UNSURE for what rcl refuses or reads another way (a mapping, an empty or mixed sequence, a block
    scalar)."""
    import yaml

    if isinstance(node, yaml.ScalarNode):
        if node.style in ("'", '"'):
            return node.value
        if node.style is not None:  # block scalars ('|', '>')
            return UNSURE
        return scalar_value(node.value)
    if isinstance(node, yaml.SequenceNode):
        items = [yaml_value(item) if isinstance(item, yaml.ScalarNode) else UNSURE for item in node.value]
        if not items or any(item is UNSURE for item in items) or len({type(item) for item in items}) != 1:
            return UNSURE
        return items
    return UNSURE


def parse_value(text: str):
    """The value of ``-p name:=<text>`` as rcl types it (UNSURE where it refuses it or this cannot tell)."""
    if re.fullmatch(r"[A-Za-z0-9_.+\-/]+", text) and text != "-" and not text.startswith(("---", "...")):
        return scalar_value(text)  # a plain scalar: no need for the YAML parser
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return UNSURE
    return UNSURE if node is None else yaml_value(node)


class ParamsFileError(ValueError):
    """A parameters file this module cannot read as rcl does (rcl says what is wrong when the node starts)."""


def params_file_entries(path: str) -> list[tuple[str, str, object]]:
    """(node entry, parameter name, value or UNSURE) of a ROS 2 parameters file, in file order; ParamsFileError where
    it cannot be read or has another shape."""
    import yaml

    try:
        with open(path, encoding="utf-8") as file:
            root = yaml.compose(file, Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise ParamsFileError(f"{path}: {error}") from None
    entries: list[tuple[str, str, object]] = []

    def parameters(node_name: str, mapping, prefix: str) -> None:
        if not isinstance(mapping, yaml.MappingNode):
            raise ParamsFileError(f"{path}: parameters of {node_name} are not a mapping")
        for key, value in mapping.value:
            if not isinstance(key, yaml.ScalarNode):
                raise ParamsFileError(f"{path}: a parameter name is not text")
            name = prefix + key.value
            if isinstance(value, yaml.MappingNode):
                parameters(node_name, value, name + ".")
            else:
                entries.append((node_name, name, yaml_value(value)))

    def nodes(mapping, prefix: str) -> None:
        if not isinstance(mapping, yaml.MappingNode):
            raise ParamsFileError(f"{path}: expected a mapping of node names")
        for key, value in mapping.value:
            if not isinstance(key, yaml.ScalarNode):
                raise ParamsFileError(f"{path}: a node name is not text")
            if key.value == PARAMETERS_KEY:
                if not prefix:
                    raise ParamsFileError(f"{path}: {PARAMETERS_KEY} without a node name")
                parameters(prefix, value, "")
            else:
                nodes(value, f"{prefix}/{key.value.strip('/')}" if prefix else key.value)

    if root is not None:
        nodes(root, "")
    return entries


def _entry_key(name: str) -> str:
    return name if name.startswith("/") else "/" + name


@dataclasses.dataclass
class NodeCommandLine:
    """What the command line gives one node."""

    name: str
    """The node's name after remapping."""
    namespace: str
    """Its namespace after remapping ("/" when none)."""
    values: dict[str, object]
    """Parameter values that apply to it (typed as rclpy gets them), by name; UNSURE where this cannot tell."""
    unsure: set[str]
    """Names given in an entry that may or may not apply to it (a wildcard this module does not follow)."""

    @property
    def full_name(self) -> str:
        return self.namespace.rstrip("/") + "/" + self.name


def node_command_line(argv: Sequence[str], node_name: str, namespace: str = "/") -> NodeCommandLine:
    """What `argv` gives the node created as `node_name` (rclpy.init(args=argv), then create_node(node_name)).
    ParamsFileError for a parameters file this cannot read (rcl reports it when the node starts)."""
    _, ros = split_ros_args(argv)
    remaps: list[str] = []
    entries: dict[str, dict[str, object]] = {}  # entry -> name -> value, each in order of first appearance
    i = 0
    while i < len(ros):
        flag = ros[i]
        value = ros[i + 1] if i + 1 < len(ros) and flag in _TAKES_VALUE else None
        i += 2 if flag in _TAKES_VALUE else 1
        if value is None:
            continue
        if flag in REMAP_FLAGS:
            remaps.append(value)
        elif flag in PARAM_FLAGS:
            rule, sep, text = value.partition(":=")
            entry, _, name = rule.partition(":") if ":" in rule else ("", "", rule)
            if entry and not _TOKEN.fullmatch(entry):
                entry = "*"  # rcl refuses it (wildcards are not implemented for -p)
            entries.setdefault(_entry_key(entry) if entry else ALL_NODES, {})[name] = \
                parse_value(text) if sep else UNSURE
        elif flag == PARAMS_FILE_FLAG:
            for entry, name, parsed in params_file_entries(value):
                entries.setdefault(_entry_key(entry), {})[name] = parsed

    name, space = node_name, namespace
    for kind in ("__node", "__ns"):
        for rule in remaps:
            match = _NAME_REMAP.fullmatch(rule)
            if match is None:
                continue
            scope, target, new = match.groups()
            # a node-scoped rule names the node as created for __node, as renamed for __ns (rcl_node_init's order)
            if (target == "__ns") != (kind == "__ns") or (scope is not None and scope != name):
                continue
            if kind == "__ns":
                space = new if new.startswith("/") else "/" + new
            else:
                name = new
            break
    result = NodeCommandLine(name=name, namespace=space, values={}, unsure=set())
    full_name = result.full_name
    for entry, values in entries.items():
        if entry in (ALL_NODES, full_name):
            result.values.update(values)
        elif "*" in entry:
            result.unsure.update(values)
    return result
