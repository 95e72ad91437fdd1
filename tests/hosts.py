"""N simulated "hosts" for tests and benches: one set of Linux namespaces per host, joined by a private link.

Each host is a ``sleep infinity`` process started with ``unshare --net --mount --uts --ipc --fork`` that holds:

- a network namespace with ``lo`` up and one interface ``eth0`` carrying ``{subnet}.{i}/24`` (i = 1, 2, ...);
- a UTS namespace with the host's own name as hostname;
- a mount namespace (private propagation) with a fresh tmpfs on ``/dev/shm``, so Fast DDS cannot take a
  shared-memory shortcut between hosts;
- an IPC namespace;
- with a clock offset (``hosts(..., clock_offsets={"server": 86400})``), a time namespace whose CLOCK_MONOTONIC and
  CLOCK_BOOTTIME run that many seconds ahead (CLOCK_REALTIME cannot be namespaced: the kernel's time namespaces
  cover the monotonic and boot-time clocks only).

Two hosts are joined by a veth pair; three or more by a bridge in a separate "switch" network namespace (one veth
per host into it). Every link is created *inside* a namespace the harness made (``nsenter`` into it, the peer placed
directly into the other one with ``ip link add ... peer name ... netns PID``), so neither the links nor their
addresses ever exist in the caller's namespace, and nothing the hosts send can leave them. When the holder processes
die, the kernel removes the namespaces and their links with them.

Commands run in a host with ``nsenter --target PID --net --mount --uts --ipc`` (:meth:`Host.popen`, :meth:`Host.run`).
``ip netns add`` is not used: it needs a shared ``/var/run/netns`` mount in the caller's mount namespace; the holder
processes need nothing outside their own namespaces.

Whatever ends the caller, nothing of the hosts outlives it. On leaving :func:`hosts` (normally, by an exception, by
SIGINT or by SIGTERM: while the hosts are up, SIGTERM is raised as :class:`robot_rl.core.interrupts.Terminated` in the main
thread, as SIGINT is as KeyboardInterrupt, through :func:`robot_rl.core.interrupts.handling`) every process started in a
host is killed with its whole session, then every other process still in a host's namespaces (a "sweeper" process
outside the hosts holds their network namespaces and kills what is in them), then the holders. Should the caller die
without a word (``kill -9``), the kernel kills the holders and every process started with :meth:`Host.popen` /
:meth:`Host.run` (``setpriv --pdeathsig KILL``, util-linux: start them from a thread that lives as long as they should,
as the parent-death signal follows the thread that started the process), and the sweeper, its stdin closed by the
caller's death, kills whatever else was in the hosts.

Plain Python, no pytest: use :func:`hosts_unavailable` to skip where the kernel or the user cannot make namespaces
(fails closed: no namespaces, no test).
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence

from robot_rl.core import interrupts

LINK = "eth0"  # each host's interface name (inside its own namespace)
BRIDGE = "br0"  # the switch namespace's bridge (three or more hosts)
_HOST_OPTIONS = ("--net", "--mount", "--uts", "--ipc")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,62}$")
_START_TIMEOUT = 10.0


def _tool(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/sbin/{name}", f"/usr/bin/{name}") if os.path.exists(p)), None)


class HostsError(RuntimeError):
    """The hosts could not be made or a command in one of them failed."""


def _orphan_guard() -> list[str]:
    """Command prefix that makes the kernel SIGKILL the command when the thread that started it dies (even by
    SIGKILL): nothing of the hosts outlives a caller that had no chance to clean up. Empty without setpriv."""
    setpriv = _tool("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def _holder_script(hostname: str | None, shm: bool) -> str:
    """sh script for a namespace holder: set it up, print its pid, then sleep forever."""
    steps = []
    if shm:
        # A fresh tmpfs on /dev/shm in this mount namespace only (propagation is private).
        steps.append("mount -t tmpfs -o mode=1777,size=512m hosts-shm /dev/shm")
    if hostname:
        steps.append(f"echo {hostname} > /proc/sys/kernel/hostname")
    steps.append(f'"{_tool("ip") or "ip"}" link set lo up')
    steps.append("echo $$")
    return " && ".join(steps) + " && exec sleep infinity"


def _start_holder(options: Sequence[str], hostname: str | None, shm: bool) -> tuple[subprocess.Popen, int]:
    """Start `unshare options --fork` holding new namespaces; return (the unshare process, the holder's pid).

    The unshare process dies with the thread that called this (`_orphan_guard`), the holder with the unshare process
    (``--kill-child``). Call it inside :func:`robot_rl.core.interrupts.uninterrupted` and keep what it returns before that
    ends: a stop request then cannot come between the start and the caller's record of it."""
    unshare = _tool("unshare")
    if unshare is None:
        raise HostsError("the unshare command (util-linux) is not installed")
    guard = _orphan_guard()
    command = [*guard, unshare, *options, "--fork", "--kill-child", "--propagation", "private",
               "sh", "-c", _holder_script(hostname, shm)]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        line = process.stdout.readline().strip()  # the holder's pid once it is set up, or EOF on failure
        if not line.isdigit():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            _, stderr = process.communicate(timeout=_START_TIMEOUT)
            raise HostsError(f"{' '.join(command[len(guard):len(guard) + 7])} failed: "
                             f"{(stderr or '').strip() or f'exit {process.returncode}'}")
        pid = int(line)
        # Belt and braces: never run ip commands against our own network namespace.
        if os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net"):
            raise HostsError("the namespace holder shares the caller's network namespace; refusing to go on")
    except BaseException:
        _stop_holder(process, None)
        raise
    return process, pid


def _stop_holder(process: subprocess.Popen, pid: int | None) -> None:
    """Kill a holder: the unshare process's whole session (it and the holder), and `pid` should it have left it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)  # its own session (start_new_session): unshare, sh / sleep
    if pid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        process.communicate(timeout=5)


def _net_namespace(process: subprocess.Popen | None, pid: int) -> str | None:
    """The network namespace a holder made (``net:[inode]``), or None once it is gone. Read through the unshare
    process while it runs (our child, not yet reaped: its pid cannot have been reused), else through `pid`."""
    try:
        if process is not None:
            return os.readlink(f"/proc/{process.pid}/ns/net") if process.poll() is None else None
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def _in_namespace(namespace: str, keep: Sequence[int] = ()) -> list[int]:
    """Pids of the processes in network namespace `namespace`, but those in `keep` (zombies have none: not listed)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in keep:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry}/ns/net") == namespace:
                    found.append(int(entry))
    return found


