"""Teleop without ROS: twist <-> action mapping, device parsers (keyboard, joystick, SpaceMouse), missing devices,
and the intervention rule shared by the simulated human and the scripted teleop node."""

from __future__ import annotations

import glob
import os
import struct
import termios
import time

import numpy as np
import pytest

from robot_rl.drivers.teleop import (
    JS_EVENT, JS_EVENT_AXIS, JS_EVENT_BUTTON, JS_EVENT_INIT, DeviceLost, DeviceNotFound, GamepadMapper, GamepadTeleop,
    KeyboardTeleop, KeyMapper, SpaceMouseMapper, SpaceMouseReport, SpaceMouseTeleop, TeleopCommand, TeleopConfig,
    apply_deadzone, find_spacemice, open_device, parse_js_events, parse_spacemouse_report, terminal_keys)
from robot_rl.sim.human import (
    TRIGGER_DISAGREES, TRIGGER_HAZARD, TRIGGER_NON_FINITE, TRIGGER_PUSHING_OUT, TRIGGER_STUCK, InterventionConfig,
    InterventionRule, ScriptedSupervisor, inferred_push)
from robot_rl.sim.scripted_teleop import ScriptedTeleopConfig
from robot_rl.actor.teleop_mapping import action_to_twist, twist_to_action

SCALE = {"control_dt": 0.1, "max_translation": 0.03, "max_rotation": 0.15}
LOW, HIGH = np.array([0.35, -0.22, 0.015]), np.array([0.65, 0.22, 0.30])


# --------------------------------------------------------------------------------------------- action mapping


@pytest.mark.parametrize("action_dim", [4, 7])
def test_action_twist_round_trip(action_dim):
    rng = np.random.default_rng(0)
    for action in rng.uniform(-1, 1, size=(200, action_dim)):
        linear, angular, opening = action_to_twist(action, **SCALE)
        assert 0.0 <= opening <= 1.0
        if action_dim == 4:
            np.testing.assert_array_equal(angular, 0.0)
        back = twist_to_action(linear, angular, opening, action_dim=action_dim, **SCALE)
        assert back.dtype == np.float32 and back.shape == (action_dim,)
        np.testing.assert_allclose(back, action, atol=1e-6)


def test_twist_to_action_scales_and_clips():
    # 0.3 m/s for one 0.1 s step is 0.03 m: the full per-step translation.
    action = twist_to_action([0.3, -0.15, 0.0], [0, 0, 0.75], 1.0, action_dim=7, **SCALE)
    np.testing.assert_allclose(action, [1.0, -0.5, 0.0, 0.0, 0.0, 0.5, -1.0], atol=1e-6)  # open = -1
    action = twist_to_action([30.0, -30.0, 0.0], [0, 0, 0], 0.0, action_dim=4, **SCALE)
    np.testing.assert_allclose(action, [1.0, -1.0, 0.0, 1.0])  # clipped; closed = +1
    np.testing.assert_allclose(twist_to_action([0, 0, 0], [0, 0, 0], 7.0, action_dim=4, **SCALE)[-1], -1.0)
    linear, _, opening = action_to_twist([5.0, 0, 0, 0.0], **SCALE)
    np.testing.assert_allclose(linear, [0.3, 0, 0])
    assert opening == pytest.approx(0.5)
    with pytest.raises(ValueError, match="not finite"):
        twist_to_action([np.nan, 0, 0], [0, 0, 0], 1.0, action_dim=4, **SCALE)
    with pytest.raises(ValueError, match="action_dim"):
        twist_to_action([0, 0, 0], [0, 0, 0], 1.0, action_dim=5, **SCALE)
    with pytest.raises(ValueError, match="4 or 7"):
        action_to_twist([0, 0, 0], **SCALE)
    with pytest.raises(ValueError, match="control_dt"):
        action_to_twist([0, 0, 0, 0], control_dt=0.0, max_translation=0.03, max_rotation=0.15)


