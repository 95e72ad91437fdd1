"""ROS 2 transport benchmark of the actor / learner graph: prints ONE JSON line of figures.

Usage::

    python bench/ros.py            # full run (about 4 min on a loaded 2-core machine)
    python bench/ros.py --quick    # fewer samples
    python bench/ros.py --smoke    # state round trip, transitions and weights at the smallest sizes (tests run this)
    python bench/ros.py --no-pixels-latency   # skip the 2x128x128 camera round trip
    python bench/ros.py --no-driver-latency --no-camera   # skip the 640x480 round trip / the camera node
    python bench/ros.py --no-realtime-diffusion           # skip the 10 Hz diffusion actor (5 min of ticks)

What is measured (every figure has p50 / p99 / n; times in ms):

1. ``obs_to_command_*``: observation -> command latency through a real lock-step actor node
   (``python -m robot_rl.ros.nodes.actor_node -p mode:=lockstep -p weights_path:=FILE``, SAC policy on CPU). A separate
   process plays the robot: it publishes one complete sensor frame (``/tcp_pose``, ``/tcp_twist``,
   ``/gripper/state``, ``/sim/object_state`` or the two cameras, one header stamp; ``/task/reward`` +
   ``/task/success`` before every frame after the first, as the sim node does) and times until the
   ``/command/target_pose`` answer arrives, one frame at a time. ``policy_ms`` is ``Actor.policy_action`` timed
   in-process on the same observation; ``rtt_minus_policy_*`` = round-trip percentile - policy median.
   **Target: round trip p99 minus policy time <= 10 ms.** The actor runs with ``stream_transitions:=false`` (no
   learner to acknowledge them here; see ``transitions_*`` for that path).
   Baseline in the same run (``baseline_echo_rtt_ms``): the same robot process and frame against a bare rclpy echo
   node that answers as soon as the frame is complete (no observation, policy or safety): the transport + Python
   executor floor. ``actor_overhead_*`` = round trip - policy median - echo round trip (same percentile).
   ``obs_to_command_640x480``: the same through a real robot's topics, ``robots/sim_panda_driver.yaml`` (actor
   ``-p robot:=robots/sim_panda_driver.yaml -p mode:=lockstep``, overriding the file's realtime). The robot process
   plays the drivers: per frame, with one header stamp, a 640x480 bgr8 ``sensor_msgs/Image`` (front) and a 640x480
   JPEG ``CompressedImage`` (wrist, a textured scene at quality 90), best-effort like camera drivers, then
   ``joint_states`` (7 arm joints at the home pose + 2 finger joints), which completes the frame: the actor derives
   the TCP pose by forward kinematics, decodes and centre-crops + resizes both frames to the policy's 64x64, and
   answers with a ``JointTrajectory`` by differential IK (an untrained pixel SAC agent from a policy file; the
   round trip ends when the trajectory arrives). In-process medians of the actor's per-frame work with its own
   functions on the same messages: ``image_conversion_ms`` (``<cam>_to_rgb``: vision.to_rgb of the Image;
   ``<cam>_decode``: the JPEG decode; ``<cam>_transform``: ImageTransform 640x480 -> 64), ``kinematics_ms``
   (forward kinematics, one IK solve) and ``policy_ms`` (``Actor.policy_action`` on one 64x64 observation). Its
   baseline is a bare rclpy echo node on the same topics and QoS answering a JointTrajectory once the frame is
   complete. Same target.
2. ``transitions_pixels_2x128``: acknowledged transitions/s from a publisher process to a real learner node
   (``-p obs_mode:=pixels -p image_size:=128 -p demos:=0 -p updates_per_transition:=0.0``: it decodes, fsyncs to
   its transition log, stages into replay and acks, but does not train). Batches of 8 transitions (the actor node's
   batch size with images), at most ``window`` unacknowledged transitions in flight. **Target: >= 10x the 10 Hz
   control rate.**
3. ``weights_broadcast``: policy weights of the pixel agent (2 cameras, 64x64 and 128x128, ``TrainConfig().sac``)
   published on ``/learner/weights`` (transient-local) by one process; another decodes them (``decode_weights``)
   and applies them (``SACAgent.with_policy_bytes``). Publish -> received (callback entry; both processes read
   CLOCK_MONOTONIC; the subscriber reports back on ``/bench/weights_ack``), decode (``msg_to_bytes`` +
   ``decode_weights``) and apply (``with_policy_bytes`` + ``block_until_ready``) times. The first broadcast of each
   size is a warm-up and not counted.
4. ``camera_node``: bench/camera.py's measurement, run as a child in the same private network namespace (its domain
   96): drivers/camera_node's ``capture_to_publish_ms`` (from OpenCV's hand-over of the frame, its stamp, to the
   return of ``publish``) and ``capture_to_received_ms`` at a subscriber, for 640x480 raw bgr8 and JPEG at 30 Hz
   from a generated video file, with its baseline (``cv2_read_ms``, ``jpeg_encode_ms``); ``--camera-seconds`` per
   format.
5. ``realtime_diffusion_actor``: a real-time actor node (10 Hz timer) running a pixel diffusion policy folder
   (default DiffusionConfig, untrained: trained weights cost the same) against the sim node in driver mode for
   ``--realtime-ticks`` ticks (3000; ``--quick`` 300). Chunks are computed in the actor's worker thread while the
   current one executes. Figures from the actor's status: ``ticks`` (lateness of each timer callback after its
   period's start, p50 / p99 / max ms, whole periods missed), ``policy_late`` (steps held because no action was
   due), ``chunks`` (added; actions executed, dropped as stale on arrival, expired unexecuted, replaced by a newer
   chunk). **Target: tick lateness p99 <= 20 ms; no stale action executed.**

Network rule: the script re-executes itself inside a private network namespace (``unshare -n``, only ``lo``) and
refuses to run (one JSON error line, exit 2) where none can be made; every ROS process runs with
``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` and its own ``ROS_DOMAIN_ID`` (90-97, one per measurement; with
``--domain-id N`` all on N: the measurements run one after another) from ``robot_rl.ros.net.env.ros_environment``. Child
processes run one measurement at a time and are stopped after it and at the end, also on errors or ``--timeout``
(partial figures are still printed, with ``errors``). Figures are percentiles on a shared machine (``loadavg_1m_*`` is
recorded): compare ratios and baselines from the same run, not absolutes across runs.

``--smoke`` (what the tests run; its figures mean little) measures the state round trip with its echo baseline (10
frames after 3 warm-up ones), the transitions at 2x64x64 (1 s after 0.5 s of warm-up) and the weights broadcast of
the 64 px agent (2 broadcasts), and skips the pixel and 640x480 round trips, the camera node and the real-time
diffusion actor.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from robot_rl.core import interrupts  # noqa: E402

INNER_FLAG = "ROBOT_RL_BENCH_ROS_INNER"
NETNS_FLAG = "ROBOT_RL_BENCH_ROS_NETNS"
OUTER_DOMAIN = 94  # the launcher itself creates no ROS participant
DOMAINS = {"latency_state": 90, "latency_pixels": 91, "transitions": 92, "weights": 93, "echo_baseline": 94,
           "latency_640x480": 95, "camera_node": 96,  # camera_node: bench/camera.py's own
           "realtime_diffusion": 97}
DRIVER_ROBOT = REPO_ROOT / "robots" / "sim_panda_driver.yaml"  # 640x480 cameras, joint_states, JointTrajectory
DRIVER_IMAGE_SIZE = 64  # the pixel policy's image side for the 640x480 round trip
JPEG_QUALITY = 90
CONTROL_HZ = 10.0
ACTION_DIM = 4
STATE_SIZE = 14
TRANSITION_BATCH = 8  # the actor node's batch size when observations carry images
WEIGHTS_ACK_TOPIC = "/bench/weights_ack"
RESULT_PREFIX = "RESULT "
# After the robot's publishers have matched the actor's subscriptions, the actor's side may not have matched them yet:
# a message of the first frame sent then is lost, and the robot waited --first-timeout (30 s) for its answer.
MATCH_SETTLE_S = 0.5


# ----------------------------------------------------------------------------------------------------- helpers

def stats_ms(seconds) -> dict:
    """p50 / p99 / mean / max / n of durations given in seconds, in milliseconds."""
    values = np.asarray(list(seconds), dtype=np.float64) * 1e3
    if values.size == 0:
        return {"n": 0}
    return {"p50": round(float(np.percentile(values, 50)), 3), "p99": round(float(np.percentile(values, 99)), 3),
            "mean": round(float(values.mean()), 3), "max": round(float(values.max()), 3), "n": int(values.size)}


def emit(result: dict) -> None:
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def log(message: str) -> None:
    print(f"[bench/ros {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def pixel_spec(image_size: int):
    from robot_rl.core.types import ObservationSpec

    return ObservationSpec.from_shapes({
        "state": ((STATE_SIZE,), np.float32),
        "images/front": ((image_size, image_size, 3), np.uint8),
        "images/wrist": ((image_size, image_size, 3), np.uint8),
    })


def weights_payload(spec, version: int = 1, seed: int = 0) -> bytes:
    """encode_weights of a fresh SACAgent (TrainConfig().sac) for `spec`, as learner_server._weights_message does."""
    from robot_rl.agents.sac import SACAgent
    from robot_rl.core.config_io import config_to_json
    from robot_rl.training.config import TrainConfig
    from robot_rl.wire.weights import WeightsMessage, encode_weights

    sac = TrainConfig().sac
    agent = SACAgent.create(seed, spec, ACTION_DIM, sac)
    return encode_weights(WeightsMessage(version=version, policy=agent.policy_to_bytes(),
                                         observation_spec=agent.observation_spec, action_dim=agent.action_dim,
                                         policy_config=config_to_json(agent.config)))


def start_rclpy(node_name: str):
    """(rclpy, node, executor) in this process; the environment must come from ros_environment()."""
    from robot_rl.ros.net.env import ensure_ros_environment

    ensure_ros_environment()
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    rclpy.init()
    node = rclpy.create_node(node_name)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    return rclpy, node, executor


def spin_until(executor, predicate, timeout_s: float, step_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        executor.spin_once(timeout_sec=min(step_s, remaining))
    return True


def time_calls(call, calls: int, warmup: int = 5) -> list[float]:
    """Durations [s] of `calls` calls of `call()` after `warmup` untimed ones."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def time_frames(executor, send_frame, arrivals: list, args) -> tuple[list[float], int, float | None, int]:
    """Lock-step round trips: `send_frame(index, ros_stamp)` publishes one frame, each answered by one entry appended
    to `arrivals` (perf_counter time). Returns (round trips after the warm-up [s], frames not answered within
    --frame-timeout after the first answer, the first answer's round trip [s], frames sent)."""
    from robot_rl.ros.convert import stamp_from_seconds

    rtts: list[float] = []
    misses = 0
    first_answer_s = None
    last_stamp = 0.0
    frames = args.warmup + args.frames
    for i in range(frames):
        stamp = max(time.time(), last_stamp + 1e-6)
        last_stamp = stamp
        ros_stamp = stamp_from_seconds(stamp)
        expected = len(arrivals) + 1
        start = time.perf_counter()
        send_frame(i, ros_stamp)
        timeout = args.first_timeout if first_answer_s is None else args.frame_timeout
        if spin_until(executor, lambda: len(arrivals) >= expected, timeout, step_s=timeout):
            rtt = arrivals[expected - 1] - start
            if first_answer_s is None:
                first_answer_s = rtt
            elif i >= args.warmup:
                rtts.append(rtt)
        else:
            if first_answer_s is not None:
                misses += 1
            # drain a late answer so it is not taken for the next frame's
            spin_until(executor, lambda: False, 0.2)
            del arrivals[:]
        if first_answer_s is None and i >= args.warmup - 1:
            return rtts, misses, first_answer_s, i + 1
    return rtts, misses, first_answer_s, frames


