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
- :class:`Range` / :func:`check_ranges`: the range checks of parameters that have no in-process twin (a config
  class whose own checks a node reuses by building it from its parameters); out of range is a NodeStartupError too.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import math
import signal
import threading
from collections.abc import Callable, Iterable, Mapping

from robot_rl.interrupts import STOP_SIGNALS, StopFlag, accept_held_stops, install_stop_signals


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
        from robot_rl import interrupts

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


def run_node(build: Callable[[], object], argv: list[str], name: str) -> int:
    """Run one node object until SIGINT / SIGTERM (or until it says it is finished); returns the exit status.

    `build()` creates the object after rclpy is initialised (without rclpy's own signal handlers); the object has
    ``node`` (the rclpy node) and ``destroy()``, and optionally: ``work() -> bool`` (called between callbacks; True
    means it did work, so the loop does not sleep), ``callbacks_run`` (a count of its callbacks: see
    :func:`spin_callbacks`), ``finished`` (leave the loop), ``stop(executor, signal_number)`` (called once the loop
    ends, to hand control back, drain or checkpoint) and ``exit_status``.
    A :class:`NodeStartupError` from `build()` (or a parameter given on the command line that the node does not
    declare) is logged as one line and its status returned.
    """
    from robot_rl.ros.env import ensure_ros_environment

    # A crash in native code (DDS, OpenCV, MuJoCo) then prints the Python stack of every thread before the process
    # dies, so a node that exits by a signal says where.
    faulthandler.enable()
    ensure_ros_environment()
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
        from robot_rl.ros.env import network_summary

        host.node.get_logger().info(network_summary())  # which network mode and profile this node uses
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


def declare_parameters(node, table: Iterable[tuple[str, object, str]]) -> Callable[[str], object]:
    """Declare all of a node's (name, default, description) parameters; returns their values by name.

    rclpy ignores a ``-p name:=value`` for a parameter the node never declares, so a typo would pass silently: every
    given parameter must be in `table`, else NodeStartupError names it, the closest known name and the known ones.
    A value of the wrong type is a NodeStartupError too; an integer is accepted for a float parameter, a number for a
    text parameter.
    """
    from rcl_interfaces.msg import ParameterDescriptor
    from rclpy.exceptions import InvalidParameterTypeException
    from rclpy.parameter import Parameter

    # rclpy keeps the command line's and parameter files' values in this dict (no public accessor).
    overrides = getattr(node, "_parameter_overrides", {})
    for name, default, description in table:
        given = overrides.get(name)
        if isinstance(default, float) and given is not None and given.type_ == Parameter.Type.INTEGER:
            overrides[name] = Parameter(name, Parameter.Type.DOUBLE, float(given.value))
        elif isinstance(default, str) and given is not None and given.type_ in (Parameter.Type.INTEGER,
                                                                                 Parameter.Type.DOUBLE):
            # `-p source:=0` (a camera index) or `-p task:=3` is meant as text; ROS parses it as a number
            overrides[name] = Parameter(name, Parameter.Type.STRING, str(given.value))
        try:
            node.declare_parameter(name, default, ParameterDescriptor(description=description))
        except InvalidParameterTypeException:
            value = overrides[name].value
            kind = _TYPE_NAMES.get(type(default), type(default).__name__)
            raise NodeStartupError(f"parameter {name!r} of node {node.get_name()} must be {kind} (default "
                                   f"{default!r}), got {value!r}") from None
    check_parameter_overrides(node)
    return lambda name: node.get_parameter(name).value


def check_parameter_overrides(node) -> None:
    """NodeStartupError if the node was given a parameter it does not declare (a typo would otherwise be ignored)."""
    from robot_rl.suggest import closest

    declared = sorted(node.get_parameters_by_prefix(""))
    unknown = sorted(name for name in getattr(node, "_parameter_overrides", {})
                     if not node.has_parameter(name) and not name.startswith("qos_overrides."))
    if unknown:
        name = unknown[0]
        close = closest(name, declared)
        hint = f" (did you mean {close!r}?)" if close else ""
        others = f" (and {', '.join(repr(n) for n in unknown[1:])})" if unknown[1:] else ""
        raise NodeStartupError(f"unknown parameter {name!r}{others} for node {node.get_name()}{hint}; "
                               f"known: {', '.join(declared)}")


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
    """`parser.parse_args` on the non-ROS part of `argv` (everything outside --ros-args), after the ROS bootstrap."""
    from robot_rl.ros.env import ensure_ros_environment

    ensure_ros_environment()
    from rclpy.utilities import remove_ros_args

    return parser.parse_args(remove_ros_args(argv)[1:])


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
    """A std_srvs/Trigger client as the episode runner's reset (robot_rl.episode.ResetService)."""

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
