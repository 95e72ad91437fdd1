"""Safety layer: >= 10^6 fuzzed and adversarial commands never leave the limits; watchdog, e-stop, the sim env driven
through an actor session."""

import numpy as np
import pytest

from robot_rl.actor.safety import SafeCommand, Safety, SafetyConfig

SLACK = 1e-9  # relative: float rounding of `current + step`
CONFIG_7D = SafetyConfig(action_dim=7)
NOMINAL = np.array(CONFIG_7D.nominal_quat)


# ----- independent numpy reference math for the checks ---------------------------------------------------------
def quat_multiply(a, b):
    aw, ax, ay, az = np.moveaxis(a, -1, 0)
    bw, bx, by, bz = np.moveaxis(b, -1, 0)
    return np.stack([aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw], axis=-1)


def conjugate(q):
    return q * np.array([1.0, -1.0, -1.0, -1.0])


def rotvec(q):
    q = np.where(q[..., :1] < 0, -q, q)
    sine = np.linalg.norm(q[..., 1:], axis=-1, keepdims=True)
    angle = 2 * np.arctan2(sine, q[..., :1])
    return q[..., 1:] * np.where(sine > 1e-12, angle / np.maximum(sine, 1e-300), 2.0)


def from_rotvec(r):
    angle = np.linalg.norm(r, axis=-1, keepdims=True)
    scale = np.where(angle > 1e-12, np.sin(angle / 2) / np.maximum(angle, 1e-300), 0.5)
    return np.concatenate([np.cos(angle / 2), r * scale], axis=-1)


def random_targets(rng, count, config):
    """Current targets inside the limits, a quarter of them pinned to faces of the box / orientation box."""
    low, high = np.array(config.workspace_low), np.array(config.workspace_high)
    rlow, rhigh = np.array(config.rotation_low), np.array(config.rotation_high)
    positions = rng.uniform(low, high, (count, 3))
    rotvecs = rng.uniform(rlow, rhigh, (count, 3))
    pinned = rng.random((count, 3)) < 0.25
    positions = np.where(pinned, np.where(rng.random((count, 3)) < 0.5, low, high), positions)
    rotvecs = np.where(pinned, np.where(rng.random((count, 3)) < 0.5, rlow, rhigh), rotvecs)
    return positions, quat_multiply(from_rotvec(rotvecs), NOMINAL)


def adversarial_actions(rng, count, dim):
    """Uniform, huge, +-inf, NaN, denormal, just-outside-1, alternating-extreme values, mixed per component."""
    actions = rng.uniform(-1, 1, (count, dim))
    specials = np.array([np.nan, np.inf, -np.inf, 1e308, -1e308, 1e30, -1e30, 5e-324, -5e-324, 2.2e-308,
                         np.nextafter(1.0, 2.0), np.nextafter(-1.0, -2.0), 1.0 + 1e-7, -1.0 - 1e-7, 1.5, -1.5,
                         1.0, -1.0, 0.0, -0.0])
    kind = rng.integers(0, 4, count)
    replace = (rng.random((count, dim)) < 0.3) & (kind == 1)[:, None]
    actions = np.where(replace, rng.choice(specials, (count, dim)), actions)
    corners = rng.choice([-1.0, 1.0], (count, dim)) * rng.choice([1.0, 1.0 + 1e-7, 10.0, 1e300], (count, 1))
    actions = np.where((kind == 2)[:, None], corners, actions)
    alternating = np.where(np.arange(count)[:, None] % 2 == 0, 1.0, -1.0) * np.ones((1, dim))
    actions = np.where((kind == 3)[:, None], alternating * rng.choice([1.0, 1e9], (count, 1)), actions)
    return actions


