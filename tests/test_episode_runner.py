"""The episode loop on a fake clock and a fake robot: resets, lost replies, stalled sensors, the human, weight lag."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from robot_rl.actor.session import Actor, ActorSession
from robot_rl.actor.runner import EpisodeRunner, HomePose, RunnerConfig, TickMeter
from robot_rl.policies.base import ActionChunk, PolicyBase
from robot_rl.actor.safety import Safety, SafetyConfig

HOME = np.array([0.5, 0.0, 0.3])
QUAT = np.array([0.0, 1.0, 0.0, 0.0])


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Lines:
    def __init__(self):
        self.lines: list[str] = []

    def info(self, message):
        self.lines.append(message)

    warning = error = info

    def count(self, text: str) -> int:
        return sum(text in line for line in self.lines)


class FakeService:
    """A reset server that answers (or not) as the test says."""

    name = "/reset"

    def __init__(self):
        self.up = True
        self.answers: list[tuple[bool, str] | None] = []  # per call: the answer, None = the reply is lost
        self.calls = 0
        self.abandoned = 0
        self.robot: FakeRobot | None = None

    def ready(self):
        return self.up

    def call(self):
        self.calls += 1
        answer = self.answers.pop(0) if self.answers else (True, "")
        if answer is not None and answer[0] and self.robot is not None and not self.robot.mute:
            self.robot.frame()  # the reset answers with a frame of the new scene
        return answer

    def result(self, handle):
        return handle

    def abandon(self, handle):
        self.abandoned += 1


class FakeRobot:
    """A lock-step robot: each command moves the TCP and answers with a frame, a reward and success, unless mute."""

    def __init__(self, clock: Clock, service: FakeService | None = None):
        self.clock = clock
        self.reset_service = service
        if service is not None:
            service.robot = self
        self.stamp: float | None = None
        self.position = HOME.copy()
        self.sent: list = []
        self.mute = False
        self.inputs = None
        self.succeed_at: int | None = None

    def frame(self):
        self.stamp = self.clock() if self.stamp is None else max(self.stamp + 0.1, self.clock())

    def now(self):
        return self.clock()

    def frame_stamp(self):
        return self.stamp

    pose_stamp = frame_stamp

    def observation(self, now):
        if self.stamp is None:
            return None, ("missing:tcp_pose",)
        return {"state": np.concatenate([self.position, [0.0]]).astype(np.float32)}, ()

    def sensor_stamps(self):
        return {}

    def tcp_pose(self):
        return self.position.copy(), QUAT.copy()

    def start_gripper(self):
        return None

    def missing_sensors_text(self):
        return f"tcp_pose stamp {self.stamp}"

    def reset_begun(self):
        pass

    def episode_started(self, episode):
        pass

    def send(self, command, stamp):
        self.sent.append(command)
        if not command.held:
            self.position = np.asarray(command.target_position)
        if not self.mute:
            self.frame()
            self.inputs.reward(0.0)
            self.inputs.success(len(self.sent) == self.succeed_at)
        return None


class ConstantPolicy(PolicyBase):
    kind = "constant"
    obs_horizon = chunk_length = 1
    action_dim = 4
    device = "cpu"

    def reset(self):
        pass

    def act_chunk(self, history, deterministic=True):
        action = np.array([[0.5, 0.0, 0.0, 1.0]], np.float32)
        return ActionChunk(action, action)

    def learner_action_of(self, executed, info):
        return executed


SAFETY = SafetyConfig(workspace_low=(0.0, -1.0, 0.0), workspace_high=(1.0, 1.0, 1.0), max_translation=0.02,
                      max_rotation=0.1, action_dim=4, control_period=0.1)


def make(config: RunnerConfig = RunnerConfig(), *, service=True, steps=5, gate=None):
    clock, lines = Clock(), Lines()
    robot = FakeRobot(clock, FakeService() if service else None)
    session = ActorSession(Safety(SAFETY), "test", max_episode_steps=steps, actor=Actor(ConstantPolicy()))
    runner = EpisodeRunner(session, robot, config, clock=clock, log=lines, gate=gate)
    robot.inputs = runner.inputs
    return runner, robot, clock, lines


def tick(runner, clock, n=1, dt=0.01):
    for _ in range(n):
        runner.tick()
        clock.t += dt


def test_lockstep_episodes_step_once_per_frame_and_end_at_the_time_limit():
    runner, robot, clock, _ = make(RunnerConfig(episodes=2))
    robot.frame()
    tick(runner, clock, 60)
    assert runner.done and [r["steps"] for r in runner.results] == [5, 5]
    assert robot.reset_service.calls == 2
    assert len(robot.sent) == 10  # one command per frame: the fifth transition's frame ends the episode
    assert runner.session.next_seq == 10


def test_a_lost_reset_reply_times_out_and_the_reset_is_called_again():
    runner, robot, clock, lines = make(RunnerConfig(reset_timeout_s=2.0, episodes=1))
    robot.reset_service.answers = [None]  # the first reply never comes
    robot.frame()
    tick(runner, clock, 150, dt=0.05)  # 7.5 s
    assert runner.reset_counters["reset_timeouts"] == 1 and robot.reset_service.abandoned == 1
    assert runner.reset_counters["reset_attempts"] == 2 and runner.done
    assert lines.count("did not answer within 2 s (attempt 1") == 1
    assert lines.count("answered attempt 2") == 1


def test_a_frame_older_than_the_one_the_reset_reply_names_does_not_start_the_episode():
    """The sim node's reply names the reset's frame: a frame published before it (its start-up frame, still arriving
    when the reset was called before any frame had come) is not the episode's first."""
    from robot_rl.actor.runner import frame_stamp_text, reset_frame_stamp

    runner, robot, clock, _ = make(RunnerConfig(episodes=1))
    reply = "episode 0 reset" + frame_stamp_text(100, 500_000_000)
    robot.reset_service.answers = [(True, reply)]
    robot.mute = True  # the frames come when the test says
    tick(runner, clock, 3)
    assert robot.reset_service.calls == 1 and runner.phase == "starting"
    robot.stamp = 100.25  # the start-up frame: complete, newer than any seen when the reset was called
    tick(runner, clock, 5)
    assert runner.phase == "starting" and not robot.sent
    robot.stamp, robot.mute = reset_frame_stamp(reply), False  # the reset's own frame
    tick(runner, clock)
    assert runner.phase == "running" and len(robot.sent) == 1


