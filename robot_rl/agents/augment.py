"""DrQ image augmentation inside jitted code."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def random_shift(key: jax.Array, images: jax.Array, pad: int = 4) -> jax.Array:
    """Per-sample random translation by up to `pad` pixels, replicating edge pixels (DrQ); images [B, H, W, C]."""
    if pad <= 0:
        return images
    batch, height, width, channels = images.shape
    padded = jnp.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="edge")
    offsets = jax.random.randint(key, (batch, 2), 0, 2 * pad + 1)

    def crop(image: jax.Array, offset: jax.Array) -> jax.Array:
        return jax.lax.dynamic_slice(image, (offset[0], offset[1], 0), (height, width, channels))

    return jax.vmap(crop)(padded, offsets)


def augment_observations(key: jax.Array, observations: dict, image_keys: tuple[str, ...], pad: int) -> dict:
    """Random-shift every image key with its own key; other entries pass through untouched."""
    if pad <= 0 or not image_keys:
        return observations
    out = dict(observations)
    for sub_key, image_key in zip(jax.random.split(key, len(image_keys)), image_keys, strict=True):
        out[image_key] = random_shift(sub_key, observations[image_key], pad)
    # Materialise the shifted images: otherwise XLA on CPU fuses the gather into the first conv (about 2x slower).
    return jax.lax.optimization_barrier(out)
