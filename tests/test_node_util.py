"""The node main loop's callback scheduling, with a fake executor, and its stop signals (no ROS)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from robot_rl.ros.node_util import StopFlag, install_stop_signals, spin_callbacks


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_stop_signals_set_the_flag_and_are_restored(signum):
    # SIGHUP too: closing the terminal of a node started by hand (a keyboard teleop node) must stop it cleanly
    # (the teleop node hands control back first), not kill it.
    before = signal.getsignal(signum)
    flag = StopFlag()
    restore = install_stop_signals(flag)
    try:
        os.kill(os.getpid(), signum)
        deadline = time.monotonic() + 5.0
        while not flag.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        restore()
    assert flag.is_set() and flag.signal_number == signum
    assert signal.getsignal(signum) is before


class FakeExecutor:
    """spin_once runs the next queued callback, if any (as rclpy's does with the ones ready)."""

    def __init__(self, host, ready: int):
        self.host = host
        self.ready = ready
        self.calls = 0

    def spin_once(self, timeout_sec: float) -> None:
        self.calls += 1
        if self.ready:
            self.ready -= 1
            self.host.callbacks_run += 1


class CountingHost:
    callbacks_run = 0


def test_a_counting_host_gets_every_ready_callback_between_units_of_work():
    host = CountingHost()
    executor = FakeExecutor(host, ready=10)
    assert spin_callbacks(executor, host, timeout_sec=0.0) == 10
    assert executor.ready == 0 and executor.calls == 11  # the last call found nothing ready
    assert spin_callbacks(executor, host, timeout_sec=0.0) == 0 and executor.calls == 12


def test_draining_is_bounded_so_work_still_happens_under_a_flood():
    host = CountingHost()
    executor = FakeExecutor(host, ready=1000)
    assert spin_callbacks(executor, host, timeout_sec=0.0, max_callbacks=64) == 64
    assert executor.ready == 1000 - 64


def test_a_host_that_does_not_count_gets_one_callback_per_unit_of_work():
    host = object()
    counter = CountingHost()
    executor = FakeExecutor(counter, ready=10)
    assert spin_callbacks(executor, host, timeout_sec=0.0) == 0
    assert executor.calls == 1 and executor.ready == 9
