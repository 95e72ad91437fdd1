"""The teleop node: a human input device (keyboard, gamepad, SpaceMouse) as ROS 2 teleop topics.

Run::

    python -m robot_rl.drivers.teleop_node --device auto|keyboard|gamepad|spacemouse [--path /dev/input/js0] \
        [--ros-args -r __ns:=/robot1 -p rate_hz:=50.0]

``--device auto`` takes the first device found of a SpaceMouse, a gamepad and the keyboard (only when stdin is a
terminal). With none, the node does not fail: it logs one line saying what it looked for and where episode keys come
from meanwhile (a keyboard teleop node in its own terminal, or std_msgs/String on ``teleop/episode``), publishes
engaged=false and looks again every :data:`AUTO_SEARCH_S` seconds, so a device plugged in later is picked up. A device
that stops answering is given up the same way (control goes back to the policy) instead of ending the node.

Every name is relative, so a namespace remap moves the whole node. Topics (names and QoS from robot_rl.ros.qos):

==============  ============================  ===================================================================
name            type                          content
==============  ============================  ===================================================================
teleop/twist    geometry_msgs/TwistStamped    TCP linear [m/s] / angular [rad/s] velocity, frame ``base``, each poll
teleop/gripper  std_msgs/Float64              gripper target in [0 closed, 1 open], each poll
teleop/engaged  std_msgs/Bool (latched)       true while the human overrides the policy; at start and on change
teleop/episode  std_msgs/String               "success" | "failure" | "reset" when the operator presses that key
==============  ============================  ===================================================================

Parameters (:data:`PARAMETERS`, read at start-up): ``rate_hz`` (device poll and publish rate), ``max_linear_speed``
[m/s], ``max_angular_speed`` [rad/s], ``deadzone`` (analog axes), ``key_hold_s`` (keyboard).

Exit status: 0 after SIGINT / SIGTERM / SIGHUP (its terminal closed) or the keyboard's quit key; 2 when the named
device is missing (one log line says what was looked for and how to fix it); 1 when an open device named with
``--device`` stops answering. On every
exit the node first publishes engaged=false, so the policy gets control back.
"""

from __future__ import annotations

if __name__ == "__main__":  # a program's start, before the heavy imports below
    from robot_rl.core.startup import program_start

    program_start()

import argparse
import sys
import time

from robot_rl.drivers.teleop import DEVICES, DeviceNotFound, TeleopCommand, TeleopConfig, TeleopDeviceError, \
    open_device
from robot_rl.ros import qos
from robot_rl.ros.node_util import NodeStartupError, declare_parameters, topic_publisher

NODE_NAME = "teleop"
BASE_FRAME = "base"
EXIT_OK = 0
EXIT_DEVICE_LOST = 1
EXIT_NO_DEVICE = 2
AUTO = "auto"
AUTO_ORDER = ("spacemouse", "gamepad", "keyboard")
"""Devices ``--device auto`` tries, in this order."""
AUTO_SEARCH_S = 2.0
"""Seconds between looks for a device while ``--device auto`` has none."""
NO_DEVICE_HINT = ("episode keys meanwhile: run `python -m robot_rl.drivers.teleop_node --device keyboard` in a "
                  "terminal (same ROS_DOMAIN_ID and namespace), or publish std_msgs/String success | failure | reset "
                  "on teleop/episode")


_DEFAULTS = TeleopConfig()
PARAMETERS: tuple[tuple[str, object, str], ...] = (
    ("rate_hz", _DEFAULTS.rate_hz, "device poll and publish rate [Hz] (read at start-up)"),
    ("max_linear_speed", _DEFAULTS.max_linear_speed, "TCP speed at full deflection [m/s] (read at start-up)"),
    ("max_angular_speed", _DEFAULTS.max_angular_speed,
     "TCP angular speed at full deflection [rad/s] (read at start-up)"),
    ("deadzone", _DEFAULTS.deadzone, "fraction of an analog axis read as zero (read at start-up)"),
    ("key_hold_s", _DEFAULTS.key_hold_s, "keyboard: seconds one key press keeps moving (read at start-up)"),
)
"""The node's ROS parameters (name, default, description); the device is chosen with --device."""


