"""The one policy registry: every policy kind registers one `PolicyKind` here, under one name.

A kind's entry says how it is built (from a policy folder or from a learner's weights message), which run options
it reads (`RunOption`: `robot-rl train`'s flags, the TrainConfig fields and the learner node's parameters are made from
them), how a learner trains it (`learner_plan`: the SAC config it needs, what its SAC action is, how its steps join
into learner transitions) and what the actor and learner may assume of it (uniform warm-up, demos, the robot's
observation spec). Nothing above `robot_rl.policies` names or compares a kind: callers look it up with `kind_of`
and use these facts. Kind modules (JAX, torch, diffusers) are imported only when their kind is built.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import typing
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robot_rl.policies.base import Policy, PolicyError
from robot_rl.wire.weights import DEFAULT_POLICY_KIND

if TYPE_CHECKING:  # robot_rl.core.types imports flax and JAX; the registry is read without them
    from robot_rl.core.types import ObservationSpec

GAUSSIAN = DEFAULT_POLICY_KIND  # the kind of weights that name none
DIFFUSION = "diffusion"
ONE_STEP = "one_step"
RESIDUAL = "residual"
NOISE = "noise"


@dataclasses.dataclass(frozen=True)
class ChunkKeys:
    """Per-step info keys by which a chunk-deciding policy's steps join into one learner transition."""

    step: str = "chunk_step"
    """The step's index in its chunk (0 starts a decision)."""
    alias_noise: str = "alias_noise"
    """(samples, noise_dim) head actions the base also denoised (noise aliasing)."""
    alias_chunks: str = "alias_chunks"
    """(samples, execute x action_dim) executed chunks those head actions give (noise aliasing)."""


CHUNK_KEYS = ChunkKeys()


@dataclasses.dataclass(frozen=True)
class RunOption:
    """One run option a policy kind reads: a TrainConfig field, a `robot-rl train` flag and a learner node parameter."""

    name: str
    """Its TrainConfig field, config.json key and learner node parameter; its flag is --name-with-dashes."""
    type: Any
    """Its type: bool, int, float, str or Path, or one of them | None."""
    default: Any
    help: str
    """One line for `robot-rl train --help` and the learner node's parameter description (`help_with`)."""
    check: Callable[[Any], str | None] | None = None
    """What is wrong with a value other than None, as a phrase ("must be > 0"), or None where it is fine."""
    none_means: str = ""
    """What None means, where it may be None (the learner node takes 0 or '' for None, so 0 must not be a value)."""
    required: bool = False
    """A kind reading it cannot run without it (not None): a head's frozen base."""
    sac_field: str = ""
    """The SACConfig field the kind's plan sets from it: a run that sets that field itself is told to use this."""

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def optional(self) -> bool:
        """Whether it may be None."""
        return type(None) in typing.get_args(self.type)

    @property
    def value_type(self) -> type:
        """Its type without None."""
        return next((arg for arg in typing.get_args(self.type) if arg is not type(None)), self.type)

    def help_with(self, none: str) -> str:
        """Its help, saying what None means where it may be None, None written as `none` ("None", "0")."""
        if not (self.optional and self.none_means):
            return self.help
        return f"{self.help.removesuffix('.')} ({none}: {self.none_means})."

    def problem(self, value: Any) -> str | None:
        """What is wrong with `value` ("noise_bound=0.0 must be > 0"), or None."""
        wrong = None if value is None or self.check is None else self.check(value)
        if wrong is None:
            return None
        return f"{self.name}={value!r} {wrong}" + (f" or None ({self.none_means})" if self.optional else "")


def positive(value: float) -> str | None:
    """A `RunOption.check`: a finite number > 0."""
    return None if math.isfinite(value) and value > 0 else "must be > 0"


def at_least_one(value: int) -> str | None:
    """A `RunOption.check`: an integer >= 1."""
    return None if value >= 1 else "must be >= 1"


