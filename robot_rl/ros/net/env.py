"""Environment bootstrap for ROS 2 processes from the pip wheels. Importable without rclpy.

Every ROS process of the project gets the same environment (see /work/shared/ROS2-NOTES.md):

- ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` (``SUBNET`` on the lan mode's link) unless the caller chose a range:
  DDS discovery otherwise multicasts on every interface, and this workplace forbids traffic to non-loopback addresses;
- ``ROS_DOMAIN_ID``: the one asked for, else the one already set, else 0;
- ``RMW_IMPLEMENTATION=rmw_fastrtps_cpp`` (the only middleware shipped as a wheel);
- ``FASTDDS_DEFAULT_PROFILES_FILE``: the shipped profile (big shared-memory segment, UDPv4 on 127.0.0.1 only,
  builtin transports off);
- the network mode (:func:`network_choice`, :data:`NETWORK_MODES`): ``ROBOT_RL_NETWORK`` where it is set, else ``lan``
  where the standard ROS 2 variables reach other hosts (``ROS_STATIC_PEERS`` not empty, or
  ``ROS_AUTOMATIC_DISCOVERY_RANGE`` set to ``SUBNET`` or ``SYSTEM_DEFAULT``), else ``local``. Nothing is written in
  ``ROBOT_RL_NETWORK`` for a mode so derived: a child process inherits the same standard variables (a derived ``lan``
  writes ``SUBNET`` where the range was unset) and derives the same mode, and every node's summary line
  (:func:`network_summary`) says where it came from (``network lan (from ROS_STATIC_PEERS /
  ROS_AUTOMATIC_DISCOVERY_RANGE=SUBNET; ROBOT_RL_NETWORK overrides): ...``). ``ROBOT_RL_NETWORK=local`` with such
  variables keeps ``local`` and the summary says they are ignored (the shipped profile keeps UDP on 127.0.0.1). The
  modes: ``local`` (everything above, every node on one host), ``lan`` (nodes on several hosts: shared memory between
  processes of one host and UDP between hosts, the weights and transitions paced to the link ``ROBOT_RL_LINK_MBIT`` by
  a generated profile (:mod:`robot_rl.ros.net.lan`), discovery range ``SUBNET`` unless ``ROS_AUTOMATIC_DISCOVERY_RANGE``
  says otherwise, peers named by ``ROS_STATIC_PEERS``) or ``secure`` (a network not trusted, or routed between sites:
  TLS over one TCP port of the learner's host, both sides verify the other's certificate against the run's CA;
  ``ROBOT_RL_CERTS`` names this host's folder from ``robot-rl certs``; the Fast DDS profile and OpenSSL config
  generated for it (:mod:`robot_rl.ros.net.secure`) become ``FASTDDS_DEFAULT_PROFILES_FILE`` and ``OPENSSL_CONF``, and the
  discovery range ``SYSTEM_DEFAULT``, so the profile decides); a ``FASTDDS_DEFAULT_PROFILES_FILE`` the user set (any
  file but the shipped one and the generated ones) wins over ``local`` and ``lan``, and ``secure`` refuses one, as it
  refuses an ``OPENSSL_CONF`` of the user's (either would take certificate verification away);
- the graph (:data:`GRAPHS`): in ``lan`` and ``secure`` each host has two. ``host``, every node but the learner (the
  drivers, the actor, the teleop: what the launcher gives every process), keeps to the host: the shipped profile on
  ``ROS_DOMAIN_ID``, discovery ``LOCALHOST`` (in lan, unless the user chose a range), and no other host can reach
  it. ``link``, the learner and robot_rl.ros.nodes.link_node's network half, gets the mode's profile and discovery (above) on
  the link domain
  (:func:`link_domain_id`: ``ROBOT_RL_LINK_DOMAIN_ID``, else the one after ``ROS_DOMAIN_ID``). A process picks its
  graph when it sets itself up (``ensure_ros_environment(graph="link")``); in ``local`` both are one graph;
- ``LD_LIBRARY_PATH`` with the venv's ``lib/`` and ``site-packages/ros_*.libs`` plus
  ``_ROS_WHEELS_BOOTSTRAP_COMPLETE=1``, so the ``ros_wheels_bootstrapper`` .pth does not re-execute the child;
- ``AMENT_PREFIX_PATH`` starting with the venv prefix (package look-ups).

Use :func:`ros_environment` for child processes and :func:`ensure_ros_environment` in-process before importing rclpy.
:func:`private_network_command` wraps a command in a private network namespace (only ``lo``) with its own IPC namespace
and /dev/shm, and refuses (raises RosEnvironmentError with the reason) where the kernel does not allow one.
"""

