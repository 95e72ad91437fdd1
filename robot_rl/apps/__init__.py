"""The programs people run: the ``robot-rl`` command line (``cli``, ``console``) and one module per command that is
more than a few lines (train, train-bc, distill, validate, replay-in-sim, status, progress).

May import: every robot_rl package. Nothing imports the apps.
"""
