"""Human teleoperation: command type and device backends (no rclpy here; the twist <-> policy-action mapping is
robot_rl.actor.teleop_mapping).

Devices (each optional at run time; opening an absent one raises :class:`DeviceNotFound` saying what was looked
for, how to fix it and which other device to use):

- :class:`KeyboardTeleop`: the terminal on stdin in cbreak mode (Ctrl-C still stops the node; the terminal is
  restored on close). Key map (see :data:`KEY_MAP`)::

      w / s   +x / -x        i / k   +rx / -rx      space  toggle engaged (take over / hand back)
      a / d   +y / -y        j / l   +ry / -ry      g      toggle gripper (open <-> closed)
      r / f   +z / -z        u / o   +rz / -rz      x      stop all motion
      1 success   2 failure   0 reset   q quit

  A key press holds its axis at full speed for ``TeleopConfig.key_hold_s``; keep the key down (terminal auto-repeat)
  to keep moving. The opposite key reverses the axis at once.
- :class:`GamepadTeleop`: the Linux joystick API (``/dev/input/js*``, 8-byte ``js_event`` records; no extra
  packages). Default mapping (:class:`GamepadMapping`, xpad / Xbox layout): left stick = x / y, right stick
  vertical = z, right stick horizontal = yaw; hold LB (button 4) = engaged (dead-man switch: release hands control
  back); A (0) toggles the gripper; Y (3) success, B (1) failure, Start (7) reset.
- :class:`SpaceMouseTeleop`: a 3Dconnexion SpaceMouse over ``/dev/hidraw*`` (found through
  ``/sys/class/hidraw/*/device/uevent``, vendor 0x046d or 0x256f). Deflecting the cap engages (and stays engaged for
  ``SpaceMouseMapping.engage_hold_s`` after release); left button toggles the gripper, right button latches the
  engagement on or off. Its default axes assume the operator faces the robot along base +x: push the cap away = +x,
  left = +y, lift = +z (check the signs on your unit; :class:`SpaceMouseMapping` holds them).

The byte / key parsing lives in pure classes and functions (:class:`KeyMapper`, :func:`parse_js_events`,
:class:`GamepadMapper`, :func:`parse_spacemouse_report`, :class:`SpaceMouseMapper`, :func:`find_spacemice`) that
tests feed directly. Every device has ``poll(now) -> TeleopCommand`` (non-blocking) and ``close()``.
"""

from __future__ import annotations

import dataclasses
import errno
import glob
import math
import os
import re
import struct
import sys
from collections.abc import Mapping, Sequence
from typing import Literal, Protocol

import numpy as np

from robot_rl.actor.teleop_mapping import vector3

EpisodeEvent = Literal["success", "failure", "reset"]
EPISODE_EVENTS: tuple[str, ...] = ("success", "failure", "reset")
DEVICES: tuple[str, ...] = ("keyboard", "gamepad", "spacemouse")


class TeleopDeviceError(RuntimeError):
    """A teleop device cannot be used; the message says what went wrong and how to fix it."""


class DeviceNotFound(TeleopDeviceError):
    """The requested teleop device is absent or not accessible."""


class DeviceLost(TeleopDeviceError):
    """A teleop device that was open stopped answering (unplugged, terminal closed)."""


# ------------------------------------------------------------------------------------------------ commands


