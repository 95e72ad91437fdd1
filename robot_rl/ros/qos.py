"""Named QoS profiles per stream and the project's topic names. Importable without rclpy.

Streams (all reliable: with the default transport best-effort dropped most large images, see ROS2-NOTES.md):

=============  ===============  ==========  ======================================================================
stream         durability       keep last   why
=============  ===============  ==========  ======================================================================
sensors        volatile         2           fresh data only; 2 lets a slow reader see the newest frame
commands       volatile         1           only the latest target matters; an old command must never be replayed
latched_state  transient-local  1           estop / teleop engaged: a node that starts late must know the state
transitions    volatile         64          actor -> learner; the actor's outbox re-sends what was not acknowledged
acks           volatile         16          learner -> actor persistence acknowledgements (cumulative)
weights        transient-local  1           a learner's latest weights reach actors that start (or restart) later
events         volatile         16          rewards and other per-step scalars
file_offers    transient-local  16          bundles a node offers (robot_rl.ros.nodes.file_share_node); a writer keeps its last
file_requests  volatile         16          asks one peer for a bundle (or its missing files)
file_chunks    volatile         64          paced 256 kB chunks; a receiver asks again for what did not arrive
=============  ===============  ==========  ======================================================================

Transient-local needs both sides: publish AND subscribe with the same stream's profile.
Use :func:`qos_profile` (builds an ``rclpy.qos.QoSProfile``) with the stream named in :data:`TOPICS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Durability = Literal["volatile", "transient_local"]


@dataclass(frozen=True)
class StreamQos:
    """QoS settings of one stream, independent of rclpy: reliable history of `depth` with a durability."""

    name: str
    durability: Durability
    depth: int

    def to_rclpy(self, depth: int | None = None):
        """rclpy.qos.QoSProfile for this stream (reliable, keep last `depth` or the stream's default)."""
        from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

        depth = self.depth if depth is None else depth
        if depth < 1:
            raise ValueError(f"QoS depth for stream {self.name!r} must be >= 1, got {depth}")
        return QoSProfile(
            history=HistoryPolicy.KEEP_LAST,
            depth=depth,
            reliability=ReliabilityPolicy.RELIABLE,
            durability=(
                DurabilityPolicy.TRANSIENT_LOCAL if self.durability == "transient_local" else DurabilityPolicy.VOLATILE
            ),
        )


SENSORS = StreamQos("sensors", "volatile", 2)
COMMANDS = StreamQos("commands", "volatile", 1)
LATCHED_STATE = StreamQos("latched_state", "transient_local", 1)
TRANSITIONS = StreamQos("transitions", "volatile", 64)
ACKS = StreamQos("acks", "volatile", 16)
WEIGHTS = StreamQos("weights", "transient_local", 1)
EVENTS = StreamQos("events", "volatile", 16)
FILE_OFFERS = StreamQos("file_offers", "transient_local", 16)
FILE_REQUESTS = StreamQos("file_requests", "volatile", 16)
FILE_CHUNKS = StreamQos("file_chunks", "volatile", 64)

STREAMS: dict[str, StreamQos] = {
    s.name: s for s in (SENSORS, COMMANDS, LATCHED_STATE, TRANSITIONS, ACKS, WEIGHTS, EVENTS, FILE_OFFERS,
                        FILE_REQUESTS, FILE_CHUNKS)
}


def qos_profile(stream: str | StreamQos, depth: int | None = None):
    """rclpy QoSProfile of a named stream (see module table); `depth` overrides the stream's keep-last depth."""
    spec = stream if isinstance(stream, StreamQos) else STREAMS.get(stream)
    if spec is None:
        raise KeyError(f"unknown QoS stream {stream!r}; known: {sorted(STREAMS)}")
    return spec.to_rclpy(depth)


def sensor_qos(reliability: str = "reliable", depth: int = 2):
    """A sensor subscription's QoSProfile (volatile, keep last `depth`) with the robot file's reliability.

    A best-effort subscription receives from reliable and best-effort publishers alike (most camera drivers publish
    with SensorDataQoS, best-effort); a reliable one never matches a best-effort publisher.
    """
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    if reliability not in ("reliable", "best_effort"):
        raise ValueError(f"sensor QoS reliability {reliability!r} must be reliable or best_effort")
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth, durability=DurabilityPolicy.VOLATILE,
                      reliability=ReliabilityPolicy.RELIABLE if reliability == "reliable"
                      else ReliabilityPolicy.BEST_EFFORT)