def test_teleop_command_validation():
    command = TeleopCommand([0.1, 0, 0], [0, 0, 0], 0.5, True, "success")
    assert command.linear.shape == (3,) and not command.linear.flags.writeable
    with pytest.raises(ValueError, match="gripper"):
        TeleopCommand(gripper=1.5)
    with pytest.raises(ValueError, match="episode_event"):
        TeleopCommand(episode_event="win")
    with pytest.raises(ValueError, match="3 entries"):
        TeleopCommand(linear=[0, 0])
    with pytest.raises(ValueError, match="deadzone"):
        TeleopConfig(deadzone=1.0)


def test_deadzone():
    assert apply_deadzone(0.05, 0.1) == 0.0
    assert apply_deadzone(1.0, 0.1) == 1.0 and apply_deadzone(-2.0, 0.1) == -1.0
    assert apply_deadzone(0.55, 0.1) == pytest.approx(0.5)


# --------------------------------------------------------------------------------------------- keyboard


def test_key_map_to_commands():
    keys = KeyMapper(TeleopConfig(key_hold_s=0.3))
    start = keys.command(0.0)
    assert not start.engaged and start.gripper == 1.0 and start.episode_event is None
    keys.press("w", 0.0)
    keys.press("d", 0.0)
    keys.press("u", 0.0)
    command = keys.command(0.1)
    np.testing.assert_allclose(command.linear, [0.3, -0.3, 0.0])
    np.testing.assert_allclose(command.angular, [0.0, 0.0, 1.5])
    keys.press("s", 0.2)  # the opposite key reverses at once
    np.testing.assert_allclose(keys.command(0.25).linear, [-0.3, -0.3, 0.0])
    np.testing.assert_allclose(keys.command(0.4).linear, [-0.3, 0.0, 0.0])  # 'd' expired after 0.3 s
    np.testing.assert_allclose(keys.command(0.6).linear, 0.0)
    keys.press("R", 1.0)  # caps lock still works
    keys.press("x", 1.0)  # stop
    np.testing.assert_allclose(keys.command(1.0).linear, 0.0)

    keys.press(" ", 2.0)
    keys.press("g", 2.0)
    command = keys.command(2.0)
    assert command.engaged and command.gripper == 0.0
    keys.press(" ", 2.1)
    keys.press("g", 2.1)
    assert not keys.command(2.1).engaged and keys.command(2.1).gripper == 1.0
    for key, event in (("1", "success"), ("2", "failure"), ("0", "reset")):
        keys.press(key, 3.0)
        assert keys.command(3.0).episode_event == event
        assert keys.command(3.0).episode_event is None  # reported once
    keys.press("?", 3.0)
    assert not keys.command(3.0).quit
    keys.press("q", 3.0)
    assert keys.command(3.0).quit


def test_terminal_escape_sequences_are_not_letters():
    assert terminal_keys("w\x1b[Aa\x1bOPg \x1b[1;5C") == ["w", "a", "g", " "]


def test_keyboard_teleop_on_a_pseudo_terminal_restores_it():
    master, slave = os.openpty()
    try:
        before = termios.tcgetattr(slave)
        with os.fdopen(os.dup(slave), "rb", buffering=0) as stream:
            teleop = KeyboardTeleop(TeleopConfig(), stream=stream)
            assert not termios.tcgetattr(slave)[3] & termios.ICANON  # cbreak: keys arrive one at a time
            os.write(master, b"w ")
            deadline = time.monotonic() + 30.0  # a liveness bound only: the loop ends once the keys are in
            command = teleop.poll(10.0)
            while not command.engaged and time.monotonic() < deadline:  # the pty hands bytes over asynchronously
                time.sleep(0.01)
                command = teleop.poll(10.0)
            assert command.engaged
            np.testing.assert_allclose(command.linear, [0.3, 0.0, 0.0])
            teleop.close()
        assert termios.tcgetattr(slave) == before
    finally:
        os.close(master)
        os.close(slave)


# --------------------------------------------------------------------------------------------- gamepad


def js(kind: int, number: int, value: int, time_ms: int = 0) -> bytes:
    return JS_EVENT.pack(time_ms, value, kind, number)


def test_joystick_event_parsing_keeps_partial_events():
    data = js(JS_EVENT_AXIS, 1, -32767, 5) + js(JS_EVENT_BUTTON | JS_EVENT_INIT, 4, 0)
    events, rest = parse_js_events(data + data[:3])
    assert rest == data[:3]
    assert [(e.kind, e.number, e.value, e.init) for e in events] == [("axis", 1, -32767, False),
                                                                   ("button", 4, 0, True)]
    assert events[0].time_ms == 5


