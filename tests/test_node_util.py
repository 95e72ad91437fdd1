"""The node main loop's callback scheduling, with a fake executor, and its stop signals (no ROS)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from robot_rl.core.interrupts import StopFlag, install_stop_signals
from robot_rl.ros.node_util import spin_callbacks


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
    """spin_once runs the next queued callback, if any, as rclpy's (Jazzy) does: a zero-timeout call right after one
    that ran a callback comes back empty (measured: its wait's ready list ended; the next call waits again)."""

    def __init__(self, host, ready: int):
        self.host = host
        self.ready = ready
        self.calls = 0
        self._ran_last = False

    def spin_once(self, timeout_sec: float) -> None:
        self.calls += 1
        if self._ran_last and timeout_sec == 0.0:
            self._ran_last = False
            return
        self._ran_last = bool(self.ready)
        if self.ready:
            self.ready -= 1
            self.host.callbacks_run += 1


class CountingHost:
    callbacks_run = 0


def test_a_counting_host_gets_every_ready_callback_between_units_of_work():
    host = CountingHost()
    executor = FakeExecutor(host, ready=10)
    assert spin_callbacks(executor, host, timeout_sec=0.05) == 10  # not one message per gradient step
    assert executor.ready == 0
    calls = executor.calls
    assert spin_callbacks(executor, host, timeout_sec=0.05) == 0 and executor.calls == calls + 1


def test_draining_is_bounded_so_work_still_happens_under_a_flood():
    host = CountingHost()
    executor = FakeExecutor(host, ready=1000)
    assert spin_callbacks(executor, host, timeout_sec=0.05, max_callbacks=64) == 64
    assert executor.ready == 1000 - 64


def test_a_host_that_does_not_count_gets_one_callback_per_unit_of_work():
    host = object()
    counter = CountingHost()
    executor = FakeExecutor(counter, ready=10)
    assert spin_callbacks(executor, host, timeout_sec=0.05) == 0
    assert executor.calls == 1 and executor.ready == 9


def test_a_range_names_its_rule_and_the_special_values_it_allows():
    from robot_rl.ros.node_util import NodeStartupError, Range, check_ranges

    episodes, wait = Range(1, also={0: "run until stopped"}), Range(above=0)
    assert [v for v in (-1, 0, 1, 7) if episodes.allows(v)] == [0, 1, 7]
    assert not wait.allows(0.0) and not wait.allows(float("nan")) and not Range().allows(float("inf"))
    assert str(Range(16, high=640, also={0: "the policy's own"})) == "in [16, 640] (0: the policy's own)"
    values = {"episodes": -1, "weight_wait_s": 0.0, "seed": 3}
    with pytest.raises(NodeStartupError) as error:
        check_ranges("actor", values.__getitem__, {"episodes": episodes, "weight_wait_s": wait, "seed": Range(0)})
    assert str(error.value) == ("invalid parameters of node actor: episodes=-1 must be >= 1 (0: run until stopped); "
                                "weight_wait_s=0.0 must be > 0") and error.value.status == 2
    check_ranges("actor", {"episodes": 0}.__getitem__, {"episodes": episodes})  # 0: its special value


@pytest.mark.parametrize("given, message", [
    ({"steps": -5}, "steps=-5 must be >= 0 (steps:=0 means run until stopped)"),
    ({"final_eval_episodes": -1}, "final_eval_episodes=-1 must be >= 1 (final_eval_episodes:=0 means no final "
                                  "evaluation)"),
    ({"critics": 0}, "invalid SACConfig: critics=0 must be >= 1"),
    ({"utd": 0}, "invalid LearnerConfig: utd=0 must be >= 1"),
    ({"batch_size": 0}, "batch_size=0 must be >= 1"),
    ({"image_size": 4}, "image_size=4 must be in [16, 640]"),
    ({"obs_mode": "rgb"}, "obs_mode='rgb' must be one of 'state', 'pixels', 'state+pixels'"),
    ({"policy": "nope"}, "policy='nope' must be one of 'plain', 'residual', 'noise'"),
    ({"residual_scale": -0.1, "policy": "residual", "base": "b"}, "residual_scale=-0.1 must be > 0"),
    ({"checkpoint_every": 0}, "checkpoint_every=0 must be >= 1"),
    ({"weights_every": 0}, "weights_every=0 must be >= 1"),
    ({"updates_per_transition": -1.0}, "updates_per_transition=-1.0 must be >= 0"),
    ({"abandon_after_s": float("nan")}, "abandon_after_s=nan must be > 0"),
])
def test_learner_parameters_are_checked_by_the_rules_of_their_in_process_twins(given, message):
    # TrainConfig / LearnerConfig / SACConfig / LearnerServer check the node's parameters: one rule, the twin's
    from robot_rl.ros.nodes.learner_params import PARAMETERS, check_server_settings, checked_train_config
    from robot_rl.ros.node_util import NodeStartupError

    settings = {name: default for name, default, _ in PARAMETERS} | given
    with pytest.raises(NodeStartupError) as error:
        check_server_settings(settings)
        checked_train_config(settings)
    assert message in str(error.value) and error.value.status == 2, str(error.value)


def test_the_learner_defaults_and_steps_0_pass_their_twins():
    from robot_rl.ros.nodes.learner_params import PARAMETERS, check_server_settings, checked_train_config

    settings = {name: default for name, default, _ in PARAMETERS}
    for steps in (0, 5):  # 0: run until stopped
        check_server_settings(settings | {"steps": steps})
        assert checked_train_config(settings | {"steps": steps}).steps == (steps or 1)


def test_a_bounded_teardown_that_hangs_prints_the_stacks_and_exits_with_the_status():
    """robot_rl.ros.node_util.bound_teardown: the learner's teardown (after its checkpoint) that hangs ends the process
    with the node's status and says where it hung, before the launcher's grace period runs out; one that finishes
    disarms it."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import sys, time
        from robot_rl.ros.node_util import bound_teardown

        disarm = bound_teardown(0.3, int(sys.argv[1]))
        if sys.argv[2] == "hang":
            time.sleep(30)  # a teardown stuck in a wait
        disarm()
        time.sleep(1.0)
        print("exited normally", file=sys.stderr)
    """)
    start = time.monotonic()
    hung = subprocess.run([sys.executable, "-c", script, "3", "hang"], capture_output=True, text=True, timeout=60)
    seconds = time.monotonic() - start
    assert hung.returncode == 3 and seconds < 10, (hung.returncode, seconds, hung.stderr)
    assert 'File "<string>", line 7 in <module>' in hung.stderr, hung.stderr  # the main thread's stuck line
    assert hung.stderr.strip().endswith("tearing down the node took over 0.3 s (stacks above): exiting with status 3")
    done = subprocess.run([sys.executable, "-c", script, "0", "done"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "exited normally\n"), done
