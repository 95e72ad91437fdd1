"""The robot's side: the actor (policy + human takeover + safety, ``session``), the one episode loop
(``runner``: reset -> fresh frame -> act -> command -> transition -> end), the policy slot that loads and swaps
policies (``policy_slot``), the safety layer, robot files (``robot_config``), robot I/O, sensor adapters, teleop
mapping and what an episode leaves behind (``outputs``). Pure Python: the ROS actor node and the in-process tools
drive the same objects.

May import: robot_rl.core, robot_rl.data, robot_rl.agents, robot_rl.wire and robot_rl.policies; never
robot_rl.learner, robot_rl.sim, robot_rl.apps or robot_rl.ros.
"""
