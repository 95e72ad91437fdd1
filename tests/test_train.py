"""Training in the sim mirror end to end: it learns, it reports, Ctrl-C/SIGTERM/kill -9 lose nothing, runs resume
and extend, and the policy file it writes is what `robot-rl eval` and the actor node load."""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import av
import numpy as np
import pytest

from robot_rl.apps.cli import main
from robot_rl.core.config_io import config_from_json, config_to_json
from robot_rl.training.run_folder import RunError
from robot_rl.training.config import TrainConfig
from robot_rl.training.pacing import UpdateRate
from robot_rl.apps.train import train

TINY = dict(demos=3, eval_episodes=2, video=False)


def checkpoint_state(run_dir: Path) -> dict:
    return json.loads((run_dir / "checkpoint" / "learner.json").read_text())


def video_info(path: Path) -> tuple[str, int, int, int]:
    """(codec, width, height, decoded frames) of a video file."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = sum(1 for _ in container.decode(stream))
        return stream.codec_context.name, stream.width, stream.height, frames


def test_updates_per_second_is_the_learners_speed_since_the_last_reading():
    """Not an average since the start (which hides slowdowns and rises as compile time is amortised), and not
    counting evaluations and checkpoints; what the ROS learner node reports per episode too."""
    rate = UpdateRate(updates=100, now=10.0)
    assert rate.read(300, now=12.0) == 100.0
    rate.exclude(3.0)  # an evaluation in the middle of the episode
    assert rate.read(400, now=16.0) == 100.0
    assert rate.read(400, now=17.0) == 0.0  # no updates in the last second: 0, not 300 / 7 s


def test_config_json_round_trip():
    cfg = TrainConfig(task="PegInsert-v0", obs_mode="pixels", run_dir=Path("x/y"), steps=7)
    assert config_from_json(TrainConfig, json.loads(json.dumps(config_to_json(cfg)))) == cfg


def test_peg_insert_with_the_watching_human_learns_and_holds_its_peak(tmp_path):
    """The precise-task settings (an averaged policy, a lower target entropy) on state PegInsert with the watching
    human: it learns, and no later evaluation falls far below the best (docs/results.md, "No drift"; with the
    tip-to-hole offset in metres this took 2500 steps to pass 90 %)."""
    from robot_rl.sim.human import SimulatedHumanConfig

    base = TrainConfig()
    cfg = TrainConfig(
        task="PegInsert-v0", obs_mode="state", demos=20, steps=1000, eval_every=250, eval_episodes=10, seed=0,
        intervene=True, human=SimulatedHumanConfig(disagreement=0.6), eval_latest_weights=True, video=False,
        sac=dataclasses.replace(base.sac, bc_weight=25.0, policy_average_rate=0.005, target_entropy=-8.0),
        run_dir=tmp_path / "run",
    )
    state = checkpoint_state(train(cfg))["extra"]
    rates = [row["success_rate"] for row in state["evals"]]
    assert rates[0] == 0.0 and max(rates) >= 0.9, rates  # 3 seeds at 100 % by 1000 env steps (docs/results.md)
    peak = rates.index(max(rates))
    assert min(rates[peak:]) >= max(rates) - 0.2, rates
    assert all("latest_success_rate" in row for row in state["evals"])  # the latest weights, evaluated beside
    assert 0 < state["episodes_log"][-1]["env_step"] and any(e["intervention_rate"] > 0 for e in state["episodes_log"])


class TrainProcess:
    """`robot-rl train` as a subprocess: wait for a line on its stdout, signal it, collect its exit."""

    def __init__(self, args: list[str]):
        env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_WAIT_POLICY="PASSIVE")
        self.proc = subprocess.Popen([sys.executable, "-m", "robot_rl.apps.cli", "train", *args], env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, pattern: str, timeout: float = 300) -> re.Match:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"no line matching {pattern!r} in {timeout}s; stdout: {''.join(self.stdout)}")
            if line is None:
                self.proc.wait(timeout=60)
                pytest.fail(f"exited with {self.proc.returncode} before a line matching {pattern!r}; "
                            f"stdout: {''.join(self.stdout)} stderr: {''.join(self.stderr)}")
            self.stdout.append(line)
            match = re.search(pattern, line)
            if match:
                return match

    def finish(self, timeout: float = 300) -> tuple[int, str]:
        """Exit status and stderr."""
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        time.sleep(0.2)  # let the reader threads drain the pipes
        return self.proc.returncode, "".join(self.stderr)


def assert_interrupted(run_dir: Path, stderr: str, steps: int) -> int:
    """A stopped run: one line saying where and how to resume, no traceback, checkpoint and report at that step."""
    assert "Traceback" not in stderr, stderr
    last = stderr.strip().splitlines()[-1]
    match = re.fullmatch(rf"interrupted at env step (\d+)/{steps}; resume with: robot-rl train --resume "
                         rf"{re.escape(str(run_dir))}", last)
    assert match, stderr
    env_step = int(match[1])
    saved = checkpoint_state(run_dir)
    # the episode under way is in the learner server's transition log, not yet in replay: every transition arrived
    assert saved["extra"]["env_step"] == saved["extra"]["server"]["received"] == env_step
    assert f"Interrupted at env step {env_step} of {steps}" in (run_dir / "report.md").read_text()
    for name in ("policy.msgpack", "learning_curve.png", "training_curves.png"):
        assert (run_dir / name).stat().st_size > 0, name
    return env_step


@pytest.mark.slow
def test_ctrl_c_sigterm_and_kill_9_lose_nothing_and_the_run_resumes(tmp_path):
    """SIGINT after the step-30 eval -> 130; resume; SIGTERM after the step-60 eval -> 143; resume; kill -9 once a
    later checkpoint is taken (after the step-90 eval, in the middle of an episode); resume to the end."""
    run_dir = tmp_path / "run"
    first = TrainProcess(["--steps", "150", "--demos", "3", "--eval-every", "30", "--eval-episodes", "2",
                          "--checkpoint-every", "10000", "--no-video", "--run-dir", str(run_dir)])
    first.wait_for(r"^env step 30: eval success")
    first.proc.send_signal(signal.SIGINT)
    status, stderr = first.finish()
    assert status == 130, stderr
    stopped = assert_interrupted(run_dir, stderr, 150)
    assert 30 <= stopped < 150

    second = TrainProcess(["--resume", str(run_dir)])
    second.wait_for(rf"^resumed {re.escape(str(run_dir))} from env step {stopped} ")
    second.wait_for(r"^env step 60: eval success")
    second.proc.send_signal(signal.SIGTERM)
    status, stderr = second.finish()
    assert status == 143, stderr
    stopped = assert_interrupted(run_dir, stderr, 150)
    assert 60 <= stopped < 150

    third = TrainProcess(["--resume", str(run_dir)])
    third.wait_for(rf"^resumed {re.escape(str(run_dir))} from env step {stopped} ")
    deadline = time.monotonic() + 300
    while checkpoint_state(run_dir)["extra"]["env_step"] <= stopped:
        assert third.proc.poll() is None, "".join(third.stdout + third.stderr)
        assert time.monotonic() < deadline
        time.sleep(0.1)
    os.kill(third.proc.pid, signal.SIGKILL)
    third.finish()
    saved = checkpoint_state(run_dir)
    assert stopped < saved["extra"]["env_step"] < 150

    last = subprocess.run([sys.executable, "-m", "robot_rl.apps.cli", "train", "--resume", str(run_dir)],
                          capture_output=True, text=True, timeout=600)
    assert last.returncode == 0, last.stdout + last.stderr
    assert f"from env step {saved['extra']['env_step']}" in last.stdout
    final = checkpoint_state(run_dir)
    assert final["extra"]["env_step"] == final["transitions"] == 150  # nothing lost, nothing trained on twice
    assert final["updates"] > saved["updates"] and final["extra"]["finished"]
    assert [row["env_step"] for row in final["extra"]["evals"]] == [0, 30, 60, 90, 120, 150]
    report = (run_dir / "report.md").read_text()
    assert "Final eval success" in report and "Interrupted" not in report


def test_resume_extends_a_finished_run_and_refuses_what_it_cannot_change(tmp_path, capsys):
    run_dir = tmp_path / "run"
    train(TrainConfig(steps=60, eval_every=60, run_dir=run_dir, **TINY))
    assert checkpoint_state(run_dir)["extra"]["finished"]
    capsys.readouterr()  # the run's own progress lines (a slow machine prints some while it records its demos)

    def error_of(*args: str) -> str:
        with pytest.raises(SystemExit) as exit_info:
            main(["train", "--resume", str(run_dir), *args])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        return err

    assert "nothing to resume" in error_of() and "finished its 60 env steps" in error_of()
    assert "--steps 40 is below the 60 env steps" in error_of("--steps", "40")
    assert "cannot change --sac.discount (0.97 -> 0.9)" in error_of("--steps", "100", "--sac.discount", "0.9")
    assert "cannot change --demos (3 -> 5)" in error_of("--steps", "100", "--demos", "5")
    assert checkpoint_state(run_dir)["extra"]["env_step"] == 60  # refused: nothing ran

    # 1000 is TrainConfig's default eval_every: given on the command line, it still counts
    main(["train", "--resume", str(run_dir), "--steps", "100", "--eval-every", "1000"])
    assert "resumed" in capsys.readouterr().out
    state = checkpoint_state(run_dir)
    assert state["extra"]["env_step"] == state["transitions"] == 100
    assert [row["env_step"] for row in state["extra"]["evals"]] == [0, 60, 100]
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["steps"] == 100 and saved["eval_every"] == 1000 and saved["demos"] == 3


def test_resume_of_a_folder_without_a_checkpoint_says_so(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(config_to_json(TrainConfig(run_dir=run_dir))))
    with pytest.raises(RunError, match="nothing to resume: .* has no checkpoint"):
        train(resume=run_dir)
    with pytest.raises(RunError, match="already holds a run"):
        train(TrainConfig(run_dir=run_dir))
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.json"]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A short PickCube run that also sees the wrist force/torque reading (train, policy file and eval carry it)."""
    run_dir = tmp_path_factory.mktemp("train") / "run"
    train(TrainConfig(steps=100, eval_every=100, demos=3, eval_episodes=3, video=True, wrench=True, run_dir=run_dir))
    return run_dir