# ---------------------------------------------------------------------------------------------------- topic names
# Robot-facing topics use standard messages so real drivers and the sim node are interchangeable.

CAMERA_FRONT_IMAGE = "/camera/front/image_raw"  # sensor_msgs/Image, rgb8, frame front_camera
CAMERA_WRIST_IMAGE = "/camera/wrist/image_raw"  # sensor_msgs/Image, rgb8, frame wrist_camera
JOINT_STATES = "/joint_states"  # sensor_msgs/JointState, arm joints (+ gripper finger joints)
TCP_POSE = "/tcp_pose"  # geometry_msgs/PoseStamped, tool centre point in the robot base frame
TCP_TWIST = "/tcp_twist"  # geometry_msgs/TwistStamped, TCP linear [m/s] and angular [rad/s] velocity, base frame
GRIPPER_STATE = "/gripper/state"  # sensor_msgs/JointState, gripper opening (position) and effort
COMMAND_TARGET_POSE = "/command/target_pose"  # geometry_msgs/PoseStamped, absolute TCP target in the base frame
COMMAND_GRIPPER = "/command/gripper"  # std_msgs/Float64, gripper target in [0 closed, 1 open]
TELEOP_TWIST = "/teleop/twist"  # geometry_msgs/TwistStamped, human TCP velocity command
TELEOP_ENGAGED = "/teleop/engaged"  # std_msgs/Bool, true while the human overrides the policy (latched)
TELEOP_GRIPPER = "/teleop/gripper"  # std_msgs/Float64, human gripper target in [0 closed, 1 open]
TELEOP_EPISODE = "/teleop/episode"  # std_msgs/String, episode key: "success" | "failure" | "reset"
ACTOR_EPISODE = "/actor/episode"  # std_msgs/UInt32, index of the episode the actor (re)started (per namespace)
ACTOR_TRANSITIONS = "/actor/transitions"  # std_msgs/UInt8MultiArray, msgpack batch with actor id + sequence numbers
LEARNER_WEIGHTS = "/learner/weights"  # std_msgs/UInt8MultiArray, msgpack policy weights + version (latched)
LEARNER_ACK = "/learner/ack"  # std_msgs/UInt8MultiArray, msgpack {actor id: last persisted sequence number}
SAFETY_ESTOP = "/safety/estop"  # std_msgs/Bool, true = stop the robot now (latched)
TASK_REWARD = "/task/reward"  # std_msgs/Float32, per-step reward from a classifier or the sim task
TASK_SUCCESS = "/task/success"  # std_msgs/Bool, the task's success flag of the same step
# Sim-only privileged streams (a real robot has none): task object state for state-based sim runs, the scripted
# expert's action for the current state (the "hands" of the scripted teleop node), and the failure the hand's target is
# about to cause (its eyes, with watch_hazards).
SIM_OBJECT_STATE = "/sim/object_state"  # std_msgs/Float32MultiArray, the task's OBJECT_STATE_LAYOUT
SIM_EXPERT_ACTION = "/sim/expert_action"  # std_msgs/Float32MultiArray, expert action in the env's action space
SIM_IMMINENT_FAILURE = "/sim/imminent_failure"  # std_msgs/String, RobotEnv.imminent_failure of the target ('': none)
# Files that cross between hosts once (robot_rl.ros.nodes.file_share_node): msgpack offers, requests and chunks.
FILES_OFFER = "/files/offer"  # std_msgs/UInt8MultiArray, a node's bundles {name, digest, manifest} (latched)
FILES_REQUEST = "/files/request"  # std_msgs/UInt8MultiArray, {requester, server, digest, paths}
FILES_CHUNK = "/files/chunk"  # std_msgs/UInt8MultiArray, {digest, path, offset, data} or {digest, error}


