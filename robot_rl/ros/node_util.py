"""Small helpers shared by the project's ROS 2 node modules. Importable without rclpy (rclpy is imported lazily).

- :func:`relative_name`: the project's topic constants are absolute (``/tcp_pose``); nodes create their publishers and
  subscriptions with the relative form so ``--ros-args -r __ns:=/robot1`` namespaces every stream of a node.
- :func:`clock_seconds`: a node clock's "now" as float seconds (what robot_rl.ros.convert stamps take).
- :func:`run_node`: the main loop every node module uses: environment bootstrap, rclpy without its own signal
  handlers, SIGINT / SIGTERM / SIGHUP (the terminal of a node started by hand closed) set a :class:`StopFlag`, the
  node object is spun until then (or until it is finished), stopped, destroyed, and rclpy shut down. A stop signal
  while the node object is still being built ends the process within 2 s should the build not finish by then
  (:func:`watch_startup`: a start-up stuck in native code no longer ignores SIGINT and SIGTERM until SIGKILL).
- :func:`declare_parameters`: a node's parameter table (each node module's ``PARAMETERS``) declared at once; a
  parameter the node does not know, or a value of the wrong type, is a :class:`NodeStartupError` (exit status 2).
- :func:`check_command_line`: the same checks, and the node's own rules on its values (its ``check_parameters``), on
  the values the command line gives (``--ros-args -p``, ``--params-file``; robot_rl.ros.ros_args reads them without
  rclpy): :func:`run_node` runs them first, so a bad parameter is one error line before DDS, JAX or MuJoCo start.
- :class:`Range` / :func:`check_ranges`: the range checks of parameters that have no in-process twin (a config
  class whose own checks a node reuses by building it from its parameters); out of range is a NodeStartupError too.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import math
import re
import signal
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from robot_rl.core.interrupts import STOP_SIGNALS, StopFlag, accept_held_stops, install_stop_signals
from robot_rl.ros import ros_args


def relative_name(name: str) -> str:
    """`/camera/front/image_raw` -> `camera/front/image_raw` (resolved against the node's namespace)."""
    relative = name.lstrip("/")
    if not relative:
        raise ValueError(f"topic or service name {name!r} is empty")
    return relative


def clock_seconds(clock) -> float:
    """Float seconds of `clock.now()` (an rclpy Clock; ROS time or system time)."""
    return clock.now().nanoseconds * 1e-9


STARTUP_ABANDONED: list[Callable[[], None]] = []
"""What a node's start-up registers to undo (a half-made run folder) should a stop signal end the start-up:
:func:`watch_startup` runs each before it ends the process."""

STARTUP_STOP_GRACE_S = 2.0
"""Seconds a node's start-up may still take once SIGINT / SIGTERM came before it ends the process (see
:func:`watch_startup`)."""


def watch_startup(started: threading.Event, grace_s: float = STARTUP_STOP_GRACE_S) -> Callable[[], None]:
    """While a node starts, its stop handlers only set a flag that the node loop reads once the start-up is done; a
    start-up that takes long (a policy to load, a model to compile) or is stuck in native code (a DDS participant,
    an EGL display), where no Python signal handler can run at all, would ignore SIGINT and SIGTERM until SIGKILL.
    A thread learns of a stop signal through the wakeup fd (written by the C-level handler, even then) and, if
    `started` is not set within `grace_s`, ends the process with one line (`interrupted` / `terminated`) and
    status 128 + the signal number: nothing has been made that a stop would need to finish. Returns the function
    that ends the watch (main thread only; elsewhere this does nothing)."""
    import os
    import sys

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:  # not the main interpreter
        os.close(read_fd)
        os.close(write_fd)
        return lambda: None
    stops = {int(number) for number in STOP_SIGNALS}

    def watch() -> None:
        from robot_rl.core import interrupts

        try:
            while not started.is_set():
                data = os.read(read_fd, 64)
                if not data:
                    return
                signum = next((number for number in data if number in stops), None)
                if signum is None or started.wait(grace_s):
                    continue
                for undo in list(STARTUP_ABANDONED):
                    try:
                        undo()
                    except Exception:  # noqa: BLE001 - the process ends either way
                        pass
                print(interrupts.message(signum), file=sys.stderr, flush=True)
                os._exit(128 + signum)
        finally:
            os.close(read_fd)

    threading.Thread(target=watch, name="startup-stop-watch", daemon=True).start()

    def stop_watching() -> None:
        signal.set_wakeup_fd(previous)
        os.close(write_fd)  # the watch thread reads the end of the pipe and returns

    return stop_watching


def bound_teardown(limit_s: float, status: int) -> Callable[[], None]:
    """For a node whose stop handler has kept everything the run needs (the learner: checkpoint and report): what is
    left, destroying the node's DDS entities and rclpy's context, may take `limit_s` seconds. A teardown still going
    then (seen once on a loaded machine, past the launcher's grace period) prints every thread's stack, so the log
    says where it hung, and the process ends with `status`. The stacks come from faulthandler's own thread, which
    needs no interpreter lock; the exit needs it, and a teardown holding it still waits for the launcher's SIGKILL.
    Returns the function that disarms both (the teardown is done)."""
    import os
    import sys

    faulthandler.dump_traceback_later(limit_s, exit=False)

    def end() -> None:
        sys.stdout.flush()
        print(f"tearing down the node took over {limit_s:g} s (stacks above): exiting with status {status}",
              file=sys.stderr, flush=True)
        os._exit(status)

    timer = threading.Timer(limit_s + 0.5, end)
    timer.daemon = True
    timer.start()

    def cancel() -> None:
        timer.cancel()
        faulthandler.cancel_dump_traceback_later()

    return cancel


class NodeStartupError(RuntimeError):
    """A node cannot start (missing device, bad parameters): logged as one line, and the process exits with `status`."""

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status


ParameterTable = Sequence[tuple[str, object, str]]
"""A node's parameters: (name, default, description) each."""
ParameterCheck = Callable[[str, Callable[[str], object]], None]
"""A node's own rules on its parameter values: check(node name, values by name) raises NodeStartupError. Pure and
cheap (no ROS, no JAX): it runs on the command line's values before anything starts, and on the declared values."""


def run_node(build: Callable[[], object], argv: list[str], name: str, parameters: ParameterTable | None = None,
             check: ParameterCheck | None = None, graph: str = "host") -> int:
    """Run one node object until SIGINT / SIGTERM (or until it says it is finished); returns the exit status.

    With the node's `parameters` (and `check`), the command line's parameter values are checked first
    (:func:`check_command_line`): a bad one is the node's one error line and exit status 2 before anything else
    starts (the ROS environment, rclpy, a DDS participant, the node's own heavy imports).

    `build()` creates the object after rclpy is initialised (without rclpy's own signal handlers); the object has
    ``node`` (the rclpy node) and ``destroy()``, and optionally: ``work() -> bool`` (called between callbacks; True
    means it did work, so the loop does not sleep), ``callbacks_run`` (a count of its callbacks: see
    :func:`spin_callbacks`), ``finished`` (leave the loop), ``stop(executor, signal_number)`` (called once the loop
    ends, to hand control back, drain or checkpoint) and ``exit_status``.
    A :class:`NodeStartupError` from `build()` (or a parameter given on the command line that the node does not
    declare) is logged as one line and its status returned. `graph`: the host graph the node joins in the lan and
    secure modes (:data:`robot_rl.ros.net.env.GRAPHS`; the learner's is ``link``).
    """
    if parameters is not None:
        try:
            check_command_line(argv, name, parameters, check)
        except NodeStartupError as error:
            log_error_line(name, str(error))
            return error.status
    from robot_rl.ros.net.env import RosEnvironmentError, ensure_ros_environment

    # A crash in native code (DDS, OpenCV, MuJoCo) then prints the Python stack of every thread before the process
    # dies, so a node that exits by a signal says where.
    faulthandler.enable()
    try:
        ensure_ros_environment(graph=graph)
    except RosEnvironmentError as error:  # the network settings of the user's shell (a node started by hand)
        log_error_line(name, str(error))
        return 2  # a configuration error, as a NodeStartupError's: the launcher does not respawn it
    import logging

    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    logging.basicConfig(level=logging.WARNING)  # libraries' INFO lines (JAX's backend probing, OpenGL) are noise
    logging.getLogger("robot_rl").setLevel(logging.INFO)
    flag = StopFlag()
    restore = install_stop_signals(flag)
    started = threading.Event()
    stop_watch = watch_startup(started)
    accept_held_stops()  # a stop the launcher held while this process started comes now, to the handlers above
    rclpy.init(args=argv, signal_handler_options=SignalHandlerOptions.NO)
    host = None
    disarm = None
    try:
        try:
            host = build()
            check_parameter_overrides(host.node)  # also for a node that declared its parameters another way
        except NodeStartupError as error:
            rclpy.logging.get_logger(name).error(str(error))
            return error.status
        finally:
            started.set()
            stop_watch()
        from robot_rl.ros.net.env import LAN_WARNING, network_mode, network_summary

        host.node.get_logger().info(network_summary(graph=graph))  # which network mode and profile this node uses
        if network_mode() == "lan":
            host.node.get_logger().warning(LAN_WARNING)
        executor = SingleThreadedExecutor()
        executor.add_node(host.node)
        work = getattr(host, "work", None)
        while not flag.is_set() and executor.context.ok() and not getattr(host, "finished", False):
            busy = work() if work is not None else False
            spin_callbacks(executor, host, timeout_sec=0.0 if busy else 0.05)
        stop = getattr(host, "stop", None)
        if stop is not None:
            stop(executor, flag.signal_number)
        elif flag.is_set():
            host.node.get_logger().info(f"stopping (signal {flag.signal_number})")
        status = int(getattr(host, "exit_status", 0) or 0)
        limit = getattr(host, "teardown_limit_s", None)
        if limit is not None:
            disarm = bound_teardown(float(limit), status)
        executor.shutdown(timeout_sec=1.0)
        return status
    finally:
        if host is not None:
            host.destroy()
        rclpy.try_shutdown()
        if disarm is not None:
            disarm()
        restore()


_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list"}

ROS_PARAMETERS: tuple[tuple[str, object, str], ...] = (
    ("use_sim_time", False, "rclpy's: the node clock follows /clock"),
    ("start_type_description_service", True, "rclpy's: the node offers its message type descriptions"),
)
"""The parameters rclpy declares on every node itself (rclpy 9.1.2)."""


def accepted_value(name: str, default: object, value: object, node_name: str) -> object:
    """The value a node's parameter `name` (declared with `default`) takes when given `value` (as rclpy reads the
    command line or a parameters file); NodeStartupError when its type does not match the default's. An integer is
    accepted for a float parameter, a number for a text parameter (`-p source:=0`, a camera index, or `-p task:=3` is
    meant as text; ROS parses it as a number)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    elif isinstance(default, str) and number:
        value = str(value)
    if isinstance(default, list):  # rclpy's array types: the elements' type must match too
        matches = isinstance(value, list) and (not default or {type(item) for item in value} == {type(default[0])})
    else:
        matches = type(value) is type(default)
    if not matches:
        kind = _TYPE_NAMES.get(type(default), type(default).__name__)
        raise NodeStartupError(f"parameter {name!r} of node {node_name} must be {kind} (default {default!r}), got "
                               f"{value!r}")
    return value


def declare_parameters(node, table: Iterable[tuple[str, object, str]]) -> Callable[[str], object]:
    """Declare all of a node's (name, default, description) parameters; returns their values by name.

    rclpy ignores a ``-p name:=value`` for a parameter the node never declares, so a typo would pass silently: every
    given parameter must be in `table`, else NodeStartupError names it, the closest known name and the known ones.
    A value of the wrong type is a NodeStartupError too (:func:`accepted_value`: an integer is accepted for a float
    parameter, a number for a text parameter). :func:`check_command_line` applies the same rules before rclpy starts.
    """
    from rcl_interfaces.msg import ParameterDescriptor
    from rclpy.exceptions import InvalidParameterTypeException
    from rclpy.parameter import Parameter

    # rclpy keeps the command line's and parameter files' values in this dict (no public accessor).
    overrides = getattr(node, "_parameter_overrides", {})
    for name, default, description in table:
        given = overrides.get(name)
        if given is not None and given.type_ != Parameter.Type.NOT_SET:
            value = accepted_value(name, default, given.value, node.get_name())
            if type(value) is not type(given.value):
                overrides[name] = Parameter(name, value=value)
        try:
            node.declare_parameter(name, default, ParameterDescriptor(description=description))
        except InvalidParameterTypeException:  # a type accepted_value does not know (a byte array)
            accepted_value(name, default, object(), node.get_name())
    check_parameter_overrides(node)
    return lambda name: node.get_parameter(name).value


def _ignored_override(name: str) -> bool:
    """A given parameter a node need not declare: rclpy reads QoS overrides when a publisher or subscription is made."""
    return name.startswith("qos_overrides.")


def unknown_parameters_error(unknown: Sequence[str], declared: Sequence[str], node_name: str) -> NodeStartupError:
    """The error for parameters given to a node that does not declare them: the first, the others, the closest
    declared name to the first and every declared one."""
    from robot_rl.core.suggest import closest

    unknown, declared = sorted(unknown), sorted(declared)
    name = unknown[0]
    close = closest(name, declared)
    hint = f" (did you mean {close!r}?)" if close else ""
    others = f" (and {', '.join(repr(n) for n in unknown[1:])})" if unknown[1:] else ""
    return NodeStartupError(f"unknown parameter {name!r}{others} for node {node_name}{hint}; "
                            f"known: {', '.join(declared)}")


def check_parameter_overrides(node) -> None:
    """NodeStartupError if the node was given a parameter it does not declare (a typo would otherwise be ignored)."""
    declared = node.get_parameters_by_prefix("")
    unknown = [name for name in getattr(node, "_parameter_overrides", {})
               if not node.has_parameter(name) and not _ignored_override(name)]
    if unknown:
        raise unknown_parameters_error(unknown, declared, node.get_name())


def check_command_line(argv: Sequence[str], name: str, parameters: ParameterTable,
                       check: ParameterCheck | None = None) -> dict[str, object] | None:
    """The checks of :func:`declare_parameters` (types, then unknown names) and the node's `check` on the parameter
    values that `argv` gives the node created as `name` (robot_rl.ros.ros_args reads them as rcl does; no ROS import):
    NodeStartupError for the first problem, with the same words the node would log once built. Returns the node's
    values by name (its defaults where none is given), or None where the command line has something this cannot read
    as rcl does (an unreadable parameters file): rcl reports it when the node starts. A value this cannot tell (a
    wildcard entry of a parameters file) is left to the node's own checks: `check` runs only when every value is
    known."""
    try:
        given = ros_args.node_command_line(argv, name)
    except ros_args.ParamsFileError:
        return None
    table = [*parameters, *ROS_PARAMETERS]
    defaults = {parameter: default for parameter, default, _ in table}
    unsure = set(given.unsure) | {parameter for parameter, value in given.values.items() if value is ros_args.UNSURE}
    values = dict(defaults)
    for parameter, default, _ in table:
        if parameter in given.values and parameter not in unsure:
            values[parameter] = accepted_value(parameter, default, given.values[parameter], given.name)
    unknown = [parameter for parameter in given.values
               if parameter not in defaults and parameter not in unsure and not _ignored_override(parameter)]
    if unknown:
        raise unknown_parameters_error(unknown, list(defaults), given.name)
    if check is not None and not unsure & set(defaults):
        check(given.name, values.__getitem__)
    return values


def log_error_line(logger_name: str, message: str) -> None:
    """`message` as rclpy's logger `logger_name` prints an error with the default settings (stderr, or stdout with
    RCUTILS_LOGGING_USE_STDOUT=1; RCUTILS_CONSOLE_OUTPUT_FORMAT's {severity} {time} {name} {message}; red on a
    terminal unless RCUTILS_COLORIZED_OUTPUT=0): for a node that stops before rclpy is imported."""
    import os
    import sys
    import time

    stream = sys.stdout if os.environ.get("RCUTILS_LOGGING_USE_STDOUT") == "1" else sys.stderr
    nanoseconds = time.time_ns()
    fields = {"severity": "ERROR", "name": logger_name, "message": message,
              "time": f"{nanoseconds // 10 ** 9}.{nanoseconds % 10 ** 9:09d}", "time_as_nanoseconds": str(nanoseconds)}
    line = os.environ.get("RCUTILS_CONSOLE_OUTPUT_FORMAT") or "[{severity}] [{time}] [{name}]: {message}"
    line = re.sub(r"\{(\w+)\}", lambda match: fields.get(match.group(1), ""), line)
    colour = os.environ.get("RCUTILS_COLORIZED_OUTPUT")
    if colour == "1" or (colour is None and stream.isatty()):
        line = f"\033[31m{line}\033[0m"
    print(line, file=stream, flush=True)


@dataclasses.dataclass(frozen=True)
class Range:
    """The values a numeric node parameter takes: a finite number >= `low` (or > `above`) and <= `high`, and the
    values of `also` (value -> what it stands for, e.g. {0: "run until stopped"}). For a parameter without an
    in-process twin (a config class whose own checks the node reuses by building it from its parameters), or one
    whose special values the twin does not know."""

    low: float | None = None
    above: float | None = None
    high: float | None = None
    also: Mapping[float, str] = dataclasses.field(default_factory=dict)

    def allows(self, value: float) -> bool:
        if value in self.also:
            return True
        return (math.isfinite(value) and (self.low is None or value >= self.low)
                and (self.above is None or value > self.above) and (self.high is None or value <= self.high))

    def __str__(self) -> str:
        low = f"[{self.low:g}" if self.low is not None else f"({self.above:g}" if self.above is not None else None
        if low is not None and self.high is not None:
            text = f"in {low}, {self.high:g}]"
        elif low is not None:
            text = f"{'>=' if self.low is not None else '>'} {low[1:]}"
        elif self.high is not None:
            text = f"<= {self.high:g}"
        else:
            text = "a finite number"
        return text + (f" ({'; '.join(f'{value:g}: {meaning}' for value, meaning in self.also.items())})"
                       if self.also else "")


def check_ranges(node_name: str, values: Callable[[str], object], ranges: Mapping[str, Range]) -> None:
    """NodeStartupError (one line, exit status 2) naming every parameter in `ranges` whose value (`values(name)`)
    is out of its range."""
    problems = [f"{name}={values(name)!r} must be {rule}" for name, rule in ranges.items()
                if not rule.allows(float(values(name)))]
    if problems:
        raise NodeStartupError(f"invalid parameter{'s' if len(problems) > 1 else ''} of node {node_name}: "
                               f"{'; '.join(problems)}")


MAX_CALLBACKS_PER_WORK = 64


def spin_callbacks(executor, host, timeout_sec: float, max_callbacks: int = MAX_CALLBACKS_PER_WORK) -> int:
    """Run one callback (waiting up to `timeout_sec`); for a host that counts its callbacks in ``callbacks_run``,
    then every further callback ready now, up to `max_callbacks`. Returns how many of the host's callbacks ran.

    A host whose work() is long (a learner's gradient step) would otherwise take one message per unit of work: under
    load its reader queues overflow and drop the oldest messages, which are the re-sent ones that fill gaps.
    """
    count = getattr(host, "callbacks_run", None)
    executor.spin_once(timeout_sec=timeout_sec)
    if count is None:
        return 0
    ran = host.callbacks_run - count
    idle = 0
    # Two empty calls in a row end it: rclpy's zero-timeout spin_once comes back empty every other call while
    # messages wait (the end of one wait's ready list), so stopping at the first would take one message per work().
    while ran and ran < max_callbacks and idle < 2:
        before = host.callbacks_run
        executor.spin_once(timeout_sec=0.0)
        idle = idle + 1 if host.callbacks_run == before else 0
        ran += host.callbacks_run - before
    return ran


def parse_node_arguments(parser, argv: list[str]):
    """`parser.parse_args` on the non-ROS part of `argv` (everything outside --ros-args; no ROS import)."""
    return parser.parse_args(ros_args.remove_ros_args(argv)[1:])


def topic_publisher(node, msg_type, topic: str):
    """A publisher on one of the project's topics (robot_rl.ros.qos), relative to the node's namespace, with its QoS."""
    from robot_rl.ros import qos

    return node.create_publisher(msg_type, relative_name(topic), qos.topic_qos(topic))


def publish_refused(publisher, msg) -> bool:
    """Publish `msg`; True where the middleware refused it (rclpy's RCLError "cannot publish data", e.g. a secure
    channel full both ways) instead of raising into the node loop: the caller counts it and sends again later."""
    from rclpy.impl.implementation_singleton import rclpy_implementation

    try:
        publisher.publish(msg)
    except rclpy_implementation.RCLError:
        return True
    return False


class GuardedSubscriptions:
    """Subscriptions no message can crash: an error in a callback drops the message with a log line naming the topic
    (at most once a second per topic, counted in `rejected`), and an incompatible QoS offer is logged with the fix
    (counted in `incompatible_qos`). `topics` maps each subscription's name to its resolved topic."""

    def __init__(self, node, topics: dict[str, str] | None = None):
        import collections

        self.node = node
        self.log = node.get_logger()
        self.topics = topics if topics is not None else {}
        self.rejected: collections.Counter[str] = collections.Counter()
        self.incompatible_qos: collections.Counter[str] = collections.Counter()
        self._rejected_logged: dict[str, float] = {}

    def subscribe(self, message_type, topic: str, callback, profile, what: str, matched=None) -> None:
        from rclpy.event_handler import SubscriptionEventCallbacks

        def guarded(msg) -> None:
            try:
                callback(msg)
            except Exception as error:  # noqa: BLE001 - a message must never take the node down
                self.reject(what, error)

        events = SubscriptionEventCallbacks(
            incompatible_qos=lambda info: self._incompatible(what, topic, profile, info), matched=matched)
        subscription = self.node.create_subscription(message_type, topic, guarded, profile, event_callbacks=events)
        self.topics[what] = subscription.topic_name

    def reject(self, what: str, error: Exception) -> None:
        """Log a dropped message (rclpy throttles per call site, not per topic: this throttles per topic)."""
        import time

        self.rejected[what] += 1
        now = time.monotonic()
        if now - self._rejected_logged.get(what, -math.inf) >= 1.0:
            self._rejected_logged[what] = now
            topic = self.topics.get(what)
            where = f" on {topic}" if topic else ""
            self.log.warning(f"dropped malformed {what} message{where}: {error} ({self.rejected[what]} so far)")

    def _incompatible(self, what: str, topic: str, profile, info) -> None:
        from rclpy.qos import ReliabilityPolicy

        self.incompatible_qos[what] += 1
        policy = getattr(getattr(info, "last_policy_kind", None), "name", str(getattr(info, "last_policy_kind", "")))
        hint = ""
        if profile.reliability == ReliabilityPolicy.RELIABLE and "RELIABILITY" in policy.upper():
            hint = ": the publisher is best-effort (most camera drivers are); set qos: best_effort in the robot file"
        self.log.error(f"incompatible QoS on {self.topics.get(what, topic)} ({what}): a publisher's offer does not "
                       f"match this subscription ({policy}){hint}", throttle_duration_sec=5.0)


class TriggerReset:
    """A std_srvs/Trigger client as the episode runner's reset (robot_rl.actor.runner.ResetService)."""

    def __init__(self, node, name: str):
        from std_srvs.srv import Trigger

        self._trigger = Trigger
        self.client = node.create_client(Trigger, name)
        self.name = self.client.service_name

    def ready(self) -> bool:
        return self.client.service_is_ready()

    def call(self):
        return self.client.call_async(self._trigger.Request())

    def result(self, future) -> tuple[bool, str] | None:
        if not future.done():
            return None
        response = future.result()
        return (False, "no response") if response is None else (bool(response.success), response.message)

    def abandon(self, future) -> None:
        self.client.remove_pending_request(future)
        future.cancel()