def test_policy_file_reproduces_the_trained_agent(trained_run):
    from robot_rl.learner.learner import Learner
    from robot_rl.sim.loop import make_env
    from robot_rl.actor.session import actor_from_weights
    from robot_rl.wire.policy_file import read_policy_file

    cfg = config_from_json(TrainConfig, json.loads((trained_run / "config.json").read_text()))
    env = make_env(cfg.task, **cfg.env_settings())
    learner = Learner(env.observation_space, env.action_space.shape[0], cfg.sac, cfg.learner)
    learner.restore(trained_run / "checkpoint")
    assert "wrench" in learner.observation_spec.keys
    message = read_policy_file(trained_run)
    assert message.updates == learner.updates > 0 and message.transitions == 100
    actor = actor_from_weights(message, deterministic=True)
    for seed in range(3):
        obs, _ = env.reset(seed=seed)
        expected = np.asarray(learner.agent.eval_actions({k: obs[k] for k in learner.observation_spec.keys}))
        np.testing.assert_array_equal(actor.act(obs), expected)
    untrained = Learner(env.observation_space, env.action_space.shape[0], cfg.sac, cfg.learner).agent
    assert not np.allclose(untrained.eval_actions({k: obs[k] for k in learner.observation_spec.keys}), expected)
    env.close()


