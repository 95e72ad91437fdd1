"""The one episode loop: reset -> wait for a fresh frame -> act -> command -> transition -> end.

:class:`EpisodeRunner` drives an :class:`~robot_rl.actor.session.ActorSession` through episodes on a robot it reaches through
a :class:`RobotLink` (sensor frames in, safe commands out, a reset), on an injected clock. The ROS actor node calls
`tick` from its timer and sensor callbacks; the in-process tools (`robot-rl train`, its evaluations, `eval`,
`validate`, `replay-in-sim`) call it with the sim env behind a link (robot_rl.sim.robot_adapter.SimLink), where
every reset and every command answers at once. Pure: no ROS, no simulator, so its phases and timeouts are tested
with a fake clock.

Phases: ``idle`` -> ``resetting`` (the reset: a service call with a timeout and retries, homing, the human's reset
key, or none) -> ``starting`` (a sensor frame taken after the reset: where the reply names the reset's frame, that
one or a later one; then the episode starts at the measured pose)
-> ``running`` (one step per frame in lock-step, per tick in real time) -> ``idle``. Every reason it waits or holds
is counted (`waits`, `holds`) and logged once it lasts; a frame that does not come within `frame_timeout_s` gives
the episode up and resets again.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import re
import time
from collections.abc import Callable
from typing import Any, Literal, Protocol

import numpy as np

from robot_rl.actor.session import EPISODE_KEYS, ActorSession, SessionStep
from robot_rl.actor.safety import SafeCommand

RESET_LOG_EVERY_S = 5.0
RESET_RETRY_AFTER_FAILURE_S = 1.0  # a server that answers "failed" is not asked again at once
TELEOP_TIMEOUT_S = 0.5
Wait = tuple[str, str]
"""(reason, message): why the runner cannot go on now (the reason is counted, the message logged)."""


FRAME_STAMP_MARK = "; frame stamp "
"""What ends a reset reply's message that names the frame the reset published (see `frame_stamp_text`)."""
_FRAME_STAMP = re.compile(r"(\d+)\.(\d{9})", re.ASCII)


def frame_stamp_text(sec: int, nanosec: int) -> str:
    """The end of a reset reply's message that names the reset's frame by its header stamp (builtin_interfaces/Time
    `sec`, `nanosec`): ``'; frame stamp <sec>.<nanosec, 9 digits>'``."""
    return f"{FRAME_STAMP_MARK}{int(sec)}.{int(nanosec):09d}"


def reset_frame_stamp(message: str) -> float | None:
    """The stamp of the frame a reset published, where its reply's message ends with `frame_stamp_text`, in the
    float seconds robot_rl.ros.convert.stamp_to_seconds gives that frame's headers (the same value, not a close one);
    None where the message names none (another robot's reset service)."""
    _, mark, tail = message.rpartition(FRAME_STAMP_MARK)
    match = _FRAME_STAMP.fullmatch(tail) if mark else None
    if match is None:
        return None
    return int(match[1]) + int(match[2]) * 1e-9  # as stamp_to_seconds: sec + nanosec * 1e-9


class Log(Protocol):
    """Where the runner's lines go (an rclpy logger, or `PrintLog`)."""

    def info(self, message: str) -> None: ...

    def warning(self, message: str) -> None: ...

    def error(self, message: str) -> None: ...


class PrintLog:
    """A `Log` that prints (in-process tools) or, `quiet`, drops info lines."""

    def __init__(self, quiet: bool = True):
        self.quiet = quiet

    def info(self, message: str) -> None:
        if not self.quiet:
            print(message)

    def warning(self, message: str) -> None:
        print(f"warning: {message}")

    def error(self, message: str) -> None:
        print(f"error: {message}")


class ResetService(Protocol):
    """A reset the robot runs on request (a std_srvs/Trigger service; the sim env's reset in-process)."""

    name: str

    def ready(self) -> bool:
        """Whether a server is up to take a call."""

    def call(self) -> Any:
        """Start a reset; returns a handle to poll."""

    def result(self, handle: Any) -> tuple[bool, str] | None:
        """(success, message) once the call answered, None while it has not. A message that ends with
        :func:`frame_stamp_text` names the reset's frame (the sim node's): the episode starts at it or a later one."""

    def abandon(self, handle: Any) -> None:
        """Give up a call that did not answer (it will not be polled again)."""