def assert_safe(batch, positions, quats, grippers, config):
    """Every command: finite, in the box, in the orientation limits, within one step, gripper in range."""
    out_p, out_q, out_g = batch.target_positions, batch.target_quats, batch.grippers
    assert np.isfinite(out_p).all() and np.isfinite(out_q).all() and np.isfinite(out_g).all()
    assert np.all(out_p >= np.array(config.workspace_low)) and np.all(out_p <= np.array(config.workspace_high))
    np.testing.assert_allclose(np.linalg.norm(out_q, axis=1), 1.0, atol=1e-9)
    orientation = rotvec(quat_multiply(out_q, conjugate(np.array(config.nominal_quat))))
    assert np.all(orientation >= np.array(config.rotation_low) - 1e-9)
    assert np.all(orientation <= np.array(config.rotation_high) + 1e-9)
    translation = out_p - positions
    rotation = rotvec(quat_multiply(out_q, conjugate(quats)))
    if config.step_bound == "per_axis":
        translation_size, rotation_size = np.abs(translation).max(axis=1), np.abs(rotation).max(axis=1)
    else:
        translation_size, rotation_size = np.linalg.norm(translation, axis=1), np.linalg.norm(rotation, axis=1)
    assert translation_size.max() <= config.max_translation * (1 + SLACK) + 1e-15
    assert rotation_size.max() <= config.max_rotation * (1 + SLACK) + 1e-12
    assert np.all(out_g >= config.gripper_low) and np.all(out_g <= config.gripper_high)
    held = batch.held
    np.testing.assert_array_equal(out_p[held], positions[held])
    np.testing.assert_array_equal(out_q[held], quats[held])
    np.testing.assert_array_equal(out_g[held], grippers[held])


# ----- fuzzing --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("config", [
    CONFIG_7D,
    SafetyConfig(action_dim=7, step_bound="norm", gripper_low=-0.5, gripper_high=0.8, max_rotation=0.3,
                 initial_gripper=0.0),
    SafetyConfig(action_dim=4),
], ids=["7d-per-axis", "7d-norm", "4d"])
def test_fuzzed_actions_never_leave_the_limits(config):
    rng = np.random.default_rng(0)
    safety = Safety(config)
    total = 0
    for _ in range(2):
        count = 200_000
        positions, quats = random_targets(rng, count, config)
        grippers = rng.uniform(config.gripper_low, config.gripper_high, count)
        actions = adversarial_actions(rng, count, config.action_dim)
        batch = safety.filter_batch(actions, positions, quats, current_grippers=grippers)
        assert_safe(batch, positions, quats, grippers, config)
        np.testing.assert_array_equal(batch.held, ~np.isfinite(actions).all(axis=1))
        total += count
    assert safety.counters["commands"] == total
    assert safety.counters["non_finite_action"] == safety.counters["held"] > 0
    assert safety.counters["workspace_clipped"] > 0 and safety.counters["action_clipped"] > 0
    if config.action_dim == 7:
        assert safety.counters["orientation_clipped"] > 0 and safety.counters["rotation_step_limited"] > 0


def test_fuzzed_absolute_commands_never_leave_the_limits():
    rng = np.random.default_rng(1)
    safety = Safety(CONFIG_7D)
    count = 200_000
    positions, quats = random_targets(rng, count, CONFIG_7D)
    grippers = np.zeros(count)
    targets = positions + rng.normal(0, 0.3, (count, 3)) * rng.choice([0.01, 1.0, 1e6], (count, 1))
    target_quats = rng.normal(size=(count, 4)) * rng.choice([1.0, 1e-300, 1e300], (count, 1))
    target_quats[rng.random(count) < 0.01] = 0.0
    target_grippers = rng.normal(0, 3, count)
    for array in (targets, target_quats):
        array[rng.random(array.shape) < 0.01] = np.nan
    target_grippers[rng.random(count) < 0.01] = -np.inf
    batch = safety.filter_absolute_batch(targets, target_quats, target_grippers, positions, quats,
                                         current_grippers=grippers)
    assert_safe(batch, positions, quats, grippers, CONFIG_7D)
    assert batch.reasons["non_finite_command"].any() and batch.reasons["invalid_quaternion"].any()
    assert batch.reasons["translation_step_limited"].any() and batch.reasons["rotation_step_limited"].any()


def test_long_rollouts_with_evolving_targets_stay_safe():
    """512 lanes x 200 steps = 102400 sequential steps, each starting from the previous safe target."""
    rng = np.random.default_rng(2)
    safety = Safety(CONFIG_7D)
    lanes = 512
    positions, quats = random_targets(rng, lanes, CONFIG_7D)
    grippers = np.full(lanes, -1.0)
    bias = rng.choice([-1.0, 1.0], (lanes, 7)) * 3.0  # drive each lane into a corner, with noise and NaN bursts
    for step in range(200):
        actions = bias * (1 if step % 50 < 40 else -1) + adversarial_actions(rng, lanes, 7)
        batch = safety.filter_batch(actions, positions, quats, current_grippers=grippers)
        assert_safe(batch, positions, quats, grippers, CONFIG_7D)
        positions, quats, grippers = batch.target_positions, batch.target_quats, batch.grippers
    assert safety.counters["commands"] == lanes * 200