def test_eval_reproduces_the_runs_final_evaluation(trained_run, tmp_path, capsys):
    out = tmp_path / "eval"
    main(["eval", "--policy", str(trained_run), "--episodes", "3", "--video", "--out", str(out)])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary == json.loads((out / "eval.json").read_text())
    assert summary["task"] == "PickCube-v0" and summary["obs_mode"] == "state" and summary["episodes"] == 3
    final = checkpoint_state(trained_run)["extra"]["evals"][-1]
    assert final["env_step"] == 100
    # the same held-out seeds and weights as train's final evaluation: the same episodes
    assert summary["successes"] == final["successes"]
    assert summary["mean_length"] == pytest.approx(final["mean_length"])
    assert summary["success_ci95"][0] <= summary["success_rate"] <= summary["success_ci95"][1]
    # each failed episode's failure mode and the scene at its end, tallied as train's final row has them
    assert summary["failure_modes"] == final["failure_modes"]
    assert sum(final["failure_modes"].values()) == 3 - final["successes"]
    for episode in summary["per_episode"]:
        assert ("failure" in episode) == (not episode["success"]) and "cube_lift_mm" in episode["end"], episode
    lengths = [e["length"] for e in summary["per_episode"]]
    codec, width, height, frames = video_info(out / "eval.mp4")
    assert codec == "h264" and width == 2 * height and frames == sum(lengths[:2])  # front | wrist, 2 episodes
    # train filmed the same two episodes of its final evaluation
    assert video_info(trained_run / "eval.mp4") == (codec, width, height, frames)


