"""Policy classes: Gaussian (SAC), diffusion, residual, noise-space, one-step."""
