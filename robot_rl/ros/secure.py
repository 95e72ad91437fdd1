"""The ``secure`` network mode: a run's certificate authority, one certificate folder per host, and the Fast DDS
profile that makes every ROS 2 process of a host use TLS between hosts. Importable without rclpy.

``robot-rl certs`` (:func:`create_certificates`) makes, with the ``openssl`` command:

- ``OUT/ca/``: the run's CA (``ca.key`` never leaves this folder, ``ca.pem``);
- ``OUT/server/`` and ``OUT/<robot>/``: what that machine needs: ``ca.pem``, ``cert.pem``, ``key.pem`` (mode 0600),
  ``dh.pem`` and ``network.json`` (role ``server`` or ``robot``, the server's address and TCP port, the host name).

On a host, ``ROBOT_RL_NETWORK=secure`` and ``ROBOT_RL_CERTS=<that folder>`` make
:func:`robot_rl.ros.env.ros_environment` write :func:`fastdds_profile` and :func:`openssl_config` next to the
certificates (:func:`write_network_files`) and point ``FASTDDS_DEFAULT_PROFILES_FILE`` and ``OPENSSL_CONF`` at them:

- between hosts: Fast DDS's TCPv4 transport with TLS, both sides verifying the other's certificate against the run's
  CA. The server (the learner's host) listens on one TCP port; every robot-side process connects to it (initial
  peer: the server's address and port). A peer without a certificate of this run's CA is refused in the handshake;
- within a host: shared memory and UDP on 127.0.0.1 only (discovery through 127.0.0.1), so the processes of one host
  (drivers, actor, teleop; learner, evaluation) talk to each other as in the ``local`` mode;
- builtin transports off: nothing else listens or sends;
- the weights and the transitions paced to half of ``ROBOT_RL_LINK_MBIT`` as in the lan mode
  (:func:`robot_rl.ros.lan.pacing_xml`).

Fast DDS 3.2 behaviours this works around (measured with the wheels' build):

- its ``<verify_mode>`` keeps only the first of the flags listed, so an accepting (TLS server) side with
  VERIFY_PEER + VERIFY_FAIL_IF_NO_PEER_CERT gets VERIFY_PEER alone and lets in a client that shows no certificate
  at all. The server's profile therefore sets no ``<verify_mode>`` and its OpenSSL (the wheel's own libssl 1.1.1)
  takes ``VerifyMode = Peer,Require`` from the generated ``OPENSSL_CONF``; :func:`check_fastdds_openssl` checks in
  the process that it did. The robot side (TLS client, where VERIFY_PEER is all there is) sets VERIFY_PEER itself;
- when it cannot load a TLS file it logs an error and goes on with plain TCP: Python's ``ssl`` module checks the
  folder first (:func:`check_tls_files`);
- its TLS channel reads and writes on one thread with blocking writes: once both ends' socket buffers are full,
  both stay blocked in a write for good. With 208 KiB buffers (the usual ``net.core.wmem_max``) 1 MB messages at
  20 Hz both ways did that every time; the profile asks for the largest buffers the kernel allows, up to 16 MiB
  (:func:`tcp_buffer_size`; 4 MiB carried it). A link slower than what both ends send (measured: 5 MB at 10 Hz
  both ways over 4 MiB buffers) can still stall: raise ``net.core.wmem_max`` / ``rmem_max`` on both machines for
  big policies, or publish weights less often.

Fast DDS logs a refused handshake only on the side that refused a certificate while connecting ("Handshake failed:
certificate verify failed"); the accepting side (the learner's host) logs nothing, and a refused client sees the
TLS alert (certificate required, unknown CA).

Only the process that binds the port listens: on the server host, start the learner first (a later process there
logs Fast DDS's "Error binding at port" and talks to that host's processes only), or run the others in ``local``
mode, which reaches the learner through shared memory. The robots look for it behind the port at the participant
ids 0..SERVER_PEERS-1 of the server host: started first, it has id 0.

Processes started later (a recorder, a second teleop, ``robot-rl doctor``) on a robot host: one in this mode finds
that host's processes in about a second (it announces itself on 127.0.0.1 to the ports of participant ids
0..LOCAL_PEERS-1 and they answer) and the learner in 1 to 4 s, through its own TLS connection (measured:
tests/test_secure_network.py's latecomer, started once the run is under way, sees every endpoint by node name and
talks both ways with the robot's processes and the learner). Participants beyond the first LOCAL_PEERS of a host
find those but not each other (a consequence of the initial-peer list, not measured). What puts a process in this
mode is :func:`robot_rl.ros.env.ensure_ros_environment` (every robot_rl node and command calls it before rclpy):
``ROBOT_RL_NETWORK`` and ``ROBOT_RL_CERTS`` mean nothing to Fast DDS. A ROS 2 program that does not go through it
(the ``ros2`` CLI, rviz, a plain ``import rclpy`` script) runs Fast DDS's defaults: UDP on every interface in the
clear with multicast discovery, so an intruder on the network reaches it (measured: a plain rclpy node on the robot
host received a ``lan``-mode intruder's messages and listed its node), it never reaches the learner (no TLS
transport), and it sees this host's processes only as far as their announcements to 127.0.0.1 and shared memory
carry (a plain graph probe on the robot host of a two-host training run, after 25 s: some of the robot's nodes,
endpoints named ``_NODE_NAME_UNKNOWN_``, not always the actor's subscriptions, nothing of the learner). Call
``ensure_ros_environment()`` before importing rclpy, or start such a program with what it sets:
``FASTDDS_DEFAULT_PROFILES_FILE`` and ``OPENSSL_CONF`` naming the generated files (the ``profile`` path in a robot_rl
process's "network secure" log line, and the ``openssl_secure*.cnf`` next to it),
``ROS_AUTOMATIC_DISCOVERY_RANGE=SYSTEM_DEFAULT`` and ``RMW_FASTRTPS_PUBLICATION_MODE=AUTO`` (without it, a
publisher on a paced topic is refused: "Cannot use a flow controller in synchronously publication mode").
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import ipaddress
import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape as _html_escape
from pathlib import Path

from robot_rl.files import atomic_write_text
from robot_rl.ros.lan import DEFAULT_LINK_MBIT, SHM_TRANSPORT, pacing_xml

ROLES = ("server", "robot")
DEFAULT_PORT = 7650
CA_FILE, CERT_FILE, KEY_FILE, DH_FILE, NETWORK_FILE = "ca.pem", "cert.pem", "key.pem", "dh.pem", "network.json"
HOST_FILES = (CA_FILE, CERT_FILE, KEY_FILE, DH_FILE, NETWORK_FILE)
PROFILE_FILE = "fastdds_secure.xml"
OPENSSL_CONFIG_FILE = "openssl_secure.cnf"
# In the first line of every generated file: robot_rl.ros.env recognises its own files by it (a child process
# inherits FASTDDS_DEFAULT_PROFILES_FILE and OPENSSL_CONF; those are not files "the user set").
GENERATED_MARK = "robot_rl secure network: generated by robot_rl.ros.secure, rewritten as needed"
# What OpenSSL's VerifyMode = Peer,Require sets: SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT.
REQUIRED_VERIFY_MODE = 0x01 | 0x02
# TCP socket buffers of the TLS connection (see tcp_buffer_size): measured between two namespaces, 1 MB messages at
# 20 Hz both ways stalled the connection with 208 KiB buffers (the usual net.core.wmem_max) and passed with 4 MiB.
MAX_TCP_BUFFER = 16 * 2**20
MIN_TCP_BUFFER = 65536
# RFC 7919 groups: standard safe-prime DH parameters made at once (`openssl dhparam 2048` takes 7-70 s here).
DH_GROUPS = ("ffdhe2048", "ffdhe3072", "ffdhe4096")
RSA_BITS = 2048
LOCAL_PEERS = 32  # participants of one host found through 127.0.0.1 (ports of participant ids 0..31)
SERVER_PEERS = 8  # participant ids on the server host the robots try behind its TCP port
_HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
_DNS_NAME = re.compile(r"^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}"
                       r"[A-Za-z0-9])?)*$")
_RESERVED_NAMES = ("ca", "server")


def _xml_text(text: str) -> str:
    return _html_escape(text, quote=False)


class CertificateError(ValueError):
    """A certificate folder or a `robot-rl certs` request cannot be used; the message names the file or option."""


@dataclass(frozen=True)
class SecureHost:
    """One host's certificate folder: its role, the server's address and port, and the TLS files."""

    folder: Path
    role: str
    server: str
    port: int
    host: str

    def path(self, name: str) -> Path:
        """The file `name` (one of HOST_FILES) of this folder."""
        return self.folder / name


@dataclass(frozen=True)
class CertificateRun:
    """What :func:`create_certificates` made: the CA folder and one folder per host (server first)."""

    out: Path
    ca_folder: Path
    hosts: tuple[SecureHost, ...]


def check_server_address(server: str) -> str:
    """`server` if it is an IPv4 address or a DNS name the robots can reach the learner's host at; else raise."""
    server = server.strip()
    try:
        address = ipaddress.ip_address(server)
    except ValueError:
        if _DNS_NAME.match(server) and not server.replace(".", "").isdigit():
            return server
        raise CertificateError(f"--server {server!r} is neither an IPv4 address nor a host name") from None
    if address.version != 4 or address.is_unspecified or address.is_multicast:
        raise CertificateError(f"--server {server!r} must be the IPv4 address robots reach the learner's host at")
    return server