def test_eval_errors_are_one_line(trained_run, tmp_path, capsys):
    def error_of(*args: str) -> str:
        with pytest.raises(SystemExit) as exit_info:
            main(["eval", *args, "--out", str(tmp_path / "out")])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("error: "), err
        return err

    checkpoint = trained_run / "checkpoint" / "agent.msgpack"
    assert f"pass {trained_run / 'policy.msgpack'}" in error_of("--policy", str(checkpoint))
    assert "does not exist" in error_of("--policy", str(tmp_path / "none.msgpack"))
    assert "does not provide" in error_of("--policy", str(trained_run), "--obs-mode", "pixels")
    assert "unknown task 'Nope-v0'" in error_of("--policy", str(trained_run), "--task", "Nope-v0")
    assert "episodes=0" in error_of("--policy", str(trained_run), "--episodes", "0")
    assert "gaussian policy has no DDIM steps" in error_of("--policy", str(trained_run), "--inference-steps", "5")
    assert not (tmp_path / "out").exists()


def test_an_interrupted_eval_leaves_no_output_folder(trained_run, tmp_path):
    from robot_rl.sim.evaluate import evaluate_policy_file

    def ctrl_c(result) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        evaluate_policy_file(trained_run, episodes=3, out=tmp_path / "eval", on_episode=ctrl_c)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "mine").mkdir()  # a folder that was there stays
    with pytest.raises(KeyboardInterrupt):
        evaluate_policy_file(trained_run, episodes=3, out=tmp_path / "mine", on_episode=ctrl_c)
    assert (tmp_path / "mine").is_dir()


def test_interventions_during_training_are_flagged_and_reach_both_buffers(tmp_path):
    from robot_rl.learner.learner import LearnerConfig
    from robot_rl.sim.human import SimulatedHumanConfig

    cfg = TrainConfig(
        demos=0, steps=150, eval_every=150, eval_episodes=1, intervene=True, video=False, run_dir=tmp_path / "run",
        human=SimulatedHumanConfig(stuck_window=3, stuck_distance=0.05, takeover_steps=4, episode_budget=8),
        learner=LearnerConfig(batch_size=32, utd=1, n_step=3),
    )
    run_dir = train(cfg)
    state = json.loads((run_dir / "checkpoint" / "learner.json").read_text())
    episodes = state["extra"]["episodes_log"]
    assert 0 < state["interventions"] <= 8 * len(episodes)
    assert any(e["intervention_rate"] > 0 for e in episodes)
    for e in episodes:  # each episode counts its takeovers by trigger: up to 4 steps each, within the budget of 8
        assert set(e["takeovers"]) <= {"stuck", "pushing_out"} and (e["takeovers"] or e["intervention_rate"] == 0), e
        assert sum(e["takeovers"].values()) * 4 >= e["intervention_rate"] * e["length"] - 1e-9, e
    from robot_rl.learner.learner import checkpoint_replay

    online = checkpoint_replay(run_dir / "checkpoint", "online")
    demo = checkpoint_replay(run_dir / "checkpoint", "demo")
    assert online.intervention[online.valid].sum() == state["interventions"] == len(demo)
    assert "Human interventions" in (run_dir / "report.md").read_text()


