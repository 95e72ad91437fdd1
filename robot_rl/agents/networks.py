"""Flax linen modules for SAC: observation encoder (convs per camera + vectors), actor, critic ensemble."""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from robot_rl.core.types import ObservationSpec

_default_init = nn.initializers.xavier_uniform


def module_name(key: str) -> str:
    """Observation key -> a valid flax submodule name ('images/front' -> 'images_front')."""
    return key.replace("/", "_")


class MLP(nn.Module):
    """Dense stack, optionally with LayerNorm after each hidden Dense."""

    hidden_dims: Sequence[int]
    layer_norm: bool = False
    activate_final: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for i, width in enumerate(self.hidden_dims):
            x = nn.Dense(width, kernel_init=_default_init())(x)
            if i + 1 < len(self.hidden_dims) or self.activate_final:
                if self.layer_norm:
                    x = nn.LayerNorm()(x)
                x = nn.relu(x)
        return x


PIXEL_NORMALISATIONS = ("fixed", "per_image")
"""How an encoder scales uint8 pixels: `fixed` maps [0, 255] to [-0.5, 0.5]; `per_image` standardises each channel of
each image over its pixels (zero mean, unit spread), so a brighter or darker room, or a table of another colour,
changes the encoder's input much less."""

_PER_IMAGE_EPS = 25.0  # variance floor in squared pixel units: a nearly uniform image is not blown up into noise


def pixel_scale(images: jax.Array, normalisation: str) -> tuple[jax.Array, jax.Array]:
    """(scale, offset) that map `images` [B, H, W, C] (uint8) to the encoder's input as `x * scale + offset`:
    scalars for `fixed`, per image and channel ([B, 1, 1, C]) for `per_image`."""
    if normalisation == "fixed":
        return jnp.float32(1.0 / 255.0), jnp.float32(-0.5)
    mean = jnp.mean(images, axis=(1, 2), keepdims=True, dtype=jnp.float32)
    mean_square = jnp.mean(jnp.square(images.astype(jnp.float32)), axis=(1, 2), keepdims=True)
    scale = jax.lax.rsqrt(jnp.maximum(mean_square - jnp.square(mean), 0.0) + _PER_IMAGE_EPS)
    return scale, -mean * scale


def _normalise_pixels(x: jax.Array, scale: jax.Array, offset: jax.Array) -> jax.Array:
    return x.astype(jnp.float32) * scale + offset


