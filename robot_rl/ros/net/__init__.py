"""How ROS 2 traffic leaves a process: the environment every node starts with (``env``: domain ids, discovery range,
the host and link graphs), the network modes beyond one host (``lan``: UDP to named peers; ``secure``: TCP with TLS
and mutual certificates) and the certificates they use (``certs``). Imports no rclpy: it runs before rclpy loads.

May import: robot_rl.core only.
"""