from __future__ import annotations

import functools
import importlib.machinery
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

INSTALL_HINT = "install with pip install -e '.[ros]'"
RMW_IMPLEMENTATION = "rmw_fastrtps_cpp"
DEFAULT_DISCOVERY_RANGE = "LOCALHOST"
DISCOVERY_RANGES = ("OFF", "LOCALHOST", "SUBNET", "SYSTEM_DEFAULT")
# Fast DDS derives UDP ports from the domain id; 232 is the largest id that keeps them valid.
MAX_DOMAIN_ID = 232
FASTDDS_PROFILE_PATH = Path(__file__).resolve().with_name("fastdds_shm.xml")
NETWORK_VARIABLE = "ROBOT_RL_NETWORK"
NETWORK_MODES = {
    "local": "every node on this host: loopback discovery and the shipped shared-memory profile",
    "lan": "nodes on several hosts: shared memory on a host, UDP between hosts (weights and transitions paced to "
           "ROBOT_RL_LINK_MBIT), discovery SUBNET unless ROS_AUTOMATIC_DISCOVERY_RANGE says otherwise, peers from "
           "ROS_STATIC_PEERS",
    "secure": "nodes on several hosts over a network not trusted: TLS with the run's certificates (ROBOT_RL_CERTS, "
              "made by robot-rl certs) to one TCP port of the learner's host; shared memory within a host",
}
LAN_DISCOVERY_RANGE = "SUBNET"
# The two graphs of a host in the lan and secure modes: "host", the host's own nodes (drivers, actor, teleop, safety:
# shared memory and 127.0.0.1 only, on ROS_DOMAIN_ID), and "link", the learner link between hosts (the learner and
# the link process's network half, robot_rl.ros.nodes.link_node, on the link domain). In the local mode both are the same graph.
GRAPHS = ("host", "link")
LINK_DOMAIN_VARIABLE = "ROBOT_RL_LINK_DOMAIN_ID"
_RANGE_WRITTEN = "_ROBOT_RL_HOST_DISCOVERY_RANGE"  # set where ROS_AUTOMATIC_DISCOVERY_RANGE is ours, not the user's
# Discovery ranges that reach other hosts: set explicitly, without ROBOT_RL_NETWORK, they make the mode lan.
WIDE_DISCOVERY_RANGES = ("SUBNET", "SYSTEM_DEFAULT")
CERTS_VARIABLE = "ROBOT_RL_CERTS"
# rmw_fastrtps leaves a profile's discovery settings alone only with SYSTEM_DEFAULT (LOCALHOST replaces the
# metatraffic locators, SUBNET / LOCALHOST add ROS_STATIC_PEERS as UDP peers).
SECURE_DISCOVERY_RANGE = "SYSTEM_DEFAULT"
BOOTSTRAP_FLAG = "_ROS_WHEELS_BOOTSTRAP_COMPLETE"
# The variables rclpy / rmw read when a context or participant is created: they must agree with ours.
# OPENSSL_CONF: Fast DDS's OpenSSL reads it when the secure mode's TLS transport is made.
_CONFIG_KEYS = ("RMW_IMPLEMENTATION", "ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_DOMAIN_ID", "FASTDDS_DEFAULT_PROFILES_FILE",
                "OPENSSL_CONF")
_FASTDDS_NAMESPACE = "{http://www.eprosima.com}"
_LOOPBACK_ADDRESSES = {"127.0.0.1", "localhost", "lo"}


class RosEnvironmentError(RuntimeError):
    """The ROS 2 environment cannot be set up; the message names the problem and the fix."""


@dataclass(frozen=True)
class RosWheelPaths:
    """Where the ROS 2 wheels live: the venv prefix, its site-packages and the shared-library folders."""

    prefix: Path
    site_packages: Path
    library_dirs: tuple[Path, ...]


@dataclass(frozen=True)
class FastDdsProfileSummary:
    """What a Fast DDS XML profile configures, as checked by :func:`check_fastdds_profile`."""

    path: Path
    shm_segment_size: int
    shm_max_message_size: int
    udp_allowlist: tuple[str, ...]
    builtin_transports: bool