class PatchConv(nn.Module):
    """VALID conv with kernel == stride, computed as space-to-depth + matmul.

    Same maths and parameter shapes as nn.Conv, but XLA:CPU runs it several times faster, and (unlike its
    convolutions) it stays fast inside lax.scan.
    """

    features: int
    patch: int
    normalisation: str = "fixed"
    """How uint8 input is scaled (PIXEL_NORMALISATIONS); float input is used as it comes."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        batch, height, width, channels = x.shape
        k = self.patch
        kernel = self.param("kernel", _default_init(), (k, k, channels, self.features))
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        scaling = pixel_scale(x, self.normalisation) if x.dtype == jnp.uint8 else None
        patches = x.reshape(batch, height // k, k, width // k, k, channels).transpose(0, 1, 3, 2, 4, 5)
        patches = patches.reshape(batch, height // k, width // k, k * k * channels)
        if scaling is not None:  # rearranging bytes before the float conversion moves 4x less memory
            # a patch's values run (row, column, channel), channel fastest: repeat the per-channel factors k*k times
            scale, offset = (jnp.tile(f, (1, 1, 1, k * k)) if jnp.ndim(f) else f for f in scaling)
            patches = _normalise_pixels(patches, scale, offset)
        return patches @ kernel.reshape(k * k * channels, self.features) + bias


class ConvEncoder(nn.Module):
    """Small DrQ/SERL-style conv stack for one camera: uint8 HxWxC -> LayerNorm+tanh latent."""

    channels: Sequence[int]
    kernel_sizes: Sequence[int]
    strides: Sequence[int]
    latent_dim: int
    normalisation: str = "fixed"
    """How uint8 pixels are scaled (PIXEL_NORMALISATIONS)."""

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        lead = images.shape[:-3]
        x = images.reshape((-1,) + images.shape[-3:])
        for i, (ch, k, s) in enumerate(zip(self.channels, self.kernel_sizes, self.strides, strict=True)):
            if k == s and x.shape[1] % k == 0 and x.shape[2] % k == 0:  # PatchConv normalises uint8 itself
                x = nn.relu(PatchConv(ch, k, self.normalisation, name=f"Conv_{i}")(x))
            else:
                if x.dtype == jnp.uint8:
                    x = _normalise_pixels(x, *pixel_scale(x, self.normalisation))
                conv = nn.Conv(ch, (k, k), (s, s), padding="VALID", kernel_init=_default_init(), name=f"Conv_{i}")
                x = nn.relu(conv(x))
        if x.dtype == jnp.uint8:  # no conv layers configured
            x = _normalise_pixels(x, *pixel_scale(x, self.normalisation))
        x = x.reshape((x.shape[0], -1))
        x = nn.Dense(self.latent_dim, kernel_init=_default_init())(x)
        x = jnp.tanh(nn.LayerNorm()(x))
        return x.reshape(lead + (self.latent_dim,))


class ObservationEncoder(nn.Module):
    """Encodes an observation dict into one feature vector.

    Each image key gets its own ConvEncoder; every other key (proprio `state`, `object_state`, or any extra actor
    input such as a base action) is flattened and concatenated as is, but the wrist `wrench` as sign(x) log(1 + |x|).
    """

    spec: ObservationSpec
    channels: Sequence[int]
    kernel_sizes: Sequence[int]
    strides: Sequence[int]
    latent_dim: int
    normalisation: str = "fixed"
    """How uint8 pixels are scaled (PIXEL_NORMALISATIONS)."""

    @nn.compact
    def __call__(self, observations: dict[str, jax.Array]) -> jax.Array:
        parts = []
        for key in self.spec.image_keys:
            encoder = ConvEncoder(self.channels, self.kernel_sizes, self.strides, self.latent_dim,
                                  self.normalisation, name=module_name(key))
            parts.append(encoder(observations[key]))
        for key in self.spec.vector_keys:
            x = jnp.asarray(observations[key], jnp.float32)
            if key == "wrench":  # newtons: a few in a light touch, a hundred pressing; symlog keeps both readable
                x = jnp.sign(x) * jnp.log1p(jnp.abs(x))
            n_dims = len(self.spec[key].shape)
            parts.append(x.reshape(x.shape[: x.ndim - n_dims] + (-1,)))
        return jnp.concatenate(parts, axis=-1)


class TanhGaussianActor(nn.Module):
    """Features -> (mean, log_std) of a tanh-squashed Gaussian; log_std is squashed smoothly into its bounds."""

    hidden_dims: Sequence[int]
    action_dim: int
    log_std_min: float = -5.0
    log_std_max: float = 2.0
    layer_norm: bool = False
    zero_init_last: bool = False

    @nn.compact
    def __call__(self, features: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = MLP(self.hidden_dims, layer_norm=self.layer_norm)(features)
        init = nn.initializers.zeros if self.zero_init_last else _default_init()
        mean = nn.Dense(self.action_dim, kernel_init=init, name="mean")(x)
        raw_log_std = nn.Dense(self.action_dim, kernel_init=init, name="log_std")(x)
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (jnp.tanh(raw_log_std) + 1.0)
        return mean, log_std


class CriticHead(nn.Module):
    """One Q-function: concat(features, action) -> LayerNorm MLP -> scalar."""

    hidden_dims: Sequence[int]
    layer_norm: bool = True

    @nn.compact
    def __call__(self, features: jax.Array, actions: jax.Array) -> jax.Array:
        x = jnp.concatenate([features, actions], axis=-1)
        x = MLP(self.hidden_dims, layer_norm=self.layer_norm)(x)
        return nn.Dense(1, kernel_init=_default_init())(x)[..., 0]


class CriticEnsemble(nn.Module):
    """`ensemble_size` independent critic heads evaluated with nn.vmap; returns Q values [E, ...]."""

    hidden_dims: Sequence[int]
    ensemble_size: int
    layer_norm: bool = True

    @nn.compact
    def __call__(self, features: jax.Array, actions: jax.Array) -> jax.Array:
        ensemble = nn.vmap(
            CriticHead,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=None,
            out_axes=0,
            axis_size=self.ensemble_size,
        )
        return ensemble(self.hidden_dims, self.layer_norm, name="heads")(features, actions)