def test_per_call_filter_matches_the_batch_path():
    rng = np.random.default_rng(3)
    for config in (CONFIG_7D, SafetyConfig(action_dim=7, step_bound="norm")):
        single, batched = Safety(config), Safety(config)
        position, quat = random_targets(rng, 1, config)
        position, quat, gripper = position[0], quat[0], 0.0
        actions = adversarial_actions(rng, 500, 7) + rng.choice([0.0, 3.0, -3.0], (500, 7))
        for action in actions:
            command = single.filter(action, position, quat, current_gripper=gripper)
            batch = batched.filter_batch(action[None], position, quat, current_grippers=gripper)
            np.testing.assert_allclose(command.target_position, batch.target_positions[0], rtol=0, atol=1e-12)
            np.testing.assert_allclose(command.target_quat, batch.target_quats[0], rtol=0, atol=1e-9)
            assert command.gripper == batch.grippers[0] and command.held == batch.held[0]
            assert set(command.reasons) == set(batch.reasons)
            position, quat, gripper = command.target_position, command.target_quat, command.gripper
        assert single.counters == batched.counters


# ----- unit behaviour -------------------------------------------------------------------------------------------
POSITION, QUAT = np.array([0.5, 0.0, 0.2]), NOMINAL.copy()


def test_stale_or_missing_sensor_holds_and_names_it():
    safety = Safety(SafetyConfig(required_sensors=("images/front", "state")))
    action = np.array([1.0, 1.0, 1.0, 1.0])
    fresh = safety.filter(action, POSITION, QUAT, 10.0, {"images/front": 9.85, "state": 9.95})
    assert not fresh.held and fresh.reasons == ()
    stale = safety.filter(action, POSITION, QUAT, 10.0, {"images/front": 9.7, "state": 9.95})
    assert stale.held and stale.reasons == ("stale:images/front",)
    missing = safety.filter(action, POSITION, QUAT, 10.0, {"images/front": 9.95})
    assert missing.held and missing.reasons == ("stale:state",)
    future = safety.filter(action, POSITION, QUAT, 10.0, {"images/front": 11.0, "state": float("nan")})
    assert future.reasons == ("stale:images/front", "stale:state")
    assert safety.counters["stale:images/front"] == 2 and safety.counters["held"] == 3
    with pytest.raises(ValueError, match="now"):
        safety.filter(action, POSITION, QUAT)


def test_held_command_repeats_the_previous_target_and_gripper_exactly():
    safety = Safety(CONFIG_7D)
    quat = quat_multiply(from_rotvec(np.array([0.1, -0.05, 0.3])), NOMINAL)
    moved = safety.filter(np.full(7, 0.5), POSITION, quat)
    for bad in (np.nan, np.inf, -np.inf):
        action = np.full(7, 0.5)
        action[2] = bad
        held = safety.filter(action, moved.target_position, moved.target_quat)
        assert held.held and held.reasons == ("non_finite_action",)
        np.testing.assert_array_equal(held.target_position, moved.target_position)
        np.testing.assert_array_equal(held.target_quat, moved.target_quat)
        assert held.gripper == moved.gripper == 0.5
    assert safety.filter(np.full(7, np.nan), POSITION, QUAT, current_gripper=0.25).gripper == 0.25


def test_estop_latches_until_cleared():
    safety = Safety()
    safety.engage_estop("operator button")
    for _ in range(3):
        command = safety.filter(np.array([1.0, 0.0, 0.0, 1.0]), POSITION, QUAT)
        assert command.held and command.reasons == ("estop:operator button",)
        np.testing.assert_array_equal(command.target_position, POSITION)
    assert safety.filter_absolute(POSITION + 0.01, QUAT, 0.0, POSITION, QUAT).held
    safety.clear_estop()
    command = safety.filter(np.array([1.0, 0.0, 0.0, 1.0]), POSITION, QUAT)
    assert not command.held
    np.testing.assert_allclose(command.target_position, POSITION + [0.03, 0, 0])
    assert safety.counters["estop:operator button"] == 4


