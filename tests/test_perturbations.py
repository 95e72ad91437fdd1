"""Each perturbation of a validation suite models its real cause (sim/perturb.py), checked as a property of random
command sequences sent the way validation sends them (absolute safe commands through `SimRobotAdapter` and `SimLink`),
against the same commands without the perturbation:

- action latency of k steps: the target (pose and gripper) executed at step t is the one commanded at t - k, and
  nothing before k (a real arm lags; it does not overshoot);
- sensor delay of k steps: the observation at t is the one of t - k, stamped when it was read;
- frame drops: a dropped frame repeats the camera's last frame with that frame's stamp; proprioception stays fresh;
- control-rate jitter: each period lasts 80-120 % of nominal, the frames' stamps follow it, and the commanded targets
  are the nominal ones;
- proprioceptive noise: only the state reading changes, by about the asked standard deviation;

and training's randomisation (`robot-rl train --randomize SUITE`) draws one condition per episode from its seed.
"""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from robot_rl.sim.loop import make_env  # noqa: E402
from robot_rl.actor.safety import SafeCommand, Safety  # noqa: E402
from robot_rl.sim.perturb import Condition, PerturbedEnv, RandomizedEnv  # noqa: E402
from robot_rl.sim.robot_adapter import SimLink, SimRobotAdapter  # noqa: E402

SEED = 5
STEPS = 12


def condition(*perturbations) -> Condition:
    return Condition.from_dict({"name": "property", "perturbations": list(perturbations)}, "test")


def commands(env, rng: np.random.Generator, count: int) -> list[SafeCommand]:
    """Random absolute commands, each reachable in one step from the one before (made by the env's own rule)."""
    base = env.unwrapped
    position, quat = base.target_pose()
    out = []
    for _ in range(count):
        action = rng.uniform(-1, 1, base.action_space.shape[0])
        position, quat = base.action_target(action, position, quat)
        out.append(SafeCommand(position, quat, float(action[-1]), False, ()))
    return out


def play(env, sequence: list[SafeCommand]) -> dict[str, list]:
    """Reset with SEED, execute `sequence`: the controller target, gripper command, observation, sensor stamps and
    link stamp after each step (index 0: after the reset)."""
    adapter = SimRobotAdapter(env)
    link = SimLink(adapter, [SEED])
    start = link.call()
    base = env.unwrapped
    seen = {"position": [start.tcp_position], "quat": [start.tcp_quat], "gripper": [start.gripper],
            "observation": [start.observation], "stamps": [link.sensor_stamps()], "stamp": [link.now()]}
    for command in sequence:
        link.send(command, None)
        position, quat = base.target_pose()
        for key, value in (("position", position), ("quat", quat), ("gripper", base.gripper_command),
                           ("observation", link.observation(link.now())[0]), ("stamps", link.sensor_stamps()),
                           ("stamp", link.now())):
            seen[key].append(value)
    return seen


@pytest.mark.parametrize("rotation", [False, True], ids=["xyz", "pose"])
@pytest.mark.parametrize("steps", [1, 3])
def test_action_latency_executes_the_command_of_k_steps_before(rotation, steps):
    env = make_env("PickCube-v0", obs_mode="state", control_rotation=rotation)
    try:
        env.reset(seed=SEED)
        sequence = commands(env, np.random.default_rng(steps), STEPS)
        nominal = play(PerturbedEnv(env, condition()), sequence)
        late = play(PerturbedEnv(env, condition({"type": "action_latency", "steps": steps})), sequence)
    finally:
        env.close()
    for t in range(1, STEPS + 1):
        np.testing.assert_allclose(nominal["position"][t], sequence[t - 1].target_position, atol=1e-6)
        source = max(t - steps, 0)  # before the first command arrives, the start target and gripper hold
        np.testing.assert_allclose(late["position"][t], nominal["position"][source], atol=1e-6, err_msg=f"step {t}")
        np.testing.assert_allclose(late["quat"][t], nominal["quat"][source], atol=1e-6, err_msg=f"step {t}")
        assert late["gripper"][t] == pytest.approx(nominal["gripper"][source], abs=1e-6), t