def teleop_config(values) -> TeleopConfig:
    """The parameters' twin, TeleopConfig (as for an in-process device), which checks them; NodeStartupError for a bad
    value (`values`: name -> value)."""
    try:
        return TeleopConfig(max_linear_speed=float(values("max_linear_speed")),
                            max_angular_speed=float(values("max_angular_speed")), deadzone=float(values("deadzone")),
                            rate_hz=float(values("rate_hz")), key_hold_s=float(values("key_hold_s")))
    except ValueError as error:
        raise NodeStartupError(str(error)) from None


def check_parameters(node_name: str, values) -> None:
    """NodeStartupError for a bad parameter value; run_node applies it to the command line's values first."""
    teleop_config(values)


class TeleopNode:
    """One rclpy node that polls a teleop device at ``rate_hz`` and publishes its commands (see the module doc)."""

    def __init__(self, device_name: str, *, path: str | None = None, node_name: str = NODE_NAME, context=None,
                 cli_args: list[str] | None = None):
        import rclpy
        from geometry_msgs.msg import TwistStamped
        from std_msgs.msg import Bool, Float64, String

        self._Bool, self._Float64, self._String = Bool, Float64, String
        self.node = rclpy.create_node(node_name, context=context, cli_args=cli_args)
        node = self.node
        param = declare_parameters(node, PARAMETERS)
        try:
            self.config = teleop_config(param)
        except NodeStartupError:
            node.destroy_node()
            raise
        self._log = node.get_logger()
        self.exit_status: int | None = None
        """Set when the node wants to stop by itself (quit key, lost device)."""
        self.auto = device_name == AUTO
        self.device = None
        self._next_search = 0.0
        if self.auto:
            try:
                self.device = find_device(self.config)
            except DeviceNotFound as error:
                self._log.warning(f"{error}; running without a teleop device (the policy acts alone) and looking "
                                  f"again every {AUTO_SEARCH_S:g} s; {NO_DEVICE_HINT}")
                self._next_search = time.monotonic() + AUTO_SEARCH_S
        else:
            try:
                self.device = open_device(device_name, self.config, path=path)
            except DeviceNotFound:
                node.destroy_node()
                raise  # the caller logs it and exits with EXIT_NO_DEVICE

        self._twist_pub = topic_publisher(node, TwistStamped, qos.TELEOP_TWIST)
        self._gripper_pub = topic_publisher(node, Float64, qos.TELEOP_GRIPPER)
        self._engaged_pub = topic_publisher(node, Bool, qos.TELEOP_ENGAGED)
        self._episode_pub = topic_publisher(node, String, qos.TELEOP_EPISODE)
        self.engaged = False
        self._engaged_pub.publish(Bool(data=False))
        node.create_timer(1.0 / self.config.rate_hz, self._on_timer)
        self._log.info(f"teleop node up: device={self._describe_device()} rate={self.config.rate_hz:g} Hz "
                       f"namespace={node.get_namespace()}")

    def _describe_device(self) -> str:
        if self.device is None:
            return "none yet (auto)"
        return f"{self.device.name} ({getattr(self.device, 'path', 'stdin')})"

    def _on_timer(self) -> None:
        if self.exit_status is not None:
            return
        now = time.monotonic()
        if self.device is None:
            if now >= self._next_search:
                self._next_search = now + AUTO_SEARCH_S
                try:
                    self.device = find_device(self.config)
                except DeviceNotFound:
                    return
                self._log.info(f"teleop device found: {self._describe_device()}")
            return
        try:
            command = self.device.poll(now)
        except TeleopDeviceError as error:
            if self.auto:
                self._log.error(f"teleop device lost: {error}; handing control back to the policy and looking for a "
                                f"device again every {AUTO_SEARCH_S:g} s")
                self.disengage()
                self._close_device()
                self._next_search = now + AUTO_SEARCH_S
                return
            self._log.error(f"teleop device lost: {error}; handing control back to the policy and stopping")
            self.exit_status = EXIT_DEVICE_LOST
            self.disengage()
            return
        self.publish(command)
        if command.quit:
            self._log.info("quit key pressed; handing control back to the policy and stopping")
            self.exit_status = EXIT_OK
            self.disengage()

    def publish(self, command: TeleopCommand) -> None:
        """Publish one command: twist and gripper always, engaged on change, the episode key if any."""
        from robot_rl.ros.convert import twist_to_msg
        from robot_rl.ros.node_util import clock_seconds

        stamp = clock_seconds(self.node.get_clock())
        self._twist_pub.publish(twist_to_msg(command.linear, command.angular, stamp=stamp, frame_id=BASE_FRAME))
        self._gripper_pub.publish(self._Float64(data=float(command.gripper)))
        if command.engaged != self.engaged:
            self.engaged = bool(command.engaged)
            self._engaged_pub.publish(self._Bool(data=self.engaged))
            self._log.info("human engaged: overriding the policy" if self.engaged else "human released control")
        if command.episode_event is not None:
            self._episode_pub.publish(self._String(data=command.episode_event))
            self._log.info(f"episode key: {command.episode_event}")

    @property
    def finished(self) -> bool:
        return self.exit_status is not None

    def stop(self, executor, signal_number: int | None) -> None:
        if self.exit_status is None:
            self._log.info(f"stopping (signal {signal_number})")
            self.disengage()

    def disengage(self, timeout_s: float = 0.5) -> None:
        """Publish engaged=false and give the middleware a moment to deliver it."""
        from rclpy.duration import Duration

        self.engaged = False
        self._engaged_pub.publish(self._Bool(data=False))
        self._engaged_pub.wait_for_all_acked(Duration(seconds=timeout_s))

    def _close_device(self) -> None:
        device, self.device = self.device, None
        if device is not None:
            device.close()

    def destroy(self) -> None:
        try:
            self._close_device()
        finally:
            self.node.destroy_node()