@dataclass(frozen=True)
class TopicSpec:
    """A project topic: its name, ROS message type ("pkg/msg/Type") and QoS stream."""

    name: str
    message_type: str
    stream: StreamQos


TOPICS: dict[str, TopicSpec] = {
    t.name: t
    for t in (
        TopicSpec(CAMERA_FRONT_IMAGE, "sensor_msgs/msg/Image", SENSORS),
        TopicSpec(CAMERA_WRIST_IMAGE, "sensor_msgs/msg/Image", SENSORS),
        TopicSpec(JOINT_STATES, "sensor_msgs/msg/JointState", SENSORS),
        TopicSpec(TCP_POSE, "geometry_msgs/msg/PoseStamped", SENSORS),
        TopicSpec(TCP_TWIST, "geometry_msgs/msg/TwistStamped", SENSORS),
        TopicSpec(GRIPPER_STATE, "sensor_msgs/msg/JointState", SENSORS),
        TopicSpec(COMMAND_TARGET_POSE, "geometry_msgs/msg/PoseStamped", COMMANDS),
        TopicSpec(COMMAND_GRIPPER, "std_msgs/msg/Float64", COMMANDS),
        TopicSpec(TELEOP_TWIST, "geometry_msgs/msg/TwistStamped", COMMANDS),
        TopicSpec(TELEOP_ENGAGED, "std_msgs/msg/Bool", LATCHED_STATE),
        TopicSpec(TELEOP_GRIPPER, "std_msgs/msg/Float64", COMMANDS),
        TopicSpec(TELEOP_EPISODE, "std_msgs/msg/String", EVENTS),
        TopicSpec(ACTOR_EPISODE, "std_msgs/msg/UInt32", EVENTS),
        TopicSpec(ACTOR_TRANSITIONS, "std_msgs/msg/UInt8MultiArray", TRANSITIONS),
        TopicSpec(LEARNER_WEIGHTS, "std_msgs/msg/UInt8MultiArray", WEIGHTS),
        TopicSpec(LEARNER_ACK, "std_msgs/msg/UInt8MultiArray", ACKS),
        TopicSpec(SAFETY_ESTOP, "std_msgs/msg/Bool", LATCHED_STATE),
        TopicSpec(TASK_REWARD, "std_msgs/msg/Float32", EVENTS),
        TopicSpec(TASK_SUCCESS, "std_msgs/msg/Bool", EVENTS),
        TopicSpec(SIM_OBJECT_STATE, "std_msgs/msg/Float32MultiArray", SENSORS),
        TopicSpec(SIM_EXPERT_ACTION, "std_msgs/msg/Float32MultiArray", SENSORS),
        TopicSpec(SIM_IMMINENT_FAILURE, "std_msgs/msg/String", SENSORS),
        TopicSpec(FILES_OFFER, "std_msgs/msg/UInt8MultiArray", FILE_OFFERS),
        TopicSpec(FILES_REQUEST, "std_msgs/msg/UInt8MultiArray", FILE_REQUESTS),
        TopicSpec(FILES_CHUNK, "std_msgs/msg/UInt8MultiArray", FILE_CHUNKS),
    )
}


def topic_qos(topic: str, depth: int | None = None):
    """rclpy QoSProfile for one of the project's topics (see :data:`TOPICS`)."""
    spec = TOPICS.get(topic)
    if spec is None:
        raise KeyError(f"unknown topic {topic!r}; known: {sorted(TOPICS)}")
    return spec.stream.to_rclpy(depth)
