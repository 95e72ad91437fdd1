"""Image augmentation inside jitted code: DrQ random shifts, and colour jitter for lighting and colour changes."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


def random_shift(key: jax.Array, images: jax.Array, pad: int = 4) -> jax.Array:
    """Per-sample random translation by up to `pad` pixels, replicating edge pixels (DrQ); images [B, H, W, C]."""
    if pad <= 0:
        return images
    shape = images.shape
    padded = jnp.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="edge")
    offsets = jax.random.randint(key, (shape[0], 2), 0, 2 * pad + 1)
    return jax.lax.platform_dependent(
        padded,
        offsets,
        cpu=functools.partial(crop_per_sample_loop, shape=shape),
        default=functools.partial(crop_per_sample_batched, shape=shape),
    )


def crop_per_sample_batched(padded: jax.Array, offsets: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """Crop `shape[1:3]` windows at per-sample (row, col) offsets, as one batched gather (fast on accelerators)."""
    return jax.vmap(lambda image, offset: _crop(image, offset, shape))(padded, offsets)


def crop_per_sample_loop(padded: jax.Array, offsets: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """Same crops as `crop_per_sample_batched`, one dynamic slice per sample in a loop.

    XLA:CPU runs the batched gather element by element (it cost a third of a pixel SAC update); a dynamic slice
    per sample becomes row copies.
    """

    def crop_into(i: jax.Array, out: jax.Array) -> jax.Array:
        return out.at[i].set(_crop(padded[i], offsets[i], shape))

    return jax.lax.fori_loop(0, shape[0], crop_into, jnp.empty(shape, padded.dtype))


def _crop(image: jax.Array, offset: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return jax.lax.dynamic_slice(image, (offset[0], offset[1], 0), shape[1:])


def colour_jitter(key: jax.Array, images: jax.Array, strength: float) -> jax.Array:
    """Per-sample brightness scale 1 + u (u in [-strength, strength]) and per-channel offset v x 255 (v in
    [-strength / 2, strength / 2]), clipped to [0, 255]; images [B, H, W, C] in, the same dtype out (uint8 images
    stay uint8: the encoder scales uint8 pixels, and the actor's images are uint8)."""
    if strength <= 0:
        return images
    scale_key, shift_key = jax.random.split(key)
    batch, channels = images.shape[0], images.shape[-1]
    scale = 1.0 + jax.random.uniform(scale_key, (batch, 1, 1, 1), minval=-strength, maxval=strength)
    shift = 255.0 * jax.random.uniform(shift_key, (batch, 1, 1, channels), minval=-strength / 2, maxval=strength / 2)
    jittered = jnp.clip(images.astype(jnp.float32) * scale + shift, 0.0, 255.0)
    return jnp.round(jittered).astype(images.dtype) if images.dtype == jnp.uint8 else jittered


def augment_observations(key: jax.Array, observations: dict, image_keys: tuple[str, ...], pad: int,
                         colour: float = 0.0) -> dict:
    """Random-shift (and with `colour` > 0 colour-jitter) every image key with its own key; other entries pass
    through untouched."""
    if (pad <= 0 and colour <= 0) or not image_keys:
        return observations
    out = dict(observations)
    for sub_key, image_key in zip(jax.random.split(key, len(image_keys)), image_keys, strict=True):
        shifted = random_shift(sub_key, observations[image_key], pad)
        out[image_key] = colour_jitter(jax.random.fold_in(sub_key, 1), shifted, colour) if colour > 0 else shifted
    # Materialise the shifted images before the encoders read them (a few percent faster on CPU than letting XLA
    # schedule the crops into their consumers).
    return jax.lax.optimization_barrier(out)
