"""The ``secure`` network mode: a run's certificate authority, one certificate per host with one role, and the Fast
DDS profile that makes every ROS 2 process of a host use TLS between hosts. Importable without rclpy; every host
needs the ``openssl`` command.

``robot-rl certs`` makes the certificates with the ``openssl`` command, in three steps. Only a certificate request
goes to the CA's machine and only public files come back: no private key ever travels.

1. ``robot-rl certs ca OUT --server ADDR`` (:func:`robot_rl.ros.net.certs.create_ca`), on the CA's machine: ``OUT/ca.key`` (mode 0600; it
   never leaves the folder), ``ca.pem``, ``dh.pem`` and ``run.json`` (the server's address and TCP port, the run id);
2. ``robot-rl certs request FOLDER --host NAME`` (:func:`robot_rl.ros.net.certs.create_request`), on each host: ``FOLDER`` (0700) with
   ``key.pem`` (0600, made there, reused when present) and ``request.csr``, which goes to the CA's machine;
3. ``robot-rl certs sign OUT REQUEST.csr --role server|robot`` (:func:`robot_rl.ros.net.certs.sign_request`), on the CA's machine: the signer,
   not the request, decides the role. ``OUT/issued/<host>/`` gets ``cert.pem``, ``ca.pem``, ``dh.pem`` and
   ``network.json`` (role, the server's address and port, the host name), which go into that host's ``FOLDER``.

One role per certificate: the server's (the learner's host) carries the extended key usage ``serverAuth`` only, with
the server's address in its subjectAltName; a robot's ``clientAuth`` only. OpenSSL checks that purpose in every
handshake (a TLS client wants serverAuth of the server, a server that verifies clients wants clientAuth), so a
robot's certificate cannot pose as the server to the other robots and the server's cannot connect as a robot
(measured with the wheels' libssl 1.1.1 in tests/test_secure_network.py: a robot refuses an impostor that listens at
the server's address with another robot's certificate, and the learner refuses a client showing the server's).
:func:`read_host_folder` checks that the certificate is the host's, of its ``network.json`` role's purpose and valid
now; :func:`check_tls_files` that the CA signed it for that purpose (``openssl verify -purpose``) and that the key is
the certificate's.

Lifetime and revocation: short-lived certificates. A host's certificate lasts 30 days unless ``--days`` says
otherwise (the CA 365 days, and no certificate outlasts it); renewing it is the same two steps again (``certs
request`` reuses the key, then ``certs sign``). There is no revocation list: a host the CA stops signing for is
refused once its certificate expires; to shut one out at once, make a new CA and sign the other hosts' requests with
it. A process refuses to start with an expired (or not yet valid) certificate, naming the commands that renew it.

:func:`robot_rl.ros.net.certs.create_certificates` runs the three steps in one place (``OUT/ca``, ``OUT/server``, ``OUT/<robot>``): it makes
every host's key on one machine, so it is for tests and benches whose hosts share one disk, not for real hosts.

On a host, ``ROBOT_RL_NETWORK=secure`` and ``ROBOT_RL_CERTS=<that folder>`` make
:func:`robot_rl.ros.net.env.ros_environment` write :func:`fastdds_profile` and :func:`openssl_config` next to the
certificates (:func:`write_network_files`) and point ``FASTDDS_DEFAULT_PROFILES_FILE`` and ``OPENSSL_CONF`` at them:

- between hosts: Fast DDS's TCPv4 transport with TLS, both sides verifying the other's certificate against the run's
  CA. The server (the learner's host) listens on one TCP port; every robot-side process connects to it (initial
  peer: the server's address and port). A peer without a certificate of this run's CA, or with one of the other role,
  is refused in the handshake;
- within a host: shared memory and UDP on 127.0.0.1 only (discovery through 127.0.0.1), so the processes of one host
  (drivers, actor, teleop; learner, evaluation) talk to each other as in the ``local`` mode;
- builtin transports off: nothing else listens or sends;
- the weights and the transitions paced to half of ``ROBOT_RL_LINK_MBIT`` as in the lan mode
  (:func:`robot_rl.ros.net.lan.pacing_xml`).

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
mode is :func:`robot_rl.ros.net.env.ensure_ros_environment` (every robot_rl node and command calls it before rclpy):
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

import calendar
import ctypes
import functools
import hashlib
import ipaddress
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape as _html_escape
from pathlib import Path

from robot_rl.core.files import atomic_write_text
from robot_rl.ros.net.lan import DEFAULT_LINK_MBIT, SHM_TRANSPORT, pacing_xml

ROLES = ("server", "robot")
DEFAULT_PORT = 7650
CA_FILE, CERT_FILE, KEY_FILE, DH_FILE, NETWORK_FILE = "ca.pem", "cert.pem", "key.pem", "dh.pem", "network.json"
HOST_FILES = (CA_FILE, CERT_FILE, KEY_FILE, DH_FILE, NETWORK_FILE)
REQUEST_FILE = "request.csr"  # a host's certificate request (public): it goes to the CA's machine
SIGNED_FILES = (CERT_FILE, CA_FILE, DH_FILE, NETWORK_FILE)  # what `certs sign` makes (public): it goes to the host
CA_KEY_FILE, RUN_FILE = "ca.key", "run.json"  # in the CA's folder: its key (never leaves it), the run's settings
CA_FILES = (CA_KEY_FILE, CA_FILE, DH_FILE, RUN_FILE)
ISSUED_FOLDER = "issued"  # CA/issued/<host>/: where `certs sign` puts a host's signed files unless told otherwise
DEFAULT_DAYS = 30  # a host certificate's lifetime: short-lived, renewed with `certs request` + `certs sign`
DEFAULT_CA_DAYS = 365
MAX_DAYS = 36500
# Each role's one purpose (extended key usage), and the `openssl verify -purpose` that checks it.
ROLE_USAGE = {"server": "serverAuth", "robot": "clientAuth"}
_VERIFY_PURPOSE = {"server": "sslserver", "robot": "sslclient"}
_USAGE_NAMES = {"TLS Web Server Authentication": "serverAuth", "TLS Web Client Authentication": "clientAuth"}
PROFILE_FILE = "fastdds_secure.xml"
OPENSSL_CONFIG_FILE = "openssl_secure.cnf"
# In the first line of every generated file: robot_rl.ros.net.env recognises its own files by it (a child process
# inherits FASTDDS_DEFAULT_PROFILES_FILE and OPENSSL_CONF; those are not files "the user set").
GENERATED_MARK = "robot_rl secure network: generated by robot_rl.ros.net.secure, rewritten as needed"
# What OpenSSL's VerifyMode = Peer,Require sets: SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT.
REQUIRED_VERIFY_MODE = 0x01 | 0x02
# TCP socket buffers of the TLS connection (see tcp_buffer_size): measured between two namespaces, 1 MB messages at
# 20 Hz both ways stalled the connection with 208 KiB buffers (the usual net.core.wmem_max) and passed with 4 MiB.
MAX_TCP_BUFFER = 16 * 2**20
MIN_TCP_BUFFER = 65536
# RFC 7919 groups: standard safe-prime DH parameters made at once (`openssl dhparam 2048` takes 7-70 s here).
DH_GROUPS = ("ffdhe2048", "ffdhe3072", "ffdhe4096")
RSA_BITS = 2048
MIN_EC_BITS = 256
LOCAL_PEERS = 32  # participants of one host found through 127.0.0.1 (ports of participant ids 0..31)
SERVER_PEERS = 8  # participant ids on the server host the robots try behind its TCP port
_HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
_DNS_NAME = re.compile(r"^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}"
                       r"[A-Za-z0-9])?)*$")
_RESERVED_NAMES = ("ca", "server")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
# An OpenSSL 3 error line: "40D7...:error:03000072:digital envelope routines:X509_PUBKEY_get0:decode error:file:line:"
_OPENSSL_ERROR_LINE = re.compile(r"^[0-9A-F]+:error:[0-9A-F]+:[^:]*:[^:]*:([^:]*):")


def _xml_text(text: str) -> str:
    return _html_escape(text, quote=False)


class CertificateError(ValueError):
    """A certificate folder or a `robot-rl certs` request cannot be used; the message names the file or option."""


def _date(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(seconds))


@dataclass(frozen=True)
class SecureHost:
    """One host's certificate folder: its role, the server's address and port, and the TLS files."""

    folder: Path
    role: str
    server: str
    port: int
    host: str
    not_after: float
    """When the host's certificate expires (seconds since the epoch)."""

    def path(self, name: str) -> Path:
        """The file `name` (one of HOST_FILES) of this folder."""
        return self.folder / name

    def validity(self, now: float | None = None) -> str:
        """How long the certificate stays valid, e.g. 'certificate valid until 2026-05-01 12:00 UTC (29 days left)'."""
        left = self.not_after - (time.time() if now is None else now)
        span = f"{int(left // 86400)} days" if left >= 2 * 86400 else f"{max(int(left // 3600), 0)} hours"
        return f"certificate valid until {_date(self.not_after)} ({span} left)"


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


