"""Shipped robot files (``<name>.yaml``, see robot_rl.actor.robot_config) and arm models (``models/``); installed as
robot_rl.robots so ``robot:=sim_panda`` works from any folder."""