def find_ros_wheels() -> RosWheelPaths:
    """Locate the installed ROS 2 wheels without importing rclpy; raise RosEnvironmentError if they are missing."""
    # PathFinder searches sys.path without importing and without trusting an rclpy already in sys.modules.
    spec = importlib.machinery.PathFinder.find_spec("rclpy")
    if spec is None or not spec.submodule_search_locations:
        raise RosEnvironmentError(f"the ROS 2 wheels (rclpy) are not installed: {INSTALL_HINT}")
    site_packages = Path(next(iter(spec.submodule_search_locations))).resolve().parent
    # <prefix>/lib/pythonX.Y/site-packages: the wheels put their shared libraries into <prefix>/lib.
    prefix = site_packages.parents[2]
    if not (prefix / "lib" / "librmw_fastrtps_cpp.so").exists():
        raise RosEnvironmentError(
            f"rclpy is installed in {site_packages} but the Fast DDS middleware (ros-rmw-fastrtps-cpp) is not: "
            + INSTALL_HINT
        )
    library_dirs = [prefix / "lib", *sorted(p for p in site_packages.glob("ros_*.libs") if p.is_dir())]
    return RosWheelPaths(prefix=prefix, site_packages=site_packages, library_dirs=tuple(library_dirs))


@functools.lru_cache(maxsize=8)
def _check_fastdds_profile_cached(path: Path, mtime_ns: int) -> FastDdsProfileSummary:
    try:
        root = ElementTree.parse(path).getroot()
    except ElementTree.ParseError as error:
        raise RosEnvironmentError(f"Fast DDS profile {path} is not valid XML: {error}") from error
    if root.tag != f"{_FASTDDS_NAMESPACE}dds":
        raise RosEnvironmentError(
            f"Fast DDS profile {path}: root element is {root.tag!r}, expected <dds> in {_FASTDDS_NAMESPACE}"
        )
    ns = _FASTDDS_NAMESPACE
    descriptors = {
        (d.findtext(f"{ns}transport_id") or "").strip(): d
        for d in root.iter(f"{ns}transport_descriptor")
    }
    participants = [p for p in root.iter(f"{ns}participant") if p.get("is_default_profile") == "true"]
    if len(participants) != 1:
        raise RosEnvironmentError(
            f"Fast DDS profile {path}: expected one participant with is_default_profile=\"true\", "
            f"found {len(participants)}"
        )
    rtps = participants[0].find(f"{ns}rtps")
    if rtps is None:
        raise RosEnvironmentError(f"Fast DDS profile {path}: the default participant has no <rtps> element")
    builtin = (rtps.findtext(f"{ns}useBuiltinTransports") or "true").strip().lower() != "false"
    if builtin:
        raise RosEnvironmentError(
            f"Fast DDS profile {path}: <useBuiltinTransports> must be false (builtin UDP listens on every interface)"
        )
    used = [(t.text or "").strip() for t in rtps.iter(f"{ns}transport_id")]
    shm_segment = shm_max = 0
    allowlist: list[str] = []
    for transport_id in used:
        descriptor = descriptors.get(transport_id)
        if descriptor is None:
            raise RosEnvironmentError(f"Fast DDS profile {path}: participant uses undefined transport {transport_id!r}")
        kind = (descriptor.findtext(f"{ns}type") or "").strip()
        if kind == "SHM":
            shm_segment = int(descriptor.findtext(f"{ns}segment_size") or 0)
            shm_max = int(descriptor.findtext(f"{ns}maxMessageSize") or 0)
        elif kind in ("UDPv4", "UDPv6", "TCPv4", "TCPv6"):
            addresses = [(a.text or "").strip() for a in descriptor.iter(f"{ns}address")]
            addresses += [(i.get("name") or "").strip() for i in descriptor.iter(f"{ns}interface")]
            if not addresses or any(a not in _LOOPBACK_ADDRESSES for a in addresses):
                raise RosEnvironmentError(
                    f"Fast DDS profile {path}: {kind} transport {transport_id!r} must be restricted to 127.0.0.1, "
                    f"got {addresses or 'no allowlist'}"
                )
            allowlist += addresses
        else:
            raise RosEnvironmentError(f"Fast DDS profile {path}: transport {transport_id!r} has unknown type {kind!r}")
    return FastDdsProfileSummary(
        path=path, shm_segment_size=shm_segment, shm_max_message_size=shm_max,
        udp_allowlist=tuple(allowlist), builtin_transports=builtin,
    )