class RobotLink(Protocol):
    """The robot as the runner sees it: the newest sensor frame, safe commands out, the reset."""

    reset_service: ResetService | None

    def now(self) -> float:
        """The control clock [s] (sensor stamps are on it)."""

    def frame_stamp(self) -> float | None:
        """Stamp of the newest complete sensor frame (lock-step: every sensor of one stamp), None before one."""

    def pose_stamp(self) -> float | None:
        """Stamp of the newest arm state."""

    def observation(self, now: float) -> tuple[dict[str, np.ndarray] | None, tuple[str, ...]]:
        """(observation, ()) from the newest readings, or (None, problems) naming missing or stale sensors."""

    def sensor_stamps(self) -> dict[str, float]: ...

    def tcp_pose(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The measured TCP pose (position, quaternion wxyz), None before one arrived."""

    def start_gripper(self) -> float | None:
        """The gripper command an episode starts from (None: the safety layer's initial one)."""

    def missing_sensors_text(self) -> str:
        """Each sensor's newest stamp and topic, for log lines about missing frames."""

    def reset_begun(self) -> None:
        """A reset starts (e.g. a twist estimator forgets the pose before the jump)."""

    def episode_started(self, episode: int) -> None:
        """An episode started (announce it; joint commands start from the measured joints)."""

    def send(self, command: SafeCommand, stamp: float | None) -> Wait | None:
        """Send a safe command to the robot; a `Wait` when it cannot be sent yet."""


class Gate(Protocol):
    """What the policy side says about acting (robot_rl.actor.policy_slot.PolicySlot; `OPEN` in-process)."""

    weights_version: int
    training_done: bool
    """No more weights will come and no episode would train anything: start none."""

    def start_wait(self, human_engaged: bool, teleop_seen: bool) -> Wait | None:
        """Why an episode cannot start yet (no policy weights, no teleop node), or None."""

    def step_wait(self, transitions: int) -> Wait | None:
        """Why the next step must wait (weights too far behind this actor's `transitions`), or None."""

    def hold_reason(self) -> str | None:
        """Why the policy's commands are held now (the learner is away and the robot file says hold), or None."""


class OpenGate:
    """A `Gate` that never waits: the policy is there and no learner is watched."""

    weights_version = 0
    training_done = False

    def start_wait(self, human_engaged: bool, teleop_seen: bool) -> Wait | None:
        return None

    def step_wait(self, transitions: int) -> Wait | None:
        return None

    def hold_reason(self) -> str | None:
        return None


@dataclasses.dataclass(frozen=True)
class HomePose:
    """The move_home reset's target and when it is reached."""

    position: tuple[float, float, float]
    quat: tuple[float, float, float, float]
    gripper: float
    tolerance: float


@dataclasses.dataclass(frozen=True)
class RunnerConfig:
    """How the runner steps, resets and gives up."""

    mode: Literal["lockstep", "realtime"] = "lockstep"
    """lockstep: one step per new sensor frame (the world waits for us); realtime: one per tick."""
    control_dt: float = 0.1
    reset: Literal["service", "none", "move_home", "human"] = "service"
    reset_timeout_s: float = 10.0
    frame_timeout_s: float = 10.0
    """No frame this long after a reset (lock-step: after a command): the episode is given up, the reset called again."""
    episodes: int = 0
    """Stop after this many episodes (0: run until stopped)."""
    home: HomePose | None = None
    """The move_home reset's target."""
    max_translation: float = 0.02
    """Of the robot: a human's twist is scaled into actions with it."""
    max_rotation: float = 0.1


class StepInputs:
    """What arrives between steps besides the sensors: the task's reward and success, the human's episode keys and
    teleop commands. The ROS node's callbacks fill it; in-process, the sim link adds each step's reward and success
    and its simulated human (robot_rl.sim.human.SimulatedHuman) the teleop commands, as the scripted teleop node's
    messages would."""

    def __init__(self, clock: Callable[[], float]):
        self._clock = clock
        self.task_events: list[tuple[float, bool]] = []
        self.last_reward = 0.0
        self.episode_key: str | None = None
        self.engaged = False
        self.teleop_seen = False  # the teleop node's latched engaged state has arrived
        self.twist: tuple[np.ndarray, np.ndarray, float] | None = None  # linear, angular, clock time received
        self.twist_stamp = -math.inf  # header stamp of the newest teleop twist
        self.gripper: float | None = None

    def reward(self, value: float) -> None:
        self.last_reward = float(value) if math.isfinite(value) else 0.0

    def success(self, value: bool) -> None:
        """A task success message closes the step's events (with the reward that came before it)."""
        self.task_events.append((self.last_reward, bool(value)))

    def key(self, key: str) -> None:
        """An episode key; ValueError for an unknown one."""
        if key not in EPISODE_KEYS:
            raise ValueError(f"unknown key {key!r}; expected one of {EPISODE_KEYS}")
        self.episode_key = key

    def teleop_twist(self, linear: np.ndarray, angular: np.ndarray, stamp: float) -> None:
        self.twist = (np.asarray(linear), np.asarray(angular), self._clock())
        self.twist_stamp = float(stamp)

    def teleop_gripper(self, value: float) -> None:
        """The human's gripper opening in [0 closed, 1 open]; ValueError if not finite."""
        if not math.isfinite(value):
            raise ValueError(f"gripper {value} is not finite")
        self.gripper = min(max(float(value), 0.0), 1.0)

    def teleop_engaged(self, engaged: bool) -> bool:
        """The human's engaged state; True when it changed."""
        self.teleop_seen = True
        changed = bool(engaged) != self.engaged
        self.engaged = bool(engaged)
        return changed

    def take_task_events(self) -> tuple[float, bool]:
        """The step's (reward, success): the largest reward and any success since the last step."""
        if not self.task_events:
            return 0.0, False
        reward = max(r for r, _ in self.task_events)
        success = any(s for _, s in self.task_events)
        self.task_events.clear()
        return reward, success

    def take_key(self) -> str | None:
        key, self.episode_key = self.episode_key, None
        return key

    def human_action(self, session: ActorSession, config: RunnerConfig) -> np.ndarray | None:
        """The engaged human's command as an action (a twist older than TELEOP_TIMEOUT_S is no motion; the gripper
        stays where it is until the human sends one), or None while nobody is engaged."""
        if not self.engaged:
            return None
        from robot_rl.actor.teleop_mapping import twist_to_action

        linear, angular = np.zeros(3), np.zeros(3)
        if self.twist is not None and self._clock() - self.twist[2] <= TELEOP_TIMEOUT_S:
            linear, angular = self.twist[0], self.twist[1]
        gripper = self.gripper
        if gripper is None:
            gripper = (1.0 - session.safety.last_gripper) / 2.0
        return twist_to_action(linear, angular, gripper, control_dt=config.control_dt,
                               max_translation=config.max_translation, max_rotation=config.max_rotation,
                               action_dim=session.safety.config.action_dim)


class TickMeter:
    """Real time: how late each timer tick runs after its period's start, and whole periods missed."""

    def __init__(self, period: float):
        self.period = float(period)
        self._expected: float | None = None
        self._late: collections.deque[float] = collections.deque(maxlen=100_000)
        self.missed = 0

    def tick(self, now: float) -> None:
        if self._expected is None:
            self._expected = now
        else:
            self._expected += self.period
            if now - self._expected >= self.period:  # whole periods without a tick
                missed = int((now - self._expected) // self.period)
                self.missed += missed
                self._expected += missed * self.period
            elif now < self._expected:  # earlier than any tick so far: the timer's phase is this one
                self._expected = now
        self._late.append(now - self._expected)

    def summary(self) -> dict:
        """{n, p50, p99, max} lateness [ms] and `missed` ({} before a tick)."""
        if not self._late:
            return {}
        late = 1e3 * np.asarray(self._late)
        return {"n": int(late.size), "p50": round(float(np.median(late)), 2),
                "p99": round(float(np.percentile(late, 99)), 2), "max": round(float(late.max()), 2),
                "missed": self.missed}


@dataclasses.dataclass(frozen=True)
class EpisodeEnd:
    """A finished episode: its record (the status file's `results` row), last observation and transitions."""

    record: dict
    final_observation: dict
    steps: list
    """(transition, unix time) of each step."""


@dataclasses.dataclass
class EpisodeResult:
    """What one episode produced."""

    seed: int | None
    steps: int
    total_reward: float
    success: bool
    seconds: float
    failure: str | None = None
    """What kept a failed sim episode from success at its end (the task's failure_mode), None if unknown."""
    end: dict[str, float] = dataclasses.field(default_factory=dict)
    """The task's measurements at the sim episode's end (its task_measures), for a failure census."""


class EpisodeRunner:
    """The episode loop over any robot link (see the module doc); `tick()` goes as far as it can now."""

    def __init__(self, session: ActorSession, link: RobotLink, config: RunnerConfig, *,
                 clock: Callable[[], float] = time.monotonic, log: Log | None = None, gate: Gate | None = None,
                 inputs: StepInputs | None = None, uniform: Callable[[], bool] = lambda: False,
                 on_episode_end: Callable[[EpisodeEnd], None] | None = None,
                 on_command: Callable[[SessionStep], None] | None = None):
        if config.reset == "service" and link.reset_service is None:
            raise ValueError("a service reset needs the link's reset_service")
        if config.reset == "move_home" and config.home is None:
            raise ValueError("a move_home reset needs the home pose")
        self.session, self.link, self.config = session, link, config
        self.clock = clock
        self.log = log if log is not None else PrintLog()
        self.gate = gate if gate is not None else OpenGate()
        self.uniform = uniform
        self.on_episode_end = on_episode_end
        self.on_command = on_command
        self.inputs = inputs if inputs is not None else StepInputs(clock)
        self.ticks = TickMeter(config.control_dt)
        self.phase = "idle"
        self.done = False
        self.results: list[dict] = []
        self.waits: collections.Counter[str] = collections.Counter()  # seconds spent waiting, by reason
        self.holds: collections.Counter[str] = collections.Counter()  # commands held, by reason
        self.reset_counters: collections.Counter[str] = collections.Counter()
        self.waiting_for: str | None = None
        self._wait_since: float | None = None
        self._wait_last = 0.0
        self._logged: dict[str, float] = {}
        self._reset_handle = None
        self._reset_sent_at = 0.0
        self._reset_started: float | None = None  # clock time this episode's reset began
        self._reset_attempt = 0
        self._reset_retry_at = -math.inf
        self._reset_requested_at_stamp = -math.inf
        self._frame_due_since: float | None = None
        self._last_stepped_stamp = -math.inf
        self._commanded_since_frame = False
        self._human_wait: tuple[float, float] | None = None  # (frame stamp, clock start) of a wait for the human
        self._human_answers_frames = False  # the teleop node has answered a frame (it stamps its twist per frame)
        self._episode_started = 0.0
        self._episode_steps: list[tuple] = []

    # ----- the loop ----------------------------------------------------------------------------------------------
    def tick(self) -> None:
        """Advance as far as the robot's state allows now (a timer tick, or a new frame in lock-step)."""
        if self.config.mode == "realtime":
            self.ticks.tick(self.clock())
        if self.done:
            return
        if self.phase == "idle":
            if self.gate.training_done:  # nothing would train on another episode (said once, when it became so)
                self._wait("the learner (its training budget is done)", "", after_s=math.inf)
                self._hold_between_episodes()
                return
            self._begin_reset()
            return
        if self.phase == "resetting":
            self._check_reset()
            return
        stamp = self.link.frame_stamp()
        if self._awaiting_frame(stamp):
            self._check_frame_timeout()
            return
        self._frame_due_since = None
        if self.phase == "starting":
            wait = self.gate.start_wait(self.inputs.engaged, self.inputs.teleop_seen)
            if wait is not None:
                self._wait(*wait, after_s=0.0)
                return
            self._waited()
            self._start_episode()
        wait = self.gate.step_wait(self.session.next_seq)
        if wait is not None:
            self._wait(*wait)
            return
        self._waited()
        self._step(stamp)

    def _start_episode(self) -> None:
        position, quat = self.link.tcp_pose()
        episode = self.session.start_episode(position, quat, self.link.start_gripper())
        self._episode_started = self.clock()
        self.link.episode_started(episode)
        self.inputs.task_events.clear()
        self.inputs.episode_key = None
        self._episode_steps = []
        self.phase = "running"

    def _awaiting_frame(self, stamp: float | None) -> bool:
        """Whether the next step needs a sensor frame that has not arrived (after the reset; lockstep: the frame,
        reward and success that answer the last command)."""
        if self.phase == "starting" and (stamp is None or stamp <= self._reset_requested_at_stamp):
            self._wait("a sensor frame after the reset",
                       f"for a sensor frame after the reset: {self.link.missing_sensors_text()}")
            return True
        if self.config.mode == "lockstep":
            if stamp is None or stamp <= self._last_stepped_stamp:
                self._wait("a lock-step frame", "for a frame whose sensors all carry one stamp, newer than the last "
                           f"step ({self.link.missing_sensors_text()}); only the sim node in lock-step mode sends "
                           "such frames: a real driver needs mode: realtime in the robot file")
                return True
            if self.phase == "running" and self._commanded_since_frame and not self.inputs.task_events:
                self._wait("the step's reward and success", "for task/reward and task/success of the last step "
                           "(lock-step: the sim task publishes them; a real robot needs mode: realtime)")
                return True
            if self.phase == "running" and self._awaiting_human(stamp):
                return True
        return False

    def _awaiting_human(self, stamp: float) -> bool:
        """Lock-step with an engaged human: the world waits for us, and the human (the scripted teleop node, which
        stamps its twist with the frame it answers) is part of it; wait for their command for this frame rather than
        act on the previous one. A device that has answered a frame is waited for as the world is (up to
        `frame_timeout_s`: a busy machine delays its answer, it does not end it); one that has not yet (a device
        that does not stamp per frame) for TELEOP_TIMEOUT_S, then the runner acts on its newest command."""
        if not self.inputs.engaged or self.inputs.twist_stamp >= stamp:
            self._human_answers_frames |= self.inputs.engaged
            self._human_wait = None
            return False
        now = self.clock()
        if self._human_wait is None or self._human_wait[0] != stamp:
            self._human_wait = (stamp, now)
        limit = max(TELEOP_TIMEOUT_S, self.config.frame_timeout_s) if self._human_answers_frames else TELEOP_TIMEOUT_S
        if now - self._human_wait[1] >= limit:
            return False  # act on the device's newest command
        self._wait("the human's command for this frame", "for the teleop node's command answering this frame")
        return True

    def _check_frame_timeout(self) -> None:
        """No frame for `frame_timeout_s` (the sim or driver died, or restarted and lost the episode): give the
        episode up and reset again. Its transitions sent so far stay with the learner, which closes the episode."""
        now = self.clock()
        if self._frame_due_since is None or now - self._frame_due_since < self.config.frame_timeout_s:
            return
        self.reset_counters["frame_timeouts"] += 1
        if self.phase == "running":
            self.reset_counters["episodes_given_up"] += 1
            what = (f"after the command of step {self.session.episode_step} of episode {self.session.episode}; "
                    f"giving the episode up ({self.session.episode_step} steps) and resetting")
        else:
            what = "after the reset; calling the reset again"
        self.log.warning(f"no sensor frame within {self.config.frame_timeout_s:g} s {what} (is the sim or robot "
                         "driver running?)")
        self._frame_due_since = None
        self.phase = "idle"
        self._commanded_since_frame = False
        self.inputs.task_events.clear()

    def _step(self, stamp: float | None) -> None:
        # Lock-step: the world waits for us, so sensor age is measured on the frame's own clock.
        now = stamp if self.config.mode == "lockstep" and stamp is not None else self.link.now()
        obs, problems = self.link.observation(now)
        if obs is None:
            self.holds.update(problems)
            self._throttled("holding", 2.0, f"holding: {', '.join(problems)} "
                            f"({self.link.missing_sensors_text()}; a reading older than the robot's sensor age limit "
                            "counts as stale: is every driver running?)")
            self._hold_realtime(now, stamp)
            return
        hold = self.gate.hold_reason()  # asked every step: it notes when the learner went away
        if hold is not None and not self.inputs.engaged:
            self.holds[hold] += 1
            self._hold_realtime(now, stamp)
            return
        reward, success = self.inputs.take_task_events()
        result = self.session.step(obs, reward=reward, success=success, now=now,
                                   sensor_stamps=self.link.sensor_stamps(),
                                   human_action=self.inputs.human_action(self.session, self.config),
                                   episode_key=self.inputs.take_key(), uniform=self.uniform())
        self._last_stepped_stamp = stamp if stamp is not None else now
        if result.transition is not None:
            self._episode_steps.append((result.transition, time.time()))
        if result.episode_over:
            self._end_episode(result, obs)
            return
        if result.policy_late:
            self.holds["policy_late"] += 1
            self._throttled("policy_late", 2.0, "holding: the policy's next chunk is not ready yet")
        elif result.command.held:
            self.holds.update(result.command.reasons)
            self._throttled("safety", 1.0, f"safety held the command: {', '.join(result.command.reasons)}")
        self._send(result.command, stamp)
        if self.on_command is not None:
            self.on_command(result)

    def _hold_realtime(self, now: float, stamp: float | None) -> None:
        """A real-time robot needs a steady command stream (lock-step waits for us): the last target again."""
        if self.config.mode == "realtime":
            command = self.session.hold(now, self.link.sensor_stamps())
            if command is not None:
                self._send(command, stamp)

    def _send(self, command: SafeCommand, stamp: float | None) -> None:
        wait = self.link.send(command, stamp)
        if wait is not None:
            self._wait(*wait, every_s=1.0)
            return
        self._commanded_since_frame = True
        if self.config.mode == "lockstep":  # the sim answers each command with a frame
            self._frame_due_since = self.clock()

    def _end_episode(self, result: SessionStep, final_obs: dict) -> None:
        session = self.session
        record = {"episode": session.episode, "success": bool(result.success), "steps": session.episode_step,
                  "return": session.episode_return, "interventions": session.episode_interventions,
                  "weights_version": self.gate.weights_version,
                  "seconds": round(self.clock() - self._episode_started, 3)}
        self.results.append(record)
        self.log.info(f"episode {session.episode}: success={record['success']} steps={record['steps']} "
                      f"return={record['return']:.2f} interventions={record['interventions']} "
                      f"weights=v{record['weights_version']}")
        self.phase = "idle"
        self._commanded_since_frame = False
        self.inputs.task_events.clear()
        if self.config.episodes and len(self.results) >= self.config.episodes:
            self.done = True
        if self.on_episode_end is not None:
            self.on_episode_end(EpisodeEnd(record, final_obs, self._episode_steps))

    # ----- resets ------------------------------------------------------------------------------------------------
    def _begin_reset(self) -> None:
        """Call the reset service (idle -> resetting), or wait for one to come up; start homing or waiting for the
        human's reset key."""
        self._commanded_since_frame = False
        self.link.reset_begun()
        kind, now = self.config.reset, self.clock()
        stamp = self.link.pose_stamp()  # the episode starts at a frame taken after the reset
        if kind in ("human", "move_home"):
            self._reset_requested_at_stamp = -math.inf if stamp is None else stamp
            self._reset_started = now
            self.inputs.episode_key = None
            self.phase = "resetting"
            return
        if kind == "none":  # the episode starts at the first frame not stepped on yet
            self._reset_requested_at_stamp = self._last_stepped_stamp
            self.phase = "starting"
            self._frame_due_since = now
            return
        self._reset_requested_at_stamp = -math.inf if stamp is None else stamp
        if self._reset_started is None:
            self._reset_started = now
        if now < self._reset_retry_at:
            return
        service = self.link.reset_service
        if not service.ready():
            self._wait(f"the reset service {service.name}", "", after_s=math.inf)  # logged below
            self._reset_log(f"waiting for the reset service {service.name} ({self._reset_waited(now):.0f} s)")
            return
        self.reset_counters["reset_attempts"] += 1
        self._reset_attempt += 1
        self._wait(f"a response of the reset service {service.name}", "", after_s=math.inf)
        self._reset_handle = service.call()
        self._reset_sent_at = now
        self.phase = "resetting"

    def _check_reset(self) -> None:
        """A reset call answered (-> starting), failed or not answered in time (-> idle: call again)."""
        if self.config.reset == "human":
            if self.inputs.episode_key == "reset":
                self.inputs.episode_key = None
                self._reset_done(self.clock())
            else:
                self._hold_between_episodes()
                self._wait("the human's reset key", "for the human to reset the scene and press the reset key "
                           "(teleop/episode 'reset')", after_s=0.0, every_s=15.0)
            return
        if self.config.reset == "move_home":
            self._move_home()
            return
        service, now, attempt = self.link.reset_service, self.clock(), self._reset_attempt
        answer = service.result(self._reset_handle)
        if answer is None:
            if now - self._reset_sent_at < self.config.reset_timeout_s:
                self._wait(f"a response of the reset service {service.name}", "", after_s=math.inf)
                return
            # A lost response, or a sim / driver that died during the reset: this call would never complete.
            service.abandon(self._reset_handle)
            self.reset_counters["reset_timeouts"] += 1
            self._reset_handle, self.phase = None, "idle"
            self._reset_log(f"reset service {service.name} did not answer within {self.config.reset_timeout_s:g} s "
                            f"(attempt {attempt}, {self._reset_waited(now):.1f} s since the reset began); calling "
                            "again", warning=True, force=True)
            return
        self._reset_handle = None
        ok, message = answer
        if not ok:
            self.reset_counters["reset_failures"] += 1
            self.phase, self._reset_retry_at = "idle", now + RESET_RETRY_AFTER_FAILURE_S
            self._reset_log(f"reset failed: {message} (attempt {attempt}, {self._reset_waited(now):.1f} s since the "
                            f"reset began); retrying in {RESET_RETRY_AFTER_FAILURE_S:g} s", warning=True, force=True)
            return
        if attempt > 1:
            self.log.info(f"reset service {service.name} answered attempt {attempt}, "
                          f"{self._reset_waited(now):.1f} s after the reset began")
        frame = reset_frame_stamp(message)
        if frame is not None:  # the reply names the reset's frame: an older one (a frame still arriving from before
            # the reset, such as the sim node's start-up frame when no frame had come before the call) never starts it
            self._reset_requested_at_stamp = max(self._reset_requested_at_stamp, math.nextafter(frame, -math.inf))
        self._reset_done(now)

    def _reset_done(self, now: float) -> None:
        self._reset_attempt, self._reset_started = 0, None
        self.phase = "starting"
        self._frame_due_since = now

    def _hold_between_episodes(self) -> None:
        """Realtime: keep the command stream going (the last target) while no episode runs."""
        if self.session.target is not None:
            self._hold_realtime(self.link.now(), None)

    def _move_home(self) -> None:
        """Drive the TCP to the home pose through the command interface, within the safety limits; done within the
        home tolerance. A homing that takes longer than the reset timeout is logged and goes on."""
        now = self.clock()
        pose = self.link.tcp_pose()
        if pose is None:
            self._wait("the arm state (homing)",
                       f"for the arm state to home the robot ({self.link.missing_sensors_text()})")
            return
        home, (position, quat) = self.config.home, pose
        target = np.asarray(home.position)
        distance = float(np.linalg.norm(np.asarray(position) - target))
        if distance <= home.tolerance:
            self.log.info(f"at home after {self._reset_waited(now):.1f} s")
            self._reset_done(now)
            return
        if self._reset_waited(now) > self.config.reset_timeout_s * (1 + self.reset_counters["reset_timeouts"]):
            self.reset_counters["reset_timeouts"] += 1
            self.log.warning(f"homing takes longer than {self.config.reset_timeout_s:g} s (TCP "
                             f"{np.round(position, 3)}, home {list(home.position)}): is the arm's controller running?")
        command = self.session.safety.filter_absolute(target, home.quat, home.gripper, position, quat,
                                                      self.link.now(), self.link.sensor_stamps())
        self._send(command, None)
        self._wait("homing", f"for the TCP to reach home ({distance:.3f} m to go)")

    def _reset_waited(self, now: float) -> float:
        return now - (self._reset_started if self._reset_started is not None else now)

    def _reset_log(self, message: str, warning: bool = False, force: bool = False) -> None:
        """Log about the reset at most every RESET_LOG_EVERY_S (each timeout and failure is logged)."""
        if force or self.clock() - self._logged.get("reset", -math.inf) >= RESET_LOG_EVERY_S:
            self._logged["reset"] = self.clock()
            if warning:  # rclpy wants one severity per call site
                self.log.warning(message)
            else:
                self.log.info(message)

    # ----- waits and logs ----------------------------------------------------------------------------------------
    def _wait(self, reason: str, message: str, every_s: float = 5.0, after_s: float = 1.0) -> None:
        """The runner cannot go on now: add the time to `waits[reason]` [s] and, once a wait has lasted `after_s`,
        log why (at most every `every_s` per reason)."""
        now = self.clock()
        if self.waiting_for == reason and self._wait_since is not None:
            self.waits[reason] += now - self._wait_last
        else:
            self._wait_since = now
        self.waiting_for, self._wait_last = reason, now
        if now - self._wait_since >= after_s and now - self._logged.get(f"wait:{reason}", -math.inf) >= every_s:
            self._logged[f"wait:{reason}"] = now
            self.log.warning(f"waiting {message} ({now - self._wait_since:.1f} s so far)")

    def _waited(self) -> None:
        self.waiting_for, self._wait_since = None, None

    def _throttled(self, key: str, every_s: float, message: str) -> None:
        """A warning, at most every `every_s` per key."""
        now = self.clock()
        if now - self._logged.get(key, -math.inf) >= every_s:
            self._logged[key] = now
            self.log.warning(message)

    # ----- status ------------------------------------------------------------------------------------------------
    def status(self) -> dict:
        """The episode loop's part of the actor's status file."""
        results = self.results
        return {
            "episodes": len(results), "successes": sum(r["success"] for r in results), "results": results[-200:],
            "steps": sum(r["steps"] for r in results), "interventions": sum(r["interventions"] for r in results),
            "done": self.done, "phase": self.phase, "waiting_for": self.waiting_for,
            **{name: self.reset_counters[name] for name in ("reset_attempts", "reset_timeouts", "reset_failures",
                                                             "frame_timeouts", "episodes_given_up")},
            "waits_s": {reason: round(seconds, 3) for reason, seconds in self.waits.items()},
            "holds": dict(self.holds), "tick_late_ms": self.ticks.summary(),
        }


def run_episodes(runner: EpisodeRunner, episodes: int | None = None, *,
                 should_stop: Callable[[], bool] | None = None) -> list[dict]:
    """Tick a runner whose link answers at once (the in-process sim) until `episodes` more episodes ended (None: its
    config's count); returns their records. `should_stop()`, checked every tick, ends it early (the episode under way
    is not finished)."""
    count = episodes if episodes is not None else runner.config.episodes or math.inf  # 0: until stopped
    first = len(runner.results)
    wanted = first + count
    idle_ticks = 0
    while len(runner.results) < wanted and not runner.done:
        if should_stop is not None and should_stop():
            break
        before = (runner.phase, runner.session.counters["commands"], len(runner.results))
        runner.tick()
        idle_ticks = idle_ticks + 1 if (runner.phase, runner.session.counters["commands"],
                                        len(runner.results)) == before else 0
        if idle_ticks > 1000:
            raise RuntimeError(f"the episode loop makes no progress (waiting for {runner.waiting_for})")
    return runner.results[first:]
