"""Making a run's certificates for the ``secure`` network mode (``robot-rl certs ca | request | sign``, with the
``openssl`` command): the CA on the CA's machine, each host's key and request on that host, the CA's signature of a
request with the role the signer gives it. Only requests and public files travel; what a host's folder must hold and
how a process checks and uses it: :mod:`robot_rl.ros.net.secure`."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from robot_rl.core.files import atomic_write_text
from robot_rl.ros.net.secure import (
    CA_FILE, CA_FILES, CA_KEY_FILE, CERT_FILE, CertificateError, DEFAULT_CA_DAYS, DEFAULT_DAYS, DEFAULT_PORT,
    DH_FILE, DH_GROUPS, ISSUED_FOLDER, KEY_FILE, MAX_DAYS, MIN_EC_BITS, NETWORK_FILE, REQUEST_FILE, ROLE_USAGE, ROLES,
    RSA_BITS, RUN_FILE, SIGNED_FILES, SecureHost, _certificate_facts, _check_private, _date, _host_name_problem,
    _openssl, _openssl_problem, _openssl_result, _read_json_object, _run_openssl, check_port, check_server_address,
    check_tls_files, read_host_folder,
)


# ----------------------------------------------------------------------------------------------------------- openssl

_HOST_SECTION = """[{role}]
basicConstraints = critical, CA:FALSE
keyUsage = critical, {{key_usage}}
extendedKeyUsage = {usage}
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = {{alt_names}}
"""
_OPENSSL_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
[ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
""" + "".join(_HOST_SECTION.format(role=role, usage=usage) for role, usage in ROLE_USAGE.items())  # one purpose each


def check_days(days: int) -> int:
    """`days` if it is a certificate lifetime in days in [1, MAX_DAYS]; else raise."""
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_DAYS:
        raise CertificateError(f"--days {days!r} must be in [1, {MAX_DAYS}]")
    return days


def check_robot_names(robots: Sequence[str]) -> tuple[str, ...]:
    """The robot host names if each is a valid, distinct folder name (not `ca` or `server`); else raise."""
    if not robots:
        raise CertificateError("give at least one --robot NAME")
    for name in robots:
        problem = _host_name_problem(name, "robot")
        if problem:
            raise CertificateError(f"--robot {name!r} {problem}")
    lowered = [name.lower() for name in robots]
    repeated = sorted({name for name in robots if lowered.count(name.lower()) > 1})
    if repeated:
        raise CertificateError(f"--robot {', '.join(repeated)} given more than once")
    return tuple(robots)


def _check_dh(dh: str) -> str:
    if dh not in (*DH_GROUPS, "generate"):
        raise CertificateError(f"--dh {dh!r} is not one of {', '.join((*DH_GROUPS, 'generate'))}")
    return dh


def _write_private(path: Path, data: bytes) -> None:
    """Write `data` to a new file only its owner can read (mode 0600 from the start)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(data)


def _new_key(openssl: str) -> bytes:
    return _run_openssl(openssl, ["genpkey", "-algorithm", "RSA", "-pkeyopt", f"rsa_keygen_bits:{RSA_BITS}"])


@contextlib.contextmanager
def _config_file(alt_names: str = "DNS:ca", key_usage: str = "digitalSignature") -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="robot_rl_certs_") as scratch:
        path = Path(scratch) / "openssl.cnf"
        path.write_text(_OPENSSL_CONFIG.format(alt_names=alt_names, key_usage=key_usage))
        yield str(path)


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


@dataclass(frozen=True)
class CertificateAuthority:
    """A run's CA folder (:func:`create_ca`): ca.key, ca.pem, dh.pem and run.json (the server, its port, the run id)."""

    folder: Path
    server: str
    port: int
    run: str
    not_after: float
    """When the CA's certificate expires (seconds since the epoch): no host certificate outlasts it."""


@dataclass(frozen=True)
class HostRequest:
    """What :func:`create_request` made in a host's folder: its key (new or reused) and its certificate request."""

    folder: Path
    host: str
    request: Path
    key_reused: bool


@dataclass(frozen=True)
class SignedCertificate:
    """What :func:`sign_request` made: a folder of one host's public files (SIGNED_FILES)."""

    folder: Path
    host: str
    role: str
    server: str
    port: int
    not_after: float


@dataclass(frozen=True)
class CertificateRun:
    """What :func:`create_certificates` made: the CA folder and one folder per host (server first)."""

    out: Path
    ca_folder: Path
    hosts: tuple[SecureHost, ...]


# ----------------------------------------------------------------------------------------------- making certificates


