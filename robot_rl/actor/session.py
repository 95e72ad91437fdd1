"""The actor: observation -> action with the latest policy weights; the session: its control loop, in which a human
may take over at any step (their action given to `ActorSession.step`)."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from robot_rl.core.protocols import Observation
from robot_rl.actor.safety import SafeCommand, Safety
from robot_rl.wire.outbox import Outbox
from robot_rl.wire.transitions import StampedTransition


@dataclasses.dataclass(frozen=True)
class ActorStep:
    """What the actor decided: the action to execute."""

    action: np.ndarray
    learner_action: np.ndarray | None = None
    """The learner head's own action for this step (the residual, the noise; None: unknown)."""
    info: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    """The policy's per-step extras (e.g. `base_action`)."""


class Actor:
    """Runs any policy (robot_rl.policies: SAC, diffusion, ...) with the newest weights it was given; a human's action
    replaces it through `human_acted` (the session's `human_action`).

    Chunks are executed receding-horizon, one action per `policy_action` call: in lock-step and in-process loops the
    next chunk is computed when the previous one is used up (`execute` actions of each, default all). With a
    `planner` (robot_rl.policies.chunking.ChunkPlanner, for a real-time robot) chunks are computed in a worker thread
    and each call takes the action due now, or None when none is: the caller holds.
    """

    def __init__(
        self,
        policy,
        *,
        seed: int = 0,
        deterministic: bool = False,
        execute: int | None = None,
        planner=None,
    ):
        from robot_rl.policies.base import ObservationHistory

        self.policy = policy
        self.deterministic = deterministic
        self.execute = policy.chunk_length if execute is None else int(execute)
        if not 1 <= self.execute <= policy.chunk_length:
            raise ValueError(f"execute={execute} must be in [1, chunk_length={policy.chunk_length}]")
        self.planner = planner
        self.history = ObservationHistory(policy.obs_horizon)
        self._queue: collections.deque[tuple[np.ndarray, np.ndarray, dict]] = collections.deque()
        self._last: tuple[np.ndarray, dict] = (np.zeros(0, np.float32), {})  # learner action, info of the last step
        self._uniform_rng = np.random.default_rng(seed)

    @property
    def weights_version(self) -> int:
        return int(self.policy.weights_version)

    def update_weights(self, policy_bytes: bytes, version: int) -> None:
        """Swap in the learner's newer weights (policies trained by the learner only; a frozen policy's PolicyError
        says it has none)."""
        self.policy.update_weights(policy_bytes, version)

    def reset(self) -> None:
        self.history.reset()
        self._queue.clear()
        if self.planner is not None:
            self.planner.reset()
        else:
            self.policy.reset()

    def observe(self, obs: Observation) -> Observation:
        """This control step's observation as the policy and the learner see it: a policy over a frozen base adds the
        base's action for the step (call once per step, before `step` or `human_acted`; others return `obs`)."""
        return self.policy.augment_observation(obs)

    def learner_action_of(self, executed: np.ndarray, obs: Observation) -> np.ndarray | None:
        """A human's executed action in the learner's action space, where the policy can map it (else None); `obs`
        (this step's, from `observe`) wins over the info of the policy's last step."""
        return self.policy.learner_action_of(executed, {**self._last[1], **obs})

    def policy_action(self, obs: Observation, now: float | None = None) -> np.ndarray | None:
        """The policy's action for `obs` (taken at `now`, on the planner's clock, when there is a planner); None
        when a planner has no action due now. Its learner action and info are kept for `step`."""
        if self.planner is not None:
            stamp = self.planner.clock() if now is None else now
            self.planner.observe(obs, stamp)
            scheduled = self.planner.action_at(stamp)
            if scheduled is None:
                return None
            self._last = (scheduled.learner_action, scheduled.info)
            return scheduled.action
        self.history.append(obs)
        if not self._queue:
            chunk = self.policy.act_chunk(self.history.observations(), deterministic=self.deterministic)
            self._queue.extend(chunk.step(i) for i in range(min(self.execute, len(chunk))))
        action, learner_action, info = self._queue.popleft()
        self._last = (learner_action, info)
        return action

    def human_acted(self, obs: Observation) -> None:
        """A human chose this step's action: keep the observation history, drop the policy's plan (the arm will not
        be where the plan assumed)."""
        self._last = (np.zeros(0, np.float32), {})
        self.policy.interrupt()
        if self.planner is not None:
            self.planner.interrupt(obs)
            return
        self.history.append(obs)
        self._queue.clear()

    def uniform_action(self) -> np.ndarray:
        """An action drawn uniformly from [-1, 1] (warm-up exploration of a run without demos)."""
        return self._uniform_rng.uniform(-1.0, 1.0, self.policy.action_dim).astype(np.float32)

    def step(self, obs: Observation, *, uniform: bool = False, now: float | None = None) -> ActorStep | None:
        """The policy's action (for `obs` taken at `now`, see `policy_action`), or a uniform random one when
        `uniform` (pass `learner.warming_up`). None when a planner has no action due now (the caller holds)."""
        if uniform:
            policy_action = self.uniform_action()
            self._last = (self.policy.learner_action_of(policy_action, {}), {})
        else:
            policy_action = self.policy_action(obs, now)
        if policy_action is None:
            return None
        learner_action, info = self._last
        return ActorStep(policy_action, learner_action, dict(info))

    def act(self, obs: Observation) -> np.ndarray:
        """`Policy` interface: the action to execute."""
        return self.step(self.observe(obs)).action


