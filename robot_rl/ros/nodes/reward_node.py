"""The reward node: a trained success classifier (robot_rl.agents.reward_classifier) on the robot's cameras -> the task's
reward and success, the way the sim node publishes them, so a real robot trains with a learned reward.

Run::

    python -m robot_rl.ros.nodes.reward_node --ros-args -r __ns:=/robot1 -p model:=runs/reward -p robot:=robots/my_arm.yaml

Topics (relative names resolve in the node's namespace):

=======================  ===  ========================================================================================
camera topics            in   the cameras the classifier was trained on, with topic, message type (Image or
                              CompressedImage), QoS and crop / resize from the robot file's ``cameras``
actor/episode            in   a new episode restarts the count of consecutive success frames
task/reward              out  std_msgs/Float32 per classified frame: 1.0 on success, else 0.0 (the sim task's sparse
                              reward); with ``-p reward:=probability`` the classifier's probability
task/success             out  std_msgs/Bool of the same frame, published right after its reward
=======================  ===  ========================================================================================

A frame is classified when the classifier's first camera delivers one, with the newest frame of each other camera
(none yet, or older than ``max_frame_age_s``: the frame is skipped, with a throttled log line). Success is
published once ``consecutive`` frames in a row reach ``threshold``. The actor node consumes both topics; a human's
success / failure keys (teleop/episode) still decide over it in the actor. A frame that cannot be converted
(malformed message, unknown encoding, undecodable JPEG) is dropped with a log line naming the topic and the
reason; it never stops the node. A missing or unreadable model or robot file, a camera the robot file does not
have, or an invalid parameter is one error line and exit status 2.
"""

from __future__ import annotations

if __name__ == "__main__":  # a program's start, before the heavy imports below
    from robot_rl.core.startup import program_start

    program_start()

import collections
import math
import sys
import time

import numpy as np

from robot_rl.ros import qos
from robot_rl.ros.node_util import NodeStartupError, declare_parameters, relative_name, topic_publisher

NODE_NAME = "reward"
REWARD_MODES = ("success", "probability")

PARAMETERS: tuple[tuple[str, object, str], ...] = (
    ("model", "", "reward classifier folder written by `robot-rl train-reward` (required)"),
    ("robot", "sim_panda", "robot file (a path, or a name in robots/): camera topics, types, QoS, crop / resize"),
    ("threshold", 0.0, "success probability threshold (0: the classifier's own)"),
    ("consecutive", 1, "success only after this many consecutive frames at or above the threshold"),
    ("reward", "success", "success: 1.0 on a success frame, else 0.0 | probability: the classifier's probability"),
    ("max_frame_age_s", 0.5, "another camera's newest frame older than this [s] is not paired with a new frame"),
)
"""The node's ROS parameters (name, default, description)."""


def check_parameters(node_name: str, values) -> None:
    """NodeStartupError for the first parameter value (`values`: name -> value) the node cannot start with (threshold
    is checked once the classifier, whose own threshold 0 stands for, is loaded). Cheap: run_node applies it to the
    command line's values before anything starts; the node to its declared values."""
    if not values("model"):
        raise NodeStartupError("parameter 'model' is required: the folder `robot-rl train-reward` wrote")
    if int(values("consecutive")) < 1:
        raise NodeStartupError(f"parameter 'consecutive' must be >= 1, got {int(values('consecutive'))}")
    if str(values("reward")) not in REWARD_MODES:
        raise NodeStartupError(f"parameter 'reward' must be one of {', '.join(REWARD_MODES)}, "
                               f"got {str(values('reward'))!r}")
    if not float(values("max_frame_age_s")) > 0:
        raise NodeStartupError(f"parameter 'max_frame_age_s' must be > 0, got {float(values('max_frame_age_s'))}")


class SuccessFilter:
    """Success after `consecutive` frames in a row at or above `threshold` (pure; the node feeds it)."""

    def __init__(self, threshold: float, consecutive: int):
        self.threshold = float(threshold)
        self.consecutive = int(consecutive)
        self.run = 0

    def update(self, probability: float) -> bool:
        self.run = self.run + 1 if probability >= self.threshold else 0
        return self.run >= self.consecutive

    def reset(self) -> None:
        self.run = 0


