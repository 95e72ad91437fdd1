"""The one policy registry: every policy kind registers one `PolicyKind` here, under one name.

A kind's entry says how it is built (from a policy folder or from a learner's weights message), which run options
it reads, how a learner trains it (`learner_plan`: the SAC config it needs, what its SAC action is, how its steps join
into learner transitions) and what the actor and learner may assume of it (uniform warm-up, demos, the robot's
observation spec). Nothing above `robot_rl.policies` names or compares a kind: callers look it up with `kind_of`
and use these facts. Kind modules (JAX, torch, diffusers) are imported only when their kind is built.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
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
class PolicyKind:
    """One registered policy kind: its name, the run options it reads, how it is built and how a learner trains it."""

    name: str
    """The kind's one name, in policy files, weights messages and `Policy.kind`."""
    aliases: tuple[str, ...] = ()
    """Other names it is read under (the command line's `--policy plain`, old run folders)."""
    options: tuple[str, ...] = ()
    """The run options (robot_rl.training.config.TrainConfig fields) it reads; `base` among them: it runs on a frozen
    base."""
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
    """A flag among `options` without which demos cannot train it (the noise behind a demo is unknown)."""
    robot_spec_in_weights: bool = False
    """Its weights' (and learner's) observation spec is what the robot gives, known before building the policy."""
    ddim_steps: bool = False
    """Its DDIM step count can be set when acting (`set_inference_steps`)."""

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


KINDS: dict[str, PolicyKind] = {kind.name: kind for kind in (
    PolicyKind(GAUSSIAN, aliases=("plain",), from_weights="robot_rl.policies.gaussian:GaussianPolicy.from_message",
               plan="robot_rl.policies.gaussian:learner_plan", uniform_warmup=True, robot_spec_in_weights=True),
    PolicyKind(DIFFUSION, from_files="robot_rl.policies.diffusion:policy_from_files", ddim_steps=True),
    PolicyKind(ONE_STEP, from_files="robot_rl.policies.one_step:policy_from_files"),
    PolicyKind(RESIDUAL, options=("base", "base_execute", "residual_scale"),
               from_weights="robot_rl.policies.residual:ResidualPolicy.from_message",
               plan="robot_rl.policies.residual:learner_plan", labels_demos=True),
    PolicyKind(NOISE, options=("base", "base_execute", "noise_bound", "noise_aliasing", "noise_repeat"),
               from_weights="robot_rl.policies.noise:NoisePolicy.from_message",
               plan="robot_rl.policies.noise:learner_plan", chunk_decisions=True, demos_need="noise_aliasing"),
)}
_NAMES = {name: kind for kind in KINDS.values() for name in (kind.name, *kind.aliases)}


def known_kinds(kinds=None) -> str:
    """`kinds` (default: all) as "a, b (alias), ..." for messages."""
    return ", ".join(kind.name + "".join(f" ({alias})" for alias in kind.aliases)
                     for kind in sorted(KINDS.values() if kinds is None else kinds, key=lambda k: k.name))


def kind_of(name: str) -> PolicyKind:
    """The kind registered under `name` (or an alias of it); PolicyError naming the known kinds."""
    try:
        return _NAMES[name]
    except (KeyError, TypeError):
        raise PolicyError(f"unknown policy kind {name!r}; known: {known_kinds()}") from None


def learner_kinds() -> list[PolicyKind]:
    """The kinds a learner trains (built from weights messages)."""
    return [kind for kind in KINDS.values() if kind.from_weights is not None]


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