@contextlib.contextmanager
def _new_folder(out: Path) -> Iterator[None]:
    """Make `out` (mode 0700; it must not exist or be empty) for the block; on failure nothing of it is left."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CertificateError(f"{out} exists and is not an empty folder: give a new one (a run's CA is never "
                               "overwritten)")
    made = not out.exists()
    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    out.chmod(0o700)
    try:
        yield
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        if not made:
            out.mkdir(mode=0o700, exist_ok=True)
        raise


def create_ca(out: str | os.PathLike[str], server: str, port: int = DEFAULT_PORT, days: int = DEFAULT_CA_DAYS,
              dh: str = "ffdhe2048") -> CertificateAuthority:
    """Make a run's CA in the folder `out` (which must not exist or be empty; see module doc); raise CertificateError
    on bad input, leaving nothing of `out`."""
    server, port, days, dh = check_server_address(server), check_port(port), check_days(days), _check_dh(dh)
    out = Path(out).expanduser().absolute()
    openssl = _openssl()
    with _new_folder(out):
        run_id = secrets.token_hex(4)
        dh_pem = _dh_parameters(openssl, dh)
        ca_key = out / CA_KEY_FILE
        _write_private(ca_key, _new_key(openssl))
        with _config_file() as config:
            ca_pem = _run_openssl(openssl, [
                "req", "-x509", "-new", "-key", str(ca_key), "-config", config, "-extensions", "ca", "-sha256",
                "-days", str(days), "-subj", f"/O=robot_rl/CN=robot_rl run CA {run_id}",
                "-set_serial", str(secrets.randbits(63))])
        (out / CA_FILE).write_bytes(ca_pem)
        (out / DH_FILE).write_bytes(dh_pem)
        (out / RUN_FILE).write_text(json.dumps({"server": server, "port": port, "run": run_id}, indent=2) + "\n")
        return read_ca_folder(out)


def read_ca_folder(folder: str | os.PathLike[str]) -> CertificateAuthority:
    """Read a CA folder made by `robot-rl certs ca`; raise CertificateError naming the file at fault."""
    folder = Path(folder).expanduser().absolute()
    if not folder.is_dir():
        raise CertificateError(f"CA folder {folder} does not exist (make it with `robot-rl certs ca`)")
    for name in CA_FILES:
        if not (folder / name).is_file():
            raise CertificateError(f"{folder / name} is missing: {folder} is not a `robot-rl certs ca` folder")
    _check_private(folder / CA_KEY_FILE)
    path = folder / RUN_FILE
    run = _read_json_object(path)
    if not isinstance(run.get("server"), str) or not isinstance(run.get("run"), str):
        raise CertificateError(f"{path} must hold a JSON object with the server's address and the run id")
    try:
        server, port = check_server_address(run["server"]), check_port(run.get("port"))
    except CertificateError as error:
        raise CertificateError(f"{path}: {str(error).removeprefix('--')}") from None
    return CertificateAuthority(folder=folder, server=server, port=port, run=run["run"],
                                not_after=_certificate_facts(folder / CA_FILE).not_after)


def create_request(folder: str | os.PathLike[str], host: str) -> HostRequest:
    """Make `host`'s private key in `folder` (or reuse the one there: renewal) and its certificate request (see module
    doc); raise CertificateError on bad input."""
    problem = _host_name_problem(host, None)
    if problem:
        raise CertificateError(f"--host {host!r} {problem}")
    folder = Path(folder).expanduser().absolute()
    if folder.exists() and not folder.is_dir():
        raise CertificateError(f"{folder} exists and is not a folder")
    try:
        signed_for = json.loads((folder / NETWORK_FILE).read_text()).get("host")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        signed_for = None
    if isinstance(signed_for, str) and signed_for != host:
        raise CertificateError(f"{folder} holds {signed_for}'s certificate: give --host {signed_for} to renew it, or "
                               f"another folder for {host}")
    openssl = _openssl()
    key, made_folder = folder / KEY_FILE, not folder.exists()
    reused = key.exists()
    if reused:
        _check_private(key)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        if not reused:
            _write_private(key, _new_key(openssl))
        with _config_file() as config:
            result = _openssl_result(openssl, ["req", "-new", "-key", str(key), "-config", config, "-sha256",
                                               "-subj", f"/O=robot_rl/CN={host}"])
        if result.returncode != 0:
            raise CertificateError(f"{key} is not a private key openssl can use ({_openssl_problem(result)}): move it "
                                   "away to make a new one")
        atomic_write_text(folder / REQUEST_FILE, result.stdout.decode())
    except BaseException:
        if made_folder:
            shutil.rmtree(folder, ignore_errors=True)
        elif not reused:
            key.unlink(missing_ok=True)
        raise
    return HostRequest(folder=folder, host=host, request=folder / REQUEST_FILE, key_reused=reused)


def _read_request(openssl: str, request: Path) -> tuple[str, str]:
    """The host name (CN) and key type (RSA or EC) of the certificate request `request`, once its signature and its
    key are checked; else raise."""
    result = _openssl_result(openssl, ["req", "-in", str(request), "-noout", "-verify", "-nameopt", "RFC2253",
                                       "-subject", "-text"])
    if result.returncode != 0:
        raise CertificateError(f"{request} is not a certificate request openssl can verify "
                               f"({_openssl_problem(result)})")
    text = result.stdout.decode(errors="replace")
    subject = re.search(r"^subject=(.*)$", text, re.M)
    name = re.search(r"(?:^|,)CN=([^,+]*)", subject.group(1)) if subject else None
    if name is None:
        raise CertificateError(f"{request} names no host (no CN in its subject): make it with `robot-rl certs request "
                               "FOLDER --host NAME`")
    algorithm = re.search(r"Public Key Algorithm: *(\S+)", text)
    bits = re.search(r"Public-Key: *\((\d+) bit\)", text)
    algorithm, bits = (algorithm.group(1) if algorithm else "unknown"), (int(bits.group(1)) if bits else 0)
    if algorithm == "rsaEncryption" and bits >= RSA_BITS:
        return name.group(1), "RSA"
    if algorithm == "id-ecPublicKey" and bits >= MIN_EC_BITS:
        return name.group(1), "EC"
    if algorithm in ("rsaEncryption", "id-ecPublicKey"):
        raise CertificateError(f"{request} holds a {bits}-bit {'RSA' if algorithm == 'rsaEncryption' else 'EC'} key: "
                               f"too weak (RSA {RSA_BITS} or EC {MIN_EC_BITS} bits at least)")
    raise CertificateError(f"{request} holds a key of type {algorithm}: robot_rl signs RSA and EC keys only")


def sign_request(ca_folder: str | os.PathLike[str], request: str | os.PathLike[str], role: str,
                 days: int = DEFAULT_DAYS, out: str | os.PathLike[str] | None = None) -> SignedCertificate:
    """Sign a host's certificate request as `role` with the CA in `ca_folder`; write the host's public files to `out`
    (default CA/issued/<host>); raise CertificateError on bad input (see module doc)."""
    if role not in ROLES:
        raise CertificateError(f"--role {role!r} must be one of {', '.join(ROLES)}")
    days = check_days(days)
    ca = read_ca_folder(ca_folder)
    request = Path(request).expanduser().absolute()
    if not request.is_file():
        raise CertificateError(f"{request} does not exist (a host makes it with `robot-rl certs request`)")
    openssl = _openssl()
    host, key_type = _read_request(openssl, request)
    problem = _host_name_problem(host, role)
    if problem:
        raise CertificateError(f"{request}: host {host!r} {problem}")
    if time.time() + days * 86400 > ca.not_after + 3600:
        raise CertificateError(f"--days {days} would outlast the CA ({ca.folder / CA_FILE} expires "
                               f"{_date(ca.not_after)}): give fewer days, or make a new CA")
    out = ca.folder / ISSUED_FOLDER / host if out is None else Path(out).expanduser().absolute()
    if out.exists() and not out.is_dir():
        raise CertificateError(f"--out {out} exists and is not a folder")
    try:
        previous = json.loads((out / NETWORK_FILE).read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        previous = {}
    if isinstance(previous, dict) and previous and (previous.get("host"), previous.get("role")) != (host, role):
        raise CertificateError(f"{out} holds {previous.get('host')}'s {previous.get('role')} certificate: give "
                               "another --out (a host has one role)")
    key_usage = "digitalSignature, keyEncipherment" if key_type == "RSA" else "digitalSignature"
    with _config_file(_alt_names(host, ca.server if role == "server" else None), key_usage) as config:
        certificate = _run_openssl(openssl, [
            "x509", "-req", "-in", str(request), "-CA", str(ca.folder / CA_FILE), "-CAkey",
            str(ca.folder / CA_KEY_FILE), "-extfile", config, "-extensions", role, "-sha256", "-days", str(days),
            "-set_serial", str(secrets.randbits(63))])
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / CERT_FILE, certificate.decode())
    for name in (CA_FILE, DH_FILE):
        atomic_write_text(out / name, (ca.folder / name).read_text())
    atomic_write_text(out / NETWORK_FILE, json.dumps(
        {"role": role, "server": ca.server, "port": ca.port, "host": host}, indent=2) + "\n")
    return SignedCertificate(folder=out, host=host, role=role, server=ca.server, port=ca.port,
                             not_after=_certificate_facts(out / CERT_FILE).not_after)


def create_certificates(out: Path, server: str, robots: Sequence[str], port: int = DEFAULT_PORT,
                        days: int = DEFAULT_DAYS, dh: str = "ffdhe2048") -> CertificateRun:
    """For tests and benches whose hosts share one disk: the three steps at once, every host's key made here (not
    for real hosts, see module doc): `out`/ca, `out`/server and `out`/<robot>, each host's certificate valid `days`.

    `out` must not exist or be empty; on failure nothing of it is left. Raises CertificateError on bad input.
    """
    server, port, robots = check_server_address(server), check_port(port), check_robot_names(robots)
    days, dh = check_days(days), _check_dh(dh)
    out = Path(out).expanduser().absolute()
    with _new_folder(out):
        ca = create_ca(out / "ca", server, port, days=max(days, DEFAULT_CA_DAYS), dh=dh)
        hosts = []
        for role, name in (("server", "server"), *(("robot", robot) for robot in robots)):
            folder = create_request(out / name, name).folder
            sign_request(ca.folder, folder / REQUEST_FILE, role, days=days, out=folder)
            hosts.append(read_host_folder(folder))
            check_tls_files(hosts[-1])
    return CertificateRun(out=out, ca_folder=ca.folder, hosts=tuple(hosts))


# ------------------------------------------------------------------------------------ what `robot-rl certs` prints


def ca_instructions(ca: CertificateAuthority) -> str:
    """What `robot-rl certs ca` prints: what the CA folder holds and the next two steps."""
    return "\n".join([
        f"made the certificate authority of run {ca.run} in {ca.folder}/ (valid until {_date(ca.not_after)}):",
        f"  {CA_KEY_FILE} signs this run's certificates: it stays in this folder, never copy it",
        f"  {CA_FILE}, {DH_FILE}, {RUN_FILE}: public (they go out with each signed certificate)",
        "next, on each host (the learner's host, each robot's computer), where its private key will stay:",
        "  robot-rl certs request ~/robot_rl_certs --host NAME",
        f"then copy that host's request.csr here and sign it (one server: the learner's host; --days {DEFAULT_DAYS} "
        "unless told):",
        f"  robot-rl certs sign {ca.folder} NAME.csr --role server|robot",
        f"the robots will reach TCP port {ca.port} of {ca.server}."])


def request_instructions(made: HostRequest) -> str:
    """What `robot-rl certs request` prints: which file goes to the CA's machine and what comes back."""
    key = (f"reused {made.folder / KEY_FILE} (renewal: the same key, a new certificate)" if made.key_reused
           else f"made {made.folder / KEY_FILE}: this host's private key; it stays here, never copy it")
    return "\n".join([
        key, f"wrote {made.request} (public): copy it to the CA's machine, e.g. as {made.host}.csr, and sign it there:",
        f"  robot-rl certs sign CA {made.host}.csr --role server|robot",
        f"then copy the files it makes ({', '.join(SIGNED_FILES)}) into {made.folder}/ here and, for every robot_rl "
        "ROS process of this host:",
        f"  export ROBOT_RL_NETWORK=secure ROBOT_RL_CERTS={made.folder}"])


