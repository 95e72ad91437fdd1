"""Real hardware as ROS 2 nodes: cameras, robot-arm bridge, teleop devices."""