def test_one_step_of_latency_lags_a_move_and_holds_where_it_ends():
    """2 cm a step for 4 steps, then holding 8 cm away: one step of latency delays the move, no more."""
    env = make_env("PickCube-v0", obs_mode="state")
    try:
        env.reset(seed=SEED)
        position, quat = env.unwrapped.target_pose()
        targets = [position - [0, 0, 0.02 * min(i, 4)] for i in range(1, 9)]  # down: room for 8 cm
        sequence = [SafeCommand(p, quat, -1.0, False, ()) for p in targets]
        rises = {}
        for steps in (0, 1):
            seen = play(PerturbedEnv(env, condition({"type": "action_latency", "steps": steps})), sequence)
            rises[steps] = [round(float(seen["position"][0][2] - p[2]) * 100, 3) for p in seen["position"][1:]]
    finally:
        env.close()
    assert rises[0] == [2, 4, 6, 8, 8, 8, 8, 8]
    assert rises[1] == [0, 2, 4, 6, 8, 8, 8, 8]


@pytest.fixture(scope="module")
def pixel_env():
    env = make_env("PickCube-v0", obs_mode="pixels", image_size=32)
    yield env
    env.close()


@pytest.fixture(scope="module")
def pixel_commands(pixel_env):
    pixel_env.reset(seed=SEED)
    return commands(pixel_env, np.random.default_rng(0), STEPS)


@pytest.fixture(scope="module")
def pixel_nominal(pixel_env, pixel_commands):
    return play(PerturbedEnv(pixel_env, condition()), pixel_commands)


def test_sensor_delay_delivers_the_observation_of_k_steps_before_with_its_stamp(pixel_env, pixel_commands,
                                                                                 pixel_nominal):
    delayed = play(PerturbedEnv(pixel_env, condition({"type": "sensor_delay", "steps": 2})), pixel_commands)
    dt = pixel_env.unwrapped.control_dt
    for t in range(STEPS + 1):
        source = max(t - 2, 0)
        for key, value in pixel_nominal["observation"][source].items():
            np.testing.assert_array_equal(delayed["observation"][t][key], value, err_msg=f"{key} at step {t}")
        # stamped when it was read: the link's stamp of step t - 2 (the reset's frame for the first two)
        for name in ("state", "images/front", "camera/wrist", "tcp_pose"):
            assert delayed["stamps"][t][name] == pytest.approx(delayed["stamp"][source], abs=1e-6), (name, t)
    # the commands, and so the targets, are the nominal ones: only what the policy sees is late
    np.testing.assert_allclose(delayed["position"], pixel_nominal["position"], atol=1e-9)
    assert delayed["stamp"][-1] == pytest.approx(STEPS * dt, abs=1e-6)


def test_a_dropped_frame_repeats_the_last_one_with_its_old_stamp(pixel_env, pixel_commands, pixel_nominal):
    dropped = play(PerturbedEnv(pixel_env, condition({"type": "frame_drops", "probability": 0.5})), pixel_commands)
    repeats = 0
    for t in range(1, STEPS + 1):
        np.testing.assert_array_equal(dropped["observation"][t]["state"], pixel_nominal["observation"][t]["state"])
        assert dropped["stamps"][t]["tcp_pose"] == pytest.approx(dropped["stamp"][t], abs=1e-9)
        for camera in ("front", "wrist"):
            key, frame = f"images/{camera}", dropped["observation"][t][f"images/{camera}"]
            if dropped["stamps"][t][key] == pytest.approx(dropped["stamp"][t], abs=1e-9):  # fresh
                np.testing.assert_array_equal(frame, pixel_nominal["observation"][t][key])
            else:  # the previous frame again, with the previous frame's stamp
                repeats += 1
                np.testing.assert_array_equal(frame, dropped["observation"][t - 1][key])
                assert dropped["stamps"][t][key] == pytest.approx(dropped["stamps"][t - 1][key], abs=1e-9)
                assert dropped["stamps"][t][f"camera/{camera}"] == dropped["stamps"][t][key]
    assert 4 <= repeats <= 20  # of 24 frames at p = 0.5 (seeded: the same every run)