def check_port(port: int) -> int:
    """`port` if it is a TCP port a server can listen on; else raise."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise CertificateError(f"--port {port!r} must be a TCP port in [1, 65535]")
    return port


def check_robot_names(robots: Sequence[str]) -> tuple[str, ...]:
    """The robot host names if each is a valid, distinct folder name (not `ca` or `server`); else raise."""
    if not robots:
        raise CertificateError("give at least one --robot NAME")
    for name in robots:
        if not _HOST_NAME.match(name):
            raise CertificateError(f"--robot {name!r} must be a host name of letters, digits, '-' and '_'")
        if name.lower() in _RESERVED_NAMES:
            raise CertificateError(f"--robot {name!r} is reserved (folders {', '.join(_RESERVED_NAMES)} hold the CA "
                                   "and the server)")
    lowered = [name.lower() for name in robots]
    repeated = sorted({name for name in robots if lowered.count(name.lower()) > 1})
    if repeated:
        raise CertificateError(f"--robot {', '.join(repeated)} given more than once")
    return tuple(robots)


# ----------------------------------------------------------------------------------------------- making certificates


def _openssl() -> str:
    found = shutil.which("openssl") or next((p for p in ("/usr/bin/openssl", "/usr/local/bin/openssl")
                                             if Path(p).exists()), None)
    if found is None:
        raise CertificateError("the openssl command is not installed (Debian/Ubuntu: apt install openssl)")
    return found


def _run_openssl(openssl: str, args: Sequence[str], stdin: bytes | None = None) -> bytes:
    result = subprocess.run([openssl, *args], input=stdin, capture_output=True, timeout=600, check=False)
    if result.returncode != 0:
        lines = result.stderr.decode(errors="replace").strip().splitlines()
        raise CertificateError(f"openssl {args[0]} failed: {lines[-1] if lines else f'exit {result.returncode}'}")
    return result.stdout


def _write_private(path: Path, data: bytes) -> None:
    """Write `data` to a new file only its owner can read (mode 0600 from the start)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(data)


