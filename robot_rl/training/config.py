"""A training run's config (:class:`TrainConfig`, shared by the in-process `robot-rl train` and the ROS learner
node), the policy fields it takes from the policy registry (:func:`with_policy_options`) and the plan of its --policy
over the robot's spaces (:func:`policy_kind`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from robot_rl.agents.sac import ImageEncoderConfig, SACConfig
from robot_rl.learner.learner import LearnerConfig
from robot_rl.policies.registry import LearnerPlan, kind_of, learner_kinds, learner_plan, run_names, run_options
from robot_rl.sim.human import SimulatedHumanConfig
from robot_rl.training.rules import DEFAULT_POLICY, ObsMode, policy_help, setting_problems
from robot_rl.training.run_folder import RunError


def with_policy_options(cls: type) -> type:
    """Class decorator, under @dataclass: the class's `policy` field chooses among the registry's learner-trained
    kinds (robot_rl.policies.registry.run_names), and each kind's run options (`run_options`) become fields right
    after it, typed, with their defaults and their help (for `robot-rl train --help`)."""
    annotations = {}
    for name, annotation in cls.__dict__["__annotations__"].items():
        if name != "policy":
            annotations[name] = annotation
            continue
        annotations[name] = Annotated[Literal[run_names()], tyro.conf.arg(help=policy_help())]
        for option in run_options():
            annotations[option.name] = Annotated[option.type, tyro.conf.arg(help=option.help_with("None"))]
            setattr(cls, option.name, option.default)
    cls.__annotations__ = annotations
    return cls


@dataclasses.dataclass(frozen=True)
@with_policy_options
class TrainConfig:
    """A sim training run: task, demos, schedule, learner and agent settings."""

    task: str = "PickCube-v0"
    """Task name (PickCube-v0, PegInsert-v0)."""
    obs_mode: ObsMode = "state"
    """Observations the agent sees: `pixels` is what a real robot has (proprio + cameras)."""
    image_size: int = 64
    """Camera image height and width in pixels for pixel modes."""
    wrench: bool = False
    """Add the wrist force/torque reading to what the agent sees (obs key `wrench`: force [N] and torque [N m] about
    the TCP that the surroundings exert on the hand, base frame, zeroed at reset; sim only for now)."""
    demos: int = 20
    """Scripted demos to record into the run (ignored with --demo-path)."""
    demo_path: Path | None = None
    """Use an existing demo dataset instead of recording."""
    steps: int = 5000
    """Environment steps to train for (with --resume: extend the run to this many)."""
    weights_every: int = 5
    """Env steps between weight updates sent to the actor."""
    eval_every: int = 1000
    """Env steps between evaluations (each is followed by a checkpoint)."""
    eval_episodes: int = 20
    """Episodes per evaluation (deterministic policy, no human)."""
    final_eval_episodes: int | None = None
    """Episodes of the final evaluation (None: as many as --eval-episodes)."""
    eval_latest_weights: bool = False
    """With --sac.policy-average-rate: each evaluation also runs the last gradient step's weights on the same
    episodes (eval row `latest_success_rate`), to see what the average buys."""
    checkpoint_every: int = 2000
    """Env steps between checkpoints; there is also one after every evaluation, at the end and on Ctrl-C/SIGTERM."""
    policy: str = DEFAULT_POLICY  # its choices, its help and the policy kinds' options after it: with_policy_options
    randomize: str | None = None
    """Domain randomisation: each training episode runs under one condition of this validation suite (a shipped
    suite's name such as `default`, or a YAML file: camera pose, lighting and colours, object physics, latency,
    sensor delay and drops, rate jitter, proprioceptive noise), drawn with its values from the episode's seed; the
    demos the run records and its evaluations stay nominal (a demo recorded under latency pairs each observation with
    a command that acts a step later: not what behaviour cloning should imitate).
    Train with the suite a robot validates with, and the gate tests what the policy has seen."""
    intervene: bool = False
    """Let the simulated human (the scripted expert) take over when the policy is stuck or leaving the workspace."""
    human: SimulatedHumanConfig = SimulatedHumanConfig()
    """The simulated human (with --intervene): when and how long it takes over, and how noisy its actions are."""
    seed: int = 0
    """Seed of the run: training episode k uses seed + k; demos and evaluations use their own held-out seeds."""
    run_dir: Path | None = None
    """Where to write logs, checkpoints and the report (None: runs/<task>-<obs_mode>-<time>)."""
    video: bool = True
    """Film the first episodes of the final evaluation (front and wrist cameras) to eval.mp4."""
    learner: LearnerConfig = LearnerConfig(utd=2, n_step=3)
    """Replay and updates of the learner; CPU preset: 2 gradient steps per env step (UTD 2), 3-step returns."""
    sac: SACConfig = SACConfig(
        critic_ensemble_size=2, discount=0.97, init_temperature=0.01, backup_entropy=False, bc_weight=2.5,
        target_bounds=(0.0, 1.0), image_encoder=ImageEncoderConfig(channels=(16, 16, 16)),
    )
    """SAC agent; CPU preset: 2 LayerNorm critics (as HIL-SERL), no entropy backup with sparse rewards, a BC term on
    demo rows, TD targets clipped to [0, 1] (the sim tasks pay 1 on success and end the episode: change
    target_bounds with the reward), and a 16-channel pixel encoder (about 1.6x faster than 32 channels on a CPU).
    On a GPU learner raise critic_ensemble_size (RLPD uses 10), utd and the encoder channels."""

    @property
    def learns_from_demos(self) -> bool:
        """Whether the run's learner can use demos (DSRL-SAC cannot: the noise behind a demo is unknown)."""
        return kind_of(self.policy).learns_from_demos(self)

    def __post_init__(self) -> None:
        # the rules on its own settings live apart (robot_rl.training.rules): the ROS learner node checks its
        # parameters with them before it imports JAX
        problems = setting_problems({field.name: getattr(self, field.name) for field in dataclasses.fields(self)})
        for option in run_options():  # SAC fields a policy kind's plan sets from its options
            value = getattr(self.sac, option.sac_field) if option.sac_field else None
            if value is not None:
                readers = " or ".join(kind.run_name for kind in learner_kinds() if kind.reads(option))
                shown = option.flag if option.value_type is bool else f"{option.flag} {value:g}"
                problems.append(f"sac.{option.sac_field} is set by the run: use --policy {readers} {shown}")
        if problems:
            raise ValueError(f"invalid {type(self).__name__}: {'; '.join(problems)}")

    def env_settings(self) -> dict[str, Any]:
        """make_env's settings for this run's sim env (the observations the agent sees)."""
        return {"obs_mode": self.obs_mode, "image_size": self.image_size, "wrench": self.wrench}


def policy_kind(cfg: TrainConfig, observation_spec, action_dim: int) -> LearnerPlan:
    """The run's --policy over the robot's (or sim task's) observations and actions (robot_rl.policies.registry);
    RunError for a --base the run cannot use."""
    from robot_rl.policies.base import PolicyError

    try:
        return learner_plan(cfg, observation_spec, action_dim)
    except PolicyError as error:
        raise RunError(str(error)) from None

