"""The ROS 2 shell: msg <-> numpy conversions (``convert``), QoS profiles and topic names (``qos``), what every node
shares (``node_util``, ``ros_args``), the launcher (``launch``, ``launch_file``), ``robot-rl doctor``, the nodes
(``nodes/``) and the network modes (``net/``).

Only modules under robot_rl/ros/ (and node modules in drivers/ and sim/) import rclpy. ``robot_rl.ros.net.env`` and
``robot_rl.ros.qos``'s topic names import without it; import ``robot_rl.ros.convert`` after
:func:`robot_rl.ros.net.env.ensure_ros_environment`.

May import: every robot_rl package except robot_rl.apps.
"""
