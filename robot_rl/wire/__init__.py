"""What crosses between the robot's side and the learner's: transitions with actor ids and sequence numbers, acks and
weights stamped with their run's identity (``transport``), policy files (``policy_file``) and files offered to the
other host, verified by sha256 (``file_share``). Bytes are msgpack; nothing here is pickled or imports rclpy.

May import: robot_rl.core. The ROS 2 shell that carries these bytes is robot_rl.ros.
"""