def test_rate_jitter_changes_the_period_and_the_stamps_and_nothing_else(pixel_env, pixel_commands, pixel_nominal):
    jittered = play(PerturbedEnv(pixel_env, condition({"type": "control_rate_jitter", "fraction": 0.2})),
                    pixel_commands)
    dt = pixel_env.unwrapped.control_dt
    periods = np.diff(jittered["stamp"])
    assert periods.min() >= 0.8 * dt - 1e-9 and periods.max() <= 1.2 * dt + 1e-9 and periods.std() > 0.02 * dt
    np.testing.assert_allclose(jittered["position"], pixel_nominal["position"], atol=1e-9)
    np.testing.assert_allclose(jittered["quat"], pixel_nominal["quat"], atol=1e-9)
    assert jittered["gripper"] == pixel_nominal["gripper"]
    for t in range(STEPS + 1):
        assert set(jittered["stamps"][t].values()) == {jittered["stamp"][t]}  # every reading fresh at its frame


def test_proprio_noise_changes_only_the_state_by_about_its_std(pixel_env, pixel_commands, pixel_nominal):
    noisy = play(PerturbedEnv(pixel_env, condition({"type": "proprio_noise", "position_m": 0.01})), pixel_commands)
    errors = []
    for t in range(STEPS + 1):
        for key in ("images/front", "images/wrist"):
            np.testing.assert_array_equal(noisy["observation"][t][key], pixel_nominal["observation"][t][key])
        true, seen = pixel_nominal["observation"][t]["state"], noisy["observation"][t]["state"]
        errors.extend(seen[:3] - true[:3])
        np.testing.assert_array_equal(seen[3:], true[3:])  # only position noise was asked for
    assert 0.005 < np.std(errors) < 0.02 and abs(np.mean(errors)) < 0.006  # 39 draws of std 0.01
    np.testing.assert_allclose(noisy["position"], pixel_nominal["position"], atol=1e-9)


def test_a_reading_older_than_the_robots_limit_holds_the_command(pixel_env, pixel_commands):
    """With the sensors watched as on a robot (validation does), three steps of delay exceed a two-period limit."""
    env = PerturbedEnv(pixel_env, condition({"type": "sensor_delay", "steps": 3}))
    link = SimLink(SimRobotAdapter(env), [SEED])
    link.call()
    safety = Safety(SimRobotAdapter(env).safety_config(required_sensors=("tcp_pose", "camera/front")))
    reasons = []
    for command in pixel_commands[:5]:
        link.send(command, None)
        reasons.append(safety.hold_reasons(link.now(), link.sensor_stamps()))
    assert reasons[0] == ()  # one period old: within the limit (two periods is the limit itself)
    assert all(set(r) == {"stale:tcp_pose", "stale:camera/front"} for r in reasons[2:]), reasons  # three periods


def test_randomisation_draws_one_condition_per_episode_from_its_seed():
    conditions = [condition(), Condition.from_dict({"name": "late", "perturbations": [
        {"type": "action_latency", "steps": 1}]}, "test"), Condition.from_dict({"name": "dark", "perturbations": [
            {"type": "lighting", "brightness": [0.5, 0.5]}]}, "test")]
    env = make_env("PickCube-v0", obs_mode="state")
    try:
        randomized = RandomizedEnv(env, conditions, suite_seed=1)
        drawn = [randomized.reset(seed=seed)[1]["condition"] for seed in range(30)]
        again = RandomizedEnv(env, conditions, suite_seed=1)
        assert [again.reset(seed=seed)[1]["condition"] for seed in range(30)] == drawn  # a resume sees the same
        assert set(drawn) == {"property", "late", "dark"}
        seed = drawn.index("late")  # the latency episode: a command arrives one step late, through the adapter
        sequence = commands(env, np.random.default_rng(0), 4)
        link = SimLink(SimRobotAdapter(randomized), [seed])
        start = link.call()
        link.send(sequence[0], None)
        np.testing.assert_allclose(env.unwrapped.target_pose()[0], start.tcp_position, atol=1e-9)
        # the next episode restores the nominal model (the dark episode's lighting is gone when nominal is drawn)
        nominal_light = env.unwrapped.model.light_diffuse.copy()
        randomized.reset(seed=drawn.index("dark"))
        assert env.unwrapped.model.light_diffuse.sum() == pytest.approx(0.5 * nominal_light.sum())
        randomized.reset(seed=drawn.index("property"))
        np.testing.assert_array_equal(env.unwrapped.model.light_diffuse, nominal_light)
    finally:
        env.close()
