"""The policy an actor acts with, without ROS: loading a saved one or a learner's weights, the checks against the
robot and the deployment gate, and what the policy side tells the episode loop (robot_rl.actor.runner.Gate).

The policy comes from a file (``weights_path``: a SAC policy.msgpack, a policy folder, or a run folder holding one;
the actor acts at once and never waits for a learner) or from the learner's weights messages. On a real robot a
saved policy, or the frozen base a learner's head names, needs a passing validation record of the robot file's suite
(robot_rl.actor.deploy_gate; the record that admits it is logged at start-up) unless ``allow_unvalidated`` (then it is logged
at start-up and every episode). The learner is away when nothing of it arrived for the robot file's
``learner_lost.after_s``: the actor acts on with the last weights (``act``) or holds the policy's commands
(``hold``). ``max_weight_lag`` (lock-step) waits, at most ``weight_wait_s`` per step, for weights that saw all but
that many of this actor's transitions.
"""

from __future__ import annotations

import collections
import dataclasses
import time
import typing
from collections.abc import Callable

import numpy as np

from robot_rl.actor.session import ActorSession
from robot_rl.actor.runner import Log, Wait
from robot_rl.policies.base import PolicyError
from robot_rl.actor.robot_config import RobotConfig
from robot_rl.wire.learner_contact import LearnerWatch
from robot_rl.wire.weights import WeightsStamp


@dataclasses.dataclass(frozen=True)
class PolicySettings:
    """How the actor runs its policy (the actor node's parameters of the same names)."""

    source: str = "learner"
    """learner: weights from the learner or a file | none: no policy (the human acts)."""
    observation_keys: tuple[str, ...] = ("state",)
    action_dim: int = 4
    image_size: int = 0
    device: str = "auto"
    inference_steps: int = 0
    chunk_execute: int = 0
    ensemble_decay: float = -1.0
    deterministic: bool = False
    seed: int = 0
    stream: bool = True
    max_weight_lag: int = 0
    weight_wait_s: float = 5.0
    allow_unvalidated: bool = False
    task: str = "PickCube-v0"
    realtime: bool = False
    control_dt: float = 0.1
    weights_from: str = "the learner"
    """Where the learner's weights come from, as the wait for them names it (the actor node: the topic)."""

    PARAMETERS: typing.ClassVar[tuple[str, ...]] = (
        "image_size", "device", "inference_steps", "chunk_execute", "ensemble_decay", "deterministic", "seed",
        "max_weight_lag", "weight_wait_s", "allow_unvalidated", "task")
    """The fields that are actor node parameters of the same name."""


def observation_mismatch(policy_keys, actor_keys, robot_file: str, learner: bool) -> str:
    """One line: the policy (the learner's, or a saved one) reads observation keys this actor does not build from
    its robot file, both key lists, and the fix."""
    whose = "the learner's policy" if learner else "the policy"
    fix = (f"start the learner with robot:={robot_file} (or the same obs_mode / cameras)" if learner else
           "act with a policy trained on this robot file's observations (or the same obs_mode / cameras)")
    return (f"{whose} reads {list(policy_keys)}; this actor builds {list(actor_keys)} from robot file {robot_file}: "
            f"{fix}")