def test_wrong_shapes_raise():
    safety = Safety()
    for action in (np.zeros(7), np.zeros((1, 4)), np.zeros(3), 0.0):
        with pytest.raises(ValueError, match="shape"):
            safety.filter(action, POSITION, QUAT)
    with pytest.raises(ValueError, match="shape"):
        safety.filter_batch(np.zeros((5, 7)), POSITION, QUAT)
    with pytest.raises(ValueError, match="current target"):
        safety.filter(np.zeros(4), [np.nan, 0, 0], QUAT)
    with pytest.raises(ValueError, match="unit quaternion"):
        safety.filter(np.zeros(4), POSITION, [0, 0, 0, 0])


def test_clipping_reasons_and_workspace():
    safety = Safety(CONFIG_7D)
    corner = np.array(CONFIG_7D.workspace_high)
    command = safety.filter(np.array([5.0, 1, 1, 0, 0, 0, 2.0]), corner, QUAT)
    np.testing.assert_array_equal(command.target_position, corner)
    assert set(command.reasons) == {"action_clipped", "workspace_clipped"} and command.gripper == 1.0
    tilted = quat_multiply(from_rotvec(np.array([0.3, 0.0, 0.0])), NOMINAL)
    command = safety.filter(np.array([0, 0, 0, 1.0, 0, 0, 0]), POSITION, tilted)
    assert "orientation_clipped" in command.reasons
    np.testing.assert_allclose(rotvec(quat_multiply(command.target_quat, conjugate(NOMINAL))), [0.3, 0, 0], atol=1e-9)


def test_absolute_commands_are_step_limited_and_boxed():
    safety = Safety(SafetyConfig(action_dim=7, step_bound="norm"))
    far = safety.filter_absolute([2.0, 2.0, 2.0], QUAT, 0.3, POSITION, QUAT)
    assert set(far.reasons) >= {"workspace_clipped", "translation_step_limited"}
    assert np.linalg.norm(far.target_position - POSITION) <= 0.03 * (1 + SLACK)
    turned = safety.filter_absolute(POSITION, quat_multiply(from_rotvec(np.array([0, 0, 0.7])), NOMINAL), 0.3,
                                    POSITION, QUAT)
    assert "rotation_step_limited" in turned.reasons
    assert np.linalg.norm(rotvec(quat_multiply(turned.target_quat, conjugate(QUAT)))) <= 0.15 * (1 + SLACK)
    assert safety.filter_absolute(POSITION, [0, 0, 0, 0], 0.0, POSITION, QUAT).reasons == ("invalid_quaternion",)
    huge = safety.filter_absolute(POSITION, QUAT * 1e300, 0.0, POSITION, QUAT)
    assert not huge.held and huge.reasons == ()
    np.testing.assert_allclose(huge.target_quat, QUAT, atol=1e-12)
    assert safety.filter_absolute([np.nan, 0, 0], QUAT, 0.0, POSITION, QUAT).reasons == ("non_finite_command",)


def test_a_target_outside_the_box_is_brought_back_one_step_at_a_time():
    safety = Safety()
    outside = np.array([0.9, 0.0, 0.2])
    command = safety.filter(np.zeros(4), outside, QUAT)
    np.testing.assert_allclose(command.target_position, [0.87, 0.0, 0.2])
    assert "outside_workspace" in command.reasons


@pytest.mark.parametrize("kwargs,message", [
    ({"workspace_low": (1, 0, 0)}, "below"), ({"rotation_high": (3, 3, 3)}, "pi"), ({"step_bound": "x"}, "step_bound"),
    ({"gripper_low": -2.0}, "gripper"), ({"action_dim": 6}, "action_dim"),
    ({"max_translation": float("nan")}, "finite"),
    ({"nominal_quat": (1, 1, 0, 0)}, "unit"), ({"workspace_low": (0, 0)}, "3 finite"),
])
def test_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SafetyConfig(**kwargs)


