"""The basics every other package stands on: array and observation specs (``types``), the small protocols
(``protocols``), typed config <-> JSON (``config_io``), the msgpack codec for numpy arrays (``codec``), atomic files
(``files``), rotations and kinematics, camera frames -> policy images (``vision``), stop requests (``interrupts``),
run reports (``report``) and "did you mean" hints (``suggest``).

May import: the standard library and third-party libraries only, never another robot_rl package. Importing it has no
side effects and pulls in neither JAX, torch, MuJoCo nor rclpy.
"""