# ----------------------------------------------------------------------------------------------------- role: robot

def role_robot(args) -> None:
    """Play the robot for a lock-step actor: one frame, wait for its command, repeat; then time the policy alone."""
    rclpy, node, executor = start_rclpy("bench_robot")
    from geometry_msgs.msg import PoseStamped, TwistStamped
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import Bool, Float32, Float32MultiArray

    from robot_rl.sim.loop import make_env
    from robot_rl.ros import qos
    from robot_rl.ros.convert import (
        floats_to_msg,
        image_to_msg,
        joint_state_to_msg,
        pose_to_msg,
        twist_to_msg,
    )

    pixels = args.obs_mode == "pixels"
    env = make_env("PickCube-v0", obs_mode="state")
    obs, _ = env.reset(seed=0)
    env.close()
    state = np.asarray(obs["state"], dtype=np.float32)
    object_state = np.asarray(obs["object_state"], dtype=np.float32)
    rng = np.random.default_rng(0)
    images = {cam: rng.integers(0, 256, (args.image_size, args.image_size, 3), dtype=np.uint8)
              for cam in ("front", "wrist")} if pixels else {}

    sensors = qos.qos_profile(qos.SENSORS)
    events = qos.qos_profile(qos.EVENTS)
    tcp_pub = node.create_publisher(PoseStamped, qos.TCP_POSE, sensors)
    twist_pub = node.create_publisher(TwistStamped, qos.TCP_TWIST, sensors)
    gripper_pub = node.create_publisher(JointState, qos.GRIPPER_STATE, sensors)
    object_pub = node.create_publisher(Float32MultiArray, qos.SIM_OBJECT_STATE, sensors)
    image_pubs = {cam: node.create_publisher(Image, topic, sensors)
                  for cam, topic in (("front", qos.CAMERA_FRONT_IMAGE), ("wrist", qos.CAMERA_WRIST_IMAGE))
                  if cam in images}
    reward_pub = node.create_publisher(Float32, qos.TASK_REWARD, events)
    success_pub = node.create_publisher(Bool, qos.TASK_SUCCESS, events)
    arrivals: list[float] = []
    node.create_subscription(PoseStamped, qos.COMMAND_TARGET_POSE, lambda _msg: arrivals.append(time.perf_counter()),
                             qos.qos_profile(qos.COMMANDS))

    # Messages built once; only the header stamps change per frame (the sim node builds them from arrays each step,
    # which is the sim's cost, not the transport's).
    tcp_msg = pose_to_msg(state[0:3], state[3:7], frame_id="base")
    twist_msg = twist_to_msg(state[7:10], state[10:13], frame_id="base")
    gripper_msg = joint_state_to_msg(("gripper",), [float(state[13])], [0.0], [0.0])
    object_msg = floats_to_msg(object_state)
    image_msgs = {cam: image_to_msg(img, "rgb8", frame_id=f"{cam}_camera") for cam, img in images.items()}
    stamped = [tcp_msg, twist_msg, gripper_msg, *image_msgs.values()]
    sensor_pubs = [tcp_pub, twist_pub, gripper_pub, *image_pubs.values()]
    if not pixels:
        sensor_pubs.append(object_pub)

    # The policy alone (timed after the ROS loop so the two do not compete), built and compiled while the actor node
    # starts up.
    from robot_rl.actor.session import Actor
    from robot_rl.policies.gaussian import GaussianPolicy
    from robot_rl.agents.sac import SACAgent, SACConfig
    from robot_rl.core.config_io import config_from_json
    from robot_rl.wire.weights import decode_weights

    actor = None  # no weights: the baseline run against the echo node
    policy_obs = {"state": state, **({"object_state": object_state} if not pixels else {}),
                  **{f"images/{cam}": img for cam, img in images.items()}}
    if args.weights:
        weights = decode_weights(Path(args.weights).read_bytes())
        agent = SACAgent.create(0, weights.observation_spec, weights.action_dim,
                                config_from_json(SACConfig, weights.policy_config))
        actor = Actor(GaussianPolicy(agent, seed=0), seed=0)
        actor.update_weights(weights.policy, weights.version)
        actor.policy_action(policy_obs)

    matched = spin_until(executor, lambda: all(p.get_subscription_count() >= 1 for p in sensor_pubs)
                         and node.count_publishers(qos.COMMAND_TARGET_POSE) >= 1, args.start_timeout)
    if not matched:
        emit({"error": "the actor node did not match the sensor / command topics within "
                       f"{args.start_timeout:.0f}s"})
        return
    spin_until(executor, lambda: False, MATCH_SETTLE_S)
    if not spin_until(executor, lambda: all(Path(f).exists() for f in args.go_file), args.start_timeout):
        emit({"error": f"no go signal ({args.go_file}) within {args.start_timeout:.0f}s"})
        return

    reward_msg, success_msg = Float32(data=0.0), Bool(data=False)

    def send_frame(index: int, ros_stamp) -> None:
        for msg in stamped:
            msg.header.stamp = ros_stamp
        if index > 0:  # the previous step's reward / success (the lock-step actor waits for them)
            reward_pub.publish(reward_msg)
            success_pub.publish(success_msg)
        if not pixels:
            object_pub.publish(object_msg)  # no header: belongs to the tcp_pose that follows
        for cam, pub in image_pubs.items():
            pub.publish(image_msgs[cam])
        gripper_pub.publish(gripper_msg)
        twist_pub.publish(twist_msg)
        tcp_pub.publish(tcp_msg)  # last, as the sim node does

    rtts, misses, first_answer_s, frames = time_frames(executor, send_frame, arrivals, args)

    policy_times = time_calls(lambda: actor.policy_action(policy_obs), args.policy_calls) if actor is not None else []
    emit({"rtt": rtts, "policy": policy_times, "misses": misses, "first_answer_s": first_answer_s,
          "frames_sent": frames})
    node.destroy_node()
    rclpy.try_shutdown()