def check_fastdds_profile(path: str | os.PathLike[str] = FASTDDS_PROFILE_PATH) -> FastDdsProfileSummary:
    """Parse a Fast DDS XML profile and check it keeps traffic on loopback; raise RosEnvironmentError if not."""
    resolved = Path(path).resolve()
    if not resolved.is_file():
        raise RosEnvironmentError(
            f"Fast DDS profile {resolved} does not exist (is robot_rl.ros package data installed?)"
        )
    return _check_fastdds_profile_cached(resolved, resolved.stat().st_mtime_ns)


def _resolve_domain_id(domain_id: int | None, base: Mapping[str, str]) -> int:
    if domain_id is None:
        raw = base.get("ROS_DOMAIN_ID", "").strip()
        if not raw:
            return 0
        try:
            domain_id = int(raw)
        except ValueError:
            raise RosEnvironmentError(f"ROS_DOMAIN_ID={raw!r} is not an integer") from None
    if isinstance(domain_id, bool) or not isinstance(domain_id, int) or not 0 <= domain_id <= MAX_DOMAIN_ID:
        raise RosEnvironmentError(f"ROS domain id must be an integer in [0, {MAX_DOMAIN_ID}], got {domain_id!r}")
    return domain_id


def _prepend_paths(existing: str | None, new: Sequence[Path | str]) -> str:
    parts = [str(p) for p in new]
    parts += [p for p in (existing or "").split(os.pathsep) if p and p not in parts]
    return os.pathsep.join(parts)


def other_host_variables(base: Mapping[str, str]) -> tuple[str, ...]:
    """The standard ROS 2 variables in `base` that reach other hosts: ROS_STATIC_PEERS (non-empty) and a discovery
    range of SUBNET or SYSTEM_DEFAULT, as ``NAME`` / ``NAME=VALUE``."""
    named = ("ROS_STATIC_PEERS",) if base.get("ROS_STATIC_PEERS", "").strip() else ()
    discovery = base.get("ROS_AUTOMATIC_DISCOVERY_RANGE", "").strip()
    wide = discovery in WIDE_DISCOVERY_RANGES
    return named + ((f"ROS_AUTOMATIC_DISCOVERY_RANGE={discovery}",) if wide else ())