def test_joystick_events_to_commands_with_deadman_switch():
    pad = GamepadMapper(TeleopConfig(deadzone=0.1))
    feed = lambda data: [pad.feed(e) for e in parse_js_events(data)[0]]  # noqa: E731
    # Initial state (as the kernel reports it on open): a pressed gripper button must not toggle the gripper.
    feed(js(JS_EVENT_BUTTON | JS_EVENT_INIT, 0, 1) + js(JS_EVENT_AXIS | JS_EVENT_INIT, 1, 0))
    assert pad.command().gripper == 1.0 and not pad.command().engaged
    feed(js(JS_EVENT_BUTTON, 0, 0))
    feed(js(JS_EVENT_AXIS, 1, -32767) + js(JS_EVENT_AXIS, 0, 1000) + js(JS_EVENT_AXIS, 4, 32767))
    command = pad.command()
    np.testing.assert_allclose(command.linear, [0.3, 0.0, -0.3])  # stick forward = +x; small x is in the deadzone
    assert not command.engaged
    feed(js(JS_EVENT_BUTTON, 4, 1))
    assert pad.command().engaged
    feed(js(JS_EVENT_BUTTON, 4, 0))
    assert not pad.command().engaged  # dead-man switch released: control goes back to the policy
    feed(js(JS_EVENT_BUTTON, 0, 1))
    assert pad.command().gripper == 0.0
    feed(js(JS_EVENT_BUTTON, 0, 1))  # repeated press report without release: no second toggle
    assert pad.command().gripper == 0.0
    feed(js(JS_EVENT_BUTTON, 0, 0) + js(JS_EVENT_BUTTON, 0, 1))
    assert pad.command().gripper == 1.0
    feed(js(JS_EVENT_BUTTON, 3, 1))
    assert pad.command().episode_event == "success" and pad.command().episode_event is None
    feed(js(JS_EVENT_BUTTON, 1, 1) + js(JS_EVENT_BUTTON, 7, 1))
    assert pad.command().episode_event == "reset"  # the latest key wins within one poll
    feed(js(JS_EVENT_AXIS, 3, 32767))
    np.testing.assert_allclose(pad.command().angular, [0.0, 0.0, -1.5])


def test_gamepad_teleop_reads_a_device_file_and_reports_its_loss(tmp_path):
    path = str(tmp_path / "js0")
    os.mkfifo(path)
    teleop = GamepadTeleop(TeleopConfig(), path=path)
    writer = os.open(path, os.O_WRONLY)
    try:
        os.write(writer, js(JS_EVENT_BUTTON, 4, 1) + js(JS_EVENT_AXIS, 0, -32767)[:5])
        command = teleop.poll(0.0)
        assert command.engaged and np.allclose(command.linear, 0.0)  # the axis event is still incomplete
        os.write(writer, js(JS_EVENT_AXIS, 0, -32767)[5:])
        np.testing.assert_allclose(teleop.poll(0.0).linear, [0.0, 0.3, 0.0])
    finally:
        os.close(writer)
    with pytest.raises(DeviceLost, match="unplugged"):
        teleop.poll(0.0)
    teleop.close()


# --------------------------------------------------------------------------------------------- spacemouse


def report(report_id: int, *values: int) -> bytes:
    return bytes([report_id]) + struct.pack(f"<{len(values)}h", *values)


def test_spacemouse_report_parsing():
    assert parse_spacemouse_report(report(1, 10, -20, 30)) == SpaceMouseReport(translation=(10, -20, 30))
    assert parse_spacemouse_report(report(1, 1, 2, 3, 4, 5, 6)) == SpaceMouseReport((1, 2, 3), (4, 5, 6))
    assert parse_spacemouse_report(report(2, -4, 5, -6)) == SpaceMouseReport(rotation=(-4, 5, -6))
    assert parse_spacemouse_report(bytes([3, 0b10, 0])) == SpaceMouseReport(buttons=2)
    assert parse_spacemouse_report(bytes([0x17, 90])) == SpaceMouseReport()  # battery level: ignored
    assert parse_spacemouse_report(b"") == SpaceMouseReport()
    assert parse_spacemouse_report(bytes([1, 0, 0])) == SpaceMouseReport()  # truncated