def test_repeated_calls_give_the_same_command_and_are_counted():
    """Same inputs, same command: no hidden state but the counters (cost per call: bench/safety.py)."""
    safety = Safety(SafetyConfig(action_dim=7, required_sensors=("images/front", "state")))
    action, stamps = np.array([0.3, -0.2, 0.1, 0.05, -0.1, 0.2, 0.5]), {"images/front": 0.99, "state": 0.99}
    first = safety.filter(action, POSITION, QUAT, 1.0, stamps)
    assert isinstance(first, SafeCommand) and not first.held and first.reasons == ()
    for _ in range(200):
        again = safety.filter(action, POSITION, QUAT, 1.0, stamps)
        np.testing.assert_array_equal(again.target_position, first.target_position)
        np.testing.assert_array_equal(again.target_quat, first.target_quat)
        assert (again.gripper, again.held, again.reasons) == (first.gripper, first.held, first.reasons)
    assert safety.counters["commands"] == 201 and safety.counters["held"] == 0


# ----- the sim env through an actor session --------------------------------------------------------------------
@pytest.mark.parametrize("control_rotation", [False, True], ids=["4d", "7d"])
def test_the_sim_driven_through_an_actor_session_survives_nan_and_keeps_the_tcp_in_the_box(control_rotation):
    """What the in-process tools do (robot_rl.sim.robot_adapter): every action goes through the session's safety
    layer to the sim env as a safe command."""
    from robot_rl.actor.session import ActorSession
    from robot_rl.sim.loop import make_env
    from robot_rl.sim.robot_adapter import SimRobotAdapter

    adapter = SimRobotAdapter(make_env("PickCube-v0", control_rotation=control_rotation))
    safety = Safety(adapter.safety_config(required_sensors=("state",)))
    session = ActorSession(safety, "test/safety", max_episode_steps=adapter.max_episode_steps)
    base = adapter.env.unwrapped

    def start(seed=None):
        started = adapter.reset(seed=seed)
        session.start_episode(started.tcp_position, started.tcp_quat, started.gripper)
        return started.observation

    def execute(obs, action, sensor_age=0.0):
        command = session.step(obs, now=10.0, sensor_stamps={"state": 10.0 - sensor_age}, human_action=action).command
        return command, adapter.execute(command)

    obs = start(seed=0)
    rng = np.random.default_rng(0)
    dim = adapter.env.action_space.shape[0]
    actions = adversarial_actions(rng, 60, dim) + rng.choice([0.0, 4.0, -4.0], (60, dim))
    for action in actions:
        target_before, gripper_before = base.target_pose(), base.gripper_command
        with np.errstate(over="ignore"):  # 1e300 -> inf in float32: held like any non-finite action
            action = action.astype(np.float32)
        command, executed = execute(obs, action)
        assert not executed.info["action_rejected"]  # nothing non-finite reached the env
        if not np.isfinite(action).all():
            assert command.held and command.reasons == ("non_finite_action",)
            np.testing.assert_allclose(base.target_pose()[0], target_before[0], atol=1e-9)
            assert base.gripper_command == pytest.approx(gripper_before)
        position = base.tcp_pose()[0]
        assert np.all(position >= base.workspace_low - 0.02) and np.all(position <= base.workspace_high + 0.02)
        assert np.isfinite(executed.observation["state"]).all()
        obs = start() if executed.terminated or executed.truncated else executed.observation
    target_before = base.target_pose()[0]
    command, executed = execute(obs, np.ones(dim, dtype=np.float32), sensor_age=1.0)  # the proprioception went silent
    assert command.held and command.reasons == ("stale:state",)
    np.testing.assert_allclose(base.target_pose()[0], target_before, atol=1e-9)
    safety.engage_estop("test")
    assert execute(executed.observation, np.ones(dim, dtype=np.float32))[0].reasons == ("estop:test",)
    safety.clear_estop()
    assert not execute(executed.observation, np.ones(dim, dtype=np.float32))[0].held
    adapter.close()


def test_a_sim_runner_refuses_a_safety_layer_of_another_action_size():
    from robot_rl.sim.loop import make_env
    from robot_rl.sim.robot_adapter import SimLink, SimRobotAdapter, sim_runner

    env = make_env("PickCube-v0")
    with pytest.raises(ValueError, match="7-d actions"):
        sim_runner(SimLink(SimRobotAdapter(env), [0]), None, safety=Safety(CONFIG_7D))
    env.close()
