"""Tanh-Gaussian: log-prob against numpy change of variables and a Monte-Carlo histogram; numerical stability."""

import jax
import jax.numpy as jnp
import numpy as np

from robot_rl.agents.distributions import (
    tanh_gaussian_log_prob,
    tanh_gaussian_log_prob_from_pre_tanh,
    tanh_gaussian_mode,
    tanh_gaussian_sample,
)


def numpy_tanh_gaussian_log_prob(actions, mean, std):
    """log N(atanh a; mean, std) - log |d tanh/du|, summed over dims, computed naively in float64."""
    u = np.arctanh(actions)
    gaussian = -0.5 * ((u - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)
    return np.sum(gaussian - np.log(1.0 - actions**2), axis=-1)


def test_log_prob_matches_change_of_variables():
    rng = np.random.default_rng(0)
    mean = rng.normal(size=(64, 3))
    std = np.exp(rng.uniform(-1.5, 0.5, size=(64, 3)))
    actions = rng.uniform(-0.99, 0.99, size=(64, 3))
    ours = tanh_gaussian_log_prob(jnp.asarray(actions, jnp.float32), jnp.asarray(mean, jnp.float32),
                                  jnp.asarray(np.log(std), jnp.float32))
    np.testing.assert_allclose(np.asarray(ours), numpy_tanh_gaussian_log_prob(actions, mean, std), rtol=1e-4, atol=1e-3)


def test_sampled_log_prob_matches_monte_carlo_histogram():
    mean, log_std = jnp.array([[0.3]]), jnp.array([[np.log(0.8)]])
    samples, _ = tanh_gaussian_sample(jax.random.PRNGKey(0), jnp.broadcast_to(mean, (200_000, 1)),
                                      jnp.broadcast_to(log_std, (200_000, 1)))
    samples = np.asarray(samples)[:, 0]
    assert np.all(np.abs(samples) <= 1.0)
    counts, edges = np.histogram(samples, bins=40, range=(-0.95, 0.95))
    empirical = counts / (len(samples) * np.diff(edges))
    centres = 0.5 * (edges[1:] + edges[:-1])
    density = np.exp(np.asarray(tanh_gaussian_log_prob(jnp.asarray(centres[:, None]), mean, log_std)))
    np.testing.assert_allclose(empirical, density, rtol=0.08, atol=0.02)


def test_sample_log_prob_is_consistent_and_stable_for_saturated_actions():
    mean = jnp.array([[0.0, 12.0, -12.0]])
    log_std = jnp.zeros((1, 3))
    actions, log_probs = tanh_gaussian_sample(jax.random.PRNGKey(1), jnp.repeat(mean, 8, 0), jnp.repeat(log_std, 8, 0))
    assert np.isfinite(np.asarray(log_probs)).all()
    pre_tanh = jnp.array([[0.5, 15.0, -30.0]])
    value = tanh_gaussian_log_prob_from_pre_tanh(pre_tanh, mean, log_std)
    assert np.isfinite(float(value[0]))  # naive log(1 - tanh^2) would be log(0) = -inf here
    grads = jax.grad(lambda m: tanh_gaussian_log_prob_from_pre_tanh(pre_tanh, m, log_std).sum())(mean)
    assert np.isfinite(np.asarray(grads)).all()
    np.testing.assert_allclose(np.asarray(tanh_gaussian_mode(mean)), np.tanh([[0.0, 12.0, -12.0]]), atol=1e-6)