def actor_from_weights(message, *, seed: int = 0, deterministic: bool = False) -> Actor:
    """An `Actor` built from scratch for the policy in `message` (a WeightsMessage: its kind, spec and config), with
    its weights."""
    from robot_rl.policies.checkpoint import policy_from_weights

    return Actor(policy_from_weights(message, seed=seed), seed=seed, deterministic=deterministic)


EPISODE_KEYS = ("success", "failure", "reset")


@dataclasses.dataclass(frozen=True)
class SessionStep:
    """One control step of an `ActorSession`: the command to send (None once the episode is over)."""

    command: SafeCommand | None
    transition: StampedTransition | None
    episode_over: bool
    intervention: bool = False
    success: bool = False
    policy_late: bool = False
    """Held because the policy had no action due (its next chunk was still being computed)."""


class ActorSession:
    """The actor's control loop without transport: observation -> safe absolute command, transitions with sequence
    numbers into an outbox, episodes ended by success, time limit or a human episode key.

    Step t: the actor's `observe` completes the observation (a residual policy adds its base's action for the
    step), which closes transition t-1 (with the reward and success the robot or the sim task reported for that
    step), then command t is chosen (the human's action if one is given: a teleop device's or the simulated human's,
    over ROS and in-process alike; else the actor's `step`: its policy, or a uniform random action while the learner
    warms up), filtered by the safety layer and tracked as the new absolute target. A
    transition carries the executed action, the learner head's own action and the policy's per-step info. A
    transition's `step` is the control step its observation was taken at, so a held command (no transition starts
    there) leaves a gap in the steps, and the learner does not join the transitions on either side of it.

    The ROS actor node drives a robot (or the sim node) with it, and in-process `robot-rl train` the sim env through
    `robot_rl.sim.robot_adapter.SimRobotAdapter`: one control loop, one safety layer.
    """

    def __init__(self, safety: Safety, source: str, outbox: Outbox | None = None, *, max_episode_steps: int = 50,
                 actor: Actor | None = None):
        if max_episode_steps < 1:
            raise ValueError(f"max_episode_steps={max_episode_steps} must be >= 1")
        self.safety = safety
        self.source = source
        self.outbox = outbox if outbox is not None else Outbox()
        self.actor = actor
        self.max_episode_steps = int(max_episode_steps)
        self.next_seq = 0
        self.episode = -1
        self.episode_step = 0
        self.episode_over = True
        self.episode_return = 0.0
        self.episode_interventions = 0
        self.counters: collections.Counter[str] = collections.Counter()
        # obs, action, intervention, control step, learner action, policy info
        self._pending: tuple[dict, np.ndarray, bool, int, np.ndarray | None, dict] | None = None
        self._control_step = 0  # step() calls of this episode that chose a command
        self._target: tuple[np.ndarray, np.ndarray] | None = None
        self._gripper = safety.config.initial_gripper

    @property
    def target(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The absolute target the last command asked for (position, quaternion wxyz)."""
        return self._target

    def start_episode(self, tcp_position, tcp_quat, gripper: float | None = None) -> int:
        """Begin an episode at the robot's measured pose (the controller target after a reset); returns its index."""
        self.episode += 1
        self.episode_step = 0
        self.episode_over = False
        self.episode_return = 0.0
        self.episode_interventions = 0
        self._pending = None
        self._control_step = 0
        self._target = (np.asarray(tcp_position, dtype=np.float64).copy(), np.asarray(tcp_quat, np.float64).copy())
        self._gripper = self.safety.config.initial_gripper if gripper is None else float(gripper)
        if self.actor is not None:
            self.actor.reset()
        return self.episode

    def hold(self, now: float | None = None, sensor_stamps=None) -> SafeCommand | None:
        """A command that keeps the current target (for a robot that needs a steady command stream).

        Counted in ``counters`` as a command and as held, like a command the safety layer held.
        """
        if self._target is None:
            return None
        command = self.safety.filter(self._hold_action(), *self._target, now, sensor_stamps,
                                     current_gripper=self._gripper)
        self.counters["commands"] += 1
        self.counters["held"] += 1
        return command

    def _hold_action(self) -> np.ndarray:
        """Zero motion; the gripper part of an action is absolute, so it repeats the current gripper."""
        action = np.zeros(self.safety.config.action_dim, dtype=np.float32)
        action[-1] = self._gripper
        return action

    def step(self, obs: Observation, *, reward: float = 0.0, success: bool = False, now: float | None = None,
             sensor_stamps=None, human_action: np.ndarray | None = None, episode_key: str | None = None,
             uniform: bool = False) -> SessionStep:
        """Close the previous transition with `obs`, then choose, filter and track the next command (`uniform`: the
        actor acts uniformly at random, a learner's warm-up without demos)."""
        if self.episode_over or self._target is None:
            raise RuntimeError("no episode is running: call start_episode() first")
        if episode_key is not None and episode_key not in EPISODE_KEYS:
            raise ValueError(f"episode key {episode_key!r} is not one of {EPISODE_KEYS}")
        success = bool(success) or episode_key == "success"
        reward = max(float(reward), 1.0) if episode_key == "success" else float(reward)
        transition = None
        observe = getattr(self.actor, "observe", None)  # an actor object without it adds nothing
        if observe is not None and not (self._pending is None and episode_key is not None):
            obs = observe(obs)  # e.g. the base action of a residual policy, for this step and the learner
        if self._pending is not None:
            previous_obs, action, intervention, control_step, learner_action, policy_info = self._pending
            self.episode_step += 1
            terminated = success
            truncated = not terminated and (self.episode_step >= self.max_episode_steps or episode_key is not None)
            transition = StampedTransition(
                seq=self.next_seq, episode=self.episode, step=control_step, observation=previous_obs,
                action=action, reward=reward, terminated=terminated, truncated=truncated, next_observation=obs,
                intervention=intervention, success=success, learner_action=learner_action, policy_info=policy_info)
            self.next_seq += 1
            self.episode_return += reward
            self.episode_interventions += int(intervention)
            self._pending = None
            if terminated or truncated:
                self.outbox.add(transition)
                self.episode_over = True
                return SessionStep(None, transition, True, intervention, success)
        elif episode_key is not None:
            self.episode_over = True
            return SessionStep(None, None, True, False, success)
        try:
            step = self._command(obs, now, sensor_stamps, human_action, uniform, transition, success)
        finally:
            if transition is not None:  # its next frame crosses the wire with the next transition, if one starts at it
                self.outbox.add(transition if self._pending is None
                                else dataclasses.replace(transition, next_frame_follows=True))
        return step

    def _command(self, obs: Observation, now: float | None, sensor_stamps, human_action: np.ndarray | None,
                 uniform: bool, transition: StampedTransition | None, success: bool) -> SessionStep:
        """Choose, filter and track the command for `obs` (a transition starts at `obs` unless it is held)."""
        intervention = human_action is not None
        learner_action, policy_info = None, {}
        if intervention:
            action = np.asarray(human_action, dtype=np.float32)
            if self.actor is not None:
                learner_action = self.actor.learner_action_of(action, obs)
                self.actor.human_acted(obs)
        elif self.actor is not None:
            decision = self.actor.step(obs, uniform=uniform, now=now)
            if decision is None:  # a chunked policy in real time: its next chunk is not ready yet; hold
                command = self.safety.filter(self._hold_action(), *self._target, now, sensor_stamps,
                                             current_gripper=self._gripper)
                self.counters["commands"] += 1
                self.counters["held"] += 1
                self.counters["policy_late"] += 1
                return SessionStep(command, transition, False, False, success, policy_late=True)
            action = decision.action
            learner_action, policy_info = decision.learner_action, decision.info
        else:  # no policy and no human: hold
            action = self._hold_action()
        command = self.safety.filter(action, *self._target, now, sensor_stamps, current_gripper=self._gripper)
        self.counters["commands"] += 1
        control_step = self._control_step
        self._control_step += 1
        if command.held:
            self.counters["held"] += 1
        else:
            self._target = (command.target_position, command.target_quat)
            self._gripper = command.gripper
            self._pending = (dict(obs), np.clip(action, -1.0, 1.0).astype(np.float32), intervention, control_step,
                             learner_action, dict(policy_info))
        return SessionStep(command, transition, False, intervention, success)