def test_spacemouse_reports_to_commands():
    mouse = SpaceMouseMapper(TeleopConfig(deadzone=0.1))
    assert not mouse.command(0.0).engaged
    # Push the cap away from the operator (device -y) and lift it (device -z): base +x and +z.
    mouse.feed(parse_spacemouse_report(report(1, 0, -350, -350)), now=1.0)
    command = mouse.command(1.0)
    np.testing.assert_allclose(command.linear, [0.3, 0.0, 0.3])
    assert command.engaged
    mouse.feed(parse_spacemouse_report(report(2, 0, 0, 350)), now=1.1)  # twist the cap: -yaw
    np.testing.assert_allclose(mouse.command(1.1).angular, [0.0, 0.0, -1.5])
    mouse.feed(parse_spacemouse_report(report(1, 5, 5, 5, 0, 0, 0)), now=1.2)  # released (inside the deadzone)
    command = mouse.command(1.3)
    np.testing.assert_allclose(command.linear, 0.0)
    np.testing.assert_allclose(command.angular, 0.0)
    assert command.engaged  # still within engage_hold_s of the last deflection
    assert not mouse.command(1.8).engaged
    mouse.feed(parse_spacemouse_report(bytes([3, 0b01])), now=2.0)  # left button: gripper
    assert mouse.command(2.0).gripper == 0.0
    mouse.feed(parse_spacemouse_report(bytes([3, 0b11])), now=2.1)  # right button too: latch engagement
    assert mouse.command(2.1).gripper == 0.0 and mouse.command(5.0).engaged
    mouse.feed(parse_spacemouse_report(bytes([3, 0b00])), now=2.2)
    mouse.feed(parse_spacemouse_report(bytes([3, 0b10])), now=2.3)  # right again: unlatch
    assert not mouse.command(5.0).engaged and mouse.command(5.0).gripper == 0.0


def _fake_hidraw(root, name: str, hid_id: str, hid_name: str) -> None:
    device = root / name / "device"
    device.mkdir(parents=True)
    (device / "uevent").write_text(f"DRIVER=hid-generic\nHID_ID={hid_id}\nHID_NAME={hid_name}\n")


def test_find_spacemice_in_sysfs(tmp_path):
    _fake_hidraw(tmp_path, "hidraw0", "0003:0000046D:0000C52B", "Logitech USB Receiver")  # a mouse receiver
    _fake_hidraw(tmp_path, "hidraw1", "0003:0000256F:0000C635", "3Dconnexion SpaceMouse Compact")
    _fake_hidraw(tmp_path, "hidraw2", "0003:0000046D:0000C626", "3Dconnexion SpaceNavigator")
    _fake_hidraw(tmp_path, "hidraw3", "garbage", "")
    found = find_spacemice(str(tmp_path), dev_root="/dev")
    assert [(d.path, d.vendor, d.product) for d in found] == [("/dev/hidraw1", 0x256F, 0xC635),
                                                              ("/dev/hidraw2", 0x046D, 0xC626)]


def test_spacemouse_teleop_reads_a_device_file(tmp_path):
    path = str(tmp_path / "hidraw9")
    os.mkfifo(path)
    teleop = SpaceMouseTeleop(TeleopConfig(), path=path)
    writer = os.open(path, os.O_WRONLY)
    try:
        os.write(writer, bytes([3, 1]))
        command = teleop.poll(0.0)
        assert command.gripper == 0.0 and not command.engaged
    finally:
        os.close(writer)
        teleop.close()


# --------------------------------------------------------------------------------------------- missing devices


