"""What an actor leaves behind besides commands and transitions: recorded episodes (``record_path``) and the
``eval.json`` of a saved policy's episodes (``eval_out``). Pure: the ROS actor node hands them finished episodes."""

from __future__ import annotations

import json
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
        from robot_rl.data.episodes import EpisodeWriter
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


def write_actor_eval(results: list[dict], *, weights_path: str, eval_out: str, policy, task: str, obs_mode: str,
                     inference_steps: int, mode: str, deterministic: bool) -> tuple[Path, str]:
    """`robot-rl eval`'s eval.json (robot_rl.sim.evaluate: the same statistics) for the episodes an actor ran with a
    saved policy; the sim node's random stream places the objects, so episodes carry no seed. Returns the file and a
    one-line summary."""
    from robot_rl.sim.loop import EpisodeResult
    from robot_rl.core.report import success_text
    from robot_rl.sim.evaluate import Evaluation, env_settings_for, evaluation_summary, saved_policy_fields

    located, fields = saved_policy_fields(weights_path)
    out = located.parent / "eval" if eval_out == "auto" else Path(eval_out)
    evaluation = Evaluation(tuple(EpisodeResult(None, r["steps"], float(r["return"]), r["success"], r["seconds"])
                                  for r in results))
    obs_mode = obs_mode or env_settings_for(policy.observation_spec)["obs_mode"]
    summary = {"policy": fields.pop("policy"), **({"inference_steps": inference_steps} if inference_steps else {}),
               **fields, **evaluation_summary(evaluation, task=task, obs_mode=obs_mode, policy_kind=policy.kind,
                                              first_seed=None),
               "mode": mode, "deterministic": deterministic}
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps(summary, indent=2))
    return out / "eval.json", (f"success {success_text(evaluation.successes, len(evaluation))}, return "
                               f"{evaluation.mean_return:.2f}, length {evaluation.mean_length:.1f}")