# The sweeper (see _Sweeper): reads pids of namespace holders from stdin, one a line, opens each one's network namespace
# (the open file keeps the namespace, and with it its identity, alive) and answers "ok"; once stdin closes, kills every
# process in those namespaces until none is left (zombies have no namespaces: not counted), then exits.
_SWEEPER = r"""
import os, signal, sys, time
namespaces, files = set(), []
for line in sys.stdin:
    try:
        files.append(os.open(f"/proc/{int(line)}/ns/net", os.O_RDONLY))
        status = os.fstat(files[-1])
        namespaces.add((status.st_dev, status.st_ino))
        print("ok", flush=True)
    except (OSError, ValueError) as error:
        print(f"error {error}", flush=True)
own = os.stat("/proc/self/ns/net")
namespaces.discard((own.st_dev, own.st_ino))
deadline = time.monotonic() + 10
while namespaces and time.monotonic() < deadline:
    left = 0
    for entry in os.listdir("/proc"):
        try:
            status = os.stat(f"/proc/{entry}/ns/net") if entry.isdigit() else None
            if status is not None and (status.st_dev, status.st_ino) in namespaces:
                left += 1
                os.kill(int(entry), signal.SIGKILL)
        except OSError:
            pass
    if not left:
        break
    time.sleep(0.02)
"""