class PolicySlot:
    """The actor's policy and what it says about acting: a `robot_rl.actor.runner.Gate`."""

    def __init__(self, session: ActorSession, robot: RobotConfig, settings: PolicySettings, *, log: Log,
                 clock: Callable[[], float] = time.monotonic, control_clock: Callable[[], float] | None = None,
                 image_sizes: dict[str, int] | None = None):
        self.session, self.robot, self.settings, self.log = session, robot, settings, log
        self.clock = clock
        self.control_clock = control_clock or clock
        self.image_sizes = image_sizes if image_sizes is not None else {}  # key -> the policy's image side
        self.weights_path = ""
        self.weights_version = 0
        self.weights_stamp: WeightsStamp | None = None  # run, learner incarnation and version of the weights in use
        self.weights_transitions = 0
        self.weights_heard: collections.Counter[str] = collections.Counter()
        """Learner weights messages that arrived and were not used, by why (the wait for weights says so)."""
        self.training_done = False  # the learner's newest weights are its final ones (budget reached)
        self.unvalidated: str | None = None  # why the policy acting on this real robot is not validated, if not
        self.weights_used_at: collections.deque[tuple[int, float]] = collections.deque(maxlen=200)
        self.learner_watch = LearnerWatch(robot.learner_lost.after_s)
        # The learner's count of trained transitions when its first weights arrived: the count is the run's (every
        # actor and every earlier run of this one), so only its growth since then is this run's share.
        self._trained_base: int | None = None
        self._lag_wait_started: float | None = None

    # ----- loading -----------------------------------------------------------------------------------------------
    def load_file(self, path: str) -> None:
        """Act with a saved policy from the start; PolicyError names any problem (the gate's included)."""
        from robot_rl.policies.checkpoint import find_policy_folder, load_policy
        from robot_rl.policies.registry import kind_of
        from robot_rl.wire.policy_file import PolicyFileError, read_policy_file

        if self.settings.source == "none":
            raise PolicyError(f"{path!r} with policy:=none: the actor would not use it")
        problem = self.deployment_problem(path)
        if problem:
            raise PolicyError(problem)
        self.weights_path = path
        folder = find_policy_folder(path)
        if folder is None:  # the learner's weights format (SAC): later weights from a learner may follow
            try:
                weights = read_policy_file(path)
            except PolicyFileError as error:
                raise PolicyError(str(error)) from None
            if self.settings.inference_steps:
                raise PolicyError(f"inference_steps={self.settings.inference_steps}: {path} is a SAC policy file, "
                                  "without DDIM steps to set (only diffusion policies have)")
            problem = self.use_weights(weights, origin=path)
            if problem:
                raise PolicyError(f"policy file {path}: {problem}")
            return
        policy = load_policy(folder, device=self.settings.device, seed=self.settings.seed)
        problem = self._use_policy(policy)
        if problem:
            raise PolicyError(f"policy {folder}: {problem}")
        actor = self.session.actor
        ddim = f" (DDIM-{policy.config.inference_steps})" if kind_of(policy.kind).ddim_steps else ""
        self.log.info(f"policy {policy.kind}{ddim} loaded from {folder} on {policy.device}: obs horizon "
                      f"{policy.obs_horizon}, chunks of {policy.chunk_length}, executing {actor.execute} per chunk"
                      + (" in a worker thread" if actor.planner is not None else ""))

    def check_spec(self, spec, action_dim: int, origin: str = "learner") -> str | None:
        """Why a policy (from `origin`: learner, or a file) with this observation spec and action size cannot run on
        this actor, or None."""
        keys = self.settings.observation_keys
        missing = [k for k in spec.keys if k not in keys]
        if "wrench" in missing:
            return ("the policy reads the wrist force/torque reading (observation key wrench), which no robot file "
                    "gives over ROS yet: it runs in the sim mirror only (robot-rl eval, validate)")
        if missing:
            return observation_mismatch(spec.keys, keys, self.robot.path or self.robot.name, origin == "learner")
        if int(action_dim) != self.settings.action_dim:
            return f"the policy has {action_dim} actions, the actor action_dim={self.settings.action_dim}"
        for key in spec.image_keys:
            height, width = spec[key].shape[:2]
            if height != width:
                return f"the policy's {key} is {height}x{width}; the actor makes square images"
            if self.settings.image_size and self.settings.image_size != height:
                self.log.warning(f"image_size={self.settings.image_size} but the policy sees {height} px {key}: "
                                 f"using {height}")
            self.image_sizes[key] = int(height)
        return None

    def _use_policy(self, policy) -> str | None:
        """Act with a frozen policy of any kind (chunks in a worker thread in real time); why not, or None."""
        from robot_rl.actor.session import Actor
        from robot_rl.policies.base import set_inference_steps
        from robot_rl.policies.chunking import ChunkPlanner

        settings = self.settings
        problem = self.check_spec(policy.observation_spec, policy.action_dim, origin="file")
        if problem:
            return problem
        execute = settings.chunk_execute or policy.chunk_length
        if not 1 <= execute <= policy.chunk_length:
            return f"chunk_execute={execute} must be in [1, the policy's chunk length {policy.chunk_length}]"
        if settings.inference_steps:
            try:
                set_inference_steps(policy, settings.inference_steps)
            except PolicyError as error:
                return str(error)
        warm = {key: np.zeros(entry.shape, entry.dtype) for key, entry in policy.observation_spec.entries}
        try:
            policy.act_chunk([warm] * policy.obs_horizon, deterministic=True)  # load and compile before any episode
        except (ValueError, RuntimeError) as error:
            return str(error)
        planner = None
        if settings.realtime and policy.chunk_length > 1:
            decay = settings.ensemble_decay
            planner = ChunkPlanner(policy, settings.control_dt, deterministic=settings.deterministic,
                                   ensemble_decay=None if decay < 0 else decay, clock=self.control_clock)
        self.session.actor = Actor(policy, seed=settings.seed, deterministic=settings.deterministic, execute=execute,
                                   planner=planner)
        self.weights_version = 1
        self.weights_stamp = WeightsStamp(None, None, 1)
        return None

    def deployment_problem(self, policy: str) -> str | None:
        """The deployment gate for `policy` on this robot: why it may not run (None: it may, or it runs anyway with
        allow_unvalidated, logged)."""
        if self.robot.sim:
            return None
        from robot_rl.wire.policy_file import PolicyFileError
        from robot_rl.actor.deploy_gate import deployment_decision, record_line

        try:
            problem, record = deployment_decision(policy, self.robot.path or self.robot.name, self.settings.task)
        except (PolicyError, PolicyFileError, OSError, ValueError) as error:
            return str(error)
        if record is not None:
            self.log.info(f"policy {policy} validated for robot file {self.robot.path or self.robot.name}: "
                          f"{record_line(record)}")
        if problem and self.settings.allow_unvalidated:
            self.unvalidated = problem
            self.log.error(f"UNVALIDATED POLICY ON A REAL ROBOT ({self.robot.name}), allow_unvalidated is set: "
                           f"{problem}")
            return None
        return problem

    def wants(self, weights) -> bool:
        """Whether these weights would be used: a policy is wanted and they supersede the current ones (a higher
        version of the same run and learner incarnation, or another incarnation or run: the actor node's
        robot_rl.wire.learner_contact.RunBinding lets through only the run it serves, at its newest incarnation)."""
        return self.settings.source != "none" and weights.stamp.supersedes(self.weights_stamp)

    def use_weights(self, weights, origin: str) -> str | None:
        """Act with `weights` (a WeightsMessage) from now on; returns why they cannot be used, or None."""
        from robot_rl.policies.registry import robot_observation_spec
        from robot_rl.actor.session import actor_from_weights

        session, settings = self.session, self.settings
        base = (weights.policy_config or {}).get("base")
        # A learner's head on a frozen base: the base must pass the gate (a head from weights_path passed it whole,
        # its record covering the base's bytes too).
        if base and session.actor is None and origin == "learner":
            problem = self.deployment_problem(str(base))
            if problem:
                return f"its base: {problem}"
        try:
            if session.actor is None:
                spec = robot_observation_spec(weights)  # checked before building (a head on a base loads its base)
                if spec is not None:
                    problem = self.check_spec(spec, weights.action_dim, origin)
                    if problem:
                        return problem
                actor = actor_from_weights(weights, seed=settings.seed, deterministic=settings.deterministic)
                spec = actor.policy.observation_spec  # what the robot gives (a residual head adds its base action)
                problem = self.check_spec(spec, actor.policy.action_dim, origin)
                if problem:
                    return problem
                # Compile the policy now: a first call inside an episode would stall the actor for its compile time
                # and leave every sensor stale at the next step (a hold).
                actor.policy_action(actor.observe({key: np.zeros(entry.shape, entry.dtype)
                                                   for key, entry in spec.entries}))
                session.actor = actor
            else:
                session.actor.update_weights(weights.policy, weights.version)
        except (ValueError, KeyError, TypeError) as error:
            return str(error)
        first = self.weights_version == 0
        new_run = self.weights_stamp is not None and weights.run != self.weights_stamp.run
        self.weights_version, self.weights_transitions = weights.version, weights.transitions
        self.weights_stamp = weights.stamp
        # unix time: for a bench on hosts that share a clock (learner publish -> acting with it); nothing compares it
        self.weights_used_at.append((weights.version, round(time.time(), 4)))
        if not self.weights_path and (self._trained_base is None or new_run):
            # a run switched to (follow_new_run) trains on what comes from now on: the lag counts from here
            self._trained_base = weights.transitions - (self.session.next_seq if new_run else 0)
        if first:
            self.log.info(f"policy weights v{weights.version} loaded from {origin}")
        if weights.training_done and not self.training_done:
            self.log.info(f"the learner reached its training budget: final weights v{weights.version}; this actor "
                          "finishes its episode and starts no new one")
        self.training_done = weights.training_done
        return None

    # ----- the learner -------------------------------------------------------------------------------------------
    def heard_learner(self) -> None:
        away = self.learner_watch.heard(self.clock())
        if away is not None:
            self.log.info(f"the learner is back after {away:.1f} s away")

    def learner_away(self) -> bool:
        """The learner went silent (robot file learner_lost.after_s); logs the start of each outage. Only for
        weights from a learner: a saved policy or a finished learner has nothing more to send."""
        if not self.settings.stream or self.weights_path or self.training_done or self.session.actor is None:
            return False
        watch, action = self.learner_watch, self.robot.learner_lost.action
        outages = watch.outages
        away = watch.away(self.clock())
        if watch.outages > outages:
            what = ("holding the policy's commands until it is back" if action == "hold"
                    else f"acting with weights v{self.weights_version}")
            self.log.warning(f"the learner is away (nothing of it for {watch.after_s:g} s): {what} "
                             f"(learner_lost.action: {action} in the robot file); "
                             f"{len(self.session.outbox)} transitions kept for it")
        return away

    # ----- robot_rl.actor.runner.Gate ---------------------------------------------------------------------------------
    def start_wait(self, human_engaged: bool, teleop_seen: bool) -> Wait | None:
        if self.settings.source == "learner" and self.session.actor is None and not human_engaged:
            heard = ", ".join(f"{count} {why}" for why, count in sorted(self.weights_heard.items()))
            return ("policy weights from the learner", f"for policy weights from {self.settings.weights_from}; "
                    + (f"weights messages heard but not used: {heard}" if heard else "no weights message heard yet"))
        if self.settings.source == "none" and not teleop_seen:  # recording demos: nobody would act yet
            return ("a teleop node (teleop/engaged)", "for a teleop node (teleop/engaged)")
        if self.unvalidated:
            self.log.error(f"episode {self.session.episode + 1} on {self.robot.name} with an UNVALIDATED policy "
                           "(allow_unvalidated)")
        return None

    def step_wait(self, transitions: int) -> Wait | None:
        settings = self.settings
        if (settings.realtime or settings.max_weight_lag <= 0 or self.session.actor is None or self.weights_path
                or self.training_done):  # the final weights: no newer ones will come
            return None
        trained = self.weights_transitions - (self._trained_base or 0)
        if transitions - trained <= settings.max_weight_lag:
            self._lag_wait_started = None
            return None
        now = self.clock()
        if self._lag_wait_started is None:
            self._lag_wait_started = now
        if now - self._lag_wait_started < settings.weight_wait_s:
            return ("fresher policy weights (max_weight_lag)",
                    f"for weights that trained on all but {settings.max_weight_lag} of this actor's transitions "
                    "(max_weight_lag)")
        self._lag_wait_started = None
        self.log.warning(f"no fresh weights for {settings.weight_wait_s:.1f}s (learner away?): acting with "
                         f"v{self.weights_version}")
        return None

    def hold_reason(self) -> str | None:
        if self.learner_away() and self.robot.learner_lost.action == "hold":
            return "learner_away"
        return None
