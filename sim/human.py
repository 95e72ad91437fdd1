"""The simulated human supervisor: the scripted expert takes over when the policy is stuck, pushing out of bounds or
(optionally) heading where the expert would not, or about to cause a failure the task cannot undo.

:class:`InterventionRule` holds the when-and-how-long logic without any env access (fed the TCP position, the
commanded target and the push direction each step); :class:`ScriptedSupervisor` feeds it what a person watching the
robot sees (the commanded targets, from which the push is inferred, the TCP, the expert's action, the hazard the sim
names) and turns the expert's action into a teleop twist. The ROS 2 scripted teleop node (robot_rl.sim.scripted_teleop)
and the in-process :class:`SimulatedHuman` are thin shells around one :class:`ScriptedSupervisor`, so a run decides
the same way in-process and over ROS.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from robot_rl.actor.teleop_mapping import action_to_twist
from robot_rl.sim.expert import make_expert

if TYPE_CHECKING:
    from robot_rl.actor.runner import StepInputs

ON_FACE_TOLERANCE = 1e-4  # [m]


@dataclasses.dataclass(frozen=True)
class InterventionConfig:
    """When and for how long a supervisor intervenes."""

    takeover_steps: int = 5
    """Steps the expert keeps control once it took over."""
    episode_budget: int = 15
    """At most this many intervention steps per episode."""
    total_budget: int | None = None
    """At most this many intervention steps over the whole run (None: no limit)."""
    stuck_window: int = 6
    """Steps over which the TCP must move at least stuck_distance; less means the policy is stuck (a takeover)."""
    stuck_distance: float = 0.01
    """TCP travel in metres below which the policy counts as stuck over stuck_window steps."""
    boundary_margin: float = 0.005
    """Distance in metres from a workspace face within which a target counts as at the boundary."""
    boundary_steps: int = 3
    """Consecutive steps with the target at the boundary and the action pushing further out before a takeover."""
    disagreement: float | None = None
    """Take over when the policy's translation command (first three action entries, in [-1, 1]) lies farther than
    this from the expert's, disagreement_steps steps in a row: a human who watches the motion and steps in when the
    robot heads somewhere they would not (None: off)."""
    disagreement_steps: int = 3
    """Consecutive disagreeing steps before a takeover (with disagreement set)."""
    watch_hazards: bool = False
    """Also take over at once when the policy's action is about to cause a failure the task cannot undo (the task's
    RobotEnv.imminent_failure, e.g. PegInsert's press beside the hole): a person who stops a jam they see coming.
    Read from the sim at each frame (over ROS: the sim node's sim/imminent_failure): the hand's target is there
    already, so the human sees it a step after the command that set it, as a person reacts."""

    def __post_init__(self) -> None:
        problems = [f"{name}={getattr(self, name)!r} must be >= {low}"
                    for name, low in (("takeover_steps", 1), ("episode_budget", 0), ("stuck_window", 2),
                                      ("boundary_steps", 1), ("stuck_distance", 0.0), ("boundary_margin", 0.0),
                                      ("disagreement_steps", 1))
                    if not getattr(self, name) >= low]
        if self.total_budget is not None and self.total_budget < 0:
            problems.append(f"total_budget={self.total_budget!r} must be >= 0 or None (no limit)")
        if self.disagreement is not None and not (np.isfinite(self.disagreement) and self.disagreement > 0):
            problems.append(f"disagreement={self.disagreement!r} must be a finite distance > 0 or None (off)")
        if problems:
            raise ValueError(f"invalid {type(self).__name__}: {'; '.join(problems)}")


@dataclasses.dataclass(frozen=True)
class SimulatedHumanConfig(InterventionConfig):
    """When and for how long the simulated human intervenes, and how noisy its hands are."""

    noise: float = 0.0
    """Std of Gaussian noise on the expert's actions, to make it a less-than-perfect human."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (np.isfinite(self.noise) and self.noise >= 0.0):
            raise ValueError(f"invalid {type(self).__name__}: noise={self.noise!r} must be a finite std >= 0")


TRIGGER_STUCK = "stuck"
TRIGGER_PUSHING_OUT = "pushing_out"
TRIGGER_NON_FINITE = "non_finite_action"
TRIGGER_DISAGREES = "disagrees_with_expert"
TRIGGER_HAZARD = "imminent_failure"


class InterventionRule:
    """Decides, one control step at a time, whether the supervisor takes over (pure: no env, no ROS).

    Triggers (only when no takeover is running and budget is left): the TCP moved less than ``stuck_distance`` over
    the last ``stuck_window`` steps; the commanded target was within ``boundary_margin`` of a workspace face with the
    push direction beyond 0.5 towards that face ``boundary_steps`` steps in a row; a non-finite policy action; with
    ``disagreement`` set, the push lying farther than that from the expert's ``disagreement_steps`` steps in a row;
    a hazard seen coming (fed by the caller, see ``InterventionConfig.watch_hazards``), at once. A takeover lasts
    ``takeover_steps`` steps, cut short when the episode or total budget runs out.
    """

    def __init__(self, config: InterventionConfig, workspace_low, workspace_high):
        self.config = config
        self.workspace_low = np.asarray(workspace_low, dtype=np.float64).reshape(3)
        self.workspace_high = np.asarray(workspace_high, dtype=np.float64).reshape(3)
        self.total_steps = 0
        self.last_trigger: str | None = None
        """Why the latest takeover started (TRIGGER_*), None before the first one."""
        self.reset()

    def reset(self) -> None:
        """Start a new episode: clears the evidence and any running takeover, refills the episode budget."""
        self.episode_steps = 0
        self._remaining = 0
        self._positions: collections.deque = collections.deque(maxlen=self.config.stuck_window)
        self._pushing_out = 0
        self._disagreeing = 0
        self.episode_takeovers: collections.Counter = collections.Counter()
        """This episode's takeovers by trigger (TRIGGER_*)."""

    @property
    def remaining(self) -> int:
        """Steps left in the running takeover (0: the policy acts)."""
        return self._remaining

    def budget_left(self) -> bool:
        total = self.config.total_budget
        return self.episode_steps < self.config.episode_budget and (total is None or self.total_steps < total)

    def _pushes_out(self, target_position, push) -> bool:
        if target_position is None:
            return False
        target = np.asarray(target_position, dtype=np.float64)
        margin = self.config.boundary_margin
        action = np.nan_to_num(np.asarray(push, dtype=np.float64)[:3])
        at_low = target <= self.workspace_low + margin
        at_high = target >= self.workspace_high - margin
        return bool(np.any(at_low & (action < -0.5)) or np.any(at_high & (action > 0.5)))

    def _stuck(self) -> bool:
        if len(self._positions) < self._positions.maxlen:
            return False
        return float(np.linalg.norm(self._positions[-1] - self._positions[0])) < self.config.stuck_distance

    def _disagrees(self, push, expert_action) -> bool:
        if self.config.disagreement is None or expert_action is None:
            return False
        gap = np.asarray(push, dtype=np.float64)[:3] - np.asarray(expert_action, dtype=np.float64)[:3]
        return not np.all(np.isfinite(gap)) or float(np.linalg.norm(gap)) > self.config.disagreement

    def step(self, tcp_position, target_position, push, expert_action=None, hazard: str | None = None) -> bool:
        """Feed one control step; True if the supervisor acts at this step (counted against the budgets).

        `tcp_position`: measured TCP (3,) [m]; `target_position`: the commanded target (3,) [m] or None if unknown;
        `push`: the policy's action (its first three entries are the translation direction in [-1, 1]);
        `expert_action`: what the expert would command now (for the disagreement trigger; None: unknown);
        `hazard`: the failure the policy's action is about to cause (None: none seen).
        """
        config = self.config
        self._positions.append(np.array(tcp_position, dtype=np.float64).reshape(3))
        self._pushing_out = self._pushing_out + 1 if self._pushes_out(target_position, push) else 0
        self._disagreeing = self._disagreeing + 1 if self._disagrees(push, expert_action) else 0
        if self._remaining == 0 and self.budget_left():
            trigger = None
            if hazard is not None:
                trigger = TRIGGER_HAZARD
            elif self._stuck():
                trigger = TRIGGER_STUCK
            elif self._pushing_out >= config.boundary_steps:
                trigger = TRIGGER_PUSHING_OUT
            elif not np.all(np.isfinite(push)):
                trigger = TRIGGER_NON_FINITE
            elif self._disagreeing >= config.disagreement_steps:
                trigger = TRIGGER_DISAGREES
            if trigger is not None:
                self.last_trigger = trigger
                self.episode_takeovers[trigger] += 1
                self._remaining = config.takeover_steps
                self._positions.clear()
                self._pushing_out = 0
                self._disagreeing = 0
        if self._remaining == 0 or not self.budget_left():
            self._remaining = 0
            return False
        self._remaining -= 1
        self.episode_steps += 1
        self.total_steps += 1
        return True


def inferred_push(previous_target, target, workspace_low, workspace_high, max_translation: float,
                  tolerance: float = ON_FACE_TOLERANCE) -> np.ndarray:
    """The policy's push direction (3,) in action units, inferred from two consecutive commanded targets.

    The step between the targets over `max_translation` (clipped to [-1, 1]); an axis whose target sits on a workspace
    face (within `tolerance`: the actor's safety layer clipped it there, so the policy asked for more) reads as a full
    push towards that face. Without a previous target only the faces count.
    """
    target = np.asarray(target, dtype=np.float64).reshape(3)
    if previous_target is None:
        push = np.zeros(3)
    else:
        push = np.clip((target - np.asarray(previous_target, dtype=np.float64).reshape(3)) / max_translation,
                       -1.0, 1.0)
    push = np.where(target <= np.asarray(workspace_low) + tolerance, np.minimum(push, -1.0), push)
    return np.where(target >= np.asarray(workspace_high) - tolerance, np.maximum(push, 1.0), push)


class ScriptedSupervisor:
    """The scripted human's decisions from what they see of the robot (pure: no env, no ROS): feed the commanded
    targets, each frame's expert action and hazard, then the frame's TCP (`step`); read the teleop command.

    The policy's action is not seen, only what the actor commanded: the push direction is :func:`inferred_push` of
    the last two commanded targets.
    """

    def __init__(self, config: InterventionConfig, workspace_low, workspace_high, *, control_dt: float,
                 max_translation: float, max_rotation: float):
        self.config = config
        self.workspace_low = np.asarray(workspace_low, dtype=np.float64).reshape(3)
        self.workspace_high = np.asarray(workspace_high, dtype=np.float64).reshape(3)
        self.control_dt, self.max_translation, self.max_rotation = control_dt, max_translation, max_rotation
        self.rule = InterventionRule(config, self.workspace_low, self.workspace_high)
        self.engaged = False
        self.expert_action: np.ndarray | None = None
        self.hazard: str | None = None
        """The failure the sim named at this frame (None: none), used by the next `step` only."""
        self._target: np.ndarray | None = None
        self._target_at_last_step: np.ndarray | None = None

    def reset(self) -> None:
        """A new episode: the evidence, the running takeover and the episode budget start over."""
        self.rule.reset()
        self.engaged = False
        self.hazard = None
        self._target = self._target_at_last_step = None

    def on_target(self, position) -> None:
        """The actor commanded a TCP target (3,) [m]."""
        self._target = np.array(position, dtype=np.float64).reshape(3)

    def on_hazard(self, hazard: str) -> None:
        """The failure the hand's target is about to cause ('' for none)."""
        self.hazard = hazard or None

    def on_expert_action(self, action) -> None:
        """What the expert would command now (4 or 7 entries; ValueError otherwise)."""
        action = np.array(action, dtype=np.float64).reshape(-1)
        if action.shape[0] not in (4, 7):
            raise ValueError(f"expert action must have 4 or 7 entries, got {action.shape[0]}")
        self.expert_action = action

    def step(self, tcp_position) -> bool:
        """One control step (a new TCP measurement); returns whether the supervisor is engaged for it."""
        if self._target is None:
            target, push = None, np.zeros(3)
        else:
            target = self._target
            push = inferred_push(self._target_at_last_step, target, self.workspace_low, self.workspace_high,
                                 self.max_translation)
        self._target_at_last_step = self._target
        hazard = self.hazard if self.config.watch_hazards else None
        self.hazard = None
        self.engaged = self.rule.step(tcp_position, target, push, self.expert_action, hazard)
        return self.engaged

    def command(self) -> tuple[np.ndarray, np.ndarray, float | None]:
        """(linear [m/s], angular [rad/s], gripper opening or None) from the latest expert action; zero velocity and
        no gripper target before the first expert action (ValueError for a non-finite one)."""
        if self.expert_action is None:
            return np.zeros(3), np.zeros(3), None
        return action_to_twist(self.expert_action, control_dt=self.control_dt, max_translation=self.max_translation,
                               max_rotation=self.max_rotation)


class SimulatedHuman:
    """Plays the human supervisor of an in-process sim run as the scripted teleop node does over ROS, with the
    scripted expert as the human's hands (see the module doc).

    The in-process sim link (robot_rl.sim.robot_adapter.SimLink) shows it what the sim node and the actor publish over
    ROS: each command's target (`commanded`), each frame (`frame`: the expert's action, the hazard, the TCP) and each
    episode's start (`episode_started`); it answers through the episode loop's teleop inputs (engaged, gripper, a
    twist stamped with the frame it answers), which the runner turns into the human's action for the step.
    """

    def __init__(self, env, config: SimulatedHumanConfig = SimulatedHumanConfig(), seed: int | None = None):
        base = env.unwrapped
        self.env = base
        self.config = config
        self.expert = make_expert(env, noise=config.noise, seed=seed)
        self.supervisor = ScriptedSupervisor(config, base.workspace_low, base.workspace_high,
                                             control_dt=float(base.control_dt),
                                             max_translation=float(base.max_translation),
                                             max_rotation=float(base.max_rotation))

    @property
    def rule(self) -> InterventionRule:
        return self.supervisor.rule

    @property
    def episode_steps(self) -> int:
        return self.rule.episode_steps

    @property
    def total_steps(self) -> int:
        return self.rule.total_steps

    @total_steps.setter
    def total_steps(self, value: int) -> None:  # a resumed run restores the count of past interventions
        self.rule.total_steps = int(value)

    def episode_started(self, inputs: StepInputs) -> None:
        """A new episode (the actor node's actor/episode): control handed back, evidence and episode budget reset."""
        self.expert.reset()
        self.supervisor.reset()
        inputs.teleop_engaged(False)

    def commanded(self, target_position) -> None:
        """The actor sent a command with this TCP target (its command/target_pose)."""
        self.supervisor.on_target(target_position)

    def frame(self, inputs: StepInputs, stamp: float) -> None:
        """A sim frame at `stamp` (the sim node's sim/expert_action, sim/imminent_failure, then tcp_pose): decide, and
        while engaged answer the frame with the expert's action as the gripper opening and a twist stamped with it."""
        base = self.env
        self.supervisor.on_expert_action(self.expert.act())
        if self.config.watch_hazards:
            self.supervisor.on_hazard(base.imminent_failure(base.target_pose()[0]) or "")
        engaged = self.supervisor.step(base.tcp_pose()[0])
        inputs.teleop_engaged(engaged)
        if engaged:
            linear, angular, opening = self.supervisor.command()
            inputs.teleop_gripper(opening)
            inputs.teleop_twist(linear, angular, stamp)

    def hand_back(self, inputs: StepInputs) -> None:
        """The episode ends at this frame: nobody acts on it, and control goes back to the policy."""
        self.supervisor.engaged = False
        inputs.teleop_engaged(False)