_OPENSSL_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
[ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[host]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = {alt_names}
"""


def _alt_names(name: str, server: str | None) -> str:
    names = [f"DNS:{name}"]
    if server is not None:
        try:
            ipaddress.ip_address(server)
            names.append(f"IP:{server}")
        except ValueError:
            names.append(f"DNS:{server}")
    return ", ".join(dict.fromkeys(names))


def _dh_parameters(openssl: str, dh: str) -> bytes:
    if dh in DH_GROUPS:
        return _run_openssl(openssl, ["genpkey", "-genparam", "-algorithm", "DH", "-pkeyopt", f"group:{dh}"])
    if dh == "generate":  # fresh 2048-bit safe-prime parameters: slow (measured 7-70 s)
        return _run_openssl(openssl, ["dhparam", "2048"])
    raise CertificateError(f"--dh {dh!r} is not one of {', '.join((*DH_GROUPS, 'generate'))}")


def create_certificates(out: Path, server: str, robots: Sequence[str], port: int = DEFAULT_PORT, days: int = 365,
                        dh: str = "ffdhe2048") -> CertificateRun:
    """Make a run's CA in `out`/ca and a certificate folder for the server and for each robot (see module doc).

    `out` must not exist or be empty; on failure nothing of it is left. Raises CertificateError on bad input.
    """
    server, port, robots = check_server_address(server), check_port(port), check_robot_names(robots)
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 36500:
        raise CertificateError(f"--days {days!r} must be in [1, 36500]")
    if dh not in (*DH_GROUPS, "generate"):
        raise CertificateError(f"--dh {dh!r} is not one of {', '.join((*DH_GROUPS, 'generate'))}")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CertificateError(f"{out} exists and is not an empty folder: give a new one (a run's CA is never "
                               "overwritten)")
    openssl = _openssl()
    made_out = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        return _create(out, server, port, robots, days, dh, openssl)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        if not made_out:
            out.mkdir(exist_ok=True)
        raise


def _create(out: Path, server: str, port: int, robots: tuple[str, ...], days: int, dh: str,
            openssl: str) -> CertificateRun:
    ca_folder = out / "ca"
    ca_folder.mkdir(mode=0o700)
    run_id = secrets.token_hex(4)
    dh_pem = _dh_parameters(openssl, dh)
    with tempfile.TemporaryDirectory(prefix="robot_rl_certs_") as scratch:
        scratch_dir = Path(scratch)
        config = scratch_dir / "openssl.cnf"
        ca_key = ca_folder / "ca.key"
        _write_private(ca_key, _run_openssl(openssl, ["genpkey", "-algorithm", "RSA", "-pkeyopt",
                                                      f"rsa_keygen_bits:{RSA_BITS}"]))
        config.write_text(_OPENSSL_CONFIG.format(alt_names="DNS:ca"))
        ca_pem = _run_openssl(openssl, [
            "req", "-x509", "-new", "-key", str(ca_key), "-config", str(config), "-extensions", "ca", "-sha256",
            "-days", str(days), "-subj", f"/O=robot_rl/CN=robot_rl run CA {run_id}",
            "-set_serial", str(secrets.randbits(63))])
        (ca_folder / CA_FILE).write_bytes(ca_pem)
        hosts = []
        for role, name in (("server", "server"), *(("robot", robot) for robot in robots)):
            folder = out / name
            folder.mkdir(mode=0o700)
            key = folder / KEY_FILE
            _write_private(key, _run_openssl(openssl, ["genpkey", "-algorithm", "RSA", "-pkeyopt",
                                                       f"rsa_keygen_bits:{RSA_BITS}"]))
            config.write_text(_OPENSSL_CONFIG.format(alt_names=_alt_names(name, server if role == "server" else None)))
            request = _run_openssl(openssl, ["req", "-new", "-key", str(key), "-config", str(config), "-sha256",
                                             "-subj", f"/O=robot_rl/OU=run {run_id}/CN={name}"])
            certificate = _run_openssl(openssl, [
                "x509", "-req", "-CA", str(ca_folder / CA_FILE), "-CAkey", str(ca_key), "-extfile", str(config),
                "-extensions", "host", "-sha256", "-days", str(days), "-set_serial", str(secrets.randbits(63))],
                stdin=request)
            (folder / CERT_FILE).write_bytes(certificate)
            (folder / CA_FILE).write_bytes(ca_pem)
            (folder / DH_FILE).write_bytes(dh_pem)
            (folder / NETWORK_FILE).write_text(json.dumps(
                {"role": role, "server": server, "port": port, "host": name}, indent=2) + "\n")
            hosts.append(read_host_folder(folder))
    for host in hosts:
        check_tls_files(host)
    return CertificateRun(out=out, ca_folder=ca_folder, hosts=tuple(hosts))


def instructions(run: CertificateRun) -> str:
    """What to copy where and what to set there, as printed by `robot-rl certs`."""
    server = run.hosts[0]
    width = max(len(str(folder)) for folder in (run.ca_folder, *(host.folder for host in run.hosts))) + 3
    lines = [f"made a certificate authority and {len(run.hosts)} host folders in {run.out}:",
             f"  {str(run.ca_folder) + '/':<{width}}stays here: ca.key signs this run's certificates; never copy it"]
    for host in run.hosts:
        where = (f"the learner's host (the robots reach it at {host.server}, TCP port {host.port})"
                 if host.role == "server" else f"robot {host.host}'s computer")
        lines.append(f"  {str(host.folder) + '/':<{width}}copy to {where}")
    lines += [
        f"copy a folder whole, keeping key.pem private (e.g. scp -rp {server.folder} HOST:robot_rl_certs); on each "
        "machine, for every robot_rl ROS process there:",
        "  export ROBOT_RL_NETWORK=secure ROBOT_RL_CERTS=~/robot_rl_certs   # the folder copied to that machine",
        "  learner's host:  robot-rl launch launch/robot_train.yaml side:=server ...",
        "  each robot:      robot-rl launch launch/robot_train.yaml side:=robot ...",
        f"the robots must reach TCP port {server.port} of {server.server}; nothing else is needed between the "
        "machines. Other processes on the learner's host: ROBOT_RL_NETWORK=local (one process there listens on "
        "the port)."]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ using a folder


def read_host_folder(folder: str | os.PathLike[str]) -> SecureHost:
    """Read and check a host's certificate folder (every file present and readable, network.json valid).

    Raises CertificateError naming the file at fault.
    """
    folder = Path(folder).expanduser().resolve()
    if not folder.is_dir():
        raise CertificateError(f"certificate folder {folder} does not exist (make it with `robot-rl certs`)")
    for name in HOST_FILES:
        path = folder / name
        if not path.is_file():
            raise CertificateError(f"{path} is missing: {folder} is not a complete `robot-rl certs` host folder")
        if not os.access(path, os.R_OK):
            raise CertificateError(f"{path} is not readable by this user")
    key = folder / KEY_FILE
    if key.stat().st_mode & 0o077:
        raise CertificateError(f"{key} can be read by other users (mode {key.stat().st_mode & 0o777:o}): "
                               f"chmod 600 {key}")
    path = folder / NETWORK_FILE
    try:
        network = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CertificateError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(network, dict):
        raise CertificateError(f"{path} must hold a JSON object")
    role, server, port, host = (network.get(key) for key in ("role", "server", "port", "host"))
    if role not in ROLES:
        raise CertificateError(f"{path}: role {role!r} must be one of {', '.join(ROLES)}")
    if not isinstance(server, str) or not isinstance(host, str) or not _HOST_NAME.match(host):
        raise CertificateError(f"{path}: server and host must be names, got {server!r} and {host!r}")
    try:
        server, port = check_server_address(server), check_port(port)
    except CertificateError as error:
        raise CertificateError(f"{path}: {str(error).removeprefix('--')}") from None
    return SecureHost(folder=folder, role=role, server=server, port=port, host=host)


def _pump(source, source_out, target_in) -> bool:
    """One handshake step of `source` (an ssl.SSLObject); move what it wrote (`source_out`) to the other side's
    `target_in`. True once its handshake is done."""
    import ssl

    try:
        source.do_handshake()
        done = True
    except ssl.SSLWantReadError:
        done = False
    target_in.write(source_out.read())
    return done


@functools.lru_cache(maxsize=16)
def _check_tls_files_cached(folder: Path, stamps: tuple[int, ...]) -> None:
    import ssl  # here: a process of another network mode does not load Python's OpenSSL for it

    ca, cert, key, dh = (folder / name for name in (CA_FILE, CERT_FILE, KEY_FILE, DH_FILE))
    contexts = []
    for purpose in (ssl.PROTOCOL_TLS_SERVER, ssl.PROTOCOL_TLS_CLIENT):
        context = ssl.SSLContext(purpose)
        try:
            context.load_verify_locations(cafile=str(ca))
        except (ssl.SSLError, OSError) as error:
            raise CertificateError(f"{ca} is not a PEM CA certificate: {error}") from None
        try:
            context.load_cert_chain(str(cert), str(key))
        except (ssl.SSLError, OSError) as error:
            raise CertificateError(
                f"{cert} and {key} are not a PEM certificate with its private key: {error}") from None
        context.check_hostname = False
        context.verify_mode = ssl.CERT_REQUIRED
        contexts.append(context)
    try:
        contexts[0].load_dh_params(str(dh))
    except (ssl.SSLError, OSError) as error:
        raise CertificateError(f"{dh} is not PEM DH parameters: {error}") from None
    # A handshake in memory, the host's certificate on both sides: is it signed by this folder's CA?
    buffers = [ssl.MemoryBIO() for _ in range(4)]
    server = contexts[0].wrap_bio(buffers[0], buffers[1], server_side=True)
    client = contexts[1].wrap_bio(buffers[2], buffers[3], server_side=False)
    try:
        for _ in range(10):
            client_done = _pump(client, buffers[3], buffers[0])
            server_done = _pump(server, buffers[1], buffers[2])
            if client_done and server_done:
                return
    except ssl.SSLError as error:
        raise CertificateError(f"{cert} is not accepted by a peer trusting {ca} (a certificate of another run?): "
                               f"{error.reason or error}") from None
    raise CertificateError(f"{cert}: the TLS check against {ca} did not finish")


def check_tls_files(host: SecureHost) -> None:
    """Check with Python's ssl module that the folder's CA, certificate, key and DH files load and that the
    certificate is signed by the CA (a handshake in memory); raise CertificateError naming the file at fault."""
    stamps = tuple((host.folder / name).stat().st_mtime_ns for name in (CA_FILE, CERT_FILE, KEY_FILE, DH_FILE))
    _check_tls_files_cached(host.folder, stamps)


def openssl_config() -> str:
    """The OPENSSL_CONF of a secure-mode process: every TLS context verifies its peer, and an accepting one requires
    a certificate (Fast DDS cannot say so itself, see module doc); TLS 1.2 or later, OpenSSL's default ciphers at
    security level 2."""
    return f"""# {GENERATED_MARK}
# OPENSSL_CONF of robot_rl's secure network mode: read by the OpenSSL of Fast DDS (and of Python) in this process.
openssl_conf = robot_rl_openssl_init

[robot_rl_openssl_init]
ssl_conf = robot_rl_ssl

[robot_rl_ssl]
system_default = robot_rl_tls

[robot_rl_tls]
VerifyMode = Peer,Require
MinProtocol = TLSv1.2
CipherString = DEFAULT@SECLEVEL=2
"""


def tcp_buffer_size() -> int:
    """The TCP socket buffer size for the TLS connection: the most this host's kernel allows (net.core.wmem_max,
    rmem_max), at most MAX_TCP_BUFFER (Fast DDS's TLS channel stalls for good when both ends' buffers are full, see
    module doc)."""
    sizes = [MAX_TCP_BUFFER]
    for name in ("wmem_max", "rmem_max"):
        try:
            sizes.append(int(Path(f"/proc/sys/net/core/{name}").read_text()))
        except (OSError, ValueError):
            pass
    return max(min(sizes), MIN_TCP_BUFFER)


def fastdds_profile(host: SecureHost, tcp_buffer: int | None = None, link_mbit: float = DEFAULT_LINK_MBIT) -> str:
    """The Fast DDS XML profile of `host`'s role (see module doc); `tcp_buffer`: TCP socket buffer size in bytes
    (default :func:`tcp_buffer_size`); `link_mbit`: the link the weights and transitions are paced to
    (robot_rl.ros.lan.pacing_xml)."""
    tcp_buffer = tcp_buffer_size() if tcp_buffer is None else tcp_buffer
    controller, writers = pacing_xml(link_mbit)

    def path(name: str) -> str:
        return _xml_text(str(host.path(name)))

    listening = (f"\n        <listening_ports>\n          <port>{host.port}</port>\n        </listening_ports>"
                 if host.role == "server" else "")
    if host.role == "server":  # no <verify_mode>: OPENSSL_CONF's Peer,Require applies (see module doc)
        verify = ("\n          <!-- no verify_mode: Fast DDS would keep only VERIFY_PEER of it and let in clients "
                  "without a\n               certificate; OPENSSL_CONF sets VERIFY_PEER + "
                  "VERIFY_FAIL_IF_NO_PEER_CERT instead -->")
    else:
        verify = "\n          <verify_mode>\n            <verify>VERIFY_PEER</verify>\n          </verify_mode>"
    server_peer = ("" if host.role == "server" else f"""
            <locator>
              <tcpv4>
                <address>{_xml_text(host.server)}</address>
                <physical_port>{host.port}</physical_port>
              </tcpv4>
            </locator>""")
    return f"""<!-- {GENERATED_MARK} -->
