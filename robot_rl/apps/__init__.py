"""The programs people run: the ``robot-rl`` command line (``cli``, ``console``) and one module per command (or family
of commands) that is more than a few lines: train (``train``), train-bc (``train_bc``) and distill (``distill``), these
two run under a progress bar with Ctrl-C handling (``fit_commands``), record (``record``), info / replay / export /
import (``datasets``), eval (``evaluate``), label and train-reward (``reward_training``), launch and doctor
(``ros_commands``), validate (``validate``), replay-in-sim (``replay_in_sim``) and status (``run_status``).

May import: every robot_rl package. Nothing imports the apps.
"""
