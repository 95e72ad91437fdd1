"""Learning machinery in JAX (flax + optax): the SAC agent (``sac``: pixel encoders with augmentation, LayerNorm
critic ensemble, temperature, several gradient steps per update with ``lax.scan``), its networks, distributions and
augmentations, and the reward classifier (``reward_classifier``; its training ``reward_classifier_training``, its
human frame labels and labelling tool ``frame_labels``).

May import: robot_rl.core and robot_rl.data.
"""