<!--
  ROBOT_RL_NETWORK=secure, role {host.role}, host {_xml_text(host.host)}, server {_xml_text(host.server)}:{host.port},
  certificates from {_xml_text(str(host.folder))}.
  Between hosts: TCPv4 + TLS, both sides verify the peer's certificate against the run's CA, the weights and
  transitions paced to {link_mbit:g} Mbit/s / 2. Within the host:
  shared memory and UDP on 127.0.0.1. Builtin transports off.
-->
<dds xmlns="http://www.eprosima.com">
  <profiles>
    <transport_descriptors>
{SHM_TRANSPORT}
      <transport_descriptor>
        <transport_id>robot_rl_udp_loopback</transport_id>
        <type>UDPv4</type>
        <maxInitialPeersRange>{LOCAL_PEERS}</maxInitialPeersRange>
        <interfaceWhiteList>
          <address>127.0.0.1</address>
        </interfaceWhiteList>
      </transport_descriptor>
      <transport_descriptor>
        <transport_id>robot_rl_tls</transport_id>
        <type>TCPv4</type>
        <sendBufferSize>{tcp_buffer}</sendBufferSize>
        <receiveBufferSize>{tcp_buffer}</receiveBufferSize>
        <maxInitialPeersRange>{SERVER_PEERS}</maxInitialPeersRange>{listening}
        <tls>
          <private_key_file>{path(KEY_FILE)}</private_key_file>
          <cert_chain_file>{path(CERT_FILE)}</cert_chain_file>
          <tmp_dh_file>{path(DH_FILE)}</tmp_dh_file>
          <verify_file>{path(CA_FILE)}</verify_file>{verify}
          <options>
            <option>DEFAULT_WORKAROUNDS</option>
            <option>NO_COMPRESSION</option>
            <option>NO_SSLV2</option>
            <option>NO_SSLV3</option>
            <option>NO_TLSV1</option>
            <option>NO_TLSV1_1</option>
            <option>SINGLE_DH_USE</option>
          </options>
          <handshake_role>{"SERVER" if host.role == "server" else "CLIENT"}</handshake_role>
        </tls>
      </transport_descriptor>
    </transport_descriptors>
    <participant profile_name="robot_rl_secure_participant" is_default_profile="true">
      <rtps>
        <builtin>
          <initialPeersList>
            <locator>
              <udpv4>
                <address>127.0.0.1</address>
              </udpv4>
            </locator>{server_peer}
          </initialPeersList>
        </builtin>
        <userTransports>
          <transport_id>robot_rl_shm</transport_id>
          <transport_id>robot_rl_udp_loopback</transport_id>
          <transport_id>robot_rl_tls</transport_id>
        </userTransports>
        <useBuiltinTransports>false</useBuiltinTransports>{controller}
      </rtps>
    </participant>{writers}
  </profiles>