def test_missing_devices_raise_clear_errors(tmp_path):
    if glob.glob(GamepadTeleop.PATTERN):
        pytest.skip("this machine has a joystick device")
    with pytest.raises(DeviceNotFound) as error:
        open_device("gamepad")
    message = str(error.value)
    assert "/dev/input/js*" in message and "joydev" in message and "--device keyboard" in message

    with pytest.raises(DeviceNotFound) as error:
        SpaceMouseTeleop(sys_root=str(tmp_path))
    message = str(error.value)
    assert "hidraw" in message and "0x256f" in message and "0x046d" in message and "--device gamepad" in message
    if not find_spacemice():
        with pytest.raises(DeviceNotFound, match="no SpaceMouse found"):
            open_device("spacemouse")

    read_end, write_end = os.pipe()
    try:
        with os.fdopen(read_end, "rb", buffering=0) as pipe:
            with pytest.raises(DeviceNotFound) as error:
                KeyboardTeleop(stream=pipe)
    finally:
        os.close(write_end)
    message = str(error.value)
    assert "not a TTY" in message and "--device gamepad" in message and "--device spacemouse" in message

    with pytest.raises(DeviceNotFound, match="does not exist"):
        GamepadTeleop(path=str(tmp_path / "js7"))
    with pytest.raises(ValueError, match="unknown teleop device"):
        open_device("wiimote")


# --------------------------------------------------------------------------------------------- intervention rule


def run_rule(rule, steps, tcp=None, target=None, push=(0.0, 0.0, 0.0, -1.0)):
    flags = []
    for t in range(steps):
        position = np.array([0.5, 0.0, 0.2]) if tcp is None else tcp(t)
        flags.append(rule.step(position, target, np.asarray(push, dtype=np.float64)))
    return np.array(flags)


def test_rule_triggers_on_stuck_and_respects_the_episode_budget():
    rule = InterventionRule(InterventionConfig(takeover_steps=3, episode_budget=5, stuck_window=4), LOW, HIGH)
    flags = run_rule(rule, 20)
    # Evidence needs a full window (step 3), then 3 steps; the window refills (steps 4-6 + 7) and 2 more steps
    # exhaust the budget of 5.
    assert np.flatnonzero(flags).tolist() == [3, 4, 5, 7, 8]
    assert rule.last_trigger == TRIGGER_STUCK and rule.episode_steps == 5 and rule.total_steps == 5
    rule.reset()
    assert rule.episode_steps == 0 and rule.total_steps == 5
    assert np.flatnonzero(run_rule(rule, 6)).tolist() == [3, 4, 5]


def test_rule_leaves_a_moving_policy_alone_and_respects_the_total_budget():
    rule = InterventionRule(InterventionConfig(stuck_window=4, total_budget=4, episode_budget=10), LOW, HIGH)
    moving = run_rule(rule, 30, tcp=lambda t: np.array([0.4 + 0.01 * t, 0.0, 0.2]))
    assert not moving.any()
    for _ in range(3):
        rule.reset()
        run_rule(rule, 20)
    assert rule.total_steps == 4


def test_rule_triggers_on_pushing_out_of_the_workspace():
    config = InterventionConfig(takeover_steps=2, stuck_window=50, boundary_steps=3, boundary_margin=0.005)
    moving = lambda t: np.array([0.4, -0.2 + 0.01 * t, 0.2])  # noqa: E731 - never stuck
    on_face = np.array([HIGH[0] - 0.002, 0.0, 0.2])
    rule = InterventionRule(config, LOW, HIGH)
    assert not run_rule(rule, 10, tcp=moving, target=on_face, push=[-1, 0, 0, 0]).any()  # pushes inwards
    assert not run_rule(rule, 10, tcp=moving, target=on_face, push=[0.4, 0, 0, 0]).any()  # too gently
    flags = run_rule(rule, 6, tcp=moving, target=on_face, push=[1, 0, 0, 0])
    # 3 pushes in a row (steps 0-2), 2 steps of takeover; the count restarts at the trigger: again at step 5.
    assert np.flatnonzero(flags).tolist() == [2, 3, 5] and rule.last_trigger == TRIGGER_PUSHING_OUT
    rule.reset()
    low_z = np.array([0.5, 0.0, LOW[2]])
    assert np.flatnonzero(run_rule(rule, 3, tcp=moving, target=low_z, push=[0, 0, -1, 0])).tolist() == [2]
    rule.reset()
    assert run_rule(rule, 1, tcp=moving, push=[np.nan, 0, 0, 0]).all()
    assert rule.last_trigger == TRIGGER_NON_FINITE


