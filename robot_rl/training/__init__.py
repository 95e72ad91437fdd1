"""A training run, shared by the in-process `robot-rl train` and the ROS learner node: its config and the rules on
its settings (``config``, ``rules``), its run folder (``run_folder``: new or resumed, what it holds), demo
recording (``demos``), stopping and update pacing (``pacing``), the in-process trainer (``trainer``) and the
learner node's training loop (``learner_loop``: build, train, evaluate, finish, with no ROS in it).

May import: robot_rl.core, robot_rl.data, robot_rl.agents, robot_rl.wire, robot_rl.policies, robot_rl.actor,
robot_rl.learner and robot_rl.sim; never robot_rl.ros or robot_rl.apps.
"""