</dds>
"""


def is_generated_file(path: str | os.PathLike[str]) -> bool:
    """True if `path` is a file :func:`write_network_files` wrote (GENERATED_MARK in its first line)."""
    try:
        with open(path, "rb") as file:
            return GENERATED_MARK in file.readline(512).decode(errors="replace")
    except OSError:
        return False


def write_if_changed(text: str, name: str, folder: Path) -> Path:
    """Write `text` to folder/`name` unless it holds it already; where the folder is read-only, to a per-user folder
    of the temporary directory under a name made from the content (stable for every process of the host)."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    stem, dot, suffix = name.rpartition(".")
    candidates = [folder / name,
                  Path(tempfile.gettempdir()) / f"robot_rl-{os.getuid()}" / f"{stem}-{digest}{dot}{suffix}"]
    problems = []
    for path in candidates:
        try:
            if path.is_file() and path.read_text() == text:
                return path
            path.parent.mkdir(mode=0o700, exist_ok=True)
            if path.parent.stat().st_uid != os.getuid() or path.parent.stat().st_mode & 0o022:
                raise PermissionError(f"{path.parent} belongs to another user or others may write to it")
            return atomic_write_text(path, text)  # a process starting meanwhile reads the old or the new one whole
        except OSError as error:
            problems.append(f"{path}: {error.strerror or error}")
    raise CertificateError(f"cannot write the network profile file {name} ({'; '.join(problems)})")