def test_rule_triggers_when_the_policy_heads_where_the_expert_would_not():
    config = InterventionConfig(takeover_steps=2, stuck_window=50, disagreement=0.5, disagreement_steps=3)
    moving = lambda t: np.array([0.4, -0.2 + 0.01 * t, 0.2])  # noqa: E731 - never stuck
    expert = np.array([0.0, 1.0, 0.0, -1.0])
    rule = InterventionRule(config, LOW, HIGH)
    close = [rule.step(moving(t), None, np.array([0.2, 0.8, 0.1, 1.0]), expert) for t in range(10)]
    assert not any(close)  # within 0.5 of the expert's translation (the gripper entry is not compared)
    unknown = [rule.step(moving(t), None, np.array([0.0, -1.0, 0.0, -1.0]), None) for t in range(10)]
    assert not any(unknown)  # no expert action: no evidence
    flags = [rule.step(moving(t), None, np.array([0.0, -1.0, 0.0, -1.0]), expert) for t in range(7)]
    # 3 disagreeing steps in a row (0-2), 2 steps of takeover; the count restarts at the trigger: again at step 5.
    assert np.flatnonzero(flags).tolist() == [2, 3, 5, 6] and rule.last_trigger == TRIGGER_DISAGREES
    rule.reset()
    alternating = [rule.step(moving(t), None, np.array([0.0, -1.0 if t % 2 else 1.0, 0.0, 0.0]), expert)
                   for t in range(10)]
    assert not any(alternating)  # never 3 in a row
    off = InterventionRule(InterventionConfig(stuck_window=50), LOW, HIGH)
    assert not any(off.step(moving(t), None, np.array([0.0, -1.0, 0.0, 0.0]), expert) for t in range(10))
    with pytest.raises(ValueError, match="disagreement"):
        InterventionConfig(disagreement=0.0)
    assert ScriptedTeleopConfig(disagreement=0.0).intervention_config().disagreement is None  # 0: off over ROS


def test_rule_and_scripted_supervisor_take_over_at_once_on_a_hazard_the_sim_names():
    moving = lambda t: np.array([0.4, -0.2 + 0.01 * t, 0.2])  # noqa: E731 - never stuck
    rule = InterventionRule(InterventionConfig(takeover_steps=2, stuck_window=50), LOW, HIGH)
    flags = [rule.step(moving(t), None, np.zeros(4), None, "pressing beside the hole" if t == 3 else None)
             for t in range(8)]
    assert np.flatnonzero(flags).tolist() == [3, 4] and rule.last_trigger == TRIGGER_HAZARD
    assert rule.episode_takeovers == {TRIGGER_HAZARD: 1}
    watching = ScriptedSupervisor(InterventionConfig(takeover_steps=2, stuck_window=50, watch_hazards=True), LOW,
                                  HIGH, **SCALE)
    blind = ScriptedSupervisor(InterventionConfig(takeover_steps=2, stuck_window=50), LOW, HIGH, **SCALE)
    for supervisor, expected in ((watching, [False, True, True, False]), (blind, [False] * 4)):
        engaged = []
        for t, hazard in enumerate(["", "pressing beside the hole", "", ""]):
            supervisor.on_hazard(hazard)
            engaged.append(supervisor.step(moving(t)))
        assert engaged == expected
    watching.on_hazard("pressing beside the hole")
    watching.reset()  # a new episode: a hazard of the last one's step is gone
    assert watching.step(moving(0)) is False


def test_inferred_push_from_commanded_targets():
    np.testing.assert_allclose(inferred_push(None, [0.5, 0.0, 0.2], LOW, HIGH, 0.03), 0.0)
    np.testing.assert_allclose(inferred_push([0.5, 0.0, 0.2], [0.515, -0.03, 0.2], LOW, HIGH, 0.03), [0.5, -1, 0])
    # On a face (the actor's safety layer clipped the target there): a full push out, whatever the step was.
    np.testing.assert_allclose(inferred_push(HIGH, HIGH, LOW, HIGH, 0.03), [1, 1, 1])
    np.testing.assert_allclose(inferred_push([0.5, 0.0, 0.2], [0.5, 0.0, LOW[2]], LOW, HIGH, 0.03), [0, 0, -1])


