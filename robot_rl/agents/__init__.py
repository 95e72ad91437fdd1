"""SAC learner in JAX (flax linen + optax)."""

from robot_rl.agents.sac import ImageEncoderConfig, SACAgent, SACConfig

__all__ = ["ImageEncoderConfig", "SACAgent", "SACConfig"]