@dataclasses.dataclass(frozen=True, eq=False)
class TeleopCommand:
    """One human command: TCP velocity in frame base, gripper opening, engaged flag and an optional episode key."""

    linear: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3))
    """TCP linear velocity [m/s], base frame, (3,)."""
    angular: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3))
    """TCP angular velocity [rad/s], base frame, (3,)."""
    gripper: float = 1.0
    """Gripper target opening in [0 closed, 1 open]."""
    engaged: bool = False
    """True while the human overrides the policy."""
    episode_event: EpisodeEvent | None = None
    """"success" | "failure" | "reset" on the poll that saw the key, else None."""
    quit: bool = False
    """The operator asked to stop the teleop node."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "linear", vector3(self.linear, "linear velocity"))
        object.__setattr__(self, "angular", vector3(self.angular, "angular velocity"))
        gripper = float(self.gripper)
        if not 0.0 <= gripper <= 1.0:
            raise ValueError(f"gripper opening {gripper!r} must be in [0 closed, 1 open]")
        object.__setattr__(self, "gripper", gripper)
        if self.episode_event is not None and self.episode_event not in EPISODE_EVENTS:
            raise ValueError(f"episode_event {self.episode_event!r} must be None or one of {EPISODE_EVENTS}")


@dataclasses.dataclass(frozen=True)
class TeleopConfig:
    """Speed limits and timing shared by the teleop devices."""

    max_linear_speed: float = 0.3
    """[m/s] at full deflection: 0.03 m per 0.1 s step, the env's max_translation."""
    max_angular_speed: float = 1.5
    """[rad/s] at full deflection: 0.15 rad per 0.1 s step, the env's max_rotation."""
    deadzone: float = 0.1
    """Fraction of an analog axis' range read as zero (stick / cap noise)."""
    rate_hz: float = 50.0
    """How often the teleop node polls the device and publishes."""
    key_hold_s: float = 0.3
    """Keyboard: how long one key press keeps its axis moving."""

    def __post_init__(self) -> None:
        for name in ("max_linear_speed", "max_angular_speed", "rate_hz", "key_hold_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"TeleopConfig.{name}={value!r} must be a finite number > 0")
        if not (math.isfinite(self.deadzone) and 0.0 <= self.deadzone < 1.0):
            raise ValueError(f"TeleopConfig.deadzone={self.deadzone!r} must be in [0, 1)")


def apply_deadzone(value: float, deadzone: float) -> float:
    """Analog axis in [-1, 1] -> 0 inside the deadzone, rescaled linearly to [-1, 1] outside it."""
    value = min(max(float(value), -1.0), 1.0)
    if abs(value) <= deadzone:
        return 0.0
    return math.copysign((abs(value) - deadzone) / (1.0 - deadzone), value)


class TeleopDevice(Protocol):
    """A teleop input device: non-blocking ``poll`` and ``close``."""

    name: str

    def poll(self, now: float) -> TeleopCommand: ...

    def close(self) -> None: ...


# ------------------------------------------------------------------------------------------------ keyboard

KEY_MAP: dict[str, tuple[str, int, int]] = {
    # key: (linear | angular, axis, sign)
    "w": ("linear", 0, +1), "s": ("linear", 0, -1),
    "a": ("linear", 1, +1), "d": ("linear", 1, -1),
    "r": ("linear", 2, +1), "f": ("linear", 2, -1),
    "i": ("angular", 0, +1), "k": ("angular", 0, -1),
    "j": ("angular", 1, +1), "l": ("angular", 1, -1),
    "u": ("angular", 2, +1), "o": ("angular", 2, -1),
}
"""Motion keys: key -> (velocity kind, axis, sign)."""
KEY_EPISODE_EVENTS: dict[str, EpisodeEvent] = {"1": "success", "2": "failure", "0": "reset"}
KEY_TOGGLE_ENGAGED = " "
KEY_TOGGLE_GRIPPER = "g"
KEY_STOP = "x"
KEY_QUIT = "q"
_ESCAPE_SEQUENCE = re.compile(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|O.|.)?", re.DOTALL)


def terminal_keys(text: str) -> list[str]:
    """Characters typed on a terminal, without escape sequences (arrow and function keys are not key presses of
    their letters: ESC [ A must not read as "a")."""
    return list(_ESCAPE_SEQUENCE.sub("", text))


class KeyMapper:
    """Keyboard state machine (pure): feed key presses with their time, read the command at any time."""

    def __init__(self, config: TeleopConfig = TeleopConfig()):
        self.config = config
        self._held: dict[tuple[str, int], tuple[int, float]] = {}  # (kind, axis) -> (sign, held until)
        self.engaged = False
        self.gripper = 1.0
        self._event: EpisodeEvent | None = None
        self.quit = False

    def press(self, key: str, now: float) -> None:
        """One key press (a character as read from the terminal); unknown keys are ignored."""
        key = key.lower() if key != KEY_TOGGLE_ENGAGED else key
        if key in KEY_MAP:
            kind, axis, sign = KEY_MAP[key]
            self._held[(kind, axis)] = (sign, now + self.config.key_hold_s)
        elif key == KEY_TOGGLE_ENGAGED:
            self.engaged = not self.engaged
        elif key == KEY_TOGGLE_GRIPPER:
            self.gripper = 0.0 if self.gripper > 0.5 else 1.0
        elif key == KEY_STOP:
            self._held.clear()
        elif key in KEY_EPISODE_EVENTS:
            self._event = KEY_EPISODE_EVENTS[key]
        elif key == KEY_QUIT:
            self.quit = True

    def command(self, now: float) -> TeleopCommand:
        """The command at time `now`; an episode key is reported once."""
        velocity = {"linear": np.zeros(3), "angular": np.zeros(3)}
        speed = {"linear": self.config.max_linear_speed, "angular": self.config.max_angular_speed}
        for (kind, axis), (sign, until) in list(self._held.items()):
            if now < until:
                velocity[kind][axis] = sign * speed[kind]
            else:
                del self._held[(kind, axis)]
        event, self._event = self._event, None
        return TeleopCommand(velocity["linear"], velocity["angular"], self.gripper, self.engaged, event, self.quit)


class KeyboardTeleop:
    """Keyboard teleop on the terminal attached to stdin (see the module doc for the key map)."""

    name = "keyboard"

    def __init__(self, config: TeleopConfig = TeleopConfig(), stream=None):
        import termios
        import tty

        stream = sys.stdin if stream is None else stream
        try:
            fd = stream.fileno()
            interactive = os.isatty(fd)
        except (AttributeError, OSError, ValueError):
            fd, interactive = -1, False
        if not interactive:
            raise DeviceNotFound(
                "keyboard teleop needs an interactive terminal on stdin, but stdin is not a TTY (a pipe, a file, or "
                "a process started without a terminal); run the teleop node in a terminal "
                "(python -m robot_rl.drivers.teleop_node --device keyboard), or use --device gamepad or "
                "--device spacemouse")
        self.mapper = KeyMapper(config)
        self._fd = fd
        self._saved = termios.tcgetattr(fd)
        self._termios = termios
        tty.setcbreak(fd)  # no line buffering, no echo; Ctrl-C still raises SIGINT

    def poll(self, now: float) -> TeleopCommand:
        import select

        while self._fd >= 0 and select.select([self._fd], [], [], 0.0)[0]:
            data = os.read(self._fd, 64)
            if not data:
                raise DeviceLost("keyboard teleop: stdin reached end of file (the terminal was closed)")
            for key in terminal_keys(data.decode("utf-8", errors="ignore")):
                self.mapper.press(key, now)
        return self.mapper.command(now)

    def close(self) -> None:
        if self._fd >= 0:
            self._termios.tcsetattr(self._fd, self._termios.TCSADRAIN, self._saved)
            self._fd = -1

    def __enter__(self) -> KeyboardTeleop:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ------------------------------------------------------------------------------------------------ gamepad

JS_EVENT_BUTTON = 0x01
JS_EVENT_AXIS = 0x02
JS_EVENT_INIT = 0x80
JS_EVENT = struct.Struct("<IhBB")  # struct js_event {__u32 time [ms]; __s16 value; __u8 type; __u8 number;}
JS_AXIS_MAX = 32767.0


@dataclasses.dataclass(frozen=True)
class JsEvent:
    """One Linux joystick event: time [ms], value, kind ("button" | "axis"), number, init (initial state)."""

    time_ms: int
    value: int
    kind: Literal["button", "axis"] | None
    number: int
    init: bool


def parse_js_events(data: bytes) -> tuple[list[JsEvent], bytes]:
    """Split bytes read from /dev/input/jsN into events; returns (events, left-over bytes of a partial event)."""
    whole = len(data) - len(data) % JS_EVENT.size
    events = []
    for offset in range(0, whole, JS_EVENT.size):
        time_ms, value, kind, number = JS_EVENT.unpack_from(data, offset)
        base = kind & ~JS_EVENT_INIT
        name = "button" if base == JS_EVENT_BUTTON else "axis" if base == JS_EVENT_AXIS else None
        events.append(JsEvent(time_ms, value, name, number, bool(kind & JS_EVENT_INIT)))
    return events, bytes(data[whole:])


@dataclasses.dataclass(frozen=True)
class GamepadMapping:
    """Which gamepad axes and buttons do what (defaults: xpad / Xbox layout of the Linux joystick API)."""

    linear_axes: tuple[tuple[int, float], ...] = ((1, -1.0), (0, -1.0), (4, -1.0))
    """(axis number, sign) for base x, y, z: stick forward = +x, stick left = +y, right stick forward = +z."""
    angular_axes: tuple[tuple[int, float] | None, ...] = (None, None, (3, -1.0))
    """(axis number, sign) or None for base rx, ry, rz: right stick left = +yaw."""
    deadman_button: int = 4
    gripper_button: int = 0
    episode_buttons: Mapping[int, EpisodeEvent] = dataclasses.field(
        default_factory=lambda: {3: "success", 1: "failure", 7: "reset"})


class GamepadMapper:
    """Gamepad state machine (pure): feed joystick events, read the command."""

    def __init__(self, config: TeleopConfig = TeleopConfig(), mapping: GamepadMapping = GamepadMapping()):
        self.config = config
        self.mapping = mapping
        self.axes: dict[int, float] = {}
        self.buttons: dict[int, bool] = {}
        self.gripper = 1.0
        self._event: EpisodeEvent | None = None

    def feed(self, event: JsEvent) -> None:
        if event.kind == "axis":
            self.axes[event.number] = max(-1.0, event.value / JS_AXIS_MAX)
        elif event.kind == "button":
            pressed = event.value != 0
            was = self.buttons.get(event.number, False)
            self.buttons[event.number] = pressed
            if event.init or not pressed or was:
                return  # initial state and releases carry no action; only a fresh press does
            if event.number == self.mapping.gripper_button:
                self.gripper = 0.0 if self.gripper > 0.5 else 1.0
            elif event.number in self.mapping.episode_buttons:
                self._event = self.mapping.episode_buttons[event.number]

    def _axis(self, spec: tuple[int, float] | None) -> float:
        if spec is None:
            return 0.0
        number, sign = spec
        return sign * apply_deadzone(self.axes.get(number, 0.0), self.config.deadzone)

    def command(self) -> TeleopCommand:
        """The command for the current state; an episode button is reported once."""
        linear = [self._axis(spec) * self.config.max_linear_speed for spec in self.mapping.linear_axes]
        angular = [self._axis(spec) * self.config.max_angular_speed for spec in self.mapping.angular_axes]
        engaged = self.buttons.get(self.mapping.deadman_button, False)
        event, self._event = self._event, None
        return TeleopCommand(linear, angular, self.gripper, engaged, event)


def _open_device(path: str, what: str, alternatives: str) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except PermissionError:
        raise DeviceNotFound(
            f"{what} {path} exists but this user may not read it; add the user to the group that owns it "
            f"(ls -l {path}; usually 'input' or 'plugdev', then log in again) or add a udev rule, or {alternatives}"
        ) from None
    except OSError as error:
        raise DeviceNotFound(f"cannot open {what} {path}: {error.strerror}; {alternatives}") from None


class GamepadTeleop:
    """Gamepad teleop through the Linux joystick API (see the module doc and :class:`GamepadMapping`)."""

    name = "gamepad"
    PATTERN = "/dev/input/js*"

    def __init__(self, config: TeleopConfig = TeleopConfig(), mapping: GamepadMapping = GamepadMapping(),
                 path: str | None = None):
        alternatives = "use --device keyboard or --device spacemouse"
        if path is None:
            found = sorted(glob.glob(self.PATTERN))
            if not found:
                raise DeviceNotFound(
                    f"no gamepad found: looked for Linux joystick devices {self.PATTERN} and there are none; plug in "
                    "a gamepad (the kernel's joydev module exposes it as /dev/input/jsN: 'sudo modprobe joydev'), "
                    f"or {alternatives}")
            path = found[0]
        elif not os.path.exists(path):
            raise DeviceNotFound(f"no gamepad at {path} (the path does not exist); {alternatives}")
        self.path = path
        self.mapper = GamepadMapper(config, mapping)
        self._fd = _open_device(path, "gamepad", alternatives)
        self._pending = b""

    def poll(self, now: float) -> TeleopCommand:
        while True:
            try:
                data = os.read(self._fd, 64 * JS_EVENT.size)
            except BlockingIOError:
                break
            except OSError as error:
                raise DeviceLost(f"gamepad {self.path} stopped answering ({error.strerror}); was it unplugged?") \
                    from None
            if not data:
                raise DeviceLost(f"gamepad {self.path} closed (unplugged?)")
            events, self._pending = parse_js_events(self._pending + data)
            for event in events:
                self.mapper.feed(event)
        return self.mapper.command()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


# ------------------------------------------------------------------------------------------------ spacemouse

SPACEMOUSE_VENDORS = (0x046D, 0x256F)
"""Logitech (older 3Dconnexion devices) and 3Dconnexion USB vendor ids."""
LOGITECH_3DCONNEXION_PRODUCTS = frozenset(range(0xC603, 0xC640))
"""3Dconnexion products under the Logitech vendor id (0xc603 SpaceMouse Plus .. 0xc62b SpaceMouse Pro, ...); other
Logitech products (mice, keyboards, receivers) are not SpaceMice."""
SPACEMOUSE_FULL_SCALE = 350.0
"""Approximate full deflection of a SpaceMouse axis in report units."""


@dataclasses.dataclass(frozen=True)
class HidDevice:
    """A hidraw device found in sysfs: /dev path, USB vendor and product ids, HID name."""

    path: str
    vendor: int
    product: int
    name: str


def _parse_uevent(text: str) -> dict[str, str]:
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def is_spacemouse(vendor: int, product: int, name: str = "") -> bool:
    if vendor == 0x256F:
        return True
    if vendor == 0x046D:
        return product in LOGITECH_3DCONNEXION_PRODUCTS or "3dconnexion" in name.lower() or "space" in name.lower()
    return False


def find_spacemice(sys_root: str = "/sys/class/hidraw", dev_root: str = "/dev") -> list[HidDevice]:
    """3Dconnexion devices among the hidraw devices under `sys_root` (reads each ``*/device/uevent`` HID_ID)."""
    found = []
    for uevent in sorted(glob.glob(os.path.join(sys_root, "hidraw*", "device", "uevent"))):
        try:
            with open(uevent, encoding="utf-8", errors="replace") as handle:
                fields = _parse_uevent(handle.read())
        except OSError:
            continue
        parts = fields.get("HID_ID", "").split(":")  # bus:vendor:product in hex, e.g. 0003:0000256F:0000C635
        if len(parts) != 3:
            continue
        try:
            vendor, product = int(parts[1], 16), int(parts[2], 16)
        except ValueError:
            continue
        name = fields.get("HID_NAME", "")
        if is_spacemouse(vendor, product, name):
            node = os.path.basename(os.path.dirname(os.path.dirname(uevent)))
            found.append(HidDevice(os.path.join(dev_root, node), vendor, product, name))
    return found


@dataclasses.dataclass(frozen=True)
class SpaceMouseReport:
    """A parsed SpaceMouse HID report: raw translation / rotation (x, y, z) or buttons bitmask, None when absent."""

    translation: tuple[int, int, int] | None = None
    rotation: tuple[int, int, int] | None = None
    buttons: int | None = None


_THREE_INT16 = struct.Struct("<hhh")


def parse_spacemouse_report(data: bytes) -> SpaceMouseReport:
    """Parse one hidraw report: id 1 = translation (+ rotation on newer devices, 13 bytes), id 2 = rotation,
    id 3 = buttons bitmask (little-endian); other reports (battery, ...) parse to an empty report."""
    if not data:
        return SpaceMouseReport()
    report_id = data[0]
    if report_id == 1 and len(data) >= 7:
        translation = _THREE_INT16.unpack_from(data, 1)
        rotation = _THREE_INT16.unpack_from(data, 7) if len(data) >= 13 else None
        return SpaceMouseReport(translation=translation, rotation=rotation)
    if report_id == 2 and len(data) >= 7:
        return SpaceMouseReport(rotation=_THREE_INT16.unpack_from(data, 1))
    if report_id == 3 and len(data) >= 2:
        return SpaceMouseReport(buttons=int.from_bytes(data[1:], "little"))
    return SpaceMouseReport()


# Device frame (raw HID): x right, y towards the operator, z down. Base frame when the operator faces the robot
# along +x: x away from the operator, y left, z up. The map is a proper rotation, so it also maps rotation vectors.
_DEVICE_TO_BASE = ((0.0, -1.0, 0.0), (-1.0, 0.0, 0.0), (0.0, 0.0, -1.0))


@dataclasses.dataclass(frozen=True)
class SpaceMouseMapping:
    """How SpaceMouse axes and buttons map to commands."""

    device_to_base: tuple[tuple[float, float, float], ...] = _DEVICE_TO_BASE
    """3x3 matrix taking device-frame translation / rotation to the base frame."""
    full_scale: float = SPACEMOUSE_FULL_SCALE
    gripper_button: int = 0
    engage_button: int = 1
    """Toggles a latched engagement (hold control without touching the cap)."""
    engage_hold_s: float = 0.5
    """After the cap is released, stay engaged this long (short pauses do not hand control back)."""
    episode_buttons: Mapping[int, EpisodeEvent] = dataclasses.field(default_factory=dict)
    """Extra buttons of bigger models (SpaceMouse Pro) -> episode keys, e.g. {2: "success", 3: "failure"}."""


class SpaceMouseMapper:
    """SpaceMouse state machine (pure): feed reports with their time, read the command."""

    def __init__(self, config: TeleopConfig = TeleopConfig(), mapping: SpaceMouseMapping = SpaceMouseMapping()):
        self.config = config
        self.mapping = mapping
        self._matrix = np.asarray(mapping.device_to_base, dtype=np.float64).reshape(3, 3)
        self.translation = np.zeros(3)
        self.rotation = np.zeros(3)
        self.buttons = 0
        self.gripper = 1.0
        self.latched = False
        self._last_deflected = -math.inf
        self._event: EpisodeEvent | None = None

    def _scaled(self, raw: Sequence[int]) -> np.ndarray:
        normalised = [apply_deadzone(v / self.mapping.full_scale, self.config.deadzone) for v in raw]
        return self._matrix @ np.asarray(normalised)

    def feed(self, report: SpaceMouseReport, now: float) -> None:
        if report.translation is not None:
            self.translation = self._scaled(report.translation)
        if report.rotation is not None:
            self.rotation = self._scaled(report.rotation)
        if report.translation is not None or report.rotation is not None:
            if np.any(self.translation != 0.0) or np.any(self.rotation != 0.0):
                self._last_deflected = now
        if report.buttons is not None:
            pressed = report.buttons & ~self.buttons
            self.buttons = report.buttons
            if pressed >> self.mapping.gripper_button & 1:
                self.gripper = 0.0 if self.gripper > 0.5 else 1.0
            if pressed >> self.mapping.engage_button & 1:
                self.latched = not self.latched
            for button, event in self.mapping.episode_buttons.items():
                if pressed >> button & 1:
                    self._event = event

    def command(self, now: float) -> TeleopCommand:
        deflected = np.any(self.translation != 0.0) or np.any(self.rotation != 0.0)
        engaged = bool(self.latched or deflected or now - self._last_deflected < self.mapping.engage_hold_s)
        event, self._event = self._event, None
        return TeleopCommand(self.translation * self.config.max_linear_speed,
                             self.rotation * self.config.max_angular_speed, self.gripper, engaged, event)


class SpaceMouseTeleop:
    """3Dconnexion SpaceMouse teleop over hidraw (see the module doc and :class:`SpaceMouseMapping`)."""

    name = "spacemouse"
    REPORT_SIZE = 64

    def __init__(self, config: TeleopConfig = TeleopConfig(), mapping: SpaceMouseMapping = SpaceMouseMapping(),
                 path: str | None = None, sys_root: str = "/sys/class/hidraw"):
        alternatives = "use --device keyboard or --device gamepad"
        if path is None:
            found = find_spacemice(sys_root)
            if not found:
                vendors = " or ".join(f"0x{v:04x}" for v in SPACEMOUSE_VENDORS)
                raise DeviceNotFound(
                    f"no SpaceMouse found: looked through {sys_root}/hidraw*/device/uevent for a 3Dconnexion device "
                    f"(USB vendor {vendors}) and found none; plug one in (the hid kernel driver exposes it as "
                    f"/dev/hidrawN), or {alternatives}")
            path = found[0].path
        elif not os.path.exists(path):
            raise DeviceNotFound(f"no SpaceMouse at {path} (the path does not exist); {alternatives}")
        self.path = path
        self.mapper = SpaceMouseMapper(config, mapping)
        self._fd = _open_device(path, "SpaceMouse", alternatives)

    def poll(self, now: float) -> TeleopCommand:
        while True:
            try:
                data = os.read(self._fd, self.REPORT_SIZE)  # hidraw returns one whole report per read
            except BlockingIOError:
                break
            except OSError as error:
                if error.errno == errno.EAGAIN:
                    break
                raise DeviceLost(f"SpaceMouse {self.path} stopped answering ({error.strerror}); was it unplugged?") \
                    from None
            if not data:
                raise DeviceLost(f"SpaceMouse {self.path} closed (unplugged?)")
            self.mapper.feed(parse_spacemouse_report(data), now)
        return self.mapper.command(now)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def open_device(name: str, config: TeleopConfig = TeleopConfig(), path: str | None = None) -> TeleopDevice:
    """Open the teleop device named `name` (keyboard | gamepad | spacemouse); raises DeviceNotFound if absent."""
    if name == "keyboard":
        return KeyboardTeleop(config)
    if name == "gamepad":
        return GamepadTeleop(config, path=path)
    if name == "spacemouse":
        return SpaceMouseTeleop(config, path=path)
    raise ValueError(f"unknown teleop device {name!r}; choose one of {DEVICES}")


__all__ = [
    "DEVICES", "DeviceLost", "DeviceNotFound", "EPISODE_EVENTS", "GamepadMapper", "GamepadMapping", "GamepadTeleop",
    "HidDevice", "JsEvent", "KEY_MAP", "KeyMapper", "KeyboardTeleop", "SpaceMouseMapper", "SpaceMouseMapping",
    "SpaceMouseReport", "SpaceMouseTeleop", "TeleopCommand", "TeleopConfig", "TeleopDevice", "TeleopDeviceError",
    "apply_deadzone", "find_spacemice", "open_device", "parse_js_events", "parse_spacemouse_report", "terminal_keys",
]