class _Sweeper:
    """What ends every process in the hosts, even one that nothing else reaches (started in a host in a session of
    its own, left by a :meth:`Host.run`), and even if the caller dies by SIGKILL: a small process outside the hosts,
    in a session of its own and without a parent-death signal, that holds each host's network namespace and kills
    every process in them once its stdin closes (:meth:`finish`, or the kernel closing it as the caller dies)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-I", "-S", "-c", _SWEEPER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, start_new_session=True)

    def watch(self, pid: int) -> None:
        """Take on the namespaces held by `pid` (alive, and ours: a holder just started)."""
        self.process.stdin.write(f"{pid}\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline().strip()
        if answer != "ok":
            raise HostsError(f"the sweeper cannot hold the namespaces of pid {pid}: {answer or 'it ended'}")

    def finish(self, timeout: float = 15.0) -> None:
        """Kill every process in the watched namespaces (the holders too) and wait until that is done."""
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        with contextlib.suppress(OSError):
            self.process.stdout.close()


def _nsenter(pid: int, options: Sequence[str] = _HOST_OPTIONS) -> list[str]:
    nsenter = _tool("nsenter")
    if nsenter is None:
        raise HostsError("the nsenter command (util-linux) is not installed")
    return [nsenter, "--target", str(pid), *options, "--"]


def _check(pid: int, argv: Sequence[str], options: Sequence[str] = ("--net",)) -> str:
    result = subprocess.run([*_nsenter(pid, options), *argv], capture_output=True, text=True, timeout=30,
                            check=False)
    if result.returncode != 0:
        raise HostsError(f"{' '.join(argv)} (in namespace of pid {pid}) failed: {result.stderr.strip()}")
    return result.stdout


class Host:
    """One simulated host: `name` (also its hostname), `address` on `link`, `pid` of its namespace holder."""

    def __init__(self, name: str, address: str, pid: int, link: str = LINK, clock_offset_s: float = 0.0,
                 holder: subprocess.Popen | None = None):
        self.name, self.address, self.pid, self.link = name, address, pid, link
        self.clock_offset_s = clock_offset_s
        self._holder = holder  # the unshare process that holds the namespaces (pid is its child, the holder)
        self._processes: list[subprocess.Popen] = []

    def command(self, argv: Sequence[str], cwd: str | os.PathLike[str] | None = None) -> list[str]:
        """`argv` wrapped to run in this host's namespaces (in folder `cwd`: entering a mount namespace resets it),
        killed by the kernel if the thread that starts it dies (``setpriv --pdeathsig KILL``; nsenter execs `argv`,
        which keeps it)."""
        wrapped = _nsenter(self.pid, (*_HOST_OPTIONS, "--time") if self.clock_offset_s else _HOST_OPTIONS)
        if cwd is not None:
            wrapped.insert(-1, f"--wdns={os.path.abspath(cwd)}")
        return [*_orphan_guard(), *wrapped, *argv]

    def popen(self, argv: Sequence[str], env: Mapping[str, str] | None = None, **kwargs) -> subprocess.Popen:
        """Start `argv` in this host (own session, so cleanup can kill it with everything it starts). It dies with
        the thread that called this (see :meth:`command`)."""
        kwargs.setdefault("start_new_session", True)
        with interrupts.uninterrupted():  # a stop request while it starts is raised once it is in the list
            process = subprocess.Popen(self.command(argv, kwargs.get("cwd")),
                                       env=None if env is None else dict(env), **kwargs)
            self._processes.append(process)
        return process

    def run(self, argv: Sequence[str], env: Mapping[str, str] | None = None, check: bool = True,
            timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
        """Run `argv` in this host to completion (text output captured unless told otherwise)."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.command(argv, kwargs.get("cwd")), env=None if env is None else dict(env),
                              check=check,
                              timeout=timeout, **kwargs)

    def kill_processes(self) -> None:
        """Kill every process started with :meth:`popen` (their whole sessions)."""
        for process in self._processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
            with contextlib.suppress(Exception):
                process.wait(timeout=5)
        self._processes.clear()

    def pids(self, command_part: str) -> list[int]:
        """Pids of this host's processes whose command line contains `command_part` (arguments joined by spaces)."""
        namespace = _net_namespace(self._holder, self.pid)
        found = []
        for pid in _in_namespace(namespace) if namespace is not None else ():
            with contextlib.suppress(OSError):
                with open(f"/proc/{pid}/cmdline", "rb") as file:
                    if command_part in file.read().replace(b"\0", b" ").decode(errors="replace"):
                        found.append(pid)
        return found

    def kill_all(self) -> int:
        """Kill -9 every process in this host's network namespace but its holder (the host "dies" as a machine's
        power cut would take its processes: no goodbye on the wire); returns how many were killed."""
        with open(f"/proc/{self.pid}/stat") as stat:  # the holder's parent: the unshare process, in the namespace too
            keep = {self.pid, int(stat.read().rsplit(")", 1)[1].split()[1])}
        namespace = _net_namespace(self._holder, self.pid)
        killed = 0
        if namespace is not None:
            for pid in _in_namespace(namespace, tuple(keep)):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
        for process in self._processes:
            with contextlib.suppress(Exception):
                process.wait(timeout=5)
        self._processes = [p for p in self._processes if p.poll() is None]
        return killed

    def __repr__(self) -> str:
        return f"Host({self.name!r}, {self.address!r}, pid={self.pid})"


