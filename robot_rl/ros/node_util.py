"""Small helpers shared by the project's ROS 2 node modules. Importable without rclpy (rclpy is imported lazily).

- :func:`relative_name`: the project's topic constants are absolute (``/tcp_pose``); nodes create their publishers and
  subscriptions with the relative form so ``--ros-args -r __ns:=/robot1`` namespaces every stream of a node.
- :func:`clock_seconds`: a node clock's "now" as float seconds (what robot_rl.ros.convert stamps take).
- :func:`install_stop_signals` / :func:`spin_until_stopped`: SIGINT / SIGTERM set a flag and the spin loop, which
  wakes at least every ``period_s``, returns; the caller then destroys its node and shuts rclpy down. Use with
  ``rclpy.init(signal_handler_options=SignalHandlerOptions.NO)`` so rclpy does not install its own handlers.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable


def relative_name(name: str) -> str:
    """`/camera/front/image_raw` -> `camera/front/image_raw` (resolved against the node's namespace)."""
    relative = name.lstrip("/")
    if not relative:
        raise ValueError(f"topic or service name {name!r} is empty")
    return relative


def clock_seconds(clock) -> float:
    """Float seconds of `clock.now()` (an rclpy Clock; ROS time or system time)."""
    return clock.now().nanoseconds * 1e-9


class StopFlag:
    """Set by a signal handler (or by hand); a spin loop polls it."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal_number: int | None = None

    def set(self, signal_number: int | None = None) -> None:
        if self.signal_number is None:
            self.signal_number = signal_number
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()


def install_stop_signals(
    flag: StopFlag, signals: Iterable[int] = (signal.SIGINT, signal.SIGTERM)
) -> Callable[[], None]:
    """Make each of `signals` set `flag`; return a function that restores the previous handlers (main thread only)."""
    previous = {}
    for number in signals:
        previous[number] = signal.signal(number, lambda received, _frame: flag.set(received))

    def restore() -> None:
        for number, handler in previous.items():
            signal.signal(number, handler)

    return restore


def spin_until_stopped(executor, flag: StopFlag, period_s: float = 0.1) -> None:
    """Spin `executor` (rclpy Executor with the node added) until `flag` is set or the rclpy context shuts down."""
    context = executor.context
    while not flag.is_set() and context.ok():
        executor.spin_once(timeout_sec=period_s)