def network_choice(base: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(mode, why) for `base` (default: os.environ): ``ROBOT_RL_NETWORK`` if set, else ``lan`` where the standard
    variables reach other hosts (:func:`other_host_variables`; why names them), else ``local`` (why: ``""``)."""
    base = os.environ if base is None else base
    mode = base.get(NETWORK_VARIABLE, "").strip()
    if not mode:
        named = other_host_variables(base)
        return ("lan", f"from {' / '.join(named)}; {NETWORK_VARIABLE} overrides") if named else ("local", "")
    if mode not in NETWORK_MODES:
        raise RosEnvironmentError(f"{NETWORK_VARIABLE}={mode!r} is not a network mode: "
                                  + "; ".join(f"{name} ({what})" for name, what in NETWORK_MODES.items()))
    return mode, ""


ALLOW_OPEN_NETWORK_VARIABLE = "ROBOT_RL_ALLOW_OPEN_NETWORK"
LAN_WARNING = ("network lan is open: any host that reaches this network can read the learner link (transitions, "
               "weights) and publish to it (weights the actor runs, acknowledgements, files); the robot's own "
               "topics stay on this host; use it on a network you trust, or ROBOT_RL_NETWORK=secure "
               "(docs/two_machines.md)")
"""The warning every node logs at start-up in the lan mode."""


def open_network_allowed(base: Mapping[str, str] | None = None) -> bool:
    """Whether ROBOT_RL_ALLOW_OPEN_NETWORK (a launch's ``allow_open_network:=true``) accepts lan with a real robot."""
    base = os.environ if base is None else base
    return base.get(ALLOW_OPEN_NETWORK_VARIABLE, "").strip().lower() in ("1", "true", "yes")


def open_network_problem(robot_is_sim: bool, base: Mapping[str, str] | None = None) -> str | None:
    """Why a node driving a robot file may not start in the lan mode (None when it may): with a real robot's file
    (not ``sim: true``) lan takes an explicit ROBOT_RL_ALLOW_OPEN_NETWORK, since any host on the network could then
    command the robot."""
    mode, why = network_choice(base)
    if mode != "lan" or robot_is_sim or open_network_allowed(base):
        return None
    return (f"network lan ({why or NETWORK_VARIABLE + '=lan'}) with a real robot's file: any host on the network could "
            f"send this robot the weights it runs; to accept that, launch with allow_open_network:=true "
            f"({ALLOW_OPEN_NETWORK_VARIABLE}=1), else use network:=secure (docs/two_machines.md)")


def link_domain_id(base: Mapping[str, str] | None = None) -> int:
    """The learner link's domain in the lan and secure modes: ROBOT_RL_LINK_DOMAIN_ID where it is set, else the one
    after ROS_DOMAIN_ID (every host that sets the same ROS_DOMAIN_ID derives the same link domain)."""
    base = os.environ if base is None else base
    raw = base.get(LINK_DOMAIN_VARIABLE, "").strip()
    if raw:
        try:
            return _resolve_domain_id(int(raw), {})
        except (ValueError, RosEnvironmentError):
            raise RosEnvironmentError(f"{LINK_DOMAIN_VARIABLE}={raw!r} must be a ROS domain id, an integer in "
                                      f"[0, {MAX_DOMAIN_ID}], other than ROS_DOMAIN_ID") from None
    return (_resolve_domain_id(None, base) + 1) % (MAX_DOMAIN_ID + 1)


def network_mode(base: Mapping[str, str] | None = None) -> str:
    """The network mode of `base` (default: os.environ): ``ROBOT_RL_NETWORK``, else from the standard variables
    (:func:`network_choice`)."""
    return network_choice(base)[0]


def _user_profile(base: Mapping[str, str]) -> Path | None:
    """The Fast DDS profile the user chose: FASTDDS_DEFAULT_PROFILES_FILE naming any file but the shipped one and
    the secure mode's generated ones (a child process inherits those from its parent)."""
    from robot_rl.ros.net.lan import is_lan_profile
    from robot_rl.ros.net.secure import is_generated_file

    given = base.get("FASTDDS_DEFAULT_PROFILES_FILE", "").strip()
    if not given or Path(given).resolve() == FASTDDS_PROFILE_PATH:
        return None
    if not Path(given).is_file():
        raise RosEnvironmentError(f"FASTDDS_DEFAULT_PROFILES_FILE={given!r} does not exist")
    return None if is_generated_file(given) or is_lan_profile(given) else Path(given).resolve()


def _user_openssl_conf(env: dict[str, str]) -> str:
    """The OPENSSL_CONF the user set, or ""; one the secure mode generated (a parent's) is removed from `env`."""
    given = env.get("OPENSSL_CONF", "").strip()
    if given:
        from robot_rl.ros.net.secure import is_generated_file

        if is_generated_file(given):
            del env["OPENSSL_CONF"]  # set again where this process is secure too
            return ""
    return given


def _secure_host(env: Mapping[str, str]):
    """This host's checked certificate folder (robot_rl.ros.net.secure.SecureHost) named by ROBOT_RL_CERTS."""
    from robot_rl.ros.net.secure import CertificateError, check_tls_files, read_host_folder

    folder = env.get(CERTS_VARIABLE, "").strip()
    if not folder:
        raise RosEnvironmentError(f"{NETWORK_VARIABLE}=secure needs {CERTS_VARIABLE}=<this host's folder made by "
                                  "`robot-rl certs`>")
    try:
        host = read_host_folder(folder)
        check_tls_files(host)
    except CertificateError as error:
        raise RosEnvironmentError(f"{CERTS_VARIABLE}={folder}: {error}") from None
    return host


def network_summary(env: Mapping[str, str] | None = None, graph: str = "host") -> str:
    """One line naming the network mode and what it uses in `graph` (every node logs it at start-up)."""
    env = os.environ if env is None else env
    profile = env.get("FASTDDS_DEFAULT_PROFILES_FILE") or "Fast DDS defaults"
    owner = " (set by the user: it wins over the mode)" if _user_profile(env) is not None else ""
    mode, why = network_choice(env)
    peers = env.get("ROS_STATIC_PEERS", "").strip()
    named = other_host_variables(env)
    if mode == "local" and named and not owner:  # ROBOT_RL_NETWORK=local: the shipped profile keeps to loopback
        why = f"{NETWORK_VARIABLE}=local, so {' / '.join(named)} ignored: this host only"
    if mode != "local" and graph == "host":
        where = "its own profile" if owner else "shared memory and 127.0.0.1 only"
        return (f"network {mode}" + (f" ({why})" if why else "") + f": this host's own graph ({where}, domain "
                f"{env.get('ROS_DOMAIN_ID')}, profile {profile}{owner}); the learner link crosses between hosts on "
                f"domain {link_domain_id(env)} through the link process (robot_rl.ros.nodes.link_node)")
    if mode == "secure":
        from robot_rl.ros.net.secure import CertificateError, read_host_folder

        try:
            host = read_host_folder(env.get(CERTS_VARIABLE, ""))
            tls = (f"TLS as {host.role} {host.host}, server {host.server}:{host.port}, certificates {host.folder}, "
                   f"{host.validity()}")
        except CertificateError as error:
            tls = f"TLS certificates unusable: {error}"
        peers = ""  # rmw ignores ROS_STATIC_PEERS with the SYSTEM_DEFAULT range
    elif mode == "lan" and _user_profile(env) is None:
        from robot_rl.ros.net.lan import LanSettingError, link_mbit, paced_bytes_per_s

        try:
            mbit = link_mbit(env)
            tls = f"link {mbit:g} Mbit/s (weights and transitions paced to {paced_bytes_per_s(mbit) / 1e6:.2f} MB/s)"
        except LanSettingError as error:
            tls = str(error)
    else:
        tls = ""
    return (f"network {mode}" + (f" ({why})" if why else "") + ": " + (f"{tls}, " if tls else "")
            + f"discovery {env.get('ROS_AUTOMATIC_DISCOVERY_RANGE')}"
            + (f", static peers {peers}" if peers else "")
            + f", domain {env.get('ROS_DOMAIN_ID')}, profile {profile}{owner}")


def ros_environment(
    domain_id: int | None = None,
    base: Mapping[str, str] | None = None,
    profile: str | os.PathLike[str] | None = None,
    graph: str = "host",
) -> dict[str, str]:
    """Return a copy of `base` (default: os.environ) set up for a ROS 2 process on `domain_id` (see module doc) in
    one of the host's :data:`GRAPHS`: in the lan and secure modes, ``host`` keeps to this host (the shipped profile,
    ROS_DOMAIN_ID) and ``link`` joins the learner link between hosts (the mode's profile, :func:`link_domain_id`)."""
    if graph not in GRAPHS:
        raise ValueError(f"graph {graph!r} is not one of {GRAPHS}")
    env = dict(os.environ if base is None else base)
    mode = network_mode(env)
    link = graph == "link" and mode != "local"
    # A range written for a host graph (the user set none) is no choice of the user's: a link process started from
    # that environment (the learner) picks the link's own.
    discovery = "" if env.pop(_RANGE_WRITTEN, "") else env.get("ROS_AUTOMATIC_DISCOVERY_RANGE", "").strip()
    if discovery and discovery not in DISCOVERY_RANGES:
        raise RosEnvironmentError(f"ROS_AUTOMATIC_DISCOVERY_RANGE={discovery!r} is not one of {DISCOVERY_RANGES}")
    if mode == "secure" and link:  # the generated profile decides discovery
        env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = SECURE_DISCOVERY_RANGE
    elif link and not discovery:
        env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = LAN_DISCOVERY_RANGE
    elif not discovery or mode == "secure":
        env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = DEFAULT_DISCOVERY_RANGE
        if mode != "local":
            env[_RANGE_WRITTEN] = "1"
    env["ROS_DOMAIN_ID"] = str(_resolve_domain_id(domain_id, env))
    if link:
        env["ROS_DOMAIN_ID"] = env[LINK_DOMAIN_VARIABLE] = str(link_domain_id(env))
    elif mode != "local" and str(link_domain_id(env)) == env["ROS_DOMAIN_ID"]:  # the host graph (every node's start)
        raise RosEnvironmentError(f"{LINK_DOMAIN_VARIABLE}={env[LINK_DOMAIN_VARIABLE]} is ROS_DOMAIN_ID too: the "
                                  "learner link needs a domain of its own, or the robot's graph would be on it")
    env["RMW_IMPLEMENTATION"] = RMW_IMPLEMENTATION
    user = _user_profile(env) if profile is None else None
    openssl_conf = _user_openssl_conf(env)
    if mode == "secure" and profile is None:
        for variable, value in (("FASTDDS_DEFAULT_PROFILES_FILE", user), ("OPENSSL_CONF", openssl_conf)):
            if value:
                raise RosEnvironmentError(
                    f"{NETWORK_VARIABLE}=secure writes its own {variable}, and {variable}={value} would replace it "
                    f"(and certificate verification with it): unset {variable}, or use another mode")
        host = _secure_host(env)
        env[CERTS_VARIABLE] = str(host.folder)  # absolute: a child in another working directory finds it too
    if link and mode == "secure" and profile is None:
        from robot_rl.ros.net.lan import LanSettingError, link_mbit
        from robot_rl.ros.net.secure import CertificateError, write_network_files

        try:
            fastdds_profile, openssl_config = write_network_files(host, link_mbit(env))
        except (CertificateError, LanSettingError) as error:
            raise RosEnvironmentError(str(error)) from None
        env["FASTDDS_DEFAULT_PROFILES_FILE"], env["OPENSSL_CONF"] = str(fastdds_profile), str(openssl_config)
        env["RMW_FASTRTPS_PUBLICATION_MODE"] = "AUTO"  # the profile's publish modes (pacing) apply
    elif user is not None:
        env["FASTDDS_DEFAULT_PROFILES_FILE"] = str(user)
    elif link and mode == "lan" and profile is None:
        from robot_rl.ros.net.lan import LanSettingError, link_mbit, write_lan_profile
        from robot_rl.ros.net.secure import CertificateError

        try:  # UDP reaches the other hosts; the big messages paced to the link (robot_rl.ros.net.lan)
            env["FASTDDS_DEFAULT_PROFILES_FILE"] = str(write_lan_profile(link_mbit(env)))
        except (LanSettingError, CertificateError) as error:
            raise RosEnvironmentError(str(error)) from None
        env["RMW_FASTRTPS_PUBLICATION_MODE"] = "AUTO"  # the profile's publish modes apply
    else:
        env["FASTDDS_DEFAULT_PROFILES_FILE"] = str(check_fastdds_profile(profile or FASTDDS_PROFILE_PATH).path)
    wheels = find_ros_wheels()
    env["LD_LIBRARY_PATH"] = _prepend_paths(env.get("LD_LIBRARY_PATH"), wheels.library_dirs)
    env[BOOTSTRAP_FLAG] = "1"
    env["AMENT_PREFIX_PATH"] = _prepend_paths(env.get("AMENT_PREFIX_PATH"), [wheels.prefix])
    return env


def ensure_ros_environment(
    domain_id: int | None = None, profile: str | os.PathLike[str] | None = None, graph: str = "host"
) -> dict[str, str]:
    """Apply :func:`ros_environment` to os.environ before rclpy is imported; return the variables that were set.

    Raises RosEnvironmentError if the wheels are missing, if this interpreter was started without the wheels' library
    path (the dynamic loader reads LD_LIBRARY_PATH only at start-up), if rclpy is already imported with a different
    configuration, or, in the secure mode, if the OpenSSL that Fast DDS uses does not require peer certificates
    (robot_rl.ros.net.secure.check_fastdds_openssl).
    """
    wanted = ros_environment(domain_id, base=os.environ, profile=profile, graph=graph)
    if "rclpy" in sys.modules:
        conflicts = {k: (os.environ.get(k), wanted.get(k)) for k in _CONFIG_KEYS if os.environ.get(k) != wanted.get(k)}
        if conflicts:
            details = ", ".join(f"{k}: current {cur!r}, wanted {new!r}" for k, (cur, new) in conflicts.items())
            raise RosEnvironmentError(
                f"rclpy is already imported with a different ROS configuration ({details}); call "
                "ensure_ros_environment() before importing rclpy, or start a process with ros_environment()"
            )
    loaded = {os.path.realpath(p) for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p}
    missing = [str(d) for d in find_ros_wheels().library_dirs if os.path.realpath(d) not in loaded]
    if missing:
        raise RosEnvironmentError(
            "this Python process started without the ROS 2 wheels' libraries on LD_LIBRARY_PATH "
            f"(missing {missing}); the dynamic loader reads it only at start-up: run it from the venv whose "
            "ros_wheels_bootstrapper sets it, or start it with env=robot_rl.ros.net.env.ros_environment()"
        )
    changed = {k: v for k, v in wanted.items() if os.environ.get(k) != v}
    os.environ.update(changed)
    for key in _CONFIG_KEYS:  # a mode without a profile file (lan) unsets the one a parent process set
        if key not in wanted and os.environ.pop(key, None) is not None:
            changed[key] = ""
    if network_mode(wanted) == "secure" and graph == "link" and profile is None:
        from robot_rl.ros.net.secure import CertificateError, check_fastdds_openssl

        try:  # the OpenSSL that Fast DDS will use read OPENSSL_CONF: it requires peer certificates
            check_fastdds_openssl(find_ros_wheels().library_dirs)
        except CertificateError as error:
            raise RosEnvironmentError(str(error)) from None
    return changed


def _ip_command() -> str | None:
    found = shutil.which("ip")  # /usr/sbin is often missing from a non-root PATH
    return found or next((p for p in ("/usr/sbin/ip", "/sbin/ip") if Path(p).exists()), None)


# Ways to get a private network namespace: as root (or with CAP_SYS_ADMIN), else inside a user namespace where the
# kernel allows unprivileged ones (the user is mapped to root there; files it writes stay the user's). With it come an
# IPC namespace and a mount namespace (private propagation) whose /dev/shm is a fresh tmpfs: Fast DDS's shared-memory
# transport does not stop at network namespaces, and segments or port lock files that a SIGKILLed process left in the
# host's /dev/shm would otherwise meet the next command's participants.
_NAMESPACES = ("-n", "-i", "-m", "--propagation", "private")
_UNSHARE_OPTIONS = (_NAMESPACES, ("--map-root-user", *_NAMESPACES))
_PRIVATE_SHM = "mount -t tmpfs -o mode=1777 private-shm /dev/shm"


@functools.lru_cache(maxsize=1)
def _private_network_prefix() -> tuple[tuple[str, ...] | None, str]:
    """(unshare command prefix that works here, or None; why none works)."""
    unshare, ip = shutil.which("unshare"), _ip_command()
    if not unshare:
        return None, "the unshare command (util-linux) is not installed"
    if not ip:
        return None, "the ip command (iproute2) is not installed"
    failures = []
    for options in _UNSHARE_OPTIONS:
        command = [unshare, *options]
        try:
            result = subprocess.run([*command, "sh", "-c", f'{_PRIVATE_SHM} && "{ip}" link set lo up'],
                                    capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            failures.append(f"unshare {' '.join(options)}: {error}")
            continue
        if result.returncode == 0:
            return tuple(command), ""
        lines = (result.stderr or result.stdout).strip().splitlines()
        failures.append(f"unshare {' '.join(options)}: " + (lines[-1] if lines else f"exit status {result.returncode}"))
    return None, "; ".join(failures)


def network_namespace_problem() -> str | None:
    """Why this process cannot create a private network namespace with only ``lo`` up, or None if it can."""
    prefix, problem = _private_network_prefix()
    return None if prefix is not None else problem


def network_namespace_available() -> bool:
    """True if this process may create a private network namespace (``unshare -n``) and bring its ``lo`` up."""
    return network_namespace_problem() is None


def private_network_command(argv: Sequence[str]) -> list[str]:
    """Wrap `argv` to run in a private network namespace with only ``lo`` up, its own IPC namespace and a fresh
    ``/dev/shm`` (a tmpfs of its own mount namespace): nothing the command's processes leave there meets another's.

    Fails closed: where no namespace can be made, RosEnvironmentError says why, rather than running the command on
    the host's network. Processes that must talk to each other over DDS have to share one namespace: wrap one
    launcher, not each node.
    """
    prefix, problem = _private_network_prefix()
    if prefix is None:
        raise RosEnvironmentError(f"cannot make a private network namespace (only loopback) to run {argv[0]} in: "
                                  f"{problem}")
    ip = _ip_command() or "ip"
    return [*prefix, "sh", "-c", f'{_PRIVATE_SHM} && "{ip}" link set lo up && exec "$@"', "sh", *argv]
