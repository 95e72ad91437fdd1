"""The project's ROS 2 launcher: runs a launch file's processes (robot_rl.ros.launch_file reads the file). Importable
without rclpy.

There are no wheels for ``ros2launch`` / ``launch_ros``, so ``robot-rl launch FILE`` reads a YAML launch file, starts
every process with the project's ROS environment (:func:`robot_rl.ros.net.env.ros_environment`: the network mode and its
discovery range and Fast DDS profile, the domain id, the wheels' library paths), prefixes their output with their
names and stops them all cleanly. A declared argument named ``network`` sets the network mode (``ROBOT_RL_NETWORK``:
local, lan, secure) of every process; without one, or with ``auto`` (the shipped files' default), the launcher's own
environment decides: ``ROBOT_RL_NETWORK``, else ``lan`` where the standard ROS 2 variables name other hosts, else
``local`` (:func:`robot_rl.ros.net.env.network_choice`). A declared ``allow_open_network`` set to ``true`` lets the actor
and learner nodes run ``lan`` with a real robot's file (``ROBOT_RL_ALLOW_OPEN_NETWORK``; without it they refuse).

Lifecycle (:class:`Launcher`): processes start in file order, each in its own session (a terminal Ctrl-C reaches only
the launcher). A ``preflight: true`` process (a check such as ``robot-rl doctor``) runs while the entries before it
keep running, and the entries after it start only once it has exited with status 0; any other status ends the launch
with that status, its output shown as it ran. SIGINT/SIGTERM/SIGHUP (the terminal closed) to the launcher, or the
exit of an ``on_exit: shutdown`` process, stops every process: SIGINT, then SIGTERM after ``grace_s``, then SIGKILL.
Should the launcher itself die (``kill -9``), each process gets SIGTERM from the kernel (``setpriv --pdeathsig``,
util-linux) rather than running on unsupervised. A ``respawn`` process is restarted after it exits, except when it
exits with status 2 (a usage or configuration error, which a restart would only repeat): then it ends the launch like
a required process. Exit status: 128 + the signal's number after a signal-triggered shutdown (130 SIGINT, 143 SIGTERM,
129 SIGHUP; the first signal counts, whatever else ended the launch); otherwise the status of the process that ended
the launch (1 if it died by a signal), named again on the launcher's last line; otherwise, once every process has
exited on its own, 0 if all exited 0, else 1. Children read stdin from /dev/null.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO, Any

from robot_rl.core import interrupts
from robot_rl.core.interrupts import STOP_SIGNALS
from robot_rl.ros.launch_file import (
    ALLOW_OPEN_NETWORK_ARGUMENT, NETWORK_ARGUMENT, NETWORK_AUTO, LaunchDescription, LaunchError, ProcessSpec,
    load_launch_file, parse_cli_arguments,
)

EXIT_CONFIGURATION_ERROR = 2
_COLOURS = ("36", "32", "33", "35", "34", "96", "92", "93", "95", "94")


@dataclasses.dataclass
class _Running:
    spec: ProcessSpec
    colour: str
    process: subprocess.Popen[bytes] | None = None
    readers: list[threading.Thread] = dataclasses.field(default_factory=list)
    restart_at: float | None = None  # pending respawn
    restarts: int = 0
    returncode: int | None = None
    stray_group: bool = False  # the leader exited but others in its process group still run


class Launcher:
    """Runs a LaunchDescription: starts, prefixes output, respawns and stops its processes."""

    def __init__(
        self,
        description: LaunchDescription,
        domain_id: int | None = None,
        grace_s: float = 10.0,
        term_timeout_s: float | None = None,
        stdout: IO[str] | None = None,
        stderr: IO[str] | None = None,
    ):
        from robot_rl.ros.net.env import ALLOW_OPEN_NETWORK_VARIABLE, NETWORK_VARIABLE, RosEnvironmentError, \
            open_network_allowed, ros_environment

        if grace_s < 0:
            raise LaunchError(f"grace period must be >= 0 s, got {grace_s}")
        self.description = description
        self.grace_s = grace_s
        self.term_timeout_s = min(grace_s, 5.0) if term_timeout_s is None else term_timeout_s
        base = dict(os.environ)
        network = next((a.value.strip() for a in description.arguments if a.name == NETWORK_ARGUMENT), "")
        if network not in ("", NETWORK_AUTO):  # auto: the environment decides (ROBOT_RL_NETWORK, the ROS variables)
            base[NETWORK_VARIABLE] = network
        allow_open = next((a.value for a in description.arguments if a.name == ALLOW_OPEN_NETWORK_ARGUMENT), "")
        if open_network_allowed({ALLOW_OPEN_NETWORK_VARIABLE: allow_open}):  # false leaves the variable as it is
            base[ALLOW_OPEN_NETWORK_VARIABLE] = "1"
        try:
            self.base_env = ros_environment(domain_id=domain_id, base=base)
        except RosEnvironmentError as exc:
            raise LaunchError(f"cannot set up the ROS environment: {exc}") from None
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
        self._lock = threading.Lock()
        self._colour = self.stdout.isatty()
        setpriv = shutil.which("setpriv")  # the kernel signals a child whose launcher died (even by SIGKILL)
        self._orphan_guard = (setpriv, "--pdeathsig", "TERM", "--") if setpriv else ()
        self._signals: list[int] = []
        self._nodes = [
            _Running(spec, _COLOURS[i % len(_COLOURS)]) for i, spec in enumerate(description.processes)
        ]

    # -- output
    def _emit(self, stream: IO[str], label: str, colour: str, line: str) -> None:
        prefix = f"\x1b[{colour}m[{label}]\x1b[0m " if self._colour else f"[{label}] "
        with self._lock:
            try:
                stream.write(prefix + line + "\n")
                stream.flush()
            except (OSError, ValueError):  # our own output was closed: keep the children running regardless
                pass

    def log(self, message: str) -> None:
        """Print one of the launcher's own lines, prefixed ``[launch]``."""
        self._emit(self.stdout, "launch", "1", message)

    def _pump(self, pipe: IO[bytes], stream: IO[str], label: str, colour: str) -> None:
        with pipe:
            for raw in iter(pipe.readline, b""):
                self._emit(stream, label, colour, raw.decode(errors="replace").rstrip("\r\n"))

    # -- processes
    def _start(self, node: _Running) -> None:
        spec = node.spec
        env = {**self.base_env, **spec.env}
        executable = shutil.which(spec.argv[0], path=env.get("PATH", os.defpath))
        if executable is None:  # found here, not by the orphan guard's exec after the start
            raise LaunchError(f"cannot start {spec.name} ({shlex.join(spec.argv)}): {spec.argv[0]} is not found "
                              "or not executable")
        try:
            # A project node starts with the stop signals held until its handlers are in: a stop one second into
            # a launch then ends it as cleanly as at any other moment.
            with interrupts.held_stops() if spec.holds_stops_while_starting else contextlib.nullcontext():
                process = subprocess.Popen(
                    [*self._orphan_guard, executable, *spec.argv[1:]], env=env, stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    start_new_session=True,  # own process group: a terminal Ctrl-C reaches only the launcher
                )
        except OSError as exc:
            raise LaunchError(f"cannot start {spec.name} ({shlex.join(spec.argv)}): {exc.strerror or exc}") from None
        node.process, node.returncode, node.restart_at, node.stray_group = process, None, None, False
        node.readers = [
            threading.Thread(target=self._pump, args=(pipe, stream, spec.name, node.colour), daemon=True)
            for pipe, stream in ((process.stdout, self.stdout), (process.stderr, self.stderr))
        ]
        for reader in node.readers:
            reader.start()
        self.log(f"started {spec.name} (pid {process.pid})")

    def _signal_group(self, node: _Running, sig: int) -> None:
        if node.process is None:
            return
        try:
            os.killpg(node.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _alive(self, node: _Running) -> bool:
        return node.process is not None and (node.process.poll() is None or node.stray_group)

    def _reap(self, node: _Running) -> int | None:
        """Return the exit status if the process just exited (once), else None."""
        if node.process is None or node.returncode is not None:
            if node.stray_group and node.process is not None:
                node.stray_group = _group_exists(node.process.pid)
            return None
        code = node.process.poll()
        if code is None:
            return None
        node.returncode = code
        node.stray_group = _group_exists(node.process.pid)
        for reader in node.readers:
            reader.join(timeout=0.2)  # its last lines before our "exited" line
        return code

    def _handle_signal(self, signum: int, frame: Any) -> None:
        self._signals.append(signum)

    def _install_signal_handlers(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}
        for sig in STOP_SIGNALS:
            previous[sig] = signal.signal(sig, self._handle_signal)
        return previous

    def run(self) -> int:
        """Start every process, supervise them until the launch ends and return the launcher's exit status."""
        previous = self._install_signal_handlers()
        try:
            status = self._run()
            if self._signals:  # stopped by a signal (also one during a shutdown a process started): 128 + its number
                status = 128 + self._signals[0]
            return status
        finally:
            # Whatever happened (an exception included), leave no child behind.
            for node in self._nodes:
                if self._alive(node):
                    self._signal_group(node, signal.SIGKILL)
                    if node.process is not None:
                        node.process.wait()
            for node in self._nodes:
                for reader in node.readers:
                    reader.join(timeout=1.0)
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _run(self) -> int:
        domain = self.base_env.get("ROS_DOMAIN_ID")
        self.log(f"{self.description.path} on ROS domain {domain}, {len(self._nodes)} process(es)")
        for node in self._nodes:
            if self._signals:
                break
            self._start_or_stop_all(node)
            if node.spec.preflight:
                self.log(f"waiting for {node.spec.name} (preflight) before starting the rest")
                ended = self._supervise(preflight=node)
                if ended is not None:
                    return ended
        ended = self._supervise()
        assert ended is not None
        return ended

    def _supervise(self, preflight: _Running | None = None) -> int | None:
        """Reap, respawn and end the launch as the processes exit; returns the launch's exit status, or None once
        `preflight` has exited with status 0."""
        while True:
            if self._signals:
                self.log(f"received {signal.Signals(self._signals[0]).name}, shutting down")
                self._shutdown()
                return 128 + self._signals[0]
            now = time.monotonic()
            for node in self._nodes:
                code = self._reap(node)
                if code is not None:
                    status = _describe(code)
                    if node.spec.preflight:
                        if code != 0:
                            return self._end_launch(node, f"{node.spec.name} {status}: the preflight check failed")
                        self.log(f"{node.spec.name} {status}: preflight passed")
                    elif node.spec.required:
                        return self._end_launch(node, f"{node.spec.name} {status}; it is required (on_exit: shutdown)")
                    elif node.spec.respawn and code == EXIT_CONFIGURATION_ERROR:
                        return self._end_launch(node, f"{node.spec.name} {status}, a configuration error that a "
                                                      "restart would repeat: not respawning it")
                    elif node.spec.respawn:
                        node.restarts += 1
                        node.restart_at = now + node.spec.respawn_delay
                        self.log(f"{node.spec.name} {status}; respawning in {node.spec.respawn_delay:g} s "
                                 f"(restart {node.restarts})")
                    else:
                        self.log(f"{node.spec.name} {status}")
                if node.restart_at is not None and now >= node.restart_at and not self._signals:
                    if node.stray_group and node.process is not None:
                        self.log(f"killing what {node.spec.name} left running before respawning it")
                        self._signal_group(node, signal.SIGKILL)
                    self._start_or_stop_all(node)
            if preflight is not None and preflight.returncode == 0:
                return None
            if all(n.returncode is not None and n.restart_at is None and not n.stray_group for n in self._nodes):
                failed = [n.spec.name for n in self._nodes if n.returncode != 0]
                self.log("all processes exited" + (f"; failed: {', '.join(failed)}" if failed else ""))
                return 1 if failed else 0
            time.sleep(0.05)

    def _start_or_stop_all(self, node: _Running) -> None:
        """Start `node`; if it cannot start, stop the running ones cleanly (SIGINT first) and raise."""
        try:
            self._start(node)
        except LaunchError as error:
            self.log(f"{error}; shutting down")
            self._shutdown()
            raise

    def _end_launch(self, node: _Running, reason: str) -> int:
        """`node` ended the launch: stop the others, say why once more at the end, return its exit status."""
        self.log(f"{reason}; shutting down")
        self._shutdown()
        code = node.returncode if node.returncode is not None else 1
        status = code if code > 0 else (0 if code == 0 else 1)
        outcome = "finished" if status == 0 else "failed"
        self.log(f"launch {outcome}: {node.spec.name} {_describe(code)} (exit status {status})")
        return status

    def _shutdown(self) -> None:
        """SIGINT every process group, then SIGTERM after the grace period, then SIGKILL; each stage ends early
        when everything is gone, and a further SIGINT/SIGTERM to the launcher skips to the next stage."""
        for node in self._nodes:
            node.restart_at = None
        signals_seen = len(self._signals)
        stages = ((signal.SIGINT, self.grace_s), (signal.SIGTERM, self.term_timeout_s), (signal.SIGKILL, 5.0))
        for sig, timeout in stages:
            self._log_exits()
            running = [n for n in self._nodes if self._alive(n)]
            if not running:
                self._log_exits()  # one that died between the two lines above
                return
            if sig != signal.SIGINT:
                self.log(f"{', '.join(n.spec.name for n in running)} still running: sending {sig.name}")
            for node in running:
                self._signal_group(node, sig)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and len(self._signals) == signals_seen:
                self._log_exits()
                if not any(self._alive(n) for n in self._nodes):
                    break
                time.sleep(0.02)
            signals_seen = len(self._signals)

    def _log_exits(self) -> None:
        for node in self._nodes:
            code = self._reap(node)
            if code is not None:
                self.log(f"{node.spec.name} {_describe(code)}")


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _describe(code: int) -> str:
    if code < 0:
        try:
            return f"died by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"died by signal {-code}"
    return f"exited with code {code}"




def launch(
    path: str | os.PathLike[str],
    arguments: Sequence[str] = (),
    domain_id: int | None = None,
    grace_s: float = 10.0,
    dry_run: bool = False,
    print_fn: Callable[[str], None] = print,
) -> int:
    """What ``robot-rl launch`` does: load, then print the commands (dry run) or run them; return the exit status."""
    description = load_launch_file(path, parse_cli_arguments(arguments))
    if dry_run:
        for spec in description.processes:
            print_fn(f"[{spec.name}] {spec.command()}" + ("  # preflight: the rest starts once it exits 0"
                                                          if spec.preflight else ""))
        return 0
    return Launcher(description, domain_id=domain_id, grace_s=grace_s).run()