def _host_name_problem(name: str, role: str | None) -> str | None:
    """Why `name` cannot be the host name of a host of `role` (None: any role), or None if it can."""
    if not _HOST_NAME.match(name):
        return "must be a host name of letters, digits, '-' and '_'"
    if role == "robot" and name.lower() in _RESERVED_NAMES:
        return f"is reserved (folders {', '.join(_RESERVED_NAMES)} hold the CA and the server)"
    return None


# ----------------------------------------------------------------------------------------------------------- openssl


def _openssl() -> str:
    found = shutil.which("openssl") or next((p for p in ("/usr/bin/openssl", "/usr/local/bin/openssl")
                                             if Path(p).exists()), None)
    if found is None:
        raise CertificateError("the openssl command is not installed (Debian/Ubuntu: apt install openssl)")
    return found


def _openssl_result(openssl: str, args: Sequence[str], stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([openssl, *args], input=stdin, capture_output=True, timeout=600, check=False)


def _openssl_problem(result: subprocess.CompletedProcess) -> str:
    """One line saying why an openssl command failed: its last plain message, else the reason of its last error."""
    lines = [line.strip() for line in result.stderr.decode(errors="replace").splitlines() if line.strip()]
    plain = [line for line in lines if not _OPENSSL_ERROR_LINE.match(line)]
    reasons = [found.group(1) for line in lines if (found := _OPENSSL_ERROR_LINE.match(line))]
    return plain[-1] if plain else reasons[-1] if reasons else f"exit status {result.returncode}"


def _run_openssl(openssl: str, args: Sequence[str], stdin: bytes | None = None) -> bytes:
    result = _openssl_result(openssl, args, stdin)
    if result.returncode != 0:
        raise CertificateError(f"openssl {args[0]} failed: {_openssl_problem(result)}")
    return result.stdout


def _check_private(key: Path) -> None:
    mode = key.stat().st_mode & 0o777
    if mode & 0o077:
        raise CertificateError(f"{key} can be read by other users (mode {mode:o}): chmod 600 {key}")


# Extensions by role: a host's certificate has one purpose (see module doc); keyEncipherment only for RSA keys.


def _openssl_time(text: str) -> float:
    """Seconds since the epoch of openssl's `Dec  2 13:41:52 2026 GMT` (no locale involved)."""
    month, day, clock, year = text.split()[:4]
    hours, minutes, seconds = clock.split(":")
    return float(calendar.timegm((int(year), _MONTHS.index(month) + 1, int(day), int(hours), int(minutes),
                                  int(seconds))))


@dataclass(frozen=True)
class _CertificateFacts:
    name: str  # the subject's CN
    usages: tuple[str, ...]  # extended key usages (serverAuth, clientAuth, ...)
    not_before: float
    not_after: float


@functools.lru_cache(maxsize=32)
def _certificate_facts_cached(path: Path, stamp: tuple[int, int]) -> _CertificateFacts:
    result = _openssl_result(_openssl(), ["x509", "-in", str(path), "-noout", "-nameopt", "RFC2253", "-subject",
                                          "-dates", "-ext", "extendedKeyUsage"])
    if result.returncode != 0:
        raise CertificateError(f"{path} is not a PEM certificate ({_openssl_problem(result)})")
    text = result.stdout.decode(errors="replace").replace("No extensions in certificate", "\n")
    subject = re.search(r"^subject=(.*)$", text, re.M)
    name = re.search(r"(?:^|,)CN=([^,+]*)", subject.group(1)) if subject else None
    dates = [re.search(rf"{field}=(\w+ +\d+ [\d:]+ \d+) GMT", text) for field in ("notBefore", "notAfter")]
    if not all(dates):
        raise CertificateError(f"{path}: openssl x509 printed no validity dates")
    usage = re.search(r"X509v3 Extended Key Usage:.*\n\s*(.+)", text)
    usages = tuple(_USAGE_NAMES.get(u.strip(), u.strip()) for u in usage.group(1).split(",")) if usage else ()
    return _CertificateFacts(name=name.group(1) if name else "", usages=usages,
                             not_before=_openssl_time(dates[0].group(1)), not_after=_openssl_time(dates[1].group(1)))


def _certificate_facts(path: Path) -> _CertificateFacts:
    """The name, purposes and validity of the PEM certificate `path` (read once per version of the file)."""
    status = path.stat()
    return _certificate_facts_cached(path, (status.st_mtime_ns, status.st_size))


# ------------------------------------------------------------------------------------------------ using a folder


def _check_role(cert: Path, usages: tuple[str, ...], role: str, network: Path) -> None:
    wanted, other_role = ROLE_USAGE[role], next(r for r in ROLES if r != role)
    if usages == (wanted,):
        return
    if set(ROLE_USAGE.values()) <= set(usages):
        raise CertificateError(f"{cert} is for both serverAuth and clientAuth (an older `robot-rl certs`): a "
                               f"certificate has one role now; have this host's request signed again with --role "
                               f"{role} (robot-rl certs request, then robot-rl certs sign)")
    if usages == (ROLE_USAGE[other_role],):
        raise CertificateError(f"{cert} is a {other_role} certificate ({ROLE_USAGE[other_role]}) but {network} says "
                               f"role {role}")
    raise CertificateError(f"{cert} is for {', '.join(usages) or 'no extended key usage'}; a {role} certificate is "
                           f"for {wanted} only (sign the request with --role {role})")


def _read_json_object(path: Path) -> dict:
    """The JSON object in `path`; CertificateError naming the file if it is unreadable or not an object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CertificateError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise CertificateError(f"{path} must hold a JSON object")
    return data


def read_host_folder(folder: str | os.PathLike[str], now: float | None = None) -> SecureHost:
    """Read and check a host's certificate folder: every file present and readable, network.json valid, the
    certificate this host's, of its role's purpose and valid at `now` (default: the clock).

    Raises CertificateError naming the file at fault.
    """
    folder = Path(folder).expanduser().resolve()
    if not folder.is_dir():
        raise CertificateError(f"certificate folder {folder} does not exist (make it with `robot-rl certs request`)")
    for name in HOST_FILES:
        path = folder / name
        if not path.is_file():
            if name in SIGNED_FILES and (folder / REQUEST_FILE).is_file():
                raise CertificateError(f"{path} is missing: have {folder / REQUEST_FILE} signed on the CA's machine "
                                       f"(`robot-rl certs sign`) and copy the files it makes into {folder}")
            raise CertificateError(f"{path} is missing: {folder} is not a complete host folder (`robot-rl certs "
                                   "request`, then `robot-rl certs sign`)")
        if not os.access(path, os.R_OK):
            raise CertificateError(f"{path} is not readable by this user")
    _check_private(folder / KEY_FILE)
    path = folder / NETWORK_FILE
    network = _read_json_object(path)
    role, server, port, host = (network.get(key) for key in ("role", "server", "port", "host"))
    if role not in ROLES:
        raise CertificateError(f"{path}: role {role!r} must be one of {', '.join(ROLES)}")
    if not isinstance(server, str) or not isinstance(host, str) or not _HOST_NAME.match(host):
        raise CertificateError(f"{path}: server and host must be names, got {server!r} and {host!r}")
    try:
        server, port = check_server_address(server), check_port(port)
    except CertificateError as error:
        raise CertificateError(f"{path}: {str(error).removeprefix('--')}") from None
    cert = folder / CERT_FILE
    facts = _certificate_facts(cert)
    if facts.name != host:
        raise CertificateError(f"{cert} is {facts.name or 'no host'}'s certificate but {path} says host {host!r}")
    _check_role(cert, facts.usages, role, path)
    now = time.time() if now is None else now
    if now < facts.not_before:
        raise CertificateError(f"{cert} is not valid before {_date(facts.not_before)} (is this host's clock right?)")
    if now >= facts.not_after:
        raise CertificateError(
            f"{cert} expired {_date(facts.not_after)}: renew it: `robot-rl certs request {folder} --host {host}` "
            f"here, `robot-rl certs sign CA request.csr --role {role}` on the CA's machine, and copy the files it "
            f"makes into {folder}")
    return SecureHost(folder=folder, role=role, server=server, port=port, host=host, not_after=facts.not_after)


def _verify_problem(result: subprocess.CompletedProcess, cert: Path, ca: Path, role: str) -> str:
    """One line saying why `openssl verify -purpose` refused `cert`."""
    output = (result.stdout + result.stderr).decode(errors="replace")
    found = re.search(r"error (\d+) at (\d+) depth lookup: *(.*)", output)
    if found is None:
        return f"{cert} does not verify against {ca}: {_openssl_problem(result)}"
    code, depth, reason = int(found.group(1)), int(found.group(2)), found.group(3).strip()
    if code in (2, 7, 20, 21):  # no issuer, bad signature, no local issuer, cannot verify the first certificate
        return f"{cert} is not signed by {ca} (a certificate of another run's CA?): {reason}"
    if code == 26:  # X509_V_ERR_INVALID_PURPOSE
        return (f"{cert} is not usable as a {role} certificate (openssl verify -purpose {_VERIFY_PURPOSE[role]}: "
                f"{reason})")
    return f"{cert} does not verify against {ca} ({'the CA certificate' if depth else 'the certificate'}: {reason})"


@functools.lru_cache(maxsize=16)
def _check_tls_files_cached(folder: Path, role: str, stamps: tuple[int, ...]) -> None:
    import ssl  # here: a process of another network mode does not load Python's OpenSSL for it

    ca, cert, key, dh = (folder / name for name in (CA_FILE, CERT_FILE, KEY_FILE, DH_FILE))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if role == "server" else ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(cafile=str(ca))
    except (ssl.SSLError, OSError) as error:
        raise CertificateError(f"{ca} is not a PEM CA certificate: {error}") from None
    try:
        context.load_cert_chain(str(cert), str(key))
    except (ssl.SSLError, OSError) as error:
        raise CertificateError(f"{cert} and {key} are not a PEM certificate with its private key: {error}") from None
    try:  # Fast DDS loads them on both sides (and without them goes on with plain TCP)
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_dh_params(str(dh))
    except (ssl.SSLError, OSError) as error:
        raise CertificateError(f"{dh} is not PEM DH parameters: {error}") from None
    # Signed by this folder's CA, for this role's purpose (what the peer's OpenSSL checks in the handshake).
    result = _openssl_result(_openssl(), ["verify", "-CAfile", str(ca), "-purpose", _VERIFY_PURPOSE[role], str(cert)])
    if result.returncode != 0:
        raise CertificateError(_verify_problem(result, cert, ca, role))


def check_tls_files(host: SecureHost) -> None:
    """Check that the folder's CA, certificate, key and DH files load (Python's ssl module) and that the CA signed the
    certificate for the host's role (`openssl verify -purpose`); raise CertificateError naming the file at fault."""
    stamps = tuple((host.folder / name).stat().st_mtime_ns for name in (CA_FILE, CERT_FILE, KEY_FILE, DH_FILE))
    _check_tls_files_cached(host.folder, host.role, stamps)


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
    (robot_rl.ros.net.lan.pacing_xml)."""
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
            "process's OpenSSL had read its configuration; start the process with robot_rl.ros.net.env.ros_environment()")
