"""The learner's side: the off-policy SAC learner over demo and online replay (``learner``), the learner server that
ingests transitions, acknowledges what it persisted, checkpoints and publishes weights (``server``), and its
evaluations in the sim mirror (``evaluations``).

May import: robot_rl.core, robot_rl.data, robot_rl.agents, robot_rl.wire and robot_rl.policies; never
robot_rl.actor, robot_rl.apps or robot_rl.ros.
"""