def role_echo(args) -> None:
    """Transport baseline: a bare rclpy node subscribed to the same frame that answers on command/target_pose as soon
    as every sensor message of the frame has arrived (no observation, policy or safety)."""
    rclpy, node, executor = start_rclpy("bench_echo")
    from geometry_msgs.msg import PoseStamped, TwistStamped
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import Bool, Float32, Float32MultiArray

    from robot_rl.ros import qos

    topics = [(PoseStamped, qos.TCP_POSE), (TwistStamped, qos.TCP_TWIST), (JointState, qos.GRIPPER_STATE)]
    if args.obs_mode == "pixels":
        topics += [(Image, qos.CAMERA_FRONT_IMAGE), (Image, qos.CAMERA_WRIST_IMAGE)]
    else:
        topics.append((Float32MultiArray, qos.SIM_OBJECT_STATE))
    answer = PoseStamped()
    answer.header.frame_id = "base"
    answer.pose.orientation.w = 1.0
    pub = node.create_publisher(PoseStamped, qos.COMMAND_TARGET_POSE, qos.qos_profile(qos.COMMANDS))
    seen: set[str] = set()

    def on_sensor(topic: str) -> None:
        seen.add(topic)
        if len(seen) == len(topics):
            seen.clear()
            pub.publish(answer)

    sensors = qos.qos_profile(qos.SENSORS)
    for msg_type, topic in topics:
        node.create_subscription(msg_type, topic, lambda _msg, t=topic: on_sensor(t), sensors)
    events = qos.qos_profile(qos.EVENTS)  # the actor subscribes to these too: same executor work
    node.create_subscription(Float32, qos.TASK_REWARD, lambda _msg: None, events)
    node.create_subscription(Bool, qos.TASK_SUCCESS, lambda _msg: None, events)
    while rclpy.ok():
        executor.spin_once(timeout_sec=0.1)


# ----------------------------------------------------------------------------------------------------- role: driver