def test_scripted_supervisor_engages_with_the_expert_action():
    config = InterventionConfig(takeover_steps=2, episode_budget=3, stuck_window=3, boundary_steps=2)
    supervisor = ScriptedSupervisor(config, LOW, HIGH, **SCALE)
    linear, angular, opening = supervisor.command()
    assert opening is None and not linear.any() and not angular.any()
    expert = np.array([0.5, -0.25, 1.0, 0.6])
    supervisor.on_expert_action(expert)
    tcp = np.array([0.5, 0.0, 0.2])
    assert [supervisor.step(tcp) for _ in range(6)] == [False, False, True, True, False, True]
    linear, angular, opening = supervisor.command()
    expected = action_to_twist(expert, control_dt=0.1, max_translation=0.03, max_rotation=0.15)
    np.testing.assert_allclose(linear, expected[0])
    assert opening == pytest.approx(expected[2]) == pytest.approx(0.2)
    assert supervisor.step(tcp) is False  # episode budget of 3 spent
    supervisor.reset()
    assert not supervisor.engaged
    # Pushing out over ROS: the commanded target stays on the +x face (clipped) while the TCP keeps moving.
    for t in range(4):
        supervisor.on_target([HIGH[0], 0.0, 0.2])
        engaged = supervisor.step(np.array([0.5, 0.01 * t, 0.2]))
        assert engaged == (t >= 1), t
    assert supervisor.rule.last_trigger == TRIGGER_PUSHING_OUT
    with pytest.raises(ValueError, match="4 or 7"):
        supervisor.on_expert_action([1.0, 2.0])


def test_scripted_supervisor_takes_over_when_the_commanded_motion_disagrees_with_the_expert():
    config = InterventionConfig(takeover_steps=2, stuck_window=50, disagreement=0.5, disagreement_steps=2)
    supervisor = ScriptedSupervisor(config, LOW, HIGH, **SCALE)
    supervisor.on_expert_action([0.0, 1.0, 0.0, -1.0])  # the expert would move +y at full speed
    engaged = []
    for t in range(5):  # the actor's targets step -y by 15 mm (push -0.5): 1.5 away from the expert's
        supervisor.on_target([0.5, -0.015 * t, 0.2])
        engaged.append(supervisor.step(np.array([0.5, -0.015 * t, 0.2])))
    # Step 0 reads as no push (1.0 away), step 1 as -0.5: two disagreeing steps trigger a takeover of two steps (1,
    # 2); the evidence restarts at the trigger, and steps 2 and 3 disagree again.
    assert engaged == [False, True, True, True, True] and supervisor.rule.last_trigger == TRIGGER_DISAGREES
    supervisor.reset()
    supervisor.on_expert_action([0.0, -0.4, 0.0, -1.0])  # now the expert agrees with the actor's motion
    for t in range(5):
        supervisor.on_target([0.5, -0.015 * t, 0.2])
        assert not supervisor.step(np.array([0.5, -0.015 * t, 0.2]))


def test_node_parameter_tables_match_the_configs():
    """Each teleop node declares exactly its config's fields, with the config's defaults (0: the task env's)."""
    import dataclasses

    from robot_rl.drivers.teleop_node import PARAMETERS as TELEOP_PARAMETERS
    from robot_rl.sim.scripted_teleop import ENV_DEFAULT, PARAMETERS as SCRIPTED_PARAMETERS

    teleop = {name: default for name, default, _ in TELEOP_PARAMETERS}
    assert teleop == dataclasses.asdict(TeleopConfig())
    scripted = {name: default for name, default, _ in SCRIPTED_PARAMETERS if name != "robot"}  # node only (topics)
    from_env = {"max_translation", "max_rotation", "control_dt"}
    config = dataclasses.asdict(ScriptedTeleopConfig())
    assert scripted.keys() == config.keys()
    assert {k: v for k, v in scripted.items() if k not in from_env} == {k: v for k, v in config.items()
                                                                         if k not in from_env}
    assert all(scripted[name] == ENV_DEFAULT for name in from_env)
    for table in (TELEOP_PARAMETERS, SCRIPTED_PARAMETERS):
        assert all(isinstance(description, str) and description for _, _, description in table)