def test_unsafe_policy_actions_in_training_go_through_the_safety_layer(tmp_path, monkeypatch):
    """In-process training drives the sim through the robot's ActorSession: a NaN action is held (an env step, no
    transition, counted), an out-of-range one pushing out of the workspace is clipped; the env never sees either."""
    from robot_rl.actor.session import Actor
    from robot_rl.learner.learner import checkpoint_replay
    from robot_rl.sim.env import RobotEnv

    policy_action, env_step = Actor.policy_action, RobotEnv.step
    issued = {"nan": 0, "out": 0, "policy": 0}

    def unsafe_policy_action(self, obs, now=None):
        action = policy_action(self, obs, now)
        if self.deterministic:  # the evaluations' actor: left alone
            return action
        kind = ("nan", "out", "policy")[sum(issued.values()) % 3]
        issued[kind] += 1
        return {"nan": np.full_like(action, np.nan), "out": np.array([5.0, -5.0, 5.0, 5.0], np.float32)}.get(
            kind, action)

    seen, targets = [], []

    def recording_step(self, action):
        seen.append(np.array(action))
        result = env_step(self, action)
        targets.append(self.target_pose()[0])
        return result

    monkeypatch.setattr(Actor, "policy_action", unsafe_policy_action)
    monkeypatch.setattr(RobotEnv, "step", recording_step)
    run_dir = train(TrainConfig(steps=60, eval_every=60, run_dir=tmp_path / "run", **TINY))
    assert issued["nan"] > 5 and issued["out"] > 5
    assert all(np.isfinite(a).all() and np.abs(a).max() <= 1.0 for a in seen)
    low, high = RobotEnv.workspace_low, RobotEnv.workspace_high
    assert all(np.all(t >= low - 1e-9) and np.all(t <= high + 1e-9) for t in targets)

    saved = checkpoint_state(run_dir)
    safety = saved["extra"]["safety"]
    assert safety["held"] == safety["non_finite_action"] == issued["nan"]
    assert safety["action_clipped"] >= issued["out"] and safety["workspace_clipped"] > 0
    held_steps = saved["extra"]["env_step"] - saved["transitions"]  # executed holds: env steps without a transition
    assert saved["extra"]["env_step"] == 60 and issued["nan"] - 1 <= held_steps <= issued["nan"]
    online = checkpoint_replay(run_dir / "checkpoint", "online")
    actions = online.actions[online.valid]
    assert len(actions) == saved["transitions"] and np.isfinite(actions).all() and np.abs(actions).max() <= 1.0
    assert any(np.array_equal(a, [1.0, -1.0, 1.0, 1.0]) for a in actions)  # the out-of-range action, clipped