def sign_instructions(signed: SignedCertificate) -> str:
    """What `robot-rl certs sign` prints: what was signed, for how long, and where the files go."""
    where = (f"the learner's host; the robots reach it at {signed.server}, TCP port {signed.port}"
             if signed.role == "server" else f"a robot; it reaches the server at {signed.server}:{signed.port}")
    return "\n".join([
        f"signed {signed.host}'s request as {signed.role} ({where}), valid until {_date(signed.not_after)}:",
        f"  {signed.folder}/ holds {', '.join(SIGNED_FILES)}: public files, no private key",
        f"copy these files into FOLDER on {signed.host} (the folder `robot-rl certs request` made, holding its "
        f"key.pem), e.g. scp {signed.folder}/* {signed.host}:FOLDER/",
        f"renew before {_date(signed.not_after)}: `robot-rl certs request FOLDER --host {signed.host}` there (the same "
        f"key), then sign the new request here; a host no longer signed is refused once its certificate expires."])


def instructions(run: CertificateRun) -> str:
    """What :func:`create_certificates` made and how each host folder is used (hosts sharing this disk)."""
    server = run.hosts[0]
    width = max(len(str(folder)) for folder in (run.ca_folder, *(host.folder for host in run.hosts))) + 3
    lines = [f"made a certificate authority and {len(run.hosts)} host folders in {run.out} (every host's key made "
             "here: for hosts sharing this disk; real hosts use robot-rl certs ca / request / sign):",
             f"  {str(run.ca_folder) + '/':<{width}}ca.key signs this run's certificates"]
    for host in run.hosts:
        where = (f"the learner's host (the robots reach it at {host.server}, TCP port {host.port})"
                 if host.role == "server" else f"robot {host.host}'s computer")
        lines.append(f"  {str(host.folder) + '/':<{width}}ROBOT_RL_CERTS of {where}")
    lines += [
        "for every robot_rl ROS process of a host:",
        f"  export ROBOT_RL_NETWORK=secure ROBOT_RL_CERTS={server.folder}   # that host's folder",
        f"the robots must reach TCP port {server.port} of {server.server}."]
    return "\n".join(lines)
