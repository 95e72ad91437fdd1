"""What an actor leaves behind besides commands and transitions: recorded episodes (``record_path``). Pure: the ROS
actor node hands them finished episodes. The ``eval.json`` of a saved policy's episodes (``eval_out``) is
robot_rl.sim.evaluate.write_actor_eval: the same statistics as ``robot-rl eval``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robot_rl.actor.runner import EpisodeEnd


class EpisodeRecorder:
    """Writes each finished episode's steps (observation, executed action, reward, flags, wall time) to a dataset,
    with the robot file and the camera transforms in its attributes (demos from teleop)."""

    def __init__(self, path: Path, *, robot, task: str, fps: float, image_transform):
        self.path, self.robot, self.task, self.fps = Path(path), robot, task, fps
        self.image_transform = image_transform  # key -> robot_rl.core.vision.ImageTransform
        self._writer = None

    def record(self, end: EpisodeEnd) -> int:
        """Append the episode; returns its index in the dataset."""
        from robot_rl.data.episode_writer import EpisodeWriter
        from robot_rl.core.types import ArraySpec, ObservationSpec

        if self._writer is None:
            first = end.steps[0][0]
            obs_spec = dict(ObservationSpec.from_example(first.observation).entries)
            attrs = {"robot_config": self.robot.to_json(),
                     "image_transforms": {key: self.image_transform(key).to_json() for key in obs_spec
                                          if key.startswith("images/")}}
            self._writer = EpisodeWriter(self.path, obs_spec, ArraySpec(tuple(np.shape(first.action)), "float32"),
                                         fps=self.fps, task=self.task, robot=self.robot.name, attrs=attrs)
        for transition, wall_time in end.steps:
            self._writer.add_step(transition.observation, transition.action, transition.reward,
                                  transition.terminated, transition.truncated, transition.intervention, wall_time)
        return self._writer.end_episode(end.final_observation, success=bool(end.record["success"]))

    def close(self) -> None:
        """Release the dataset for the next writer."""
        if self._writer is not None:
            self._writer.close()
