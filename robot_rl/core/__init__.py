"""The basics every other package stands on: array and observation specs (``types``), the small protocols
(``protocols``), typed config <-> JSON (``config_io``), the msgpack codec for numpy arrays (``codec``), atomic files
(``files``), rotations and kinematics, camera frames -> policy images (``vision``), stop requests (``interrupts``),
run reports (``report``), progress lines for output that is not a terminal (``progress``), "did you mean" hints
(``suggest``) and what a program sets at its start (``startup``).

May import: the standard library and third-party libraries only, never another robot_rl package. Importing it has no
side effects; only ``kinematics`` loads MuJoCo, and nothing here loads JAX, torch or rclpy.
"""