@dataclasses.dataclass(frozen=True)
class PolicyKind:
    """One registered policy kind: its name, the run options it reads, how it is built and how a learner trains it."""

    name: str
    """The kind's one name, in policy files, weights messages and `Policy.kind`."""
    run_name: str = ""
    """The name a run chooses it by (`--policy`, the learner node's `policy`, config.json's `policy`); '': `name`."""
    summary: str = ""
    """What its SAC action means, one phrase (the help of `--policy`; learner-trained kinds)."""
    options: tuple[RunOption, ...] = ()
    """The run options it reads (`BASE` among them: it runs on a frozen base)."""
    from_files: str | None = None
    """Where its builder from a policy folder's (description, tensors, device) is, as module:function (torch kinds)."""
    from_weights: str | None = None
    """Where its builder from a `WeightsMessage` (seed=, device=) is, as module:qualname (learner-trained kinds)."""
    plan: str | None = None
    """Where its run's `LearnerPlan` is made from (kind, options, robot spec, robot action size), as module:function."""
    chunk_decisions: bool = False
    """One learner transition per action chunk, its steps joined by `CHUNK_KEYS`."""
    uniform_warmup: bool = False
    """It acts uniformly at random while the learner warms up (else its untrained head acts from the start)."""
    labels_demos: bool = False
    """Its policy adds observation entries (a base's action) that demos are labelled with before training on them."""
    demos_need: str | None = None
    """The name of a bool option among `options` without which demos cannot train it (the noise behind a demo is
    unknown)."""
    robot_spec_in_weights: bool = False
    """Its weights' (and learner's) observation spec is what the robot gives, known before building the policy."""
    ddim_steps: bool = False
    """Its DDIM step count can be set when acting (`set_inference_steps`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "run_name", self.run_name or self.name)

    @property
    def names(self) -> tuple[str, ...]:
        """Every name it is read under: its name, then its run name where that differs."""
        return tuple(dict.fromkeys((self.name, self.run_name)))

    def reads(self, option: RunOption) -> bool:
        """Whether a run of this kind reads `option`."""
        return option in self.options

    def learns_from_demos(self, options: Any) -> bool:
        """Whether a run with these options can train it on demos."""
        return self.demos_need is None or bool(getattr(options, self.demos_need))


@dataclasses.dataclass(frozen=True)
class LearnerPlan:
    """How a run's policy kind shapes its learner and its actors (what `robot-rl train` and the learner node build)."""

    kind: PolicyKind
    make_policy: Callable[..., Policy]
    """make_policy(agent, seed=0) -> the policy the actor runs with the learner's agent as its head."""
    observation_spec: ObservationSpec
    """What the learner's agent sees."""
    action_dim: int
    """Size of the SAC action."""
    sac: Any
    """The agent's robot_rl.agents.sac.SACConfig: the run's, with what the kind's SAC action needs."""
    robot_action_dim: int | None = None
    """Size of the executed actions where it differs from the SAC action's (noise-space heads)."""

    @property
    def chunk_decisions(self) -> bool:
        return self.kind.chunk_decisions

    @property
    def uniform_warmup(self) -> bool:
        return self.kind.uniform_warmup

    def demo_labeller(self, agent) -> Policy | None:
        """The policy labelling demos with the entries it adds (`PolicyKind.labels_demos`), or None."""
        return self.make_policy(agent) if self.kind.labels_demos else None


BASE = RunOption("base", Path | None, None, required=True, help=(
    "Frozen base policy of a residual or noise head: a policy folder (from `robot-rl train-bc` or `distill`; a "
    "residual head also takes any policy file). The run's observations must give the entries it reads."))
BASE_EXECUTE = RunOption("base_execute", int | None, None, check=at_least_one, none_means="the base's whole chunk",
                         help="Actions of each base chunk executed before the base plans again.")

KINDS: dict[str, PolicyKind] = {}
"""Every registered kind by name, in registration order (`register`)."""
_NAMES: dict[str, PolicyKind] = {}


def register(kind: PolicyKind) -> PolicyKind:
    """Add `kind`; ValueError for a name already taken or a run option declared otherwise by another kind."""
    taken = [name for name in kind.names if name in _NAMES]
    if taken:
        raise ValueError(f"policy kind name {taken[0]!r} is already registered")
    declared = {option.name: option for other in KINDS.values() for option in other.options}
    clashes = [option.name for option in kind.options if declared.get(option.name, option) != option]
    if clashes:
        raise ValueError(f"run option {clashes[0]!r} of policy kind {kind.name!r} differs from the one registered: "
                         "kinds reading one option share its RunOption")
    KINDS[kind.name] = kind
    _NAMES.update(dict.fromkeys(kind.names, kind))
    return kind


def unregister(name: str) -> None:
    """Remove the kind registered under `name`."""
    kind = KINDS.pop(kind_of(name).name)
    for each in kind.names:
        del _NAMES[each]