def test_in_process_transitions_go_through_the_learner_servers_ingest_and_a_gap_cuts_the_episode(tmp_path):
    """The session's outbox feeds a LearnerServer (the ROS learner node's ingest) and is acknowledged from its acks;
    a held command leaves a gap in a session's steps: the transitions on either side are not joined in replay."""
    from robot_rl.agents.sac import SACConfig
    from robot_rl.learner.learner import Learner, LearnerConfig
    from robot_rl.learner.server import LearnerServer
    from robot_rl.training.trainer import feed_server
    from robot_rl.wire.outbox import Outbox
    from robot_rl.wire.protocol import make_source
    from robot_rl.wire.transitions import StampedTransition

    def item(seq, episode, step, truncated=False, intervention=False):
        return StampedTransition(seq, episode, step, {"x": np.array([step], np.float32)}, np.zeros(4, np.float32),
                                 0.0, False, truncated, {"x": np.array([step + 1], np.float32)}, intervention)

    learner = Learner({"x": ((1,), np.float32)}, 4, SACConfig(actor_hidden_dims=(8,), critic_hidden_dims=(8,)),
                      LearnerConfig(batch_size=4, online_capacity=16, demo_capacity=16))
    server = LearnerServer(learner, tmp_path)
    server.open()
    server.attach(learner)
    outbox, source = Outbox(), make_source("train")
    outbox.add(item(0, 0, 0))
    assert feed_server(server, source, outbox) == 1 and len(outbox) == 0
    for transition in (item(1, 0, 1, intervention=True), item(2, 0, 3, truncated=True), item(3, 1, 0)):
        outbox.add(transition)
    assert feed_server(server, source, outbox) == 3 and len(outbox) == 0
    assert feed_server(server, source, outbox) == 0
    assert server.received == 4 and outbox.acknowledged_through == 3
    stored = learner.online.gather(np.flatnonzero(learner.online.valid))  # episode 0: it ended; episode 1 goes on
    np.testing.assert_array_equal(stored.observations["x"][:, 0], [0, 1, 3])
    np.testing.assert_array_equal(stored.next_observations["x"][:, 0], [1, 2, 4])  # step 1 not joined to step 3
    np.testing.assert_array_equal(learner.online.truncated[learner.online.valid], [False, True, True])  # the cut
    assert learner.interventions == len(learner.demo) == 1


def test_bad_demo_dataset_leaves_no_run_folder(tmp_path):
    from robot_rl.data.episodes import DatasetError

    run_dir = tmp_path / "run"
    with pytest.raises(DatasetError, match="missing.zarr"):
        train(TrainConfig(demo_path=tmp_path / "missing.zarr", run_dir=run_dir, **TINY))
    with pytest.raises(ValueError, match="unknown task 'Nope-v0'"):
        train(TrainConfig(task="Nope-v0", run_dir=run_dir, **TINY))
    from robot_rl.sim.loop import make_env, record_episodes, writer_for_env
    from robot_rl.sim.expert import make_expert

    env = make_env("PickCube-v0", obs_mode="state")  # demos of the right shape, labelled with another task
    with writer_for_env(env, tmp_path / "peg.zarr", "PegInsert-v0") as writer:
        record_episodes(env, make_expert(env), writer, 1)
    env.close()
    with pytest.raises(RunError, match=r"holds demos of task 'PegInsert-v0', this run is --task PickCube-v0"):
        train(TrainConfig(demo_path=tmp_path / "peg.zarr", run_dir=run_dir, **TINY))
    assert not run_dir.exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_stop_signals_outside_the_commands_handling_set_a_flag_and_restore_the_handlers(signum):
    from robot_rl.core import interrupts
    from robot_rl.training.pacing import StopSignals

    with interrupts.handling():  # forget a stop request an earlier test left (a command's handling starts afresh)
        pass
    assert not interrupts.active() and interrupts.requested() is None
    before = signal.getsignal(signum)
    with StopSignals() as stop:
        assert not stop() and signal.getsignal(signum) is not before
        os.kill(os.getpid(), signum)
        deadline = time.monotonic() + 5.0
        while not stop() and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT if signum == signal.SIGTERM else signal.SIGTERM)  # the first one counts
        time.sleep(0.05)
        assert stop() and stop.signum == signum
        assert isinstance(stop.interrupt(), interrupts.Terminated) == (signum == signal.SIGTERM)
    assert signal.getsignal(signum) is before
    assert interrupts.requested() == signum  # noted, as a node's stop flag notes it
    with interrupts.handling():
        assert interrupts.requested() is None


