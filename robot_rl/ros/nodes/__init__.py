"""The robot_rl ROS 2 nodes, each a thin shell over pure objects: the actor node (``actor_node``, its parameters in
``actor_params``), the learner node (``learner_node``, ``learner_params``), the reward-classifier node, the file-share
node and the learner link between a host's own graph and the link graph (``link_node``). Run one with
``python -m robot_rl.ros.nodes.NAME`` or through ``robot-rl launch``.

May import: robot_rl.ros and everything below it (core, data, agents, wire, policies, actor, learner, sim); never
robot_rl.apps.
"""