def test_a_failed_reset_is_retried_after_a_pause_and_a_missing_server_is_waited_for():
    runner, robot, clock, lines = make(RunnerConfig(episodes=1))
    robot.reset_service.up = False
    robot.reset_service.answers = [(False, "gripper jammed")]
    robot.frame()
    tick(runner, clock, 20, dt=0.5)
    assert robot.reset_service.calls == 0 and runner.waiting_for == "the reset service /reset"
    assert runner.waits["the reset service /reset"] > 8
    robot.reset_service.up = True
    tick(runner, clock, 2, dt=0.1)
    assert runner.reset_counters["reset_failures"] == 1 and robot.reset_service.calls == 1
    tick(runner, clock, 5, dt=0.1)
    assert robot.reset_service.calls == 1  # not before RESET_RETRY_AFTER_FAILURE_S
    tick(runner, clock, 30, dt=0.1)
    assert robot.reset_service.calls == 2 and runner.done
    assert lines.count("reset failed: gripper jammed (attempt 1") == 1


def test_a_stalled_sensor_gives_the_episode_up_and_resets():
    runner, robot, clock, lines = make(RunnerConfig(frame_timeout_s=3.0, episodes=1), steps=50)
    robot.frame()
    tick(runner, clock, 10)
    assert runner.phase == "running" and len(robot.sent) >= 3
    robot.mute = True  # the sim died: no frame answers the next command
    tick(runner, clock, 40, dt=0.1)
    assert runner.reset_counters["frame_timeouts"] == 1 and runner.reset_counters["episodes_given_up"] == 1
    assert lines.count("no sensor frame within 3 s after the command of step") == 1
    robot.mute = False
    robot.frame()
    tick(runner, clock, 200)
    assert runner.done and runner.results[0]["episode"] == 1  # episode 0 was given up, episode 1 ran