class RewardNode:
    """rclpy node around a `RewardClassifier` (see the module doc)."""

    def __init__(self, *, node_name: str = NODE_NAME, context=None, cli_args: list[str] | None = None):
        import rclpy
        from sensor_msgs.msg import CompressedImage, Image
        from std_msgs.msg import Bool, Float32, UInt32

        from robot_rl.agents.reward_classifier import RewardClassifierError, load_reward_classifier
        from robot_rl.actor.robot_config import RobotConfigError, load_robot_config
        from robot_rl.core.vision import ImageError, ImageTransform, transform_mismatches

        self.node = node = rclpy.create_node(node_name, context=context, cli_args=cli_args)
        self._log = node.get_logger()
        param = declare_parameters(node, PARAMETERS)
        check_parameters(node.get_name(), param)
        try:
            self.classifier = load_reward_classifier(str(param("model")))
            robot = load_robot_config(str(param("robot")))
        except (RewardClassifierError, RobotConfigError) as error:
            raise NodeStartupError(str(error)) from None
        threshold = float(param("threshold")) or self.classifier.threshold
        consecutive = int(param("consecutive"))
        self.reward_mode = str(param("reward"))
        self.max_frame_age_s = float(param("max_frame_age_s"))
        if not 0.0 < threshold < 1.0:
            raise NodeStartupError(f"parameter 'threshold' must be in (0, 1) (0: the classifier's), got {threshold}")
        self.filter = SuccessFilter(threshold, consecutive)

        self._ImageError = ImageError
        self.cameras: dict[str, dict] = {}  # observation key -> topic, transform, newest frame
        for key, shape in self.classifier.shapes.items():
            name = key.removeprefix("images/")
            try:
                camera = robot.camera(name)
            except KeyError as error:
                raise NodeStartupError(f"{robot.path}: {error.args[0]}; the classifier {param('model')} needs "
                                       f"{list(self.classifier.cameras)}") from None
            if shape[0] != shape[1]:
                raise NodeStartupError(f"classifier image {key} is {shape[1]}x{shape[0]}, not square: the robot "
                                       "file's camera transform makes square images")
            recorded = self.classifier.image_transforms.get(key)
            problems = transform_mismatches({key: recorded}, robot, shape[0]) if recorded else []
            if problems:
                raise NodeStartupError(f"classifier {param('model')} was trained on frames cut another way than the "
                                       f"robot file's cameras give now: {problems[0]}")
            self.cameras[key] = {"topic": camera.topic, "type": camera.type, "image": None, "received": -math.inf,
                                 "transform": ImageTransform.from_camera(camera, shape[0]),
                                 "qos": qos.sensor_qos(camera.qos)}
        self.trigger = next(iter(self.cameras))
        # The trigger camera's subscription last: callbacks ready at once run in creation order, so the other
        # cameras' frames of the same moment are in before the trigger's frame is classified with them.
        for key in [*list(self.cameras)[1:], self.trigger]:
            camera = self.cameras[key]
            msg_type = CompressedImage if camera["type"] == "CompressedImage" else Image
            node.create_subscription(msg_type, relative_name(camera["topic"]),
                                     lambda msg, k=key: self._on_image(k, msg), camera["qos"])
        # compile now, not at the first frame
        self.classifier.predict({key: np.zeros(shape, np.uint8) for key, shape in self.classifier.shapes.items()})
        node.create_subscription(UInt32, relative_name(qos.ACTOR_EPISODE), self._on_episode,
                                 qos.topic_qos(qos.ACTOR_EPISODE))
        self._reward_pub = topic_publisher(node, Float32, qos.TASK_REWARD)
        self._success_pub = topic_publisher(node, Bool, qos.TASK_SUCCESS)
        self._Float32, self._Bool = Float32, Bool
        self.rejected: collections.Counter[str] = collections.Counter()
        self._logged: dict[str, float] = {}
        self.published = 0
        self.callbacks_run = 0
        streams = ", ".join(f"{key} <- {c['topic']} ({c['type']})" for key, c in self.cameras.items())
        self._log.info(f"reward node up: model={param('model')} cameras: {streams}; threshold={threshold:g} "
                       f"consecutive={consecutive} reward={self.reward_mode} namespace={node.get_namespace()}")

    def _throttled(self, what: str, text: str) -> None:
        now = time.monotonic()
        if now - self._logged.get(what, -math.inf) >= 1.0:
            self._logged[what] = now
            self._log.warning(text)

    def _convert(self, key: str, msg) -> np.ndarray:
        """The message's frame as the classifier's (size, size, 3) RGB image; ImageError / MessageError if not."""
        from robot_rl.ros.convert import image_from_msg
        from robot_rl.core.vision import decode_compressed, to_rgb

        camera = self.cameras[key]
        if camera["type"] == "CompressedImage":
            rgb = decode_compressed(msg.data, msg.format)
        else:
            rgb = to_rgb(image_from_msg(msg), msg.encoding)
        return camera["transform"](rgb)

    def _on_image(self, key: str, msg) -> None:
        from robot_rl.ros.convert import MessageError

        self.callbacks_run += 1
        camera = self.cameras[key]
        try:
            image = self._convert(key, msg)
        except (MessageError, self._ImageError) as error:
            self.rejected[camera["topic"]] += 1
            self._throttled(camera["topic"], f"dropped a frame of {camera['topic']}: {error} "
                                             f"({self.rejected[camera['topic']]} so far)")
            return
        camera["image"], camera["received"] = image, time.monotonic()
        if key == self.trigger:
            self._classify()

    def _classify(self) -> None:
        now = time.monotonic()
        stale = [c["topic"] for c in self.cameras.values() if now - c["received"] > self.max_frame_age_s]
        if stale:
            self._throttled("stale", f"not classifying: no frame of {', '.join(stale)} in the last "
                                     f"{self.max_frame_age_s:g} s")
            return
        probability = float(self.classifier.predict({key: c["image"] for key, c in self.cameras.items()}))
        success = self.filter.update(probability)
        reward = probability if self.reward_mode == "probability" else float(success)
        self._reward_pub.publish(self._Float32(data=reward))
        self._success_pub.publish(self._Bool(data=success))
        self.published += 1

    def _on_episode(self, msg) -> None:
        self.callbacks_run += 1
        self.filter.reset()

    def destroy(self) -> None:
        self.node.destroy_node()


def main(argv: list[str] | None = None) -> int:
    from robot_rl.ros.node_util import run_node

    argv = sys.argv if argv is None else argv
    return run_node(RewardNode, argv, NODE_NAME, PARAMETERS, check_parameters)


if __name__ == "__main__":
    sys.exit(main())