def test_config_rejects_bad_numbers():
    with pytest.raises(ValueError, match=r"invalid TrainConfig: eval_every=0 must be >= 1; demos=-3 must be >= 0"):
        TrainConfig(eval_every=0, demos=-3)
    with pytest.raises(ValueError, match="final_eval_episodes=0"):
        dataclasses.replace(TrainConfig(), final_eval_episodes=0)


def test_eval_env_settings_come_from_the_policys_observation_spec():
    from robot_rl.sim.evaluate import env_settings_for
    from robot_rl.core.types import ObservationSpec

    def spec(**shapes):
        return ObservationSpec.from_shapes({k.replace("__", "/"): v for k, v in shapes.items()})

    state = ((14,), "float32")
    def settings(mode, size, wrench=False):
        return {"obs_mode": mode, "image_size": size, "wrench": wrench}

    assert env_settings_for(spec(state=state, object_state=((10,), "float32"))) == settings("state", 64)
    image = ((96, 96, 3), "uint8")
    assert env_settings_for(spec(state=state, images__front=image, images__wrist=image)) == settings("pixels", 96)
    assert env_settings_for(spec(state=state, object_state=((10,), "float32"), images__front=image)) == settings(
        "state+pixels", 96)
    assert env_settings_for(spec(state=state, wrench=((6,), "float32"), images__front=image)) == settings(
        "pixels", 96, wrench=True)


def test_demos_killed_while_recording_are_recorded_again_not_used_partially(tmp_path, monkeypatch):
    """A run (or learner node) killed while it records its demos must not train on a partial demo set later."""
    import robot_rl.sim.loop
    from robot_rl.training.demos import record_demos

    record_episodes = robot_rl.sim.loop.record_episodes

    def dies_after_one_episode(env, policy, writer, episodes, **kwargs):
        record_episodes(env, policy, writer, 1, **kwargs)
        raise KeyboardInterrupt  # the process dies here, with one episode committed

    cfg = TrainConfig(run_dir=tmp_path / "run", **TINY)
    (tmp_path / "run").mkdir()
    monkeypatch.setattr(robot_rl.sim.loop, "record_episodes", dies_after_one_episode)
    with pytest.raises(KeyboardInterrupt):
        record_demos(cfg, tmp_path / "run")
    assert not (tmp_path / "run" / "demos.zarr").exists()
    monkeypatch.setattr(robot_rl.sim.loop, "record_episodes", record_episodes)
    assert record_demos(cfg, tmp_path / "run").num_episodes == 3
    assert not (tmp_path / "run" / "demos.partial.zarr").exists()


def test_a_randomised_run_without_demos_warms_up_under_the_suites_conditions(tmp_path, capsys):
    suite = tmp_path / "suite.yaml"
    suite.write_text("name: train_suite\nconditions:\n  - name: nominal\n"
                     "  - name: late\n    perturbations: [{type: action_latency, steps: 1}]\n"
                     "  - name: dark\n    perturbations: [{type: lighting, brightness: [0.5, 0.5]}]\n")
    run_dir = tmp_path / "run"
    train(TrainConfig(demos=0, steps=100, eval_every=100, eval_episodes=1, video=False, randomize=str(suite),
                      run_dir=run_dir))
    out = capsys.readouterr().out
    assert ("warm-up: uniformly random actions and no updates for the next 1024 env steps (no demos; "
            "--learner.warmup-transitions sets it)") in out
    assert checkpoint_state(run_dir)["updates"] == 0
    episodes = checkpoint_state(run_dir)["extra"]["episodes_log"]
    assert len(episodes) == 2 and {e["condition"] for e in episodes} <= {"nominal", "late", "dark"}, episodes
    assert json.loads((run_dir / "config.json").read_text())["randomize"] == str(suite)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nconditions:\n  - name: nominal\n"
                   "  - name: mug\n    perturbations: [{type: object, bodies: [mug], mass_scale: [1, 2]}]\n")
    with pytest.raises(ValueError, match="names body 'mug', which this task's model lacks"):
        train(TrainConfig(demos=0, steps=5, eval_episodes=1, video=False, randomize=str(bad),
                          run_dir=tmp_path / "bad_run"))
