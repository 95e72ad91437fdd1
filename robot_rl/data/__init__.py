"""Data on disk and in memory: zarr episode datasets with intervention flags (their layout ``episode_format``, appended
by ``episode_writer``, read and verified by ``episodes``), replay that grows by appending (``replay``,
``replay_store``), observation/action sequences for base policies (``sequences``), videos and LeRobot-format
import/export.

May import: robot_rl.core only.
"""
