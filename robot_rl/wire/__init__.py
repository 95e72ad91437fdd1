"""What crosses between the robot's side and the learner's, and the bookkeeping of its delivery: the payload
envelope, sources and run ids (``protocol``); transitions with actor ids and sequence numbers, and their
acknowledgements (``transitions``); the actor's bounded outbox that re-sends until acknowledged (``outbox``); the
learner's de-duplicating inbox (``inbox``) and its write-ahead transition log (``transition_log``); weights stamped
with their run's identity (``weights``); which learner run an actor serves and whether it is heard
(``learner_contact``); policy files (``policy_file``) and files offered to the other host, verified by sha256
(``file_share``). Bytes are msgpack; nothing here is pickled or imports rclpy.

May import: robot_rl.core. The ROS 2 shell that carries these bytes is robot_rl.ros.
"""
