"""SAC with a LayerNorm critic ensemble (REDQ target subset), auto temperature, DrQ pixels and scanned UTD updates.

The agent maps an observation dict to an action in [-1, 1]^d. What that action means (robot action, residual,
diffusion noise) is decided outside the agent.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any

import flax.serialization
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from robot_rl.agents.augment import augment_observations
from robot_rl.agents.distributions import tanh_gaussian_mode, tanh_gaussian_sample
from robot_rl.agents.networks import PIXEL_NORMALISATIONS, CriticEnsemble, ObservationEncoder, TanhGaussianActor
from robot_rl.core.types import Batch, ObservationSpec

Params = Any


def _raise_problems(config: Any, problems: list[str]) -> None:
    """One ValueError naming the config class and every bad field (a CLI shows it as one line)."""
    if problems:
        raise ValueError(f"invalid {type(config).__name__}: {'; '.join(problems)}")


@dataclasses.dataclass(frozen=True)
class ImageEncoderConfig:
    """Per-camera conv encoder of pixel observations and its DrQ augmentation (unused by state-only runs)."""

    channels: tuple[int, ...] = (32, 32, 32)
    """Output channels of each conv layer. The default non-overlapping "patchify" convs (kernel == stride, from
    a 64 px image to 16, 8 and 4 px maps) run as matmuls, which (with 16 channels and 2 critics, the CPU training
    preset) makes pixel SAC real-time at UTD 1 on a 2-core CPU learner. DrQ/SERL-style overlapping convs work too,
    e.g. kernel sizes 3 3 3 3 with strides 2 1 1 1, at roughly 10x the cost."""
    kernel_sizes: tuple[int, ...] = (4, 2, 2)
    """Kernel size of each conv layer (one per entry of channels)."""
    strides: tuple[int, ...] = (4, 2, 2)
    """Stride of each conv layer (one per entry of channels)."""
    latent_dim: int = 64
    """Size of the feature vector each camera is projected to after the convs."""
    augment_pad: int = 4
    """DrQ random-shift augmentation: pad each image by this many pixels and crop at random; 0 turns it off."""
    augment_colour: float = 0.0
    """Colour jitter of each training image (as RAD): brightness x (1 + u), u in [-c, c], and each RGB channel
    shifted by v x 255, v in [-c/2, c/2], drawn per sample; 0 turns it off. For the validation suite's
    lighting_colour condition."""
    normalisation: str = "per_image"
    """How pixels enter the convs: `per_image` standardises each channel of each image over its pixels, so a
    brighter or darker room or a table of another colour changes the input much less (the validation suite's
    lighting_colour condition: docs/results.md); `fixed` scales [0, 255] to [-0.5, 0.5] (DrQ's scaling)."""

    FIELDS_ADDED = {"normalisation": "fixed"}  # what configs saved before a field existed used (config_io)

    def __post_init__(self) -> None:
        problems = []
        if not len(self.channels) == len(self.kernel_sizes) == len(self.strides):
            problems.append(f"channels {self.channels}, kernel_sizes {self.kernel_sizes} and strides {self.strides} "
                            "must have the same length")
        for name in ("channels", "kernel_sizes", "strides"):
            values = getattr(self, name)
            if not values or min(values) < 1:
                problems.append(f"{name}={values} must be one or more integers >= 1")
        if self.latent_dim < 1:
            problems.append(f"latent_dim={self.latent_dim} must be >= 1")
        if self.augment_pad < 0:
            problems.append(f"augment_pad={self.augment_pad} must be >= 0")
        if not 0 <= self.augment_colour < 1:
            problems.append(f"augment_colour={self.augment_colour} must be in [0, 1)")
        if self.normalisation not in PIXEL_NORMALISATIONS:
            problems.append(f"normalisation={self.normalisation!r} must be one of {', '.join(PIXEL_NORMALISATIONS)}")
        _raise_problems(self, problems)


@dataclasses.dataclass(frozen=True)
class SACConfig:
    """SAC hyper-parameters (hashable: it is a static part of the jitted agent)."""

    actor_hidden_dims: tuple[int, ...] = (256, 256)
    """Hidden layer widths of the actor MLP."""
    critic_hidden_dims: tuple[int, ...] = (256, 256)
    """Hidden layer widths of each critic MLP."""
    critic_ensemble_size: int = 10
    """Critic heads in the ensemble (RLPD uses 10, HIL-SERL 2)."""
    critic_subset_size: int = 2
    """REDQ: the TD target takes the min over this many randomly chosen critic heads."""
    critic_layer_norm: bool = True
    """LayerNorm after each hidden layer of the critics (keeps Q values in check at high update-to-data ratios)."""
    actor_layer_norm: bool = False
    """LayerNorm after each hidden layer of the actor."""
    actor_lr: float = 3e-4
    """Adam learning rate of the actor."""
    critic_lr: float = 3e-4
    """Adam learning rate of the critics and the image encoder (the critic loss trains the encoder)."""
    temperature_lr: float = 3e-4
    """Adam learning rate of the entropy temperature."""
    discount: float = 0.99
    """Per-step discount gamma in (0, 1]. Batches carry the discount to apply (gamma**n for n-step returns);
    samplers take it from here."""
    tau: float = 0.005
    """Polyak averaging rate of the target critics: target <- tau * critic + (1 - tau) * target after each critic
    step."""
    init_temperature: float = 0.1
    """Initial entropy temperature alpha (then tuned automatically towards target_entropy)."""
    target_entropy: float | None = None
    """Policy entropy the temperature tuning aims for (None: -action_dim)."""
    critic_actor_ratio: int = 1
    """Critic steps per actor and temperature step."""
    backup_entropy: bool = True
    """Add the entropy bonus to the TD target (soft Q backup); often off for sparse success rewards."""
    log_std_min: float = -5.0
    """Lower clip of the actor's log standard deviation."""
    log_std_max: float = 2.0
    """Upper clip of the actor's log standard deviation."""
    actor_zero_init_last: bool = False
    """Zero-initialise the actor's last layer (residual RL: start as "no correction")."""
    actor_delay: int = 0
    """Critic-only steps before the actor's first step (a critic warm-up: the critic learns to score the executed
    actions before the actor follows it; residual RL over a good base)."""
    residual_scale: float | None = None
    """Residual RL: the SAC action a is a correction of the base action in observation entry `residual_key`, and
    the executed action is clip(base + residual_scale * a, -1, 1). The critic scores executed actions (what the
    batches hold), the actor is trained through that map, and the BC term compares executed actions. None: the SAC
    action is the executed action. A run's residual kind sets it (robot_rl.policies.registry)."""
    residual_key: str = "base_action"
    """Observation entry holding the base policy's action (with residual_scale)."""
    aliased_chunk_dim: int | None = None
    """Noise aliasing (DSRL-NA): the SAC action is a diffusion policy's initial noise, and an action critic scores
    the executed chunk of this many numbers (execute x action_dim), trained by TD on what was executed, so human and
    demo steps (noise unknown) train it too; a noise critic regresses it on (noise, denoised chunk) pairs the actor
    recorded, and the SAC actor maximises the noise critic. Batches carry packed actions (see `AliasedActions`).
    None: the critic scores the SAC action itself. A run's noise kind sets it (robot_rl.policies.registry)."""
    aliasing_samples: int = 4
    """With aliased_chunk_dim: (noise, chunk) pairs the actor denoises per decision besides its own, for the noise
    critic to regress the action critic on."""
    noise_critic_heads: int = 2
    """With aliased_chunk_dim: heads of the noise critic (the TD target takes their min at the next state)."""
    bc_weight: float = 0.0
    """Behaviour-cloning term on demo rows of each batch: bc_weight * mean ||tanh(mean(s)) - a_demo||^2 in the actor
    loss. 0 is plain SAC/RLPD; a small weight makes learning from few demos much faster (TD3+BC-style)."""
    bc_on_interventions: bool = True
    """The BC term also covers the human's intervention rows of the demo buffer (False: the demo datasets' rows
    only; the intervention rows still train the critic)."""
    policy_average_rate: float | None = None
    """Polyak rate, per actor step, of the policy the actors act with (actor head and encoder): they get
    average <- rate * latest + (1 - rate) * average instead of the latest step's weights, so one gradient step's
    noise does not move a precise policy (None: the latest weights)."""
    target_bounds: tuple[float, float] | None = None
    """Known bounds of the return, e.g. 0 1 for a sparse reward of 1 that ends the episode: TD targets are clipped
    into them, so the actor cannot chase critic over-estimates beyond what any policy can achieve (None: no
    clipping)."""
    image_encoder: ImageEncoderConfig = ImageEncoderConfig()
    """Per-camera conv encoder of pixel observations (unused by state-only runs)."""

    def __post_init__(self) -> None:
        problems = []
        for name in ("actor_hidden_dims", "critic_hidden_dims"):
            values = getattr(self, name)
            if not values or min(values) < 1:
                problems.append(f"{name}={values} must be one or more layer widths >= 1")
        if self.critic_ensemble_size < 1:
            problems.append(f"critic_ensemble_size={self.critic_ensemble_size} must be >= 1")
        elif not 1 <= self.critic_subset_size <= self.critic_ensemble_size:
            problems.append(f"critic_subset_size={self.critic_subset_size} must be in [1, critic_ensemble_size="
                            f"{self.critic_ensemble_size}]")
        for name in ("actor_lr", "critic_lr", "temperature_lr", "init_temperature"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                problems.append(f"{name}={value} must be > 0")
        if not (math.isfinite(self.discount) and 0.0 < self.discount <= 1.0):
            problems.append(f"discount={self.discount} must be in (0, 1]")
        if not (math.isfinite(self.tau) and 0.0 < self.tau <= 1.0):
            problems.append(f"tau={self.tau} must be in (0, 1]")
        if self.target_entropy is not None and not math.isfinite(self.target_entropy):
            problems.append(f"target_entropy={self.target_entropy} must be finite or None (-action_dim)")
        if self.critic_actor_ratio < 1:
            problems.append(f"critic_actor_ratio={self.critic_actor_ratio} must be >= 1")
        if not (math.isfinite(self.log_std_min) and math.isfinite(self.log_std_max)
                and self.log_std_min < self.log_std_max):
            problems.append(f"log_std_min={self.log_std_min} must be below log_std_max={self.log_std_max}")
        if self.actor_delay < 0:
            problems.append(f"actor_delay={self.actor_delay} must be >= 0")
        if self.residual_scale is not None and not (math.isfinite(self.residual_scale) and self.residual_scale > 0):
            problems.append(f"residual_scale={self.residual_scale} must be > 0 or None (no residual)")
        if self.aliased_chunk_dim is not None:
            if self.aliased_chunk_dim < 1:
                problems.append(f"aliased_chunk_dim={self.aliased_chunk_dim} must be >= 1 or None (no aliasing)")
            if self.residual_scale is not None:
                problems.append("aliased_chunk_dim (noise-space head) and residual_scale (residual head) exclude "
                                "each other")
            if self.bc_weight > 0:
                problems.append("aliased_chunk_dim (noise-space head) takes no BC term: set bc_weight 0")
        if self.aliasing_samples < 1:
            problems.append(f"aliasing_samples={self.aliasing_samples} must be >= 1")
        if self.noise_critic_heads < 1:
            problems.append(f"noise_critic_heads={self.noise_critic_heads} must be >= 1")
        if self.policy_average_rate is not None and not (
                math.isfinite(self.policy_average_rate) and 0.0 < self.policy_average_rate <= 1.0):
            problems.append(f"policy_average_rate={self.policy_average_rate} must be in (0, 1] or None (off)")
        if not (math.isfinite(self.bc_weight) and self.bc_weight >= 0):
            problems.append(f"bc_weight={self.bc_weight} must be >= 0")
        if self.target_bounds is not None and not (
            len(self.target_bounds) == 2 and all(math.isfinite(b) for b in self.target_bounds)
            and self.target_bounds[0] < self.target_bounds[1]
        ):
            problems.append(f"target_bounds={self.target_bounds} must be (low, high) with low < high, or None")
        _raise_problems(self, problems)


@dataclasses.dataclass(frozen=True)
class AliasedActions:
    """Layout of a noise-aliasing agent's packed batch action (one vector per transition, so replay buffers,
    n-step sampling and checkpoints handle it like any action):

    noise (noise_dim) | noise_known (1) | executed chunk (chunk_dim) | samples x alias noise (noise_dim) |
    samples x alias chunk (chunk_dim) | aliases_known (1)

    A human's or a demo's transition has noise_known 0 (its noise is unknown) and, unless the actor denoised
    aliases at that observation, aliases_known 0.
    """

    noise_dim: int
    chunk_dim: int
    samples: int

    @property
    def size(self) -> int:
        return self.noise_dim + 1 + self.chunk_dim + self.samples * (self.noise_dim + self.chunk_dim) + 1

    def pack(self, executed: np.ndarray, noise: np.ndarray | None = None, alias_noise: np.ndarray | None = None,
             alias_chunks: np.ndarray | None = None) -> np.ndarray:
        """One packed action from the executed chunk (chunk_dim numbers), the noise behind it (if known) and the
        actor's aliases (samples x noise_dim, samples x chunk_dim; if recorded)."""
        n, c, k = self.noise_dim, self.chunk_dim, self.samples
        parts = [np.zeros(n, np.float32) if noise is None else np.reshape(noise, n), [float(noise is not None)],
                 np.reshape(executed, c)]
        if alias_noise is None or alias_chunks is None:
            parts += [np.zeros(k * (n + c), np.float32), [0.0]]
        else:
            parts += [np.reshape(alias_noise, k * n), np.reshape(alias_chunks, k * c), [1.0]]
        return np.concatenate([np.asarray(p, np.float32) for p in parts])

    def unpack(self, actions: jax.Array) -> dict[str, jax.Array]:
        """{noise, noise_known, executed, alias_noise [.., samples, noise_dim], alias_chunks [.., samples,
        chunk_dim], aliases_known} of packed actions [..., size]."""
        n, c, k = self.noise_dim, self.chunk_dim, self.samples
        lead = actions.shape[:-1]
        cuts = np.cumsum([n, 1, c, k * n, k * c])
        noise, known, executed, alias_noise, alias_chunks, aliases_known = jnp.split(actions, cuts, axis=-1)
        return {"noise": noise, "noise_known": known[..., 0], "executed": executed,
                "alias_noise": alias_noise.reshape(lead + (k, n)), "alias_chunks": alias_chunks.reshape(lead + (k, c)),
                "aliases_known": aliases_known[..., 0]}


def aliased_actions(config: SACConfig, action_dim: int) -> AliasedActions | None:
    """The packed-action layout of a noise-aliasing agent (`config.aliased_chunk_dim` set), else None."""
    if config.aliased_chunk_dim is None:
        return None
    return AliasedActions(action_dim, config.aliased_chunk_dim, config.aliasing_samples)


class OptimisedParams(flax.struct.PyTreeNode):
    """Parameters with their optax state (the optimiser itself is rebuilt from the config)."""

    params: Params
    opt_state: Any


def _optimisers(config: SACConfig) -> tuple[optax.GradientTransformation, ...]:
    return optax.adam(config.actor_lr), optax.adam(config.critic_lr), optax.adam(config.temperature_lr)


class SACAgent(flax.struct.PyTreeNode):
    """Immutable SAC agent: create with `SACAgent.create`, train with `update`, act with `sample_actions`."""

    actor: OptimisedParams  # actor head params
    critic: OptimisedParams  # {"encoder": ..., "critic": ...}; the encoder is trained by the critic loss only
    target_critic_params: Params  # Polyak average of critic.params (encoder included)
    temperature: OptimisedParams  # {"log_temperature": scalar}
    rng: jax.Array
    step: jax.Array  # number of critic steps taken
    policy_average: Params | None  # with config.policy_average_rate: the averaged policy_params, else None
    config: SACConfig = flax.struct.field(pytree_node=False)
    observation_spec: ObservationSpec = flax.struct.field(pytree_node=False)
    action_dim: int = flax.struct.field(pytree_node=False)

    # ----------------------------------------------------------------------------------------------- construction
    @classmethod
    def create(
        cls,
        seed: int,
        observation_spec: Any,
        action_dim: int,
        config: SACConfig | None = None,
    ) -> SACAgent:
        """Initialise all networks.

        `observation_spec`: an ObservationSpec, a gymnasium Dict space or {key: (shape, dtype)}.
        """
        config = config or SACConfig()
        spec = ObservationSpec.coerce(observation_spec)
        if not spec.entries:
            raise ValueError("observation spec is empty")
        if action_dim < 1:
            raise ValueError(f"action_dim must be >= 1, got {action_dim}")
        if config.residual_scale is not None:
            key = config.residual_key
            if key not in spec or spec[key].shape != (action_dim,):
                found = f"{spec[key].dtype} {spec[key].shape}" if key in spec else "no such entry"
                raise ValueError(f"a residual SAC agent (residual_scale={config.residual_scale}) needs observation "
                                 f"entry {key!r} of shape ({action_dim},) holding the base action ({found})")
        return _create_agent(jax.random.PRNGKey(seed), spec, action_dim, config)

    @property
    def batch_action_dim(self) -> int:
        """Size of a batch's actions: the SAC action, or a noise-aliasing agent's packed action."""
        layout = aliased_actions(self.config, self.action_dim)
        return self.action_dim if layout is None else layout.size

    @property
    def target_entropy(self) -> float:
        return -float(self.action_dim) if self.config.target_entropy is None else float(self.config.target_entropy)

    # ----------------------------------------------------------------------------------------------- training
    def update(self, batch: Batch | Mapping[str, Any], validate: bool = True) -> tuple[SACAgent, dict[str, jax.Array]]:
        """Jitted training call. Leading dims [K, B]: K gradient steps in one lax.scan; [B]: one step.

        Returns the new agent and an info dict of scalars (means over the K steps).
        """
        batch = batch if isinstance(batch, Batch) else Batch.from_dict(batch)
        stacked = np.ndim(batch.actions) == 3
        if validate:
            self.validate_batch(batch, batch_dims=2 if stacked else 1)
        return _update_scan(self, batch) if stacked else _update_single(self, batch)

    def update_step(
        self, batch: Batch | Mapping[str, Any], validate: bool = True
    ) -> tuple[SACAgent, dict[str, jax.Array]]:
        """Exactly one gradient step on a [B] batch (one jitted call; the benchmark's per-step baseline)."""
        batch = batch if isinstance(batch, Batch) else Batch.from_dict(batch)
        if validate:
            self.validate_batch(batch, batch_dims=1)
        return _update_single(self, batch)

    def validate_batch(self, batch: Batch, batch_dims: int) -> None:
        """Raise ValueError naming the offending field for wrong keys/shapes or non-finite values."""
        spec = self.observation_spec
        spec.validate(batch.observations, batch_dims, "batch.observations")
        spec.validate(batch.next_observations, batch_dims, "batch.next_observations")
        lead = tuple(np.shape(batch.actions)[:batch_dims])
        if np.shape(batch.actions) != lead + (self.batch_action_dim,):
            raise ValueError(f"batch.actions has shape {np.shape(batch.actions)}, expected "
                             f"{lead + (self.batch_action_dim,)}")
        for name in ("rewards", "discounts", "masks"):
            if tuple(np.shape(getattr(batch, name))) != lead:
                raise ValueError(f"batch.{name} has shape {np.shape(getattr(batch, name))}, expected {lead}")
        fields = {name: getattr(batch, name) for name in ("actions", "rewards", "discounts", "masks")}
        fields.update({f"observations[{k!r}]": v for k, v in batch.observations.items()})
        fields.update({f"next_observations[{k!r}]": v for k, v in batch.next_observations.items()})
        for name, value in fields.items():
            value = np.asarray(value)
            if np.issubdtype(value.dtype, np.floating) and not np.isfinite(value).all():
                raise ValueError(f"batch.{name} contains NaN or inf")

    # ----------------------------------------------------------------------------------------------- acting
    def sample_actions(self, observations: Mapping[str, Any], seed: jax.Array) -> jax.Array:
        """Stochastic actions in [-1, 1]^d for one observation or a batch; `seed` is a jax PRNG key."""
        observations, single = self._prepare_obs(observations)
        actions = _sample_actions(self, observations, seed)
        return actions[0] if single else actions

    def eval_actions(self, observations: Mapping[str, Any]) -> jax.Array:
        """Deterministic actions tanh(mean) for one observation or a batch."""
        observations, single = self._prepare_obs(observations)
        actions = _eval_actions(self, observations)
        return actions[0] if single else actions

    def _prepare_obs(self, observations: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        spec = self.observation_spec
        first_key = spec.keys[0]
        if first_key not in observations:
            spec.validate(observations, 0)  # raises with the full key list
        single = np.ndim(observations[first_key]) == len(spec[first_key].shape)
        spec.validate(observations, 0 if single else 1)
        if single:
            observations = {k: np.asarray(v)[None] for k, v in observations.items()}
        return dict(observations), single

    # ----------------------------------------------------------------------------------------------- serialisation
    def to_bytes(self) -> bytes:
        """All learner state (params, optimiser states, target, rng, step) as msgpack bytes."""
        return flax.serialization.to_bytes(self)

    def restore_bytes(self, data: bytes) -> SACAgent:
        """Inverse of to_bytes; `self` (same config and spec) is the structural template. A checkpoint from before
        policy averaging starts its average at its latest weights."""
        state = flax.serialization.msgpack_restore(data)
        if self.policy_average is not None and not state.get("policy_average"):
            restored = flax.serialization.from_state_dict(self.replace(policy_average=None), state)
            return restored.replace(policy_average=restored.latest_policy_params())
        return flax.serialization.from_state_dict(self, state)

    def latest_policy_params(self) -> dict[str, Params]:
        """The last gradient step's actor head and observation encoder."""
        return {"actor": self.actor.params, "encoder": self.critic.params["encoder"]}

    def policy_params(self) -> dict[str, Params]:
        """What an actor process needs to act: actor head and observation encoder (averaged with
        `config.policy_average_rate`)."""
        return self.latest_policy_params() if self.policy_average is None else self.policy_average

    def policy_to_bytes(self) -> bytes:
        """Actor-side weights as msgpack bytes (for broadcasting to actors)."""
        return flax.serialization.to_bytes(self.policy_params())

    def with_policy_bytes(self, data: bytes) -> SACAgent:
        """Agent with actor head and encoder replaced from `policy_to_bytes` output."""
        restored = flax.serialization.from_bytes(self.policy_params(), data)
        critic_params = dict(self.critic.params, encoder=restored["encoder"])
        return self.replace(
            actor=self.actor.replace(params=restored["actor"]),
            critic=self.critic.replace(params=critic_params),
            policy_average=None if self.policy_average is None else restored,
        )

    def with_encoder_params_file(self, path: str) -> SACAgent:
        """Load (e.g. pretrained) encoder params saved with flax.serialization.to_bytes into critic and target."""
        with open(path, "rb") as f:
            encoder = flax.serialization.from_bytes(self.critic.params["encoder"], f.read())
        critic_tx = _optimisers(self.config)[1]
        critic_params = dict(self.critic.params, encoder=encoder)
        return self.replace(
            critic=OptimisedParams(critic_params, critic_tx.init(critic_params)),
            target_critic_params=dict(self.target_critic_params, encoder=encoder),
        )


@dataclasses.dataclass(frozen=True)
class _Modules:
    """The flax module definitions for one (spec, action_dim, config); cheap to rebuild inside traced code."""

    spec: ObservationSpec
    action_dim: int
    config: SACConfig

    @functools.cached_property
    def encoder(self) -> ObservationEncoder:
        enc = self.config.image_encoder
        return ObservationEncoder(self.spec, enc.channels, enc.kernel_sizes, enc.strides, enc.latent_dim,
                                  enc.normalisation)

    @functools.cached_property
    def actor(self) -> TanhGaussianActor:
        c = self.config
        return TanhGaussianActor(
            c.actor_hidden_dims,
            self.action_dim,
            c.log_std_min,
            c.log_std_max,
            c.actor_layer_norm,
            c.actor_zero_init_last,
        )

    @functools.cached_property
    def critic(self) -> CriticEnsemble:
        c = self.config
        return CriticEnsemble(c.critic_hidden_dims, c.critic_ensemble_size, c.critic_layer_norm)

    @functools.cached_property
    def noise_critic(self) -> CriticEnsemble:
        c = self.config
        return CriticEnsemble(c.critic_hidden_dims, c.noise_critic_heads, c.critic_layer_norm)


def _modules(agent: SACAgent) -> _Modules:
    return _Modules(agent.observation_spec, agent.action_dim, agent.config)


# --------------------------------------------------------------------------------------------------- pure functions
def encode(agent: SACAgent, encoder_params: Params, observations: dict[str, jax.Array]) -> jax.Array:
    """Observation dict [B, ...] -> features [B, F]."""
    return _modules(agent).encoder.apply({"params": encoder_params}, observations)


def actor_distribution(agent: SACAgent, actor_params: Params, features: jax.Array) -> tuple[jax.Array, jax.Array]:
    return _modules(agent).actor.apply({"params": actor_params}, features)


def critic_values(agent: SACAgent, critic_head_params: Params, features: jax.Array, actions: jax.Array) -> jax.Array:
    """Q values of every ensemble head, [E, B]."""
    return _modules(agent).critic.apply({"params": critic_head_params}, features, actions)


def noise_critic_values(agent: SACAgent, noise_critic_params: Params, features: jax.Array,
                        noise: jax.Array) -> jax.Array:
    """Noise-critic Q values of every head, [H, B] (noise aliasing)."""
    return _modules(agent).noise_critic.apply({"params": noise_critic_params}, features, noise)


def subset_min(key: jax.Array, q_values: jax.Array, subset_size: int) -> jax.Array:
    """REDQ target: min over `subset_size` distinct heads drawn at random from q_values [E, B] -> [B].

    (The update draws the heads the same way but evaluates only those heads.)
    """
    heads = jax.random.choice(key, q_values.shape[0], (subset_size,), replace=False)
    return jnp.min(q_values[heads], axis=0)


def executed_actions(config: SACConfig, observations: Mapping[str, jax.Array], actions: jax.Array) -> jax.Array:
    """What the robot executes for SAC actions `actions`: themselves, or (residual RL) the base action in
    `observations` plus the scaled residual, clipped to [-1, 1]."""
    if config.residual_scale is None:
        return actions
    base = jnp.asarray(observations[config.residual_key], jnp.float32)
    return jnp.clip(base + config.residual_scale * actions, -1.0, 1.0)


def critic_loss(
    agent: SACAgent, critic_params: Params, observations: dict, actions: jax.Array, targets: jax.Array
) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """Mean squared TD error over heads and batch; aux = (features, q_values)."""
    features = encode(agent, critic_params["encoder"], observations)
    q_values = critic_values(agent, critic_params["critic"], features, actions)
    return jnp.mean((q_values - targets[None]) ** 2), (features, q_values)


def noise_distillation_loss(agent: SACAgent, critic_params: Params, features: jax.Array, parts: dict[str, jax.Array],
                            key: jax.Array) -> jax.Array:
    """Noise aliasing: mean squared error of the noise critic Q^W(s, w) against the action critic's (frozen here)
    mean Q^A(s, chunk denoised from w), on each row's own (noise, executed chunk) where its noise is known and on
    one of its recorded aliases drawn at random where it has them."""
    rows = jnp.arange(features.shape[0])
    pick = jax.random.randint(key, (features.shape[0],), 0, parts["alias_noise"].shape[1])
    noise = jnp.concatenate([parts["noise"], parts["alias_noise"][rows, pick]])
    chunks = jnp.concatenate([parts["executed"], parts["alias_chunks"][rows, pick]])
    mask = jnp.concatenate([parts["noise_known"], parts["aliases_known"]])
    both = jnp.concatenate([features, features])
    targets = jax.lax.stop_gradient(critic_values(agent, critic_params["critic"], jax.lax.stop_gradient(both),
                                                  chunks).mean(axis=0))
    q_noise = noise_critic_values(agent, critic_params["noise_critic"], both, noise)
    return jnp.sum(mask[None] * (q_noise - targets[None]) ** 2) / jnp.maximum(mask.sum() * q_noise.shape[0], 1.0)


def actor_loss(
    agent: SACAgent,
    actor_params: Params,
    encoder_params: Params,
    critic_head_params: Params,
    observations: dict,
    key: jax.Array,
    temperature: jax.Array,
    features: jax.Array | None = None,
    demo_actions: jax.Array | None = None,
    demo_mask: jax.Array | None = None,
) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """alpha * log pi - mean_heads Q(executed action) (noise aliasing: mean_heads Q^W(noise)) (+ bc_weight * BC
    error on demo rows); the encoder is frozen here.

    aux = (mean log pi, BC error, per-row squared BC error).
    """
    if features is None:
        features = encode(agent, encoder_params, observations)
    features = jax.lax.stop_gradient(features)
    mean, log_std = actor_distribution(agent, actor_params, features)
    actions, log_probs = tanh_gaussian_sample(key, mean, log_std)
    if agent.config.aliased_chunk_dim is not None:  # critic_head_params are the noise critic's
        q_values = noise_critic_values(agent, critic_head_params, features, actions).mean(axis=0)
    else:
        executed = executed_actions(agent.config, observations, actions)
        q_values = critic_values(agent, critic_head_params, features, executed).mean(axis=0)
    loss = jnp.mean(temperature * log_probs - q_values)
    bc_error = jnp.zeros((), jnp.float32)
    squared = jnp.zeros(features.shape[:1], jnp.float32)
    if demo_actions is not None and demo_mask is not None:
        mask = jnp.asarray(demo_mask, jnp.float32)
        mode = executed_actions(agent.config, observations, tanh_gaussian_mode(mean))
        squared = jnp.sum((mode - demo_actions) ** 2, axis=-1)
        bc_error = jnp.sum(mask * squared) / jnp.maximum(mask.sum(), 1.0)
        loss = loss + agent.config.bc_weight * bc_error
    return loss, (jnp.mean(log_probs), bc_error, squared)


def _sac_step(agent: SACAgent, batch: Batch) -> tuple[SACAgent, dict[str, jax.Array]]:
    """One critic step, plus an actor/temperature step every `critic_actor_ratio` critic steps."""
    config = agent.config
    actor_tx, critic_tx, temperature_tx = _optimisers(config)
    rng, step_key = jax.random.split(agent.rng)
    aug_key, next_aug_key, next_action_key, subset_key, actor_key = jax.random.split(step_key, 5)
    image_keys = agent.observation_spec.image_keys
    pad, colour = config.image_encoder.augment_pad, config.image_encoder.augment_colour
    observations = augment_observations(aug_key, batch.observations, image_keys, pad, colour)
    next_observations = augment_observations(next_aug_key, batch.next_observations, image_keys, pad, colour)
    actions = jnp.asarray(batch.actions, jnp.float32)
    layout = aliased_actions(config, agent.action_dim)
    parts = None if layout is None else layout.unpack(actions)
    critic_actions = actions if parts is None else parts["executed"]  # what the critic scores
    temperature = jnp.exp(agent.temperature.params["log_temperature"])

    # TD target: next action from the current actor (on online-encoder features), value from the target critic.
    next_features = jax.lax.stop_gradient(encode(agent, agent.critic.params["encoder"], next_observations))
    next_mean, next_log_std = actor_distribution(agent, agent.actor.params, next_features)
    next_actions, next_log_probs = tanh_gaussian_sample(next_action_key, next_mean, next_log_std)
    next_actions = executed_actions(config, next_observations, next_actions)
    target_features = encode(agent, agent.target_critic_params["encoder"], next_observations)
    if parts is not None:
        # Noise aliasing: the noise critic stands for Q^A(s', chunk denoised from the actor's noise), so the learner
        # never runs the diffusion policy.
        next_q = noise_critic_values(agent, agent.target_critic_params["noise_critic"], target_features,
                                     next_actions).min(axis=0)
    else:
        # REDQ: evaluate only the randomly chosen target heads (gathering their params), then take the min.
        heads = jax.random.choice(subset_key, config.critic_ensemble_size, (config.critic_subset_size,),
                                  replace=False)
        subset_params = jax.tree.map(lambda p: p[heads], agent.target_critic_params["critic"])
        subset_critic = CriticEnsemble(config.critic_hidden_dims, config.critic_subset_size,
                                       config.critic_layer_norm)
        next_q = subset_critic.apply({"params": subset_params}, target_features, next_actions).min(axis=0)
    if config.backup_entropy:
        next_q = next_q - temperature * next_log_probs
    rewards = jnp.asarray(batch.rewards, jnp.float32)
    targets = rewards + batch.discounts * batch.masks * next_q
    if config.target_bounds is not None:
        targets = jnp.clip(targets, *config.target_bounds)
    targets = jax.lax.stop_gradient(targets)

    def loss_fn(p: Params) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array]]:
        loss, (features, q_values) = critic_loss(agent, p, observations, critic_actions, targets)
        distillation = jnp.zeros((), jnp.float32)
        if parts is not None:
            distillation = noise_distillation_loss(agent, p, features, parts, jax.random.fold_in(step_key, 7))
        return loss + distillation, (features, q_values, distillation)

    (loss_c, (features, q_values, distillation)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        agent.critic.params)
    updates, critic_opt_state = critic_tx.update(grads, agent.critic.opt_state, agent.critic.params)
    critic_params = optax.apply_updates(agent.critic.params, updates)
    target_params = optax.incremental_update(critic_params, agent.target_critic_params, config.tau)
    agent = agent.replace(
        critic=OptimisedParams(critic_params, critic_opt_state),
        target_critic_params=target_params,
        rng=rng,
        step=agent.step + 1,
    )
    info = {"critic_loss": loss_c, "q_mean": q_values.mean(), "target_q_mean": targets.mean()}
    if parts is not None:
        info["noise_critic_loss"] = distillation

    def actor_and_temperature_step(agent: SACAgent) -> tuple[SACAgent, dict[str, jax.Array]]:
        demo_rows = jnp.asarray(batch.demo, bool)
        human_rows = demo_rows & jnp.asarray(batch.intervention, bool)
        bc_rows = demo_rows if config.bc_on_interventions else demo_rows & ~human_rows
        bc_args = (actions, bc_rows) if config.bc_weight > 0 else (None, None)
        followed = agent.critic.params["critic" if parts is None else "noise_critic"]
        (loss_a, (log_prob, bc_error, squared)), actor_grads = jax.value_and_grad(
            lambda p: actor_loss(agent, p, None, followed, observations, actor_key, temperature, features, *bc_args),
            has_aux=True,
        )(agent.actor.params)
        updates, actor_opt_state = actor_tx.update(actor_grads, agent.actor.opt_state, agent.actor.params)
        actor_params = optax.apply_updates(agent.actor.params, updates)
        entropy_gap = jax.lax.stop_gradient(-log_prob - agent.target_entropy)

        def temperature_loss(p: Params) -> jax.Array:
            return jnp.exp(p["log_temperature"]) * entropy_gap

        loss_t, t_grads = jax.value_and_grad(temperature_loss)(agent.temperature.params)
        t_updates, t_opt_state = temperature_tx.update(t_grads, agent.temperature.opt_state, agent.temperature.params)
        t_params = optax.apply_updates(agent.temperature.params, t_updates)
        average = agent.policy_average
        if average is not None:
            latest = {"actor": actor_params, "encoder": agent.critic.params["encoder"]}
            average = optax.incremental_update(latest, average, config.policy_average_rate)
        agent = agent.replace(
            actor=OptimisedParams(actor_params, actor_opt_state),
            temperature=OptimisedParams(t_params, t_opt_state),
            policy_average=average,
        )
        info = {"actor_loss": loss_a, "entropy": -log_prob, "temperature_loss": loss_t, "bc_error": bc_error}
        if config.bc_weight > 0:  # the policy's distance from the demos' and from the human's actions, apart
            for name, rows in (("bc_error_demos", demo_rows & ~human_rows), ("bc_error_human", human_rows)):
                rows = rows.astype(jnp.float32)
                info[name] = jnp.where(rows.sum() > 0, jnp.sum(rows * squared) / jnp.maximum(rows.sum(), 1.0),
                                       jnp.nan)
        return agent, info

    def skip(agent: SACAgent) -> tuple[SACAgent, dict[str, jax.Array]]:
        nan = jnp.full((), jnp.nan, jnp.float32)
        names = ["actor_loss", "entropy", "temperature_loss", "bc_error"]
        if config.bc_weight > 0:
            names += ["bc_error_demos", "bc_error_human"]
        return agent, {name: nan for name in names}

    if config.critic_actor_ratio == 1 and config.actor_delay == 0:
        agent, actor_info = actor_and_temperature_step(agent)
    else:  # agent.step counts this critic step already
        actor_due = (agent.step % config.critic_actor_ratio == 0) & (agent.step > config.actor_delay)
        agent, actor_info = jax.lax.cond(actor_due, actor_and_temperature_step, skip, agent)
    info.update(actor_info)
    info["temperature"] = jnp.exp(agent.temperature.params["log_temperature"])
    return agent, info


# Init runs once, so compile it with backend optimisation off: about 4x faster to compile on CPU.
@functools.partial(jax.jit, static_argnums=(1, 2, 3), compiler_options={"xla_backend_optimization_level": 0})
def _create_agent(key: jax.Array, spec: ObservationSpec, action_dim: int, config: SACConfig) -> SACAgent:
    # One jitted init: initialising op by op costs seconds of per-primitive compilation.
    modules = _Modules(spec, action_dim, config)
    example = {k: jnp.zeros((1,) + s.shape, s.dtype) for k, s in spec.entries}
    rng, enc_key, actor_key, critic_key = jax.random.split(key, 4)
    encoder_params = modules.encoder.init(enc_key, example).get("params", {})
    features = modules.encoder.apply({"params": encoder_params}, example)
    actor_params = modules.actor.init(actor_key, features)["params"]
    layout = aliased_actions(config, action_dim)
    scored = action_dim if layout is None else layout.chunk_dim  # what the (action) critic scores
    head_params = modules.critic.init(critic_key, features, jnp.zeros((1, scored)))["params"]
    critic_params = {"encoder": encoder_params, "critic": head_params}
    if layout is not None:
        noise_key = jax.random.fold_in(critic_key, 1)
        critic_params["noise_critic"] = modules.noise_critic.init(noise_key, features,
                                                                  jnp.zeros((1, action_dim)))["params"]
    temperature_params = {"log_temperature": jnp.asarray(math.log(config.init_temperature), jnp.float32)}
    actor_tx, critic_tx, temperature_tx = _optimisers(config)
    return SACAgent(
        actor=OptimisedParams(actor_params, actor_tx.init(actor_params)),
        critic=OptimisedParams(critic_params, critic_tx.init(critic_params)),
        target_critic_params=jax.tree.map(jnp.array, critic_params),
        temperature=OptimisedParams(temperature_params, temperature_tx.init(temperature_params)),
        rng=rng,
        step=jnp.zeros((), jnp.int32),
        policy_average=None if config.policy_average_rate is None else jax.tree.map(
            jnp.array, {"actor": actor_params, "encoder": encoder_params}),
        config=config,
        observation_spec=spec,
        action_dim=action_dim,
    )


@jax.jit
def _update_single(agent: SACAgent, batch: Batch) -> tuple[SACAgent, dict[str, jax.Array]]:
    return _sac_step(agent, batch)


@jax.jit
def _update_scan(agent: SACAgent, batch: Batch) -> tuple[SACAgent, dict[str, jax.Array]]:
    enc = agent.config.image_encoder
    has_true_convs = bool(agent.observation_spec.image_keys) and any(
        k != s for k, s in zip(enc.kernel_sizes, enc.strides, strict=True)
    )
    # XLA:CPU convolutions inside a while loop run ~10x slower than unrolled; patch convs (matmuls) do not care.
    agent, infos = jax.lax.scan(_sac_step, agent, batch, unroll=has_true_convs)
    # Actor entries are NaN on critic-only steps; average over the steps that ran.
    return agent, {k: jnp.nanmean(v) for k, v in infos.items()}


@jax.jit
def _sample_actions(agent: SACAgent, observations: dict, seed: jax.Array) -> jax.Array:
    params = agent.policy_params()
    features = encode(agent, params["encoder"], observations)
    mean, log_std = actor_distribution(agent, params["actor"], features)
    return tanh_gaussian_sample(seed, mean, log_std)[0]


@jax.jit
def _eval_actions(agent: SACAgent, observations: dict) -> jax.Array:
    params = agent.policy_params()
    features = encode(agent, params["encoder"], observations)
    return tanh_gaussian_mode(actor_distribution(agent, params["actor"], features)[0])