def test_no_frame_after_the_reset_calls_the_reset_again():
    runner, robot, clock, lines = make(RunnerConfig(frame_timeout_s=2.0))
    robot.mute = True
    tick(runner, clock, 40, dt=0.1)  # no frame at all
    assert runner.reset_counters["frame_timeouts"] >= 1 and robot.reset_service.calls >= 2
    assert runner.waits["a sensor frame after the reset"] > 1.5
    assert lines.count("after the reset; calling the reset again") >= 1


def test_the_human_takes_over_and_their_steps_are_flagged():
    runner, robot, clock, _ = make(RunnerConfig(episodes=1, control_dt=0.1), steps=6)
    robot.frame()
    tick(runner, clock, 3)
    runner.inputs.teleop_engaged(True)
    runner.inputs.teleop_twist(np.array([0.0, 0.1, 0.0]), np.zeros(3), stamp=1e9)  # answers every frame
    tick(runner, clock, 40)
    flags = [t.intervention for t in runner.session.outbox.due(1e9, 100)]
    assert flags[0] is False and all(flags[2:]) and runner.results[0]["interventions"] >= 4
    assert robot.sent[-1].target_position[1] > 0.0  # the human moved it sideways


def test_lockstep_waits_for_the_human_s_command_for_the_frame_then_acts_on_the_newest():
    runner, robot, clock, _ = make(RunnerConfig(episodes=1), steps=20)
    robot.frame()
    tick(runner, clock, 3)
    runner.inputs.teleop_engaged(True)
    runner.inputs.teleop_twist(np.zeros(3), np.zeros(3), stamp=0.0)  # an old frame's command
    sent = len(robot.sent)
    tick(runner, clock, 10, dt=0.01)
    assert len(robot.sent) == sent and runner.waiting_for == "the human's command for this frame"
    tick(runner, clock, 10, dt=0.1)  # past TELEOP_TIMEOUT_S
    assert len(robot.sent) > sent


def test_lockstep_waits_as_long_as_the_world_for_a_human_who_answers_each_frame():
    """A scripted human on a busy machine: its answer to a frame comes later than TELEOP_TIMEOUT_S, and the step still
    carries it, not the previous frame's command."""
    runner, robot, clock, _ = make(RunnerConfig(episodes=1, frame_timeout_s=3.0), steps=20)
    robot.frame()
    tick(runner, clock, 3)
    runner.inputs.teleop_engaged(True)
    runner.inputs.teleop_twist(np.zeros(3), np.zeros(3), stamp=robot.stamp)  # it answers the frame it sees
    tick(runner, clock, 3)
    sent = len(robot.sent)
    tick(runner, clock, 20, dt=0.1)  # 2 s: four times TELEOP_TIMEOUT_S without its answer to the new frame
    assert len(robot.sent) == sent and runner.waiting_for == "the human's command for this frame"
    runner.inputs.teleop_twist(np.array([0.0, 0.1, 0.0]), np.zeros(3), stamp=robot.stamp)
    tick(runner, clock, 1)
    assert len(robot.sent) == sent + 1 and robot.sent[-1].target_position[1] > robot.sent[-2].target_position[1]


@dataclasses.dataclass
class LaggingGate:
    weights_version: int = 1
    training_done: bool = False
    trained: int = 0
    lag: int = 2
    away: bool = False

    def start_wait(self, human_engaged, teleop_seen):
        return None

    def step_wait(self, transitions):
        if transitions - self.trained > self.lag:
            return ("fresher policy weights (max_weight_lag)", "for fresher weights")
        return None

    def hold_reason(self):
        return "learner_away" if self.away else None


