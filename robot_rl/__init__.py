"""robot_rl: ROS 2-native real-world robot reinforcement learning.

The packages by role, each importing only those below it (tests/test_layout.py checks it): ``core`` <- ``data``
<- ``agents`` <- ``wire`` <- ``policies`` <- ``actor``, ``learner`` <- ``sim`` <- ``training`` <- ``ros`` <-
``drivers`` <- ``apps``; the actor and the learner never import each other.
Importing robot_rl has no side effects; programs call :func:`robot_rl.core.startup.program_start`.
"""

__version__ = "0.1.0"
