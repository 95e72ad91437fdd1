"""Stop requests that Python would lose (robot_rl.core.interrupts) and a node start-up that would ignore them
(robot_rl.ros.node_util.watch_startup). Each case is a small subprocess: real signals, no JAX."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from ros_harness import allocate_domain_id

REPO = Path(__file__).resolve().parents[1]


def run_script(body: str, *, signum: int | None = None, after_s: float = 0.0, after_line: str | None = None,
               timeout: float = 120.0, env: dict | None = None, wrap=None) -> tuple[int, str, float]:
    """Run `body` (dedented) with the repo's Python; optionally send `signum` `after_s` after the start, or after the
    script wrote `after_line` to stderr (a loaded machine can take seconds to import). Returns (exit status, stderr,
    seconds from the signal, or from the start, to the exit). `timeout` is a failure detector only (a script whose
    stop did not end it runs for ever): a start-up of ROS and JAX on two cores at load 17 took most of 30 s."""
    argv = [sys.executable, "-c", textwrap.dedent(body)]
    process = subprocess.Popen(wrap(argv) if wrap else argv, cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, env=env)
    start = time.monotonic()
    early = ""
    if signum is not None:
        if after_line is not None:
            deadline = threading.Timer(timeout, process.kill)  # a script that never writes the line
            deadline.start()
            for line in process.stderr:
                early += line
                if line.strip() == after_line:
                    break
            else:
                raise AssertionError(f"no {after_line!r} line: {early[-2000:]}")
            deadline.cancel()
        time.sleep(after_s)
        process.send_signal(signum)
        start = time.monotonic()
    rest: list[str] = []  # read through the file object: it may hold buffered text after `after_line`
    reader = threading.Thread(target=lambda: rest.append(process.stderr.read()), daemon=True)
    reader.start()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        reader.join(5)
        raise AssertionError(f"still running after {timeout} s: {(early + ''.join(rest))[-2000:]}") from None
    reader.join(timeout)
    return process.returncode, early + "".join(rest), time.monotonic() - start


# A command's skeleton, as robot_rl.apps.console and robot_rl.apps.cli.main run one: `job()` is the work, and a stop request
# ends it with one line and 130 / 143.
COMMAND = """
    import gc, os, signal, sys, time
    from robot_rl.core import interrupts

    interrupts.install_for_process()

    def run(job):
        try:
            job()
        except KeyboardInterrupt as exc:
            interrupts.exit_stopped(exc)
        except Exception as exc:
            if interrupts.requested() is not None:
                interrupts.exit_stopped(exc)
            raise
        if interrupts.requested() is not None:
            interrupts.exit_stopped()
        print("finished", file=sys.stderr)
"""


# The next gc.collect() gets a SIGINT while a gc callback runs: its KeyboardInterrupt is "ignored" there.
EATEN_BY_GC = """
    def eats_it(phase, info):
        if phase == "start" and not eaten:
            eaten.append(1)
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):
                pass

    eaten = []
    gc.callbacks.append(eats_it)