def write_network_files(host: SecureHost, link_mbit: float = DEFAULT_LINK_MBIT) -> tuple[Path, Path]:
    """Write (or reuse, where up to date) `host`'s Fast DDS profile and OpenSSL config; return their paths."""
    return (write_if_changed(fastdds_profile(host, link_mbit=link_mbit), PROFILE_FILE, host.folder),
            write_if_changed(openssl_config(), OPENSSL_CONFIG_FILE, host.folder))


def _fastdds_libssl(library_dirs: Sequence[Path]) -> Path:
    found = sorted((p for d in library_dirs for p in Path(d).glob("libssl*.so*") if p.is_file()),
                   key=lambda p: ("fastdds" not in p.parent.name, str(p)))  # the wheel bundles it in ros_fastdds.libs
    if not found:
        raise CertificateError(f"found no libssl next to Fast DDS (in {', '.join(map(str, library_dirs))}) to check "
                               "that it verifies certificates")
    return found[0]


def check_fastdds_openssl(library_dirs: Sequence[Path]) -> None:
    """Check, in this process, that the OpenSSL Fast DDS uses makes TLS contexts that require a verified peer
    certificate (OPENSSL_CONF applied); raise CertificateError if not. Call it after OPENSSL_CONF is set, before
    rclpy creates a participant."""
    library = _fastdds_libssl(library_dirs)
    try:
        libssl = ctypes.CDLL(str(library))  # the library Fast DDS links: the same handle, the same configuration
        libssl.TLS_method.restype = ctypes.c_void_p
        libssl.SSL_CTX_new.restype, libssl.SSL_CTX_new.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
        libssl.SSL_CTX_get_verify_mode.restype = ctypes.c_int
        libssl.SSL_CTX_get_verify_mode.argtypes = [ctypes.c_void_p]
        libssl.SSL_CTX_free.restype, libssl.SSL_CTX_free.argtypes = None, [ctypes.c_void_p]
    except (OSError, AttributeError) as error:
        raise CertificateError(f"cannot load {library} to check its certificate verification: {error}") from None
    context = libssl.SSL_CTX_new(libssl.TLS_method())
    if not context:
        raise CertificateError(f"{library}: SSL_CTX_new failed")
    try:
        mode = libssl.SSL_CTX_get_verify_mode(context)
    finally:
        libssl.SSL_CTX_free(context)
    if mode & REQUIRED_VERIFY_MODE != REQUIRED_VERIFY_MODE:
        raise CertificateError(
            f"Fast DDS's OpenSSL ({library.name}) does not require peer certificates (verify mode {mode:#x}, "
            f"OPENSSL_CONF={os.environ.get('OPENSSL_CONF')!r}): OPENSSL_CONF is not set, or was set after this "
            "process's OpenSSL had read its configuration; start the process with robot_rl.ros.env.ros_environment()")