for _kind in (
    PolicyKind(GAUSSIAN, run_name="plain", summary="the robot action",
               from_weights="robot_rl.policies.gaussian:GaussianPolicy.from_message",
               plan="robot_rl.policies.gaussian:learner_plan", uniform_warmup=True, robot_spec_in_weights=True),
    PolicyKind(DIFFUSION, from_files="robot_rl.policies.diffusion:policy_from_files", ddim_steps=True),
    PolicyKind(ONE_STEP, from_files="robot_rl.policies.one_step:policy_from_files"),
    PolicyKind(RESIDUAL, summary="a scaled correction of a frozen base policy's action (--base), per control step: "
                                 "executed = clip(base + residual_scale * SAC action, -1, 1)",
               options=(BASE, BASE_EXECUTE, RunOption(
                   "residual_scale", float, 0.1, check=positive, sac_field="residual_scale",
                   help="Residual head: scale of its correction in action units ([-1, 1] per dim).")),
               from_weights="robot_rl.policies.residual:ResidualPolicy.from_message",
               plan="robot_rl.policies.residual:learner_plan", labels_demos=True),
    PolicyKind(NOISE, summary="the initial noise of a frozen diffusion policy (--base), one decision per action chunk "
                              "(DSRL)",
               options=(BASE, BASE_EXECUTE, RunOption(
                   "noise_bound", float, 1.5, check=positive,
                   help="Noise head: the SAC action w in [-1, 1] is the initial noise noise_bound * w (DSRL's action "
                        "magnitude)."), RunOption(
                   "noise_repeat", bool, False,
                   help="Noise head: it picks one control step's noise, action_dim numbers repeated over the chunk (a "
                        "low-dimensional noise space, as DSRL's pi0 variant uses), instead of the whole "
                        "prediction_horizon x action_dim noise."), RunOption(
                   "noise_aliasing", bool, False, sac_field="aliased_chunk_dim",
                   help="Noise head: DSRL-NA. An action critic learns by TD on executed chunks (so demos and human "
                        "interventions, whose noise is unknown, train it), a noise critic regresses it on (noise, "
                        "chunk) pairs the actor denoises (--sac.aliasing-samples per decision), and the head "
                        "maximises the noise critic.")),
               from_weights="robot_rl.policies.noise:NoisePolicy.from_message",
               plan="robot_rl.policies.noise:learner_plan", chunk_decisions=True, demos_need="noise_aliasing"),
):
    register(_kind)


def known_kinds(kinds=None) -> str:
    """`kinds` (default: all) as "a, b (its run name), ..." for messages."""
    return ", ".join(kind.name + "".join(f" ({other})" for other in kind.names[1:])
                     for kind in sorted(KINDS.values() if kinds is None else kinds, key=lambda k: k.name))


def kind_of(name: str) -> PolicyKind:
    """The kind registered under `name` (or its run name); PolicyError naming the known kinds."""
    try:
        return _NAMES[name]
    except (KeyError, TypeError):
        raise PolicyError(f"unknown policy kind {name!r}; known: {known_kinds()}") from None


def learner_kinds() -> list[PolicyKind]:
    """The kinds a learner trains (built from weights messages)."""
    return [kind for kind in KINDS.values() if kind.from_weights is not None]


def run_names() -> tuple[str, ...]:
    """The names a run chooses its learner-trained kind by (`--policy`), the default's (GAUSSIAN's) first."""
    return tuple(kind.run_name for kind in learner_kinds())


def run_options() -> tuple[RunOption, ...]:
    """Every registered kind's run options, each once, in registration order."""
    return tuple({option.name: option for kind in KINDS.values() for option in kind.options}.values())


def _load(target: str) -> Callable[..., Any]:
    module, qualified = target.split(":")
    found: Any = importlib.import_module(module)
    for name in qualified.split("."):
        found = getattr(found, name)
    return found


def files_builder(name: str) -> Callable[..., Policy]:
    """The function building a policy of kind `name` from its folder's (description, tensors, device)."""
    kind = kind_of(name)
    if kind.from_files is None:
        builds = known_kinds(k for k in KINDS.values() if k.from_files is not None)
        raise PolicyError(f"a {kind.name} policy is not saved as a policy folder; policy folders hold {builds}")
    return _load(kind.from_files)


def weights_builder(name: str) -> Callable[..., Policy]:
    """The function building a policy of kind `name` from a `WeightsMessage` (seed=, device=)."""
    kind = _NAMES.get(name)
    if kind is None or kind.from_weights is None:
        raise PolicyError(f"weights of {'unknown ' if kind is None else ''}policy kind {name!r}; this actor builds "
                          f"{known_kinds(learner_kinds())} from weights")
    return _load(kind.from_weights)


def learner_plan(options: Any, observation_spec: Any, action_dim: int) -> LearnerPlan:
    """The plan of a run whose options (a robot_rl.training.config.TrainConfig: `policy`, `sac` and the kind's
    `options`) choose a learner-trained kind, over the robot's observations and actions; PolicyError for a base the
    run cannot use (loaded on the CPU)."""
    from robot_rl.core.types import ObservationSpec

    kind = kind_of(options.policy)
    if kind.plan is None:
        raise PolicyError(f"a {kind.name} policy is not trained by the learner; it trains "
                          f"{known_kinds(learner_kinds())}")
    return _load(kind.plan)(kind, options, ObservationSpec.coerce(observation_spec), int(action_dim))


def robot_observation_spec(weights) -> ObservationSpec | None:
    """What the robot must give for `weights` (a WeightsMessage), known before building its policy: the weights' own
    spec (with `weights.action_dim` actions) where it is the robot's, None where only the built policy knows (a head
    on a base); PolicyError for an unknown kind."""
    return weights.observation_spec if kind_of(weights.policy_kind).robot_spec_in_weights else None