"""


def test_an_interrupt_eaten_by_a_gc_callback_is_raised_again():
    """What JAX's _xla_gc_callback did to a Ctrl-C: "Exception ignored ... KeyboardInterrupt", then the command
    ran to its end and exited 0. Now nothing is printed for it and it is raised again where it can propagate: in the
    middle of the work, which never ends by itself (were it found only at the work's end, the script would run until
    run_script's deadline and fail)."""
    status, stderr, _ = run_script(COMMAND + EATEN_BY_GC + """

    def job():
        gc.collect()
        while True:  # the work goes on after the eaten interrupt, until something raises it
            sum(range(1000))

    run(job)
    """)
    assert (status, stderr) == (130, "interrupted\n"), (status, stderr)


def test_the_clean_up_of_a_raised_interrupt_is_not_cut_short_by_its_redelivery():
    """An interrupt eaten by a gc callback is armed to be raised again; the job's own check raises it first. The
    clean-up its handler starts then runs to its end (the redelivery cut `record`'s "kept the N finished episodes"
    line short: CI printed only `interrupted`)."""
    status, stderr, _ = run_script(COMMAND + EATEN_BY_GC + """

    def job():
        try:
            gc.collect()
            interrupts.check()  # the job's safe point, before the redelivery is due
        except KeyboardInterrupt:
            time.sleep(0.1)  # the clean-up: 20 redelivery periods
            print("kept what was done", file=sys.stderr)
            raise

    run(job)
    """)
    assert (status, stderr) == (130, "kept what was done\ninterrupted\n"), (status, stderr)


def test_an_interrupt_turned_into_another_exception_still_stops_the_command():
    """A ctypes argument conversion turns a KeyboardInterrupt into ctypes.ArgumentError (at 0.85 s, `record`
    exited 1 with its traceback): a stop request was recorded, so the command ends as stopped."""
    status, stderr, _ = run_script(COMMAND + """
    import ctypes

    class Interrupted:
        @classmethod
        def from_param(cls, value):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass
            return 0

    def job():
        function = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(lambda x: x)
        function.argtypes = [Interrupted]
        function(1)

    run(job)
    """)
    assert (status, stderr) == (143, "terminated\n"), (status, stderr)


def test_an_interrupt_during_an_import_waits_for_the_import_to_finish(tmp_path):
    """jaxlib died with a segmentation fault when Ctrl-C interrupted its extension module's initialisation: an
    interrupt that comes during an import is raised as soon as the import is done, not inside it: in the job that
    follows the import, which never ends by itself (were it found only at the job's end, the script would run until
    run_script's deadline and fail)."""
    (tmp_path / "slow_module.py").write_text(textwrap.dedent("""
        import os, signal, sys, time
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:  # the module goes on initialising
            sum(range(100))
        print("imported fully", file=sys.stderr)
    """))
    status, stderr, _ = run_script(COMMAND + f"""
    sys.path.insert(0, {str(tmp_path)!r})

    def job():
        import slow_module  # noqa: F401
        while True:  # the rest of the job, until something raises the interrupt
            time.sleep(0.05)

    run(job)
    """)
    assert (status, stderr) == (130, "imported fully\ninterrupted\n"), (status, stderr)


@pytest.mark.parametrize("where", ["_chunks_for", "_append"])
def test_an_interrupt_while_an_episode_is_committed_comes_once_it_is_committed(tmp_path, where):
    """`record` stopped by SIGINT 2.6 s in (CI) left its dataset's `.record.zarr.creating-<pid>` staging folder: the
    interrupt landed while the first episode created the dataset (zarr writes on a background thread, which went on
    after the clean-up). Now a signal while the dataset is created (`_chunks_for`) or an episode is written
    (`_append`) is raised once the episode is committed: the dataset holds it and nothing else is left."""
    status, stderr, _ = run_script(COMMAND + f"""
    import numpy as np
    from robot_rl.data import episode_writer
    from robot_rl.core.types import ArraySpec

    original = getattr(episode_writer, {where!r})

    def interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return original(*args, **kwargs)

    setattr(episode_writer, {where!r}, interrupted)
    writer = episode_writer.EpisodeWriter({str(tmp_path / "demos.zarr")!r}, {{"state": ArraySpec((3,), "float32")}},
                                          ArraySpec((2,), "float32"), fps=10, task="Test-v0")

    def job():
        try:
            writer.add_step({{"state": np.zeros(3, np.float32)}}, np.zeros(2, np.float32), 0.0, False, False)
            writer.end_episode({{"state": np.ones(3, np.float32)}}, success=True, seed=0)
            print("not stopped", file=sys.stderr)
        except KeyboardInterrupt:
            print(f"stopped with {{writer.num_episodes}} episodes", file=sys.stderr)
            raise

    run(job)
    """)
    assert (status, stderr) == (130, "stopped with 1 episodes\ninterrupted\n"), (status, stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demos.zarr"]
    from robot_rl.data.episodes import EpisodeDataset

    assert EpisodeDataset(tmp_path / "demos.zarr").num_episodes == 1


def test_a_signal_after_the_command_is_done_still_ends_it_as_stopped():
    """The command did its work; the signal came while the interpreter shut down: status 143, one line."""
    status, stderr, _ = run_script(COMMAND + """
    import atexit

    run(lambda: None)
    interrupts.record_only()
    atexit.register(lambda: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(0.2)))
    """)
    assert (status, stderr) == (143, "finished\nterminated\n"), (status, stderr)


def test_a_signal_before_the_command_s_own_handling_still_ends_it_as_stopped():
    """The `robot-rl` entry point: a SIGTERM that lands in the command's first lines, before its own try block (a
    loaded machine delivered one there), is one line and status 143, not a traceback."""
    status, stderr, _ = run_script("""
    import os, signal, sys, time, types

    def first_lines():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(2)
        print("not stopped", file=sys.stderr)

    sys.modules["robot_rl.apps.cli"] = types.SimpleNamespace(main=first_lines)
    from robot_rl.apps import console

    console.main()
    """)
    assert (status, stderr) == (143, "terminated\n"), (status, stderr)


def test_a_node_start_up_that_ignores_signals_ends_within_the_grace_period():
    """A start-up stuck where no Python handler runs, or busy for long (here: a lock never released, which a stop
    flag cannot end), ignored SIGINT and SIGTERM until the launcher's SIGKILL; now SIGINT ends it (once
    STARTUP_STOP_GRACE_S has passed) with one line and status 130: the stuck start-up never ends by itself, so the stop
    is what ended it (run_script's deadline is a liveness bound only). A start-up that finishes once the stop came is
    not cut short."""
    from ros_harness import private_network_or_skip

    from robot_rl.ros.net.env import ros_environment

    body = """
    import sys, threading, time
    from robot_rl.core import interrupts
    from robot_rl.ros.node_util import run_node

    class Host:
        def __init__(self, stuck):
            import rclpy
            if stuck:
                print("building", file=sys.stderr, flush=True)
                lock = threading.Lock()
                lock.acquire()
                lock.acquire()  # never returns; a signal handler that only sets a flag does not end it
            self.node = rclpy.create_node("stand_in")
            print("building", file=sys.stderr, flush=True)
            while interrupts.requested() is None:  # the start-up's last step goes on until the stop has come
                time.sleep(0.01)

        def destroy(self):
            self.node.destroy_node()

    sys.exit(run_node(lambda: Host(sys.argv[1] == "stuck"), sys.argv, "stand_in"))
    """
    env = ros_environment(domain_id=allocate_domain_id())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)

    def wrap_with(mode):
        return lambda argv: private_network_or_skip([*argv, mode])

    status, stderr, _ = run_script(body, signum=signal.SIGINT, after_line="building", after_s=1.0, env=env,
                                   wrap=wrap_with("stuck"))
    assert "building" in stderr and status == 130 and stderr.strip().splitlines()[-1] == "interrupted", stderr
    assert "Traceback" not in stderr
    # A signal while a start-up runs that then finishes: the node starts, sees its stop flag, stops cleanly (status 0).
    status, stderr, _ = run_script(body, signum=signal.SIGINT, after_line="building", env=env,
                                   wrap=wrap_with("quick"))
    assert status == 0 and "interrupted" not in stderr and "Traceback" not in stderr, (status, stderr)


HELD_STOP_CHILD = """
import signal, sys
from robot_rl.core import interrupts
sys.stdin.readline()  # the parent sends this line once its SIGINT is sent: the handler below comes later
received = []
signal.signal(signal.SIGINT, lambda number, frame: received.append(number))
interrupts.accept_held_stops()
print("received", received, flush=True)
"""


@pytest.mark.parametrize("held", [True, False])
def test_a_stop_while_a_child_starts_waits_for_its_handlers_when_held(held):
    """The launcher starts a project node with the stop signals held: a SIGINT that comes while the child's
    interpreter is still starting (sent here as soon as Popen returns, long before its first import) is handled by
    the child's own handler once it is in; not held, the same SIGINT ends the child during its start-up (the child
    installs its handler only after a line the parent sends once the signal is sent)."""
    from contextlib import nullcontext

    from robot_rl.core import interrupts

    with interrupts.held_stops() if held else nullcontext():
        child = subprocess.Popen([sys.executable, "-c", HELD_STOP_CHILD], cwd=REPO, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.kill(child.pid, signal.SIGINT)
    out, err = child.communicate("go\n", timeout=120)
    if held:
        assert (child.returncode, out, err) == (0, f"received [{int(signal.SIGINT)}]\n", ""), (out, err)
    else:
        assert child.returncode != 0 and "received" not in out, (child.returncode, out, err)
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, []), "the caller's mask is restored"


def test_the_launcher_holds_stops_only_for_the_projects_nodes():
    from robot_rl.ros.launch_file import ProcessSpec

    assert ProcessSpec("learner", (sys.executable, "-m", "robot_rl.ros.nodes.learner_node")).holds_stops_while_starting
    assert not ProcessSpec("driver", (sys.executable, "-m", "their_driver.node")).holds_stops_while_starting
    assert not ProcessSpec("camera", ("/usr/bin/camera_driver", "-m", "robot_rl.x")).holds_stops_while_starting