def test_weight_lag_waits_for_weights_and_a_lost_learner_holds():
    gate = LaggingGate()
    runner, robot, clock, _ = make(RunnerConfig(), steps=50, gate=gate)
    robot.frame()
    tick(runner, clock, 20)
    assert runner.session.next_seq == 3 and runner.waiting_for == "fresher policy weights (max_weight_lag)"
    gate.trained = 3
    tick(runner, clock, 20)
    assert runner.session.next_seq == 6  # steps while at most `lag` transitions are ahead of the weights
    gate.trained, gate.away = 100, True
    sent = len(robot.sent)
    tick(runner, clock, 20)
    assert len(robot.sent) == sent and runner.holds["learner_away"] > 0  # lock-step: held = no command


def test_realtime_holds_on_missing_sensors_keeps_commanding_and_counts_ticks():
    config = RunnerConfig(mode="realtime", reset="none", control_dt=0.1)
    runner, robot, clock, lines = make(config, service=False, steps=100)
    robot.frame()
    tick(runner, clock, 5, dt=0.1)
    assert runner.phase == "running"
    observation = robot.observation
    robot.observation = lambda now: (None, ("stale:camera/front",))
    sent = len(robot.sent)
    tick(runner, clock, 5, dt=0.1)
    assert len(robot.sent) == sent + 5  # a steady stream of the last target
    assert all(np.array_equal(c.target_position, robot.sent[sent - 1].target_position) for c in robot.sent[sent:])
    assert runner.holds["stale:camera/front"] == 5 and lines.count("holding: stale:camera/front") == 1
    robot.observation = observation
    tick(runner, clock, 3, dt=0.1)
    assert not robot.sent[-1].held
    assert runner.status()["tick_late_ms"]["n"] == 13


def test_move_home_drives_to_home_within_the_limits_then_starts():
    home = HomePose((0.4, 0.0, 0.3), tuple(QUAT), 1.0, tolerance=0.005)
    runner, robot, clock, lines = make(RunnerConfig(reset="move_home", home=home, episodes=1), service=False)
    robot.frame()
    tick(runner, clock, 3)
    assert runner.phase == "resetting"
    steps = [np.linalg.norm(np.diff([c.target_position for c in robot.sent], axis=0), axis=1)]
    assert np.all(np.concatenate(steps) <= 0.02 + 1e-9)  # within max_translation per command
    tick(runner, clock, 40)
    assert lines.count("at home after") == 1 and runner.done


def test_the_human_reset_key_starts_each_episode():
    runner, robot, clock, lines = make(RunnerConfig(reset="human", episodes=1), service=False)
    robot.frame()
    tick(runner, clock, 20)
    assert runner.phase == "resetting" and runner.waiting_for == "the human's reset key"
    runner.inputs.key("reset")
    robot.frame()
    tick(runner, clock, 20)
    assert runner.done


def test_an_episode_key_ends_the_episode_and_success_terminates_it():
    runner, robot, clock, _ = make(RunnerConfig(episodes=2), steps=50)
    robot.succeed_at = 3
    robot.frame()
    tick(runner, clock, 10)
    assert runner.results[0]["success"] and runner.results[0]["steps"] == 3
    robot.succeed_at = None
    tick(runner, clock, 4)
    runner.inputs.key("failure")
    tick(runner, clock, 4)
    assert runner.done and not runner.results[1]["success"]


def test_unknown_keys_and_non_finite_teleop_values_are_refused():
    runner, *_ = make()
    with pytest.raises(ValueError, match="unknown key 'pause'"):
        runner.inputs.key("pause")
    with pytest.raises(ValueError, match="not finite"):
        runner.inputs.teleop_gripper(float("nan"))


def test_tick_meter_counts_lateness_and_missed_periods():
    meter = TickMeter(0.1)
    for t in (0.0, 0.101, 0.2, 0.55):
        meter.tick(t)
    summary = meter.summary()
    assert summary["n"] == 4 and summary["missed"] == 2 and summary["max"] == pytest.approx(50.0, abs=0.1)
