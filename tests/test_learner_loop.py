"""The ROS learner node's training loop without ROS (robot_rl.training.learner_loop): a run built, attached, trained to
its budget on transitions as the node ingests them, checkpointed and finished with result.json and the report; a
stop before the learner is ready; and a new run that never got going leaves nothing behind."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import numpy as np

from robot_rl.core.types import ObservationSpec
from robot_rl.learner.learner import LearnerConfig
from robot_rl.policies.registry import learner_plan
from robot_rl.ros.nodes.learner_params import PARAMETERS
from robot_rl.training.config import TrainConfig
from robot_rl.training.learner_loop import LearnerLoop, not_in_sim
from robot_rl.wire.protocol import make_source
from robot_rl.wire.transitions import StampedTransition, encode_transitions

COMPUTES_ONLY = True  # names robot_rl.ros modules, starts no ROS 2 node (tests/conftest.py)
SHAPES = {"state": ((14,), np.float32), "object_state": ((10,), np.float32)}
ACTION_DIM = 4
SOURCE = make_source("arm-a", "inc0")
REAL_ROBOT = SimpleNamespace(sim=False, name="arm", path=None)


class RecordingLog:
    """An rclpy-style logger that keeps its lines."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def info(self, message: str, **_) -> None:
        self.lines.append(("info", message))

    def warning(self, message: str, **_) -> None:
        self.lines.append(("warning", message))

    def error(self, message: str, **_) -> None:
        self.lines.append(("error", message))


def node_settings(run_dir, **changes) -> dict:
    """The learner node's parameters at their defaults, with `changes`."""
    return {**{name: default for name, default, _ in PARAMETERS}, "run_dir": str(run_dir), **changes}


def small_config(steps: int) -> TrainConfig:
    base = TrainConfig()
    sac = dataclasses.replace(base.sac, actor_hidden_dims=(16, 16), critic_hidden_dims=(16, 16))
    learner = LearnerConfig(batch_size=8, utd=1, online_capacity=400, demo_capacity=400, seed=1,
                            warmup_transitions=0)
    return TrainConfig(task="arm-task", obs_mode="state", demos=0, steps=steps, sac=sac, learner=learner)


def episode(seq: int, episode_index: int, length: int) -> list[StampedTransition]:
    rng = np.random.default_rng(episode_index)

    def observation():
        return {key: rng.normal(size=shape).astype(dtype) for key, (shape, dtype) in SHAPES.items()}

    items = []
    for step in range(length):
        last = step == length - 1
        items.append(StampedTransition(
            seq=seq + step, episode=episode_index, step=step, observation=observation(),
            action=rng.uniform(-1, 1, ACTION_DIM).astype(np.float32), reward=float(last), terminated=last,
            truncated=False, next_observation=observation(), intervention=False, success=last))
    return items


def new_loop(settings, cfg, log, published, statuses) -> LearnerLoop:
    def publish_weights(training_done: bool = False) -> bool:
        published.append(training_done)
        return True

    return LearnerLoop(settings, cfg, REAL_ROBOT, startup={"pid": 1, "interpreter_imports": 0.0}, log=log,
                       publish_weights=publish_weights, write_status=lambda: statuses.append(True))


def test_a_run_trains_to_its_budget_checkpoints_and_finishes_with_its_result_and_report(tmp_path):
    run_dir = tmp_path / "run"
    cfg = small_config(steps=10)
    log, published, statuses = RecordingLog(), [], []
    loop = new_loop(node_settings(run_dir, steps=10, checkpoint_every=4, eval_every=0, final_eval_episodes=3,
                                  demos=0, progress_every_s=0.0), cfg, log, published, statuses)
    run_dir.mkdir()
    loop.open_server()
    assert loop.phase == "starting" and not loop.stopping
    plan = learner_plan(cfg, ObservationSpec.from_shapes(SHAPES), ACTION_DIM)
    loop.build_learner(cfg, plan, check_demos=lambda: None)
    assert json.loads((run_dir / "config.json").read_text())["task"] == "arm-task"
    assert {"learner", "restore", "compile"} <= set(loop.startup)
    assert loop.attach() is None and published == [False]  # the first weights go out at once
    assert loop.phase == "training"

    items = episode(0, 0, 4) + episode(4, 1, 4) + episode(8, 2, 4)  # 12 transitions for a budget of 10
    loop.server.ingest(encode_transitions(SOURCE, items))
    while loop.work():
        pass

    assert loop.done and loop.phase == "done" and loop.exit_status == 0 and statuses == [True]
    assert published[-1] is True and not any(published[:-1])  # the final weights are marked training_done
    result = json.loads((run_dir / "result.json").read_text())
    assert result == {"received": 12, "trained_on": 10, "updates": loop.server.learner.updates}
    assert (run_dir / "report.md").is_file()
    assert [row[0] for row in loop.checkpoints] == [12, 12]  # one when 4 were due, one at the budget
    assert loop.server.metrics and loop.server.metrics[-1]["env_step"] <= 10
    # a real robot's run has no sim to evaluate in: said, not failed
    assert ("warning", f"no final evaluation: {not_in_sim(REAL_ROBOT, 'arm-task')}") in log.lines


def test_a_stop_before_the_learner_is_ready_has_nothing_to_checkpoint(tmp_path):
    log = RecordingLog()
    loop = new_loop(node_settings(tmp_path), small_config(steps=10), log, [], [])
    loop.open_server()
    assert loop.stop(2) is False and loop.stopping and loop.is_stopping()
    assert "before the learner was ready" in log.lines[-1][1]


def test_a_new_run_that_never_got_going_removes_what_this_start_made(tmp_path):
    made = tmp_path / "runs" / "new"
    loop = new_loop(node_settings(made), small_config(steps=10), RecordingLog(), [], [])
    made.mkdir(parents=True)
    loop.open_server()
    loop.remove_unstarted_run()
    assert not (tmp_path / "runs").exists()  # the folders this start made, its parent too

    existing = tmp_path / "mine"
    existing.mkdir()
    (existing / "notes.txt").write_text("kept")
    loop = new_loop(node_settings(existing), small_config(steps=10), RecordingLog(), [], [])
    loop.open_server()
    assert set(p.name for p in existing.iterdir()) > {"notes.txt"}
    loop.remove_unstarted_run()
    assert [p.name for p in existing.iterdir()] == ["notes.txt"]


def test_a_run_with_its_config_is_kept(tmp_path):
    run_dir = tmp_path / "run"
    loop = new_loop(node_settings(run_dir), small_config(steps=10), RecordingLog(), [], [])
    run_dir.mkdir()
    loop.open_server()
    (run_dir / "config.json").write_text("{}")
    loop.remove_unstarted_run()
    assert (run_dir / "config.json").is_file()