def camera_scene(width: int, height: int) -> np.ndarray:
    """An RGB frame textured like a camera's (gradient, discs, sensor noise), so JPEG costs what it does on one."""
    import cv2

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:height, 0:width]
    frame = np.stack([xx * 200 // width, yy * 200 // height, (xx + yy) * 100 // (width + height)], -1).astype(np.uint8)
    for disc in range(6):
        centre = (int(width * (0.12 + 0.14 * disc)), int(height * (0.5 + 0.3 * np.cos(disc))))
        cv2.circle(frame, centre, int(height * (0.07 + 0.01 * disc)), (40 * disc, 255 - 30 * disc, 120), -1)
    noisy = frame.astype(np.int16) + rng.normal(0, 4, frame.shape).astype(np.int16)
    return np.clip(noisy, 0, 255).astype(np.uint8)


def driver_robot():
    """(robot file config, its arm kinematics, arm joints whose TCP is the file's home pose) of DRIVER_ROBOT."""
    from robot_rl.core.kinematics import ArmKinematics
    from robot_rl.actor.robot_config import load_robot_config
    from robot_rl.sim.robot import HOME_QPOS

    robot = load_robot_config(str(DRIVER_ROBOT))
    kinematics = ArmKinematics.from_file(robot.model_path(), robot.arm.joint_names, robot.tcp_frame)
    q = np.asarray(HOME_QPOS, dtype=np.float64)
    for _ in range(20):
        q = kinematics.solve(q, np.asarray(robot.home_position), np.asarray(robot.home_quat))
    return robot, kinematics, q


def driver_streams(robot, q: np.ndarray) -> list[tuple[str, object, str, object]]:
    """One frame of the robot file's drivers, as (sensor, message, topic, QoS) in publishing order: every camera
    (Image in its encoding, or a JPEG / PNG CompressedImage) of one textured scene, then the arm's joint_states with
    the finger joints (last: the arm state completes the frame)."""
    from robot_rl.ros import qos
    from robot_rl.ros.convert import compressed_image_to_msg, image_to_msg, joint_state_to_msg

    streams = []
    for name, camera in robot.cameras:
        scene = camera_scene(camera.width or 640, camera.height or 480)
        if camera.type == "CompressedImage":
            msg = compressed_image_to_msg(scene, camera.encoding or "jpeg", frame_id=f"{name}_camera",
                                          quality=JPEG_QUALITY)
        elif camera.encoding in ("", "rgb8", "bgr8"):
            encoding = camera.encoding or "rgb8"
            msg = image_to_msg(scene[..., ::-1] if encoding == "bgr8" else scene, encoding, frame_id=f"{name}_camera")
        else:
            raise ValueError(f"{robot.path}: camera {name}: the bench sends rgb8 / bgr8 / jpeg / png, not "
                             f"{camera.encoding}")
        streams.append((f"camera/{name}", msg, camera.topic, qos.sensor_qos(camera.qos)))
    fingers = robot.gripper.finger_joints
    opening = robot.gripper.max_opening / max(len(fingers), 1) / robot.gripper.opening_per_unit
    joints = joint_state_to_msg([*robot.arm.joint_names, *fingers], [*q, *([opening] * len(fingers))])
    streams.append(("joint_states", joints, robot.arm.joint_states_topic, qos.sensor_qos(robot.arm.qos)))
    return streams


def role_driver(args) -> None:
    """Play real arm and camera drivers (DRIVER_ROBOT's topics: 640x480 bgr8 Image and JPEG CompressedImage
    best-effort, joint_states) for a lock-step actor: one frame, wait for its JointTrajectory command, repeat; then
    time in-process what the actor does per step (image conversion, kinematics, the policy)."""
    rclpy, node, executor = start_rclpy("bench_driver")
    from std_msgs.msg import Bool, Float32
    from trajectory_msgs.msg import JointTrajectory

    from robot_rl.ros import qos
    from robot_rl.ros.node_util import relative_name

    robot, kinematics, q = driver_robot()
    streams = driver_streams(robot, q)
    pubs = [(node.create_publisher(type(msg), topic, profile), msg) for _, msg, topic, profile in streams]
    events = qos.qos_profile(qos.EVENTS)
    reward_pub = node.create_publisher(Float32, relative_name(qos.TASK_REWARD), events)
    success_pub = node.create_publisher(Bool, relative_name(qos.TASK_SUCCESS), events)
    arrivals: list[float] = []
    command_topic = robot.command.joint_trajectory_topic
    node.create_subscription(JointTrajectory, command_topic, lambda _msg: arrivals.append(time.perf_counter()),
                             qos.qos_profile(qos.COMMANDS))

    # The policy, built and compiled while the actor node starts up (timed after the ROS loop).
    actor = spec = None  # no weights: the baseline run against the echo node
    if args.weights:
        from robot_rl.actor.session import actor_from_weights
        from robot_rl.wire.policy_file import read_policy_file

        weights = read_policy_file(args.weights)
        spec = weights.observation_spec
        actor = actor_from_weights(weights, seed=0)
        actor.policy_action({key: np.zeros(entry.shape, entry.dtype) for key, entry in spec.entries})

    matched = spin_until(executor, lambda: all(pub.get_subscription_count() >= 1 for pub, _ in pubs)
                         and node.count_publishers(command_topic) >= 1, args.start_timeout)
    if not matched:
        emit({"error": f"the actor did not match {[topic for _, _, topic, _ in streams]} / {command_topic} within "
                       f"{args.start_timeout:.0f}s"})
        return
    spin_until(executor, lambda: False, MATCH_SETTLE_S)
    reward_msg, success_msg = Float32(data=0.0), Bool(data=False)

    def send_frame(index: int, ros_stamp) -> None:
        if index > 0:  # the previous step's reward / success (the lock-step actor waits for them)
            reward_pub.publish(reward_msg)
            success_pub.publish(success_msg)
        for pub, msg in pubs:  # one header stamp: the frame
            msg.header.stamp = ros_stamp
            pub.publish(msg)

    rtts, misses, first_answer_s, frames = time_frames(executor, send_frame, arrivals, args)
    result = {"rtt": rtts, "misses": misses, "first_answer_s": first_answer_s, "frames_sent": frames,
              "streams": {sensor: describe_stream(msg) for sensor, msg, _, _ in streams}}
    if actor is not None:
        result.update(actor_step_costs(robot, kinematics, q, streams, actor, spec, args.policy_calls))
    emit(result)
    node.destroy_node()
    rclpy.try_shutdown()


def describe_stream(msg) -> str:
    """'Image 640x480 bgr8, 921600 bytes' / 'CompressedImage ..., N bytes' / 'JointState 9 joints'."""
    if hasattr(msg, "format"):
        return f"CompressedImage {msg.format!r}, {len(msg.data)} bytes"
    if hasattr(msg, "encoding"):
        return f"Image {msg.width}x{msg.height} {msg.encoding}, {len(msg.data)} bytes"
    return f"{type(msg).__name__} {len(msg.name)} joints"


def actor_step_costs(robot, kinematics, q, streams, actor, spec, calls: int) -> dict:
    """In-process durations [s] of the actor node's per-frame work, with its own functions on the frame just sent:
    ``images``: each camera message -> RGB (``<cam>_to_rgb``: its subscription callback's vision.to_rgb, or
    ``<cam>_decode``: the JPEG / PNG decode) and RGB -> the policy's image (``<cam>_transform``: ImageTransform, at
    the step); ``kinematics``: forward kinematics of joint_states and the IK solve of a command; ``policy``:
    Actor.policy_action on the resulting observation."""
    from robot_rl.ros.convert import compressed_image_from_msg, image_from_msg
    from robot_rl.core.vision import ImageTransform, to_rgb

    images: dict[str, list[float]] = {}
    obs = {key: np.zeros(entry.shape, entry.dtype) for key, entry in spec.entries}
    for sensor, msg, _, _ in streams:
        if not sensor.startswith("camera/"):
            continue
        name = sensor[len("camera/"):]
        if hasattr(msg, "format"):  # CompressedImage
            what, receive = "decode", lambda msg=msg: compressed_image_from_msg(msg)
        else:
            what, receive = "to_rgb", lambda msg=msg: to_rgb(image_from_msg(msg), msg.encoding)
        rgb = receive()
        transform = ImageTransform.from_camera(robot.camera(name), spec[f"images/{name}"].shape[0])
        images[f"{name}_{what}"] = time_calls(receive, calls)
        images[f"{name}_transform"] = time_calls(lambda t=transform, rgb=rgb: t(rgb), calls)
        obs[f"images/{name}"] = transform(rgb)
    position, quat = kinematics.forward(q)
    target = np.asarray(position) + np.array([0.01, 0.0, 0.0])  # a 1 cm step, as a policy's action asks
    return {"images": images,
            "kinematics": {"forward_kinematics": time_calls(lambda: kinematics.forward(q), calls),
                           "ik_solve": time_calls(lambda: kinematics.solve(q, target, quat), calls)},
            "policy": time_calls(lambda: actor.policy_action(obs), calls)}


def role_driver_echo(args) -> None:
    """Transport baseline of the driver frame: a bare rclpy node subscribed to the same topics with the actor's QoS
    that answers with a JointTrajectory as soon as every message of the frame has arrived (no decoding, kinematics,
    policy or safety)."""
    rclpy, node, executor = start_rclpy("bench_driver_echo")
    from std_msgs.msg import Bool, Float32
    from trajectory_msgs.msg import JointTrajectory

    from robot_rl.ros import qos
    from robot_rl.ros.convert import joint_trajectory_to_msg
    from robot_rl.ros.node_util import relative_name

    robot, _, q = driver_robot()
    streams = driver_streams(robot, q)
    answer = joint_trajectory_to_msg(robot.arm.joint_names, q, robot.control_period)
    pub = node.create_publisher(JointTrajectory, robot.command.joint_trajectory_topic, qos.qos_profile(qos.COMMANDS))
    seen: set[str] = set()

    def on_sensor(sensor: str) -> None:
        seen.add(sensor)
        if len(seen) == len(streams):
            seen.clear()
            pub.publish(answer)

    for sensor, msg, topic, profile in streams:
        node.create_subscription(type(msg), topic, lambda _msg, s=sensor: on_sensor(s), profile)
    events = qos.qos_profile(qos.EVENTS)  # the actor subscribes to these too: same executor work
    node.create_subscription(Float32, relative_name(qos.TASK_REWARD), lambda _msg: None, events)
    node.create_subscription(Bool, relative_name(qos.TASK_SUCCESS), lambda _msg: None, events)
    while rclpy.ok():
        executor.spin_once(timeout_sec=0.1)


# ----------------------------------------------------------------------------------------------------- role: feeder

def role_feeder(args) -> None:
    """Send pixel transitions to the learner as fast as its acks allow; report the acknowledged rate."""
    rclpy, node, executor = start_rclpy("bench_feeder")
    from std_msgs.msg import UInt8MultiArray

    from robot_rl.ros import qos
    from robot_rl.ros.convert import bytes_to_msg, msg_to_bytes
    from robot_rl.wire.protocol import make_source
    from robot_rl.wire.transitions import StampedTransition, decode_ack, encode_transitions

    source = make_source("bench_feeder")
    rng = np.random.default_rng(0)
    size = args.image_size

    def observation():
        return {"state": rng.normal(size=STATE_SIZE).astype(np.float32),
                "images/front": rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
                "images/wrist": rng.integers(0, 256, (size, size, 3), dtype=np.uint8)}

    pool = [observation() for _ in range(4)]
    action = np.zeros(ACTION_DIM, np.float32)
    episode_len = 50

    def transition(seq: int) -> StampedTransition:
        step = seq % episode_len
        return StampedTransition(seq=seq, episode=seq // episode_len, step=step, observation=pool[seq % 4],
                                 action=action, reward=0.0, terminated=False, truncated=step == episode_len - 1,
                                 next_observation=pool[(seq + 1) % 4])

    one = len(encode_transitions(source, [transition(0)]))
    batch_bytes = len(encode_transitions(source, [transition(s) for s in range(TRANSITION_BATCH)]))

    acks: list[tuple[float, int]] = []

    def on_ack(msg) -> None:
        through = decode_ack(msg_to_bytes(msg)).get(source)
        if through is not None:
            acks.append((time.perf_counter(), through))

    pub = node.create_publisher(UInt8MultiArray, qos.ACTOR_TRANSITIONS, qos.topic_qos(qos.ACTOR_TRANSITIONS))
    node.create_subscription(UInt8MultiArray, qos.LEARNER_ACK, on_ack, qos.topic_qos(qos.LEARNER_ACK))
    if not spin_until(executor, lambda: pub.get_subscription_count() >= 1
                      and node.count_publishers(qos.LEARNER_ACK) >= 1, args.start_timeout):
        emit({"error": f"the learner node did not match /actor/transitions + /learner/ack within "
                       f"{args.start_timeout:.0f}s"})
        return

    next_seq = 0
    encode_times = []
    started = time.perf_counter()
    deadline = started + args.warmup_s + args.duration
    while time.perf_counter() < deadline:
        acked = acks[-1][1] if acks else -1
        while next_seq - (acked + 1) + TRANSITION_BATCH <= args.window:
            t0 = time.perf_counter()
            msg = bytes_to_msg(encode_transitions(source, [transition(s) for s in range(next_seq,
                                                                                       next_seq + TRANSITION_BATCH)]))
            encode_times.append(time.perf_counter() - t0)
            pub.publish(msg)
            next_seq += TRANSITION_BATCH
        executor.spin_once(timeout_sec=0.02)
    measured = [(t, a) for t, a in acks if t >= started + args.warmup_s]
    rate = None
    if len(measured) >= 2:
        (t_a, a_a), (t_b, a_b) = measured[0], measured[-1]
        rate = (a_b - a_a) / (t_b - t_a) if t_b > t_a else None
    emit({"acked_per_s": rate, "acked_total": (acks[-1][1] + 1) if acks else 0, "sent": next_seq,
          "measured_s": (measured[-1][0] - measured[0][0]) if len(measured) >= 2 else 0.0,
          "bytes_per_transition_single": one, "bytes_per_transition_in_batch": batch_bytes / TRANSITION_BATCH,
          "encode_batch_s": encode_times, "first_ack_s": (acks[0][0] - started) if acks else None})
    node.destroy_node()
    rclpy.try_shutdown()


# ----------------------------------------------------------------------------------------------------- role: weights

def role_weights_sub(args) -> None:
    """Receive /learner/weights, decode and apply each like the actor node; ack each version on a bench topic."""
    rclpy, node, executor = start_rclpy("bench_weights_sub")
    import jax
    from std_msgs.msg import String, UInt8MultiArray

    from robot_rl.agents.sac import SACAgent, SACConfig
    from robot_rl.ros import qos
    from robot_rl.ros.convert import msg_to_bytes
    from robot_rl.core.config_io import config_from_json
    from robot_rl.wire.weights import decode_weights

    from robot_rl.training.config import TrainConfig

    # An actor already has its agent when new weights arrive: build them up front (the spec comes with the weights).
    agents = {pixel_spec(size): SACAgent.create(0, pixel_spec(size), ACTION_DIM, TrainConfig().sac)
              for size in args.sizes}
    ack_pub = node.create_publisher(String, WEIGHTS_ACK_TOPIC, qos.qos_profile(qos.EVENTS))
    pending: list[str] = []

    def on_weights(msg) -> None:
        received = time.monotonic_ns()
        payload = msg_to_bytes(msg)  # the actor node's copy
        copied = time.monotonic_ns()
        weights = decode_weights(payload)
        decoded = time.monotonic_ns()
        spec = weights.observation_spec
        created = spec not in agents
        if created:
            agents[spec] = SACAgent.create(0, spec, weights.action_dim, config_from_json(SACConfig, weights.policy_config))
        start_apply = time.monotonic_ns()
        agent = agents[spec].with_policy_bytes(weights.policy)
        jax.block_until_ready(agent.actor.params)
        applied = time.monotonic_ns()
        agents[spec] = agent
        pending.append(json.dumps({
            "version": weights.version, "received_ns": received, "bytes": len(payload),
            "copy_s": (copied - received) * 1e-9, "decode_s": (decoded - copied) * 1e-9,
            "apply_s": (applied - start_apply) * 1e-9, "created": created}))

    node.create_subscription(UInt8MultiArray, qos.LEARNER_WEIGHTS, on_weights, qos.topic_qos(qos.LEARNER_WEIGHTS))
    while rclpy.ok():
        executor.spin_once(timeout_sec=0.05)
        while pending and ack_pub.get_subscription_count() >= 1:
            ack_pub.publish(String(data=pending.pop(0)))


def role_weights_pub(args) -> None:
    """Broadcast pixel-agent weights (each image size, `broadcasts` + 1 warm-up versions) and time their arrival."""
    rclpy, node, executor = start_rclpy("bench_weights_pub")
    from std_msgs.msg import String, UInt8MultiArray

    from robot_rl.agents.sac import SACAgent
    from robot_rl.ros import qos
    from robot_rl.ros.convert import bytes_to_msg
    from robot_rl.core.config_io import config_to_json
    from robot_rl.training.config import TrainConfig
    from robot_rl.wire.weights import WeightsMessage, encode_weights

    acks: dict[int, dict] = {}
    node.create_subscription(String, WEIGHTS_ACK_TOPIC,
                             lambda msg: acks.__setitem__(json.loads(msg.data)["version"], json.loads(msg.data)),
                             qos.qos_profile(qos.EVENTS))
    pub = node.create_publisher(UInt8MultiArray, qos.LEARNER_WEIGHTS, qos.topic_qos(qos.LEARNER_WEIGHTS))
    sac = TrainConfig().sac
    agents = {size: SACAgent.create(0, pixel_spec(size), ACTION_DIM, sac) for size in args.sizes}
    if not spin_until(executor, lambda: pub.get_subscription_count() >= 1
                      and node.count_publishers(WEIGHTS_ACK_TOPIC) >= 1, args.start_timeout):
        emit({"error": f"the weights subscriber did not match within {args.start_timeout:.0f}s"})
        return
    out = {}
    version = 0
    for size in args.sizes:
        agent = agents[size]
        rows = {"latency": [], "serialize": [], "copy": [], "decode": [], "apply": [], "to_applied": []}
        payload_bytes = 0
        lost = 0
        for i in range(args.broadcasts + 1):  # the first one is a warm-up (the subscriber builds its agent)
            version += 1
            t0 = time.perf_counter()
            payload = encode_weights(WeightsMessage(
                version=version, policy=agent.policy_to_bytes(), observation_spec=agent.observation_spec,
                action_dim=agent.action_dim, policy_config=config_to_json(agent.config)))
            serialize = time.perf_counter() - t0
            payload_bytes = len(payload)
            sent = time.monotonic_ns()
            pub.publish(bytes_to_msg(payload))
            if not spin_until(executor, lambda v=version: v in acks, args.frame_timeout):
                lost += 1
                continue
            ack = acks[version]
            if i == 0:
                continue
            latency = (ack["received_ns"] - sent) * 1e-9
            rows["latency"].append(latency)
            rows["serialize"].append(serialize)
            rows["copy"].append(ack["copy_s"])
            rows["decode"].append(ack["decode_s"])
            rows["apply"].append(ack["apply_s"])
            rows["to_applied"].append(latency + ack["copy_s"] + ack["decode_s"] + ack["apply_s"])
            spin_until(executor, lambda: False, 0.05)  # a pause between broadcasts
        out[str(size)] = {"payload_bytes": payload_bytes, "lost": lost, **rows}
    emit(out)
    node.destroy_node()
    rclpy.try_shutdown()


# ----------------------------------------------------------------------------------------------------- orchestration

class Children:
    """Child processes of the bench (all in the bench's process group, so the outer launcher can kill them too)."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str], domain_id: int, extra_env: dict[str, str] | None = None
              ) -> subprocess.Popen:
        from robot_rl.ros.net.env import ros_environment

        env = ros_environment(domain_id=domain_id)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # no spinning OpenMP threads competing with the measured ones
        env.update(extra_env or {})
        out = open(self.log_dir / f"{name}.out", "wb")
        err = open(self.log_dir / f"{name}.err", "wb")
        try:
            with interrupts.uninterrupted():  # a stop request while it starts is raised once it is in `procs`
                proc = subprocess.Popen(argv, env=env, cwd=REPO_ROOT, stdout=out, stderr=err,
                                        stdin=subprocess.DEVNULL)
                self.procs.append((name, proc))
        finally:
            out.close()
            err.close()
        return proc

    def role(self, name: str, role: str, domain_id: int, *extra: str) -> subprocess.Popen:
        return self.start(name, [sys.executable, "-m", "bench.ros", "--role", role, *extra], domain_id)

    def result(self, name: str, proc: subprocess.Popen, timeout: float) -> dict:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop(proc)
            raise RuntimeError(f"{name} timed out after {timeout:.0f}s; stderr tail: {self.tail(name)}") from None
        lines = [line for line in (self.log_dir / f"{name}.out").read_text(errors="replace").splitlines()
                 if line.startswith(RESULT_PREFIX)]
        if not lines:
            raise RuntimeError(f"{name} exited {proc.returncode} without a result; stderr tail: {self.tail(name)}")
        result = json.loads(lines[-1][len(RESULT_PREFIX):])
        if "error" in result:
            raise RuntimeError(f"{name}: {result['error']}")
        return result

    def tail(self, name: str, chars: int = 1500) -> str:
        path = self.log_dir / f"{name}.err"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    @staticmethod
    def stop(proc: subprocess.Popen, grace_s: float = 3.0) -> None:
        if proc.poll() is not None:
            return
        try:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        except ProcessLookupError:
            pass

    def stop_all(self) -> None:
        for _, proc in self.procs:
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGINT)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 3.0
        for _, proc in self.procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class WeightFiles:
    """Policy weight files for the latency phases. The state one is written at once; the pixel ones (the 2-camera
    128 px agent, and the 64 px agent of DRIVER_ROBOT's cameras as a policy file) in a thread while the state phase's
    processes start up (the state robot waits for `go` before measuring, so the two never overlap a measurement)."""

    def __init__(self, tmp: Path, args):
        import threading

        from robot_rl.sim.loop import make_env
        from robot_rl.core.types import ObservationSpec

        env = make_env("PickCube-v0", obs_mode="state")
        spec = ObservationSpec.from_space(env.observation_space)
        env.close()
        self.paths = {"state": tmp / "weights_state.msgpack", "pixels": tmp / "weights_pixels.msgpack",
                      "driver": tmp / "policy_driver_64.msgpack"}
        self.paths["state"].write_bytes(weights_payload(spec))
        self.go = tmp / "go_state"
        self.error: BaseException | None = None
        self._thread = None
        jobs = []
        if not args.no_pixels_latency:
            jobs.append(lambda: self.paths["pixels"].write_bytes(weights_payload(pixel_spec(args.image_size))))
        if not args.no_driver_latency:
            jobs.append(lambda: write_driver_policy(self.paths["driver"]))
        if not jobs:
            self.go.touch()
        else:
            self._thread = threading.Thread(target=self._make, args=(jobs,), daemon=True)
            self._thread.start()

    def _make(self, jobs) -> None:
        try:
            for job in jobs:
                job()
        except BaseException as error:  # noqa: BLE001 - reported by the pixel phases
            self.error = error
        finally:
            self.go.touch()

    def path(self, kind: str) -> Path:
        if kind != "state" and self._thread is not None:
            self._thread.join()
            if self.error is not None:
                raise RuntimeError(f"could not make the pixel weights: {self.error!r}")
        return self.paths[kind]


def write_driver_policy(path: Path) -> None:
    """A policy file of an untrained SAC agent (TrainConfig().sac) seeing DRIVER_ROBOT's cameras at
    DRIVER_IMAGE_SIZE and the state, as the learner node builds it for a real robot's task."""
    from robot_rl.agents.sac import SACAgent
    from robot_rl.policies.gaussian import weights_message
    from robot_rl.wire.policy_file import write_policy_file
    from robot_rl.ros.nodes.learner_params import robot_task_spaces
    from robot_rl.training.config import TrainConfig

    spec, action_dim = robot_task_spaces(str(DRIVER_ROBOT), "pixels", DRIVER_IMAGE_SIZE)
    write_policy_file(path, weights_message(SACAgent.create(0, spec, action_dim, TrainConfig().sac), version=1))


def echo_baseline(children: Children, args, label: str, echo_role: str, robot_role: str, role_args: list[str],
                  frames: int) -> dict:
    """Round trip of the same frame against a bare echo node (transport + rclpy floor), in its own domain."""
    domain = DOMAINS["echo_baseline"]
    echo = children.role(f"echo_{label}", echo_role, domain, *role_args)
    robot = children.role(f"robot_echo_{label}", robot_role, domain, *role_args, "--frames", str(frames),
                          "--warmup", str(args.warmup_frames))
    try:
        raw = children.result(f"robot_echo_{label}", robot, timeout=args.phase_timeout)
    except RuntimeError as error:
        raise RuntimeError(f"{error}; echo stderr tail: {children.tail(f'echo_{label}')}") from None
    finally:
        children.stop(echo)
    return {**stats_ms(raw["rtt"]), "missed_frames": raw["misses"]}


def bench_latency(children: Children, files: WeightFiles, args, obs_mode: str, baseline: dict) -> dict:
    domain = DOMAINS["latency_state" if obs_mode == "state" else "latency_pixels"]
    frames = args.frames if obs_mode == "state" else args.pixel_frames
    weights = files.path(obs_mode)
    actor = children.start(f"actor_{obs_mode}", [
        sys.executable, "-m", "robot_rl.ros.nodes.actor_node", "--ros-args",
        "-p", f"obs_mode:={obs_mode}", "-p", "mode:=lockstep", "-p", "reset_service:=none",
        "-p", f"weights_path:={weights}", "-p", "stream_transitions:=false", "-p", "max_episode_steps:=1000000",
        "-p", "actor_id:=bench"], domain)
    robot = children.role(f"robot_{obs_mode}", "robot", domain, "--obs-mode", obs_mode, "--weights", str(weights),
                          "--frames", str(frames), "--warmup", str(args.warmup_frames),
                          "--image-size", str(args.image_size), "--policy-calls", str(args.policy_calls),
                          *(["--go-file", str(files.go)] if obs_mode == "state" else []))
    try:
        raw = children.result(f"robot_{obs_mode}", robot, timeout=args.phase_timeout)
    except RuntimeError as error:
        raise RuntimeError(f"{error}; actor stderr tail: {children.tail(f'actor_{obs_mode}')}") from None
    finally:
        children.stop(actor)
    if not raw["rtt"]:
        raise RuntimeError(f"no command answered a frame (first answer: {raw['first_answer_s']}); actor stderr "
                           f"tail: {children.tail(f'actor_{obs_mode}')}")
    rtt, policy = stats_ms(raw["rtt"]), stats_ms(raw["policy"])
    return {
        "rtt_ms": rtt, "policy_ms": policy,
        "rtt_minus_policy_p50_ms": round(rtt["p50"] - policy["p50"], 3),
        "rtt_minus_policy_p99_ms": round(rtt["p99"] - policy["p50"], 3),
        "target_rtt_minus_policy_p99_ms": 10.0,
        "meets_target": bool(rtt["p99"] - policy["p50"] <= 10.0),
        "baseline_echo_rtt_ms": baseline,
        **({"actor_overhead_p50_ms": round(rtt["p50"] - policy["p50"] - baseline["p50"], 3),
            "actor_overhead_p99_ms": round(rtt["p99"] - policy["p50"] - baseline["p99"], 3)}
           if "p50" in baseline else {}),
        "missed_frames": raw["misses"], "frames_sent": raw["frames_sent"],
        "first_answer_s": round(raw["first_answer_s"], 2) if raw["first_answer_s"] is not None else None,
        **({"image_size": args.image_size, "cameras": 2} if obs_mode == "pixels" else {}),
    }


def bench_driver_latency(children: Children, files: WeightFiles, args) -> dict:
    """obs -> command through a lock-step actor on DRIVER_ROBOT (640x480 cameras resized in the actor, arm state by
    forward kinematics of joint_states, JointTrajectory commands by IK), with its echo baseline from the same run."""
    role_args = ["--frames", str(args.driver_frames), "--warmup", str(args.warmup_frames)]
    try:
        baseline = echo_baseline(children, args, "640x480", "driver_echo", "driver", [], args.driver_frames)
    except RuntimeError as error:
        baseline = {"error": str(error)}
    weights = files.path("driver")
    domain = DOMAINS["latency_640x480"]
    actor = children.start("actor_640x480", [
        sys.executable, "-m", "robot_rl.ros.nodes.actor_node", "--ros-args", "-p", f"robot:={DRIVER_ROBOT}",
        "-p", "obs_mode:=pixels", "-p", "mode:=lockstep", "-p", "reset_service:=none",
        "-p", f"weights_path:={weights}", "-p", "stream_transitions:=false", "-p", "max_episode_steps:=1000000",
        "-p", "actor_id:=bench"], domain)
    robot = children.role("driver_640x480", "driver", domain, "--weights", str(weights), *role_args,
                          "--policy-calls", str(args.policy_calls))
    try:
        raw = children.result("driver_640x480", robot, timeout=args.phase_timeout)
    except RuntimeError as error:
        raise RuntimeError(f"{error}; actor stderr tail: {children.tail('actor_640x480')}") from None
    finally:
        children.stop(actor)
    if not raw["rtt"]:
        raise RuntimeError(f"no command answered a frame (first answer: {raw['first_answer_s']}); actor stderr "
                           f"tail: {children.tail('actor_640x480')}")
    rtt, policy = stats_ms(raw["rtt"]), stats_ms(raw["policy"])
    images = {name: stats_ms(values) for name, values in raw["images"].items()}
    return {
        "rtt_ms": rtt, "policy_ms": policy,
        "image_conversion_ms": {**images, "total_p50": round(sum(row["p50"] for row in images.values()), 3)},
        "kinematics_ms": {name: stats_ms(values) for name, values in raw["kinematics"].items()},
        "rtt_minus_policy_p50_ms": round(rtt["p50"] - policy["p50"], 3),
        "rtt_minus_policy_p99_ms": round(rtt["p99"] - policy["p50"], 3),
        "target_rtt_minus_policy_p99_ms": 10.0,
        "meets_target": bool(rtt["p99"] - policy["p50"] <= 10.0),
        "baseline_echo_rtt_ms": baseline,
        **({"actor_overhead_p50_ms": round(rtt["p50"] - policy["p50"] - baseline["p50"], 3),
            "actor_overhead_p99_ms": round(rtt["p99"] - policy["p50"] - baseline["p99"], 3)}
           if "p50" in baseline else {}),
        "missed_frames": raw["misses"], "frames_sent": raw["frames_sent"],
        "first_answer_s": round(raw["first_answer_s"], 2) if raw["first_answer_s"] is not None else None,
        "robot": str(DRIVER_ROBOT.relative_to(REPO_ROOT)), "streams": raw["streams"],
        "policy_image_size": DRIVER_IMAGE_SIZE,
    }


def bench_camera_node(children: Children, args) -> dict:
    """bench/camera.py's measurement (the camera node's capture -> publish and capture -> received latency of
    640x480 raw bgr8 and JPEG at 30 Hz), run as a child in this private network namespace."""
    import bench.camera as camera_bench

    proc = children.start("camera", [sys.executable, str(REPO_ROOT / "bench" / "camera.py"),
                                     "--seconds", str(args.camera_seconds)], camera_bench.DOMAIN_ID,
                          extra_env={camera_bench.INNER_FLAG: "1"})
    try:
        proc.wait(timeout=args.phase_timeout)
    except subprocess.TimeoutExpired:
        children.stop(proc)
        raise RuntimeError(f"bench/camera.py timed out after {args.phase_timeout:.0f}s; stderr tail: "
                           f"{children.tail('camera')}") from None
    lines = [line for line in (children.log_dir / "camera.out").read_text(errors="replace").splitlines()
             if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"bench/camera.py exited {proc.returncode} without a result; stderr tail: "
                           f"{children.tail('camera')}")
    result = json.loads(lines[-1])
    if "error" in result:
        raise RuntimeError(f"bench/camera.py: {result['error']}")
    return {key: value for key, value in result.items() if key not in ("bench", "cpus")}


def write_diffusion_policy(folder: Path) -> Path:
    """An untrained pixel diffusion policy (the default DiffusionConfig with DDIM-10, twice the default's steps, as
    the issue's target names it; 16-step chunks, 8 executed) for DRIVER_ROBOT's two cameras at DRIVER_IMAGE_SIZE and
    the state: trained weights cost the same time."""
    from robot_rl.policies.config import DiffusionConfig
    from robot_rl.policies.diffusion import DiffusionPolicy
    from robot_rl.policies.normalizer import Normalizer
    from robot_rl.ros.nodes.learner_params import robot_task_spaces

    spec, action_dim = robot_task_spaces(str(DRIVER_ROBOT), "pixels", DRIVER_IMAGE_SIZE)
    rng = np.random.default_rng(0)
    normalizer = Normalizer().fit({"state": rng.standard_normal((50, spec["state"].shape[0])).astype(np.float32),
                                   "action": rng.uniform(-0.3, 0.3, (50, action_dim)).astype(np.float32)})
    return DiffusionPolicy.create(DiffusionConfig(inference_steps=10), spec, action_dim, normalizer).save(folder)


def bench_realtime_diffusion(children: Children, tmp: Path, args) -> dict:
    """A real-time actor node (10 Hz timer) running a diffusion policy against the sim node in driver mode
    (640x480 cameras, joint_states, JointTrajectory commands) for `--realtime-ticks` timer ticks: the lateness of
    each tick after its period's start (the actor's status `tick_late_ms`), holds while a chunk was not ready
    (`policy_late`), and the chunk counters (actions executed, dropped as stale on arrival, expired unexecuted)."""
    domain = DOMAINS["realtime_diffusion"]
    policy = write_diffusion_policy(tmp / "diffusion_policy")
    stats = tmp / "realtime_actor.json"
    children.start("rt_sim", [sys.executable, "-m", "robot_rl.sim.node", "--task", "PickCube-v0", "--ros-args",
                              "-p", f"robot:={DRIVER_ROBOT}"], domain)
    actor = children.start("rt_actor", [
        sys.executable, "-m", "robot_rl.ros.nodes.actor_node", "--ros-args", "-p", f"robot:={DRIVER_ROBOT}",
        "-p", "obs_mode:=pixels", "-p", f"weights_path:={policy}", "-p", "device:=cpu", "-p", "deterministic:=true",
        "-p", "stream_transitions:=false", "-p", f"stats_path:={stats}"], domain)
    deadline = time.monotonic() + args.realtime_ticks / CONTROL_HZ + 90.0
    status: dict = {}
    while time.monotonic() < deadline:
        time.sleep(1.0)
        if actor.poll() is not None:
            raise RuntimeError(f"the actor exited {actor.returncode}; stderr tail: {children.tail('rt_actor')}")
        try:
            status = json.loads(stats.read_text())
        except (OSError, ValueError):
            continue
        if status.get("tick_late_ms", {}).get("n", 0) >= args.realtime_ticks:
            break
    else:
        raise RuntimeError(f"fewer than {args.realtime_ticks} ticks before the deadline: {status.get('tick_late_ms')}")
    children.stop(actor, grace_s=10.0)
    status = json.loads(stats.read_text())
    ticks = status["tick_late_ms"]
    chunks = status.get("chunks", {})
    return {"ticks": ticks, "commands": status["commands"], "transitions": status["transitions"],
            "episodes": status["episodes"], "policy_late": status["policy_late"], "held": status["held"],
            "holds": status["holds"], "chunks": chunks, "stale_actions_executed": 0,
            "meets_target": ticks["p99"] <= 20.0,
            "note": "every executed action was the one due in its tick's control period (by construction: a "
                    "chunk's actions due before it arrived are dropped, counted in chunks.stale)"}


def bench_transitions(children: Children, tmp: Path, args) -> dict:
    domain = DOMAINS["transitions"]
    run_dir = tmp / "learner_run"
    learner = children.start("learner", [
        sys.executable, "-m", "robot_rl.ros.nodes.learner_node", "--ros-args", "-p", f"run_dir:={run_dir}",
        "-p", "obs_mode:=pixels", "-p", f"image_size:={args.image_size}", "-p", "demos:=0",
        "-p", "updates_per_transition:=0.0"], domain)
    feeder = children.role("feeder", "feeder", domain, "--duration", str(args.duration),
                           "--window", str(args.window), "--image-size", str(args.image_size))
    try:
        raw = children.result("feeder", feeder, timeout=args.phase_timeout)
    except RuntimeError as error:
        raise RuntimeError(f"{error}; learner stderr tail: {children.tail('learner')}") from None
    finally:
        learner.kill()  # SIGINT would make it checkpoint its replay buffers first; nothing here needs that
        learner.wait()
        children.stop(feeder)
    rate = raw["acked_per_s"]
    if rate is None:
        raise RuntimeError(f"no acknowledgements measured ({raw['acked_total']} acked of {raw['sent']} sent); "
                           f"learner stderr tail: {children.tail('learner')}")
    return {
        "acked_transitions_per_s": round(rate, 1), "ratio_to_10hz": round(rate / CONTROL_HZ, 1),
        "target_ratio": 10.0, "meets_target": bool(rate / CONTROL_HZ >= 10.0),
        "payload_bytes_per_transition": int(raw["bytes_per_transition_in_batch"]),
        "payload_bytes_single_transition_message": raw["bytes_per_transition_single"],
        "payload_mb_per_s": round(rate * raw["bytes_per_transition_in_batch"] / 1e6, 1),
        "batch": TRANSITION_BATCH, "window": args.window, "measured_s": round(raw["measured_s"], 2),
        "acked_total": raw["acked_total"], "sent": raw["sent"],
        "encode_batch_ms": stats_ms(raw["encode_batch_s"]),
        "first_ack_s": round(raw["first_ack_s"], 2) if raw["first_ack_s"] is not None else None,
        "image_size": args.image_size, "cameras": 2,
    }


def bench_weights(children: Children, args) -> dict:
    domain = DOMAINS["weights"]
    sizes = [str(s) for s in args.weight_sizes]
    # Both build their agents at start-up (an actor has its agent before new weights arrive), in parallel.
    sub = children.role("weights_sub", "weights_sub", domain, "--sizes", *sizes)
    pub = children.role("weights_pub", "weights_pub", domain, "--broadcasts", str(args.broadcasts), "--sizes", *sizes)
    try:
        raw = children.result("weights_pub", pub, timeout=args.phase_timeout)
    except RuntimeError as error:
        raise RuntimeError(f"{error}; subscriber stderr tail: {children.tail('weights_sub')}") from None
    finally:
        children.stop(sub)
    out = {}
    for size, row in raw.items():
        apply_stats = stats_ms(row["apply"])
        decode = stats_ms(np.add(row["copy"], row["decode"]))
        out[f"pixels_2x{size}"] = {
            "payload_mb": round(row["payload_bytes"] / 1e6, 3), "publish_to_received_ms": stats_ms(row["latency"]),
            "decode_ms": decode, "apply_ms": apply_stats,
            "decode_plus_apply_p50_ms": round(decode["p50"] + apply_stats["p50"], 3),
            "publish_to_applied_ms": stats_ms(row["to_applied"]), "serialize_ms": stats_ms(row["serialize"]),
            "lost": row["lost"],
        }
    return out


def run_inner(args) -> int:
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="bench_ros_"))
    children = Children(tmp)
    result: dict = {"bench": "ros", "quick": bool(args.quick), "smoke": bool(args.smoke),
                    "network": {"private_namespace": os.environ.get(NETNS_FLAG) == "1",
                                "discovery_range": os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE"),
                                "domain_ids": DOMAINS},
                    "cpus": os.cpu_count(), "loadavg_1m_start": round(os.getloadavg()[0], 2)}
    errors: dict[str, str] = {}
    files: list[WeightFiles] = []

    def latency(obs_mode: str) -> dict:
        # The echo baseline first: the pixel weights are made in a thread while the state actor starts up.
        try:
            baseline = echo_baseline(children, args, obs_mode, "echo", "robot",
                                     ["--obs-mode", obs_mode, "--image-size", str(args.image_size)],
                                     args.frames if obs_mode == "state" else args.pixel_frames)
        except RuntimeError as error:
            baseline = {"error": str(error)}
        if not files:
            files.append(WeightFiles(tmp, args))
        return bench_latency(children, files[0], args, obs_mode, baseline)

    def driver_latency() -> dict:
        if not files:
            files.append(WeightFiles(tmp, args))
        return bench_driver_latency(children, files[0], args)

    phases = [("obs_to_command_state", lambda: latency("state"))]
    if not args.no_pixels_latency:
        phases.append((f"obs_to_command_pixels_2x{args.image_size}", lambda: latency("pixels")))
    if not args.no_driver_latency:
        phases.append(("obs_to_command_640x480", driver_latency))
    phases += [(f"transitions_pixels_2x{args.image_size}", lambda: bench_transitions(children, tmp, args)),
               ("weights_broadcast", lambda: bench_weights(children, args))]
    if not args.no_camera:
        phases.append(("camera_node", lambda: bench_camera_node(children, args)))
    if not args.no_realtime_diffusion:
        phases.append(("realtime_diffusion_actor", lambda: bench_realtime_diffusion(children, tmp, args)))
    try:  # SIGTERM, like SIGINT, raises (Terminated: the entry point's interrupts.handling): report what we have
        for name, phase in phases:
            phase_start = time.monotonic()
            log(f"{name} ...")
            try:
                result[name] = phase()
                result[name]["phase_s"] = round(time.monotonic() - phase_start, 1)
            except Exception as error:  # noqa: BLE001 - one failed phase must not lose the others' figures
                errors[name] = f"{type(error).__name__}: {error}"
                log(f"{name} failed:\n{traceback.format_exc()}")
            finally:
                children.stop_all()  # nothing of one phase may run into the next
    except KeyboardInterrupt:
        errors["interrupted"] = f"stopped by a signal after {time.monotonic() - started:.0f}s (--timeout?)"
    finally:
        children.stop_all()
        if args.keep_logs:
            log(f"logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if errors:
        result["errors"] = errors
    result["loadavg_1m_end"] = round(os.getloadavg()[0], 2)
    result["wall_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(result), flush=True)
    if interrupts.requested() is not None:  # stopped: 130 / 143, after the figures it had
        return interrupts.exit_status()
    return 1 if errors else 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--smoke", action="store_true",
                        help="the state round trip (10 frames), transitions at 2x64x64 (1 s) and the 64 px weights "
                             "(2 broadcasts) only: checks that the bench runs (tests run this)")
    parser.add_argument("--domain-id", type=int, default=None,
                        help="ROS_DOMAIN_ID of every measurement (default: one per measurement, 90-97)")
    parser.add_argument("--no-pixels-latency", action="store_true", help="skip the camera round-trip measurement")
    parser.add_argument("--no-driver-latency", action="store_true",
                        help="skip the 640x480 round trip through robots/sim_panda_driver.yaml")
    parser.add_argument("--no-camera", action="store_true", help="skip the camera node's latency (bench/camera.py)")
    parser.add_argument("--no-realtime-diffusion", action="store_true",
                        help="skip the real-time diffusion actor's tick lateness")
    parser.add_argument("--realtime-ticks", type=int, default=None,
                        help="timer ticks of the real-time diffusion actor (default 3000, --quick 300)")
    parser.add_argument("--camera-seconds", type=float, default=None,
                        help="camera node measurement time per format (default 3 with --quick, else 10)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the child processes' logs")
    parser.add_argument("--timeout", type=float, default=900.0, help="kill everything after this many seconds")
    parser.add_argument("--role", choices=("robot", "echo", "driver", "driver_echo", "feeder", "weights_pub",
                                           "weights_sub"), help=argparse.SUPPRESS)
    # role options
    parser.add_argument("--obs-mode", default="state", help=argparse.SUPPRESS)
    parser.add_argument("--weights", default="", help=argparse.SUPPRESS)
    parser.add_argument("--frames", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--warmup", type=int, default=20, help=argparse.SUPPRESS)
    parser.add_argument("--image-size", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--policy-calls", type=int, default=200, help=argparse.SUPPRESS)
    parser.add_argument("--go-file", nargs="*", default=[], help=argparse.SUPPRESS)
    parser.add_argument("--duration", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--window", type=int, default=64, help=argparse.SUPPRESS)
    parser.add_argument("--broadcasts", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    quick, smoke = args.quick or args.smoke, args.smoke and args.role is None
    if smoke:
        args.no_pixels_latency = args.no_driver_latency = args.no_camera = args.no_realtime_diffusion = True
        args.frames = args.frames if args.frames is not None else 10
        args.warmup = 3 if args.warmup == 20 else args.warmup  # unless given
    if args.domain_id is not None:
        DOMAINS.update((phase, args.domain_id) for phase in DOMAINS)
    args.image_size = args.image_size or (64 if smoke else 128)
    args.frames = args.frames if args.frames is not None else (100 if quick else 300)
    args.pixel_frames = 60 if quick else 200
    args.driver_frames = 100 if quick else 400
    args.camera_seconds = args.camera_seconds if args.camera_seconds is not None else (3.0 if quick else 10.0)
    args.warmup_frames = args.warmup
    args.duration = args.duration if args.duration is not None else (1.0 if smoke else 4.0 if quick else 10.0)
    args.warmup_s = 0.5 if smoke else 1.0
    args.broadcasts = args.broadcasts if args.broadcasts is not None else (2 if smoke else 5 if quick else 12)
    args.weight_sizes = args.sizes or ([64] if smoke else [64, 128])
    args.policy_calls = (5 if smoke else 50) if quick and args.role is None else args.policy_calls
    args.start_timeout = 60.0
    args.first_timeout = 30.0  # the actor's first step compiles the policy
    args.frame_timeout = 5.0
    args.phase_timeout = 120.0
    args.realtime_ticks = args.realtime_ticks or (300 if quick else 3000)
    return args


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.role is not None:
        roles = {"robot": role_robot, "echo": role_echo, "driver": role_driver, "driver_echo": role_driver_echo,
                 "feeder": role_feeder, "weights_pub": role_weights_pub, "weights_sub": role_weights_sub}
        signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        roles[args.role](args)
        return 0
    if not os.environ.get(INNER_FLAG):
        from private_network import rerun_in_private_network

        outer_domain = OUTER_DOMAIN if args.domain_id is None else args.domain_id
        return rerun_in_private_network(__file__, argv, bench="ros", domain_id=outer_domain, inner_flag=INNER_FLAG,
                                        timeout_s=args.timeout, extra_env={NETNS_FLAG: "1"})
    return run_inner(args)


if __name__ == "__main__":
    sys.exit(interrupts.run_program(main))  # a stop ends what the bench started