class Hosts:
    """The hosts made by :func:`hosts`: ``hosts["robot"]``, iteration in creation order, link helpers."""

    def __init__(self, hosts: Sequence[Host], switch_pid: int | None):
        self._hosts = {h.name: h for h in hosts}
        self.switch_pid = switch_pid

    def __getitem__(self, name: str) -> Host:
        return self._hosts[name]

    def __iter__(self) -> Iterator[Host]:
        return iter(self._hosts.values())

    def __len__(self) -> int:
        return len(self._hosts)

    def _host(self, host: Host | str) -> Host:
        return self._hosts[host] if isinstance(host, str) else host

    def link_down(self, host: Host | str) -> None:
        """Take `host`'s interface down (inside that host): it is cut off from all others."""
        h = self._host(host)
        _check(h.pid, [_tool("ip") or "ip", "link", "set", "dev", h.link, "down"])

    def link_up(self, host: Host | str) -> None:
        """Bring `host`'s interface back up (its address and shaping stay)."""
        h = self._host(host)
        _check(h.pid, [_tool("ip") or "ip", "link", "set", "dev", h.link, "up"])


# A ROS network choice a host's user makes in its own shell: a process started in a host gets none of the caller's.
NETWORK_VARIABLES = ("ROS_AUTOMATIC_DISCOVERY_RANGE", "FASTDDS_DEFAULT_PROFILES_FILE", "OPENSSL_CONF",
                     "ROS_STATIC_PEERS", "ROBOT_RL_NETWORK", "ROBOT_RL_CERTS", "RMW_FASTRTPS_PUBLICATION_MODE",
                     "ROBOT_RL_LINK_DOMAIN_ID")


def user_shell(**variables: str) -> dict[str, str]:
    """A user's shell on one host: the caller's environment without its ROS network choice (NETWORK_VARIABLES), the
    repository on PYTHONPATH, unbuffered output, and `variables` (the host's own: its domain, peers, certificates)."""
    env = {k: v for k, v in os.environ.items() if k not in NETWORK_VARIABLES}
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env.update(PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(p for p in (repo, env.get("PYTHONPATH", "")) if p))
    env.update(variables)
    return env


def own_machine_ids(machines: Hosts) -> None:
    """Give each host its own /etc/machine-id (bind-mounted in its own mount namespace), as real computers have:
    Fast DDS tells hosts apart by it."""
    import uuid

    for machine in machines:
        machine.run(["sh", "-c", f"echo {uuid.uuid4().hex} > /dev/shm/machine-id && "
                                 "mount --bind /dev/shm/machine-id /etc/machine-id"])


