"""The ROS 2 shell: environment bootstrap, msg <-> numpy conversions, QoS profiles and topic names.

Only modules under robot_rl/ros/ (and node modules) import rclpy. ``robot_rl.ros.env`` and ``robot_rl.ros.qos``'s topic
names import without it; import ``robot_rl.ros.convert`` after :func:`robot_rl.ros.env.ensure_ros_environment`.
"""