def find_device(config: TeleopConfig):
    """The first teleop device of AUTO_ORDER that can be opened; DeviceNotFound names what was looked for."""
    reasons = []
    for name in AUTO_ORDER:
        try:
            return open_device(name, config)
        except DeviceNotFound as error:
            reasons.append(f"{name}: {str(error).split(';')[0]}")
    raise DeviceNotFound(f"no teleop device found ({'; '.join(reasons)})")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m robot_rl.drivers.teleop_node",
        description="A human teleop device as ROS 2 teleop topics (twist, gripper, engaged, episode keys). "
                    "ROS arguments go after --ros-args (e.g. -r __ns:=/robot1 -p rate_hz:=50.0).")
    parser.add_argument("--device", required=True, choices=(AUTO, *DEVICES),
                        help="auto: the first device found (SpaceMouse, gamepad, keyboard on a terminal), or none "
                             "until one is plugged in")
    parser.add_argument("--path", default=None, help="device file (/dev/input/jsN, /dev/hidrawN); default: search")
    parser.add_argument("--node-name", default=NODE_NAME)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the teleop node until SIGINT / SIGTERM or the quit key; returns the exit status (see the module doc)."""
    from robot_rl.ros.node_util import NodeStartupError, parse_node_arguments, run_node

    argv = list(sys.argv if argv is None else argv)
    parser = _parser()
    args = parse_node_arguments(parser, argv)
    if args.device == AUTO and args.path is not None:
        parser.error("--path needs a named --device (gamepad or spacemouse), not auto")

    def build() -> TeleopNode:
        try:
            return TeleopNode(args.device, path=args.path, node_name=args.node_name)
        except DeviceNotFound as error:
            raise NodeStartupError(f"teleop device {args.device!r} not available: {error}", EXIT_NO_DEVICE) from None

    return run_node(build, argv, args.node_name, PARAMETERS, check_parameters)

if __name__ == "__main__":
    sys.exit(main())
