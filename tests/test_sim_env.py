"""API conformance of the MuJoCo tasks: spaces, obs keys per mode, determinism, images."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import robot_rl.sim  # noqa: F401  (registers the tasks)
from robot_rl.sim.env import STATE_LAYOUT, STATE_SIZE

TASKS = ["robot_rl/PickCube-v0", "robot_rl/PegInsert-v0"]


@pytest.mark.parametrize("task", TASKS)
def test_check_env_passes(task):
    env = gym.make(task)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


@pytest.mark.parametrize("task", TASKS)
def test_time_limit_is_registered(task):
    assert gym.spec(task).max_episode_steps is not None


@pytest.mark.parametrize(
    "obs_mode, keys",
    [
        ("state", {"state", "object_state"}),
        ("pixels", {"state", "images/front", "images/wrist"}),
        ("state+pixels", {"state", "object_state", "images/front", "images/wrist"}),
    ],
)
def test_obs_keys_per_mode(obs_mode, keys):
    env = gym.make("robot_rl/PickCube-v0", obs_mode=obs_mode, image_size=64)
    obs, info = env.reset(seed=0)
    assert set(obs) == keys == set(env.observation_space.spaces)
    assert env.observation_space.contains(obs)
    assert obs["state"].shape == (STATE_SIZE,) == (14,) and obs["state"].dtype == np.float32
    assert sum(size for _, size in STATE_LAYOUT) == STATE_SIZE
    assert info["success"] is False
    env.close()


def test_bad_obs_mode_names_value_and_choices():
    with pytest.raises(ValueError, match=r"'rgbd'.*state\+pixels"):
        gym.make("robot_rl/PickCube-v0", obs_mode="rgbd")


def test_action_space_shapes():
    assert gym.make("robot_rl/PickCube-v0").action_space.shape == (4,)
    env = gym.make("robot_rl/PegInsert-v0", control_rotation=True)
    assert env.action_space.shape == (7,)
    env.reset(seed=0)
    obs, *_ = env.step(np.zeros(7, dtype=np.float32))
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(4, dtype=np.float32))


@pytest.mark.parametrize("task", TASKS)
def test_seeded_determinism(task):
    def rollout(seed):
        env = gym.make(task)
        obs, _ = env.reset(seed=seed)
        rng = np.random.default_rng(123)
        trajectory = [obs["state"].copy(), obs["object_state"].copy()]
        for _ in range(8):
            obs, *_ = env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))
            trajectory += [obs["state"].copy(), obs["object_state"].copy()]
        env.close()
        return np.concatenate(trajectory)

    first, second, other = rollout(7), rollout(7), rollout(8)
    np.testing.assert_array_equal(first, second)
    assert not np.array_equal(first, other)


def test_images_shapes_dtypes_and_change_when_arm_moves():
    env = gym.make("robot_rl/PickCube-v0", obs_mode="pixels", image_size=96, render_mode="rgb_array")
    obs, _ = env.reset(seed=0)
    for camera in ("front", "wrist"):
        image = obs[f"images/{camera}"]
        assert image.shape == (96, 96, 3) and image.dtype == np.uint8
        assert image.std() > 5, f"{camera} image looks blank"
    before_front = obs["images/front"].astype(np.int32)
    before_wrist = obs["images/wrist"].astype(np.int32)
    for _ in range(4):
        obs, *_ = env.step(np.array([0.5, 0.5, -1.0, 1.0], dtype=np.float32))
    assert np.abs(obs["images/front"] - before_front).mean() > 0.5
    assert np.abs(obs["images/wrist"] - before_wrist).mean() > 0.5
    frame = env.render()
    assert frame.ndim == 3 and frame.shape[2] == 3 and frame.dtype == np.uint8
    env.close()


def test_peg_insert_wrist_lens_fills_the_image_with_the_socket():
    from robot_rl.sim.expert import make_expert

    env = gym.make("robot_rl/PegInsert-v0", obs_mode="pixels", image_size=64)
    base = env.unwrapped
    obs, _ = env.reset(seed=3)
    expert = make_expert(env)
    while base.peg_tip()[2] - base.hole_top()[2] > 0.015:  # the expert's approach, just above the hole
        obs, *_ = env.step(expert.act(obs))

    def socket_share(image):
        return float(((image[..., 1].astype(int) - np.maximum(image[..., 0], image[..., 2])) > 40).mean())

    task_lens = socket_share(obs["images/wrist"])
    base.model.cam_fovy[base._camera_ids["wrist"]] = 75.0  # the robot model's wide lens, as PickCube has it
    assert 75.0 != base.wrist_camera_fovy and gym.make("robot_rl/PickCube-v0").unwrapped.wrist_camera_fovy is None
    robot_lens = socket_share(base.camera_image("wrist", 64, 64))
    assert task_lens > 3 * robot_lens > 0, (task_lens, robot_lens)
    env.close()


def test_unwrapped_accessors():
    env = gym.make("robot_rl/PickCube-v0").unwrapped
    env.reset(seed=3)
    position, quat = env.tcp_pose()
    target_position, target_quat = env.target_pose()
    np.testing.assert_allclose(position, target_position, atol=2e-3)
    assert abs(np.linalg.norm(quat) - 1) < 1e-6
    assert env.control_dt == pytest.approx(0.1)
    assert np.all(env.workspace_low < env.workspace_high)
    cube_position, _ = env.object_pose("cube")
    np.testing.assert_allclose(cube_position, env.cube_pose()[0])
    with pytest.raises(KeyError):
        env.object_pose("nope")
    env.close()


def test_peg_insert_object_state_gives_the_tip_to_hole_offset_in_centimetres():
    """The millimetres that decide an insertion are whole tenths in a state policy's input, not thousandths."""
    env = gym.make("robot_rl/PegInsert-v0", obs_mode="state").unwrapped
    obs, _ = env.reset(seed=5)
    names = [name for name, _ in env.OBJECT_STATE_LAYOUT]
    assert names[-1] == "peg_tip_minus_hole_top_cm"
    offset_cm = obs["object_state"][-3:]
    np.testing.assert_allclose(offset_cm, 100 * (env.peg_tip() - env.hole_top()), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(obs["object_state"][7:10], env.hole_top(), atol=1e-6)  # positions stay in metres
    env.close()


@pytest.mark.parametrize("offset_mm, mode", [
    ((0.0, 0.0), None),  # within the play: it goes in
    ((-1.5, 0.0), "peg turned in the hand"),  # beside the hole across the pads' faces: the press pivots the peg
    ((0.0, 2.0), "on the rim, beside the hole"),  # along the fingers' closing axis: it jams upright
])
def test_peg_insert_failure_mode_names_what_a_press_at_the_mouth_did(offset_mm, mode):
    env = gym.make("robot_rl/PegInsert-v0", obs_mode="state").unwrapped
    env.reset(seed=1)
    env.data.mocap_pos[0, :2] = env.peg_tip()[:2] + [0.1, 0.0]  # the socket a hand's width away
    env.step(np.r_[0.0, 0.0, 0.0, 1.0])
    assert env.failure_mode() == "away from the socket"
    goal = env.hole_top() + [offset_mm[0] / 1000, offset_mm[1] / 1000, 0.006]

    def move(target_tip):
        for _ in range(10):
            env.step(np.r_[np.clip((target_tip - env.peg_tip()) / env.max_translation, -1, 1), 1.0])

    move(goal)
    assert env.failure_mode() == "above the socket"
    measures = env.task_measures()
    assert measures["tip_minus_hole_z_mm"] == pytest.approx(6.0, abs=1.0)
    assert measures["tip_minus_hole_x_mm"] == pytest.approx(offset_mm[0], abs=0.5)
    assert measures["peg_tilt_deg"] < 2.0
    if mode is None:
        move(goal - [0.0, 0.0, 0.003])
        assert env.failure_mode() == "at the hole, not pushed in"
    hold = np.r_[0.0, 0.0, 0.0, 1.0]
    assert env.imminent_failure(env.target_of(hold)) is None  # holding above the mouth harms nothing
    seen = []  # what a watching person sees coming, step by step (the simulated human's hazard watch)
    for _ in range(6):  # down 5 mm a step, as the pixel policies press at the mouth
        press = np.r_[0.0, 0.0, -0.005 / env.max_translation, 1.0]
        seen.append((env.imminent_failure(env.target_of(press)), env.peg_tilt_deg()))
        env.step(press)
    assert env.is_success() == (mode is None)
    assert env.failure_mode() == mode, env.task_measures()
    if mode is None:
        assert all(hazard is None for hazard, _ in seen), seen
    else:  # seen before the press reached the rim, with the peg still upright
        assert seen[1][0] == "pressing beside the hole" and seen[1][1] < 2.0, seen
        assert seen[0][0] is None, seen  # 6 mm above: one step of 5 mm does not reach it yet
    env.close()


def test_pick_cube_failure_mode_and_measures():
    env = gym.make("robot_rl/PickCube-v0", obs_mode="state").unwrapped
    env.reset(seed=2)
    assert env.failure_mode() == "cube not in the hand"
    measures = env.task_measures()
    assert abs(measures["cube_lift_mm"]) < 1.0 and measures["cube_from_tcp_mm"] > 50
    env.close()


def test_sim_task_episode_steps_are_the_registered_lengths_and_0_for_other_tasks():
    from robot_rl.sim.loop import sim_task_episode_steps
    from robot_rl.sim.tasks import PEG_INSERT_MAX_EPISODE_STEPS, PICK_CUBE_MAX_EPISODE_STEPS

    assert sim_task_episode_steps("PickCube-v0") == PICK_CUBE_MAX_EPISODE_STEPS
    assert sim_task_episode_steps("robot_rl/PegInsert-v0") == PEG_INSERT_MAX_EPISODE_STEPS
    assert sim_task_episode_steps("Nope-v0") == 0 and sim_task_episode_steps("ur5e-real") == 0


def test_wrist_wrench_reads_zero_held_still_and_the_table_pushing_up_and_changes_nothing_else():
    from robot_rl.sim.env import WRENCH_SIZE

    def rollout(wrench: bool):
        env = gym.make("robot_rl/PegInsert-v0", obs_mode="pixels", image_size=32, wrench=wrench)
        obs, _ = env.reset(seed=0)
        observations = [obs]
        # Hold still (gripping the peg), then drive the peg down onto the table beside the socket and keep pushing.
        for action in [[0.0, 0.0, 0.0, 1.0]] * 3 + [[0.0, 0.0, -1.0, 1.0]] * 10:
            obs, *_ = env.step(np.array(action, dtype=np.float32))
            observations.append(obs)
        env.close()
        return observations

    plain, sensed = rollout(False), rollout(True)
    assert "wrench" not in plain[0]
    wrenches = np.array([obs["wrench"] for obs in sensed])
    assert wrenches.shape == (14, WRENCH_SIZE) and wrenches.dtype == np.float32
    np.testing.assert_array_equal(wrenches[0], 0.0)  # tared at reset
    assert np.abs(wrenches[1:4]).max() < 0.05  # the held peg's weight is tared away
    force, torque = wrenches[-1, :3], wrenches[-1, 3:]
    assert force[2] > 50.0 and abs(force[2]) > 3 * np.abs(force[:2]).max(), wrenches[-1]  # the table pushes up
    assert np.isfinite(torque).all()
    for a, b in zip(plain, sensed):  # the sensor only observes
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
    env = gym.make("robot_rl/PickCube-v0")
    with pytest.raises(RuntimeError, match="wrench=True"):
        env.unwrapped.wrist_wrench()
