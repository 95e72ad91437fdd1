"""Tanh-squashed diagonal Gaussian in plain jax (no distrax / TFP)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

_HALF_LOG_TWO_PI = 0.5 * jnp.log(2.0 * jnp.pi)


def gaussian_log_prob(x: jax.Array, mean: jax.Array, log_std: jax.Array) -> jax.Array:
    """Log density of a diagonal Gaussian, summed over the last axis."""
    z = (x - mean) * jnp.exp(-log_std)
    return jnp.sum(-0.5 * z**2 - log_std - _HALF_LOG_TWO_PI, axis=-1)


def tanh_log_det_jacobian(pre_tanh: jax.Array) -> jax.Array:
    """sum log |d tanh(u)/du| = sum log(1 - tanh(u)^2), in the stable form 2 (log 2 - u - softplus(-2u))."""
    return jnp.sum(2.0 * (jnp.log(2.0) - pre_tanh - jax.nn.softplus(-2.0 * pre_tanh)), axis=-1)


def tanh_gaussian_log_prob_from_pre_tanh(pre_tanh: jax.Array, mean: jax.Array, log_std: jax.Array) -> jax.Array:
    """Log density of a = tanh(u) given u (exact, no atanh needed)."""
    return gaussian_log_prob(pre_tanh, mean, log_std) - tanh_log_det_jacobian(pre_tanh)


def tanh_gaussian_log_prob(actions: jax.Array, mean: jax.Array, log_std: jax.Array, eps: float = 1e-6) -> jax.Array:
    """Log density of given squashed actions in (-1, 1); actions are clipped away from +-1 before atanh."""
    pre_tanh = jnp.arctanh(jnp.clip(actions, -1.0 + eps, 1.0 - eps))
    return tanh_gaussian_log_prob_from_pre_tanh(pre_tanh, mean, log_std)


def tanh_gaussian_sample(key: jax.Array, mean: jax.Array, log_std: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Reparameterised sample a = tanh(mean + std * eps) and its log density."""
    pre_tanh = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape, mean.dtype)
    return jnp.tanh(pre_tanh), tanh_gaussian_log_prob_from_pre_tanh(pre_tanh, mean, log_std)


def tanh_gaussian_mode(mean: jax.Array) -> jax.Array:
    """Deterministic action used for evaluation (tanh of the Gaussian mean)."""
    return jnp.tanh(mean)