def _validate(names: Sequence[str], subnet: str) -> list[str]:
    names = list(names)
    if len(names) < 2:
        raise ValueError("hosts() needs at least two host names")
    if len(set(names)) != len(names) or not all(_NAME.match(n) for n in names):
        raise ValueError(f"host names must be distinct hostnames ([A-Za-z0-9-]): {names!r}")
    if len(names) > 250:
        raise ValueError("at most 250 hosts per subnet")
    network = ipaddress.ip_network(f"{subnet}.0/24")  # raises on a malformed prefix
    if not network.is_private:
        raise ValueError(f"subnet {subnet} must be a private range")
    return names


@contextlib.contextmanager
def hosts(names: Sequence[str], subnet: str = "10.231.0", rate_mbit: float | None = None,
          clock_offsets: Mapping[str, float] | None = None) -> Iterator[Hosts]:
    """Make one simulated host per name (see module doc) and yield a :class:`Hosts`; host i gets ``{subnet}.{i}``.

    `rate_mbit` shapes each host's outgoing traffic with a tbf qdisc; `clock_offsets` puts the named hosts' monotonic
    and boot-time clocks that many seconds ahead (:func:`time_namespaces_unavailable` says where that cannot be).
    Everything started is killed and the namespaces (with their links) are gone on exit, also on exceptions, SIGINT
    and SIGTERM (raised as KeyboardInterrupt / :class:`robot_rl.core.interrupts.Terminated` in the main thread while the
    hosts are up; a further one during the clean-up only counts as recorded, and is raised once it is done).
    """
    names = _validate(names, subnet)
    ip, tc = _tool("ip") or "ip", _tool("tc") or "tc"
    holders: list[tuple[subprocess.Popen, int]] = []
    made: list[Host] = []
    sweepers: list[_Sweeper] = []

    def clean_up() -> None:
        for h in made:
            h.kill_processes()  # what was started in the hosts, with their sessions
        for sweeper in sweepers:
            sweeper.finish()  # then anything else still in them
        for process, pid in reversed(holders):
            _stop_holder(process, pid)

    def start_holder(options: Sequence[str], hostname: str, shm: bool) -> tuple[subprocess.Popen, int]:
        with interrupts.uninterrupted():  # a stop request while it starts is raised once it is in `holders`
            holders.append(_start_holder(options, hostname=hostname, shm=shm))
        sweepers[0].watch(holders[-1][1])
        return holders[-1]

    with interrupts.handling():  # SIGTERM raises too (Terminated), so the clean-up below runs as on SIGINT
        try:
            with interrupts.uninterrupted():
                sweepers.append(_Sweeper())
            for i, name in enumerate(names, start=1):
                offset = int((clock_offsets or {}).get(name, 0))
                process, pid = start_holder((*_HOST_OPTIONS, *_time_options(offset)), hostname=name, shm=True)
                made.append(Host(name, f"{subnet}.{i}", pid, clock_offset_s=offset, holder=process))
            switch_pid = None
            if len(made) == 2:
                a, b = made
                # Created inside a's namespace, the peer placed straight into b's: the pair never exists here.
                _check(a.pid, [ip, "link", "add", a.link, "type", "veth", "peer", "name", b.link,
                               "netns", str(b.pid)])
            else:
                _, switch_pid = start_holder(("--net", "--uts"), hostname="switch", shm=False)
                _check(switch_pid, [ip, "link", "add", BRIDGE, "type", "bridge"])
                _check(switch_pid, [ip, "link", "set", BRIDGE, "up"])
                for i, h in enumerate(made, start=1):
                    port = f"port{i}"
                    _check(switch_pid, [ip, "link", "add", port, "type", "veth", "peer", "name", h.link,
                                        "netns", str(h.pid)])
                    _check(switch_pid, [ip, "link", "set", port, "master", BRIDGE])
                    _check(switch_pid, [ip, "link", "set", port, "up"])
            for h in made:
                _check(h.pid, [ip, "addr", "add", f"{h.address}/24", "dev", h.link])
                _check(h.pid, [ip, "link", "set", h.link, "up"])
                if rate_mbit is not None:
                    _check(h.pid, [tc, "qdisc", "add", "dev", h.link, "root", "tbf", "rate", f"{rate_mbit}mbit",
                                   "burst", "32kbit", "latency", "50ms"])
            _wait_links_up(made, ip)
            yield Hosts(made, switch_pid)
        except BaseException:
            with interrupts.deferred():  # a (further) stop request must not cut the clean-up short
                clean_up()
            raise
        with interrupts.uninterrupted():  # one that comes during the clean-up is raised once it is done
            clean_up()


def _wait_links_up(made: Sequence[Host], ip: str, timeout: float = 5.0) -> None:
    """Wait until every host's link reports carrier (veth/bridge ports take a moment)."""
    deadline = time.monotonic() + timeout
    for h in made:
        while "LOWER_UP" not in _check(h.pid, [ip, "-o", "link", "show", "dev", h.link]):
            if time.monotonic() > deadline:
                raise HostsError(f"link {h.link} of host {h.name} did not come up")
            time.sleep(0.05)


def _time_options(offset_s: int) -> tuple[str, ...]:
    return ("--time", "--monotonic", str(offset_s), "--boottime", str(offset_s)) if offset_s else ()


@functools.lru_cache(maxsize=1)
def time_namespaces_unavailable() -> str | None:
    """Why hosts cannot get a clock offset here (a sentence), or None if they can."""
    started: list[tuple[subprocess.Popen, int]] = []
    try:
        try:
            with interrupts.uninterrupted():  # a stop request is raised once the holder is ours to stop
                started.append(_start_holder(("--net", *_time_options(86400)), hostname=None, shm=False))
        except (HostsError, OSError, subprocess.TimeoutExpired) as error:
            return f"cannot make time namespaces (Linux >= 5.6, util-linux unshare --time): {error}"
        _, pid = started[0]
        uptime = float(_check(pid, ["cat", "/proc/uptime"], ("--time",)).split()[0])
        with open("/proc/uptime") as own:
            ahead = uptime - float(own.read().split()[0])
        return None if ahead > 80000 else "the time namespace's offset did not apply"
    except (HostsError, OSError, ValueError, subprocess.TimeoutExpired) as error:
        return f"cannot enter a time namespace: {error}"
    finally:
        for process, pid in started:
            _stop_holder(process, pid)


@functools.lru_cache(maxsize=1)
def hosts_unavailable() -> str | None:
    """Why hosts cannot be made here (a sentence for pytest.skip), or None if they can.

    Probes for real: a namespace holder with all of a host's namespaces, then a veth pair and a tbf qdisc inside it.
    """
    for tool, package in (("unshare", "util-linux"), ("nsenter", "util-linux"), ("ip", "iproute2")):
        if _tool(tool) is None:
            return f"the {tool} command ({package}) is not installed"
    ip = _tool("ip")
    started: list[tuple[subprocess.Popen, int]] = []
    try:
        try:
            with interrupts.uninterrupted():  # a stop request is raised once the holder is ours to stop
                started.append(_start_holder(_HOST_OPTIONS, hostname="probe", shm=True))
        except (HostsError, OSError, subprocess.TimeoutExpired) as error:
            return f"cannot make network/mount/UTS/IPC namespaces (needs root or CAP_SYS_ADMIN): {error}"
        _, pid = started[0]
        _check(pid, [ip, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1"])
        if _tool("tc") is None:
            return "the tc command (iproute2) is not installed"
        return None
    except (HostsError, OSError, subprocess.TimeoutExpired) as error:
        return f"cannot make veth links inside a namespace: {error}"
    finally:
        for process, pid in started:
            _stop_holder(process, pid)
