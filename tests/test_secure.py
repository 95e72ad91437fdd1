"""The `secure` network mode without a ROS graph: `robot-rl certs ca / request / sign` (robot_rl.ros.net.secure), one role
per certificate (checked in the folder and by OpenSSL in a handshake), lifetimes, and what robot_rl.ros.net.env makes of a
certificate folder (the generated profile and OpenSSL config, errors naming the file)."""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from robot_rl.ros.net import env as ros_env
from robot_rl.ros.net import certs, secure
from robot_rl.ros.net.env import FASTDDS_PROFILE_PATH, RosEnvironmentError, ros_environment
from robot_rl.ros.net.lan import is_lan_profile

SERVER = "10.232.9.2"  # written into certificates and profiles only: nothing here opens a connection
NS = "{http://www.eprosima.com}"
REPO_ROOT = Path(__file__).resolve().parents[1]
SERVER_AUTH, CLIENT_AUTH = "TLS Web Server Authentication", "TLS Web Client Authentication"
PURPOSE_REFUSED = "(unsuitable|unsupported) certificate purpose"  # OpenSSL 3 / 1.1 words for X509_V_ERR_INVALID_PURPOSE

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl command is not installed")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One run's certificates (server, robots `arm1` and `arm2`) and another run's (robot `arm1` too)."""
    root = tmp_path_factory.mktemp("certs")
    return (certs.create_certificates(root / "run", server=SERVER, robots=["arm1", "arm2"], port=7651),
            certs.create_certificates(root / "other", server=SERVER, robots=["arm1"]))


@pytest.fixture
def folders(run, tmp_path):
    """Copies of the server's and the robot arm1's folders that a test may change (modes kept)."""
    return {name: Path(shutil.copytree(run[0].out / name, tmp_path / name)) for name in ("server", "arm1")}


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def _openssl(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=check)


def _usages(cert: Path) -> str:
    """The extended key usage line of `cert`, as openssl prints it."""
    text = _openssl("x509", "-in", str(cert), "-noout", "-text").stdout
    return text.split("X509v3 Extended Key Usage:")[1].splitlines()[1].strip()


def test_create_certificates_makes_a_ca_and_one_folder_per_host_each_with_one_role(run):
    made, _ = run
    out = made.out
    assert sorted(p.name for p in out.iterdir()) == ["arm1", "arm2", "ca", "server"]
    assert sorted(p.name for p in (out / "ca").iterdir()) == ["ca.key", "ca.pem", "dh.pem", "run.json"]
    assert _mode(out / "ca" / "ca.key") == 0o600 and _mode(out / "ca") == 0o700
    ca_key = (out / "ca" / "ca.key").read_bytes()
    for host, role in (("server", "server"), ("arm1", "robot"), ("arm2", "robot")):
        folder = out / host
        assert sorted(p.name for p in folder.iterdir()) == sorted((*secure.HOST_FILES, "request.csr"))
        assert _mode(folder / "key.pem") == 0o600 and _mode(folder) == 0o700
        assert (folder / "ca.pem").read_bytes() == (out / "ca" / "ca.pem").read_bytes()
        assert all(ca_key not in p.read_bytes() for p in folder.iterdir())  # the CA key is never copied
        assert json.loads((folder / "network.json").read_text()) == {
            "role": role, "server": SERVER, "port": 7651, "host": host}
        # Signed by the run's CA for its role's purpose only: OpenSSL refuses it for the other one.
        purpose, other = ("sslserver", "sslclient") if role == "server" else ("sslclient", "sslserver")
        ca_pem, cert = str(out / "ca" / "ca.pem"), str(folder / "cert.pem")
        assert _openssl("verify", "-CAfile", ca_pem, "-purpose", purpose, cert).stdout.strip().endswith(": OK")
        refused = _openssl("verify", "-CAfile", ca_pem, "-purpose", other, cert, check=False)
        assert refused.returncode != 0 and "purpose" in refused.stdout + refused.stderr
        assert _usages(folder / "cert.pem") == (SERVER_AUTH if role == "server" else CLIENT_AUTH)
        text = _openssl("x509", "-in", cert, "-noout", "-text").stdout
        assert "Public-Key: (2048 bit)" in text
        assert f"DNS:{host}" in text and ((f"IP Address:{SERVER}" in text) == (role == "server"))
        assert 29 * 86400 < secure.read_host_folder(folder).not_after - time.time() <= 30 * 86400  # 30 days
    assert [h.role for h in made.hosts] == ["server", "robot", "robot"] and made.hosts[0].port == 7651
    printed = certs.instructions(made)
    for line in (f"{out}/ca/", f"{out}/server/  ROBOT_RL_CERTS of the learner's host (the robots reach it at "
                 f"{SERVER}, TCP port 7651)", f"{out}/arm1/    ROBOT_RL_CERTS of robot arm1's computer",
                 "export ROBOT_RL_NETWORK=secure ROBOT_RL_CERTS=", "real hosts use robot-rl certs ca / request / sign"):
        assert line in printed, printed


def _files_holding(root: Path, data: bytes) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and data in p.read_bytes())


def test_cli_three_steps_keep_each_key_on_its_host_and_renew_with_the_same_key(tmp_path, capsys):
    """`certs ca` on the CA's machine, `certs request` on each host, `certs sign` back on the CA's machine: only the
    request and public files travel (here: copies between folders standing for the machines)."""
    from robot_rl.apps.cli import main

    ca, inbox = tmp_path / "ca-machine" / "run-ca", tmp_path / "ca-machine" / "inbox"
    main(["certs", "ca", str(ca), "--server", "learner.example", "--port", "7700"])
    printed = capsys.readouterr().out
    assert "ca.key signs this run's certificates: it stays in this folder" in printed
    assert "robot-rl certs request ~/robot_rl_certs --host NAME" in printed
    assert "TCP port 7700 of learner.example" in printed
    assert sorted(p.name for p in ca.iterdir()) == ["ca.key", "ca.pem", "dh.pem", "run.json"]
    assert _mode(ca) == 0o700 and _mode(ca / "ca.key") == 0o600
    assert json.loads((ca / "run.json").read_text()).items() >= {"server": "learner.example", "port": 7700}.items()
    inbox.mkdir()
    keys = {}
    for host, role in (("learner", "server"), ("arm1", "robot")):
        folder = tmp_path / f"{host}-machine" / "certs"
        main(["certs", "request", str(folder), "--host", host])
        printed = capsys.readouterr().out
        assert f"made {folder}/key.pem: this host's private key; it stays here" in printed
        assert f"robot-rl certs sign CA {host}.csr --role server|robot" in printed
        assert sorted(p.name for p in folder.iterdir()) == ["key.pem", "request.csr"]
        assert _mode(folder) == 0o700 and _mode(folder / "key.pem") == 0o600
        keys[host] = (folder / "key.pem").read_bytes()
        shutil.copy(folder / "request.csr", inbox / f"{host}.csr")  # to the CA's machine
        main(["certs", "sign", str(ca), str(inbox / f"{host}.csr"), "--role", role])
        printed = capsys.readouterr().out
        signed = ca / "issued" / host
        assert f"signed {host}'s request as {role}" in printed and f"copy these files into FOLDER on {host}" in printed
        assert sorted(p.name for p in signed.iterdir()) == sorted(secure.SIGNED_FILES)
        assert not [p for p in signed.iterdir() if b"PRIVATE KEY" in p.read_bytes()]  # public files only
        assert _usages(signed / "cert.pem") == (SERVER_AUTH if role == "server" else CLIENT_AUTH)
        for name in secure.SIGNED_FILES:  # back to the host
            shutil.copy(signed / name, folder / name)
        made = secure.read_host_folder(folder)
        secure.check_tls_files(made)
        assert (made.role, made.host, made.server, made.port) == (role, host, "learner.example", 7700)
        assert "(29 days left)" in made.validity()
    # Each key exists in its host's folder only; nothing on the CA's machine but ca.key is a private key.
    for host, key in keys.items():
        assert _files_holding(tmp_path, key) == [tmp_path / f"{host}-machine" / "certs" / "key.pem"]
    assert [p.name for p in (tmp_path / "ca-machine").rglob("*") if p.is_file() and b"PRIVATE KEY" in p.read_bytes()
            ] == ["ca.key"]
    # Renewal: the same two commands; the host keeps its key and gets a new certificate (here for 10 days, to --out).
    folder = tmp_path / "arm1-machine" / "certs"
    old_cert = (folder / "cert.pem").read_bytes()
    main(["certs", "request", str(folder), "--host", "arm1"])
    assert f"reused {folder}/key.pem (renewal" in capsys.readouterr().out
    assert (folder / "key.pem").read_bytes() == keys["arm1"]
    main(["certs", "sign", str(ca), str(folder / "request.csr"), "--role", "robot", "--days", "10",
          "--out", str(tmp_path / "renewed")])
    capsys.readouterr()
    for name in secure.SIGNED_FILES:
        shutil.copy(tmp_path / "renewed" / name, folder / name)
    renewed = secure.read_host_folder(folder)
    secure.check_tls_files(renewed)
    assert (folder / "cert.pem").read_bytes() != old_cert and "(9 days left)" in renewed.validity()


def _request(folder: Path, name: str, *key_options: str) -> Path:
    """A certificate request for the host `name` with a key made by `openssl genpkey key_options` (empty: none)."""
    folder.mkdir(exist_ok=True)
    key, csr = folder / f"{name}.key", folder / f"{name}.csr"
    _openssl("genpkey", *key_options, "-out", str(key))
    _openssl("req", "-new", "-key", str(key), "-subj", f"/O=robot_rl/CN={name}", "-out", str(csr))
    return csr


def test_cli_certs_rejects_bad_input_in_one_line(tmp_path, capsys):
    from robot_rl.apps.cli import main

    ca, csrs = tmp_path / "ca", tmp_path / "csrs"
    main(["certs", "ca", str(ca), "--server", SERVER, "--days", "40"])
    main(["certs", "request", str(tmp_path / "arm1"), "--host", "arm1"])
    main(["certs", "sign", str(ca), str(tmp_path / "arm1" / "request.csr"), "--role", "robot"])
    capsys.readouterr()
    (tmp_path / "afile").write_text("")
    (tmp_path / "junk.csr").write_text("not a request\n")
    taken = tmp_path / "taken"  # a folder holding arm1's signed files
    shutil.copytree(ca / "issued" / "arm1", taken)
    rsa = ("-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048")
    bad = [
        (["ca", str(ca), "--server", SERVER], "exists and is not an empty folder"),
        (["ca", str(tmp_path / "n1"), "--server", "no such host!"], "neither an IPv4 address nor"),
        (["ca", str(tmp_path / "n2"), "--server", "0.0.0.0"], "must be the IPv4 address robots reach"),
        (["ca", str(tmp_path / "n3"), "--server", SERVER, "--port", "70000"], "--port 70000 must be"),
        (["ca", str(tmp_path / "n4"), "--server", SERVER, "--days", "0"], "--days 0 must be in [1, 36500]"),
        (["ca", str(tmp_path / "n5")], "missing --server"),
        (["ca", str(tmp_path / "n6"), "--server", SERVER, "--dh", "x"], "--dh: 'x' is not one of"),
        ([str(tmp_path / "n7"), "--server", SERVER, "--robot", "a"], "unknown command"),  # the one-shot form is gone
        (["request", str(tmp_path / "n8"), "--host", "a/b"], "--host 'a/b' must be a host name"),
        (["request", str(tmp_path / "n9")], "missing --host"),
        (["request", str(tmp_path / "afile"), "--host", "a"], "exists and is not a folder"),
        (["request", str(taken), "--host", "arm2"], "holds arm1's certificate: give --host arm1 to renew it"),
        (["sign", str(ca), str(_request(csrs, "arm2", *rsa)), "--role", "pilot"], "--role: 'pilot' is not one of"),
        (["sign", str(ca), str(csrs / "arm2.csr")], "missing --role"),
        (["sign", str(ca), str(csrs / "arm2.csr"), "--role", "robot", "--days", "0"], "--days 0 must be"),
        (["sign", str(ca), str(csrs / "arm2.csr"), "--role", "robot", "--days", "60"],
         "--days 60 would outlast the CA"),
        (["sign", str(ca), str(csrs / "arm2.csr"), "--role", "robot", "--out", str(taken)],
         "holds arm1's robot certificate: give another --out"),
        (["sign", str(ca), str(csrs / "arm1.csr"), "--role", "robot"], "arm1.csr does not exist"),
        (["sign", str(tmp_path / "arm1"), str(csrs / "arm2.csr"), "--role", "robot"], "ca.key is missing"),
        (["sign", str(ca), str(tmp_path / "junk.csr"), "--role", "robot"],
         "junk.csr is not a certificate request openssl can verify"),
        (["sign", str(ca), str(_request(csrs, "ed", "-algorithm", "ED25519")), "--role", "robot"],
         "holds a key of type ED25519: robot_rl signs RSA and EC keys only"),
        (["sign", str(ca), str(_request(csrs, "weak", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024")),
          "--role", "robot"], "holds a 1024-bit RSA key: too weak"),
        (["sign", str(ca), str(_request(csrs, "server", *rsa)), "--role", "robot"], "host 'server' is reserved"),
        (["sign", str(ca), str(_request(csrs, "ca", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256")),
          "--role", "robot"], "host 'ca' is reserved"),
    ]
    for args, message in bad:
        with pytest.raises(SystemExit) as exit_info:
            main(["certs", *args])
        assert exit_info.value.code == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: ") and message in err, (args, err)
    # Nothing half-made: no CA or host folder from a refused command; nothing signed but arm1.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "arm1", "ca", "csrs", "junk.csr", "taken"]
    assert [p.name for p in (ca / "issued").iterdir()] == ["arm1"]
    # An EC key of 256 bits is fine, and the server's host may be called `server`.
    main(["certs", "sign", str(ca), str(csrs / "ca.csr"), "--role", "server"])
    assert "signed ca's request as server" in capsys.readouterr().out
    main(["certs", "sign", str(ca), str(csrs / "server.csr"), "--role", "server", "--out", str(tmp_path / "s")])
    assert _usages(tmp_path / "s" / "cert.pem") == SERVER_AUTH


def test_a_folder_is_checked_file_by_file(folders, run):
    robot = folders["arm1"]
    assert secure.read_host_folder(robot).role == "robot"
    secure.check_tls_files(secure.read_host_folder(robot))
    with pytest.raises(secure.CertificateError, match="does not exist"):
        secure.read_host_folder(robot.parent / "nowhere")
    (robot / "key.pem").chmod(0o644)
    with pytest.raises(secure.CertificateError, match=r"key.pem can be read by other users .*chmod 600"):
        secure.read_host_folder(robot)
    (robot / "key.pem").chmod(0o600)
    network = json.loads((robot / "network.json").read_text())
    for change, message in (({"role": "client"}, "role 'client' must be one of server, robot"),
                            ({"port": "7650"}, "port '7650' must be a TCP port"),
                            ({"server": "1.2.3.4.5.6"}, "neither an IPv4 address nor a host name"),
                            ({"host": "arm2"}, r"cert.pem is arm1's certificate but .*network.json says host 'arm2'")):
        (robot / "network.json").write_text(json.dumps({**network, **change}))
        with pytest.raises(secure.CertificateError, match=message):
            secure.read_host_folder(robot)
    (robot / "network.json").write_text("{not json")
    with pytest.raises(secure.CertificateError, match="network.json is not valid JSON"):
        secure.read_host_folder(robot)
    (robot / "network.json").write_text(json.dumps(network))
    # Another run's certificate for the same host name: without its key, with it; then a broken DH file.
    other = run[1].out / "arm1"
    shutil.copy(other / "cert.pem", robot / "cert.pem")
    with pytest.raises(secure.CertificateError, match="cert.pem and .*key.pem are not a PEM certificate with its"):
        secure.check_tls_files(secure.read_host_folder(robot))
    shutil.copy(other / "key.pem", robot / "key.pem")
    with pytest.raises(secure.CertificateError,
                       match=r"cert.pem is not signed by .*ca.pem \(a certificate of another run's CA\?\)"):
        secure.check_tls_files(secure.read_host_folder(robot))
    shutil.copy(run[0].out / "arm1" / "cert.pem", robot / "cert.pem")
    shutil.copy(run[0].out / "arm1" / "key.pem", robot / "key.pem")
    (robot / "dh.pem").write_text("not PEM\n")
    with pytest.raises(secure.CertificateError, match="dh.pem is not PEM DH parameters"):
        secure.check_tls_files(secure.read_host_folder(robot))
    (robot / "cert.pem").write_text("not PEM\n")
    with pytest.raises(secure.CertificateError, match="cert.pem is not a PEM certificate"):
        secure.read_host_folder(robot)
    for name in secure.HOST_FILES:
        broken = Path(shutil.copytree(run[0].out / "server", robot.parent / f"without-{name}"))
        (broken / name).unlink()
        hint = "have .*request.csr signed on the CA's machine" if name != "key.pem" else ".* is not a complete host"
        with pytest.raises(secure.CertificateError, match=f"{broken / name} is missing: {hint}"):
            secure.read_host_folder(broken)


def test_a_certificate_of_the_wrong_role_or_out_of_date_is_refused_in_one_line(folders, run):
    robot, server = folders["arm1"], folders["server"]
    for folder, role, message in (
            (robot, "server", r"cert.pem is a robot certificate \(clientAuth\) but .*network.json says role server"),
            (server, "robot", r"cert.pem is a server certificate \(serverAuth\) but .*network.json says role robot")):
        network = json.loads((folder / "network.json").read_text())
        (folder / "network.json").write_text(json.dumps({**network, "role": role}))
        with pytest.raises(secure.CertificateError, match=message) as refused:
            secure.read_host_folder(folder)
        assert "\n" not in str(refused.value)
        (folder / "network.json").write_text(json.dumps(network))
    # A certificate for both purposes (as `robot-rl certs` made them before one role per certificate).
    ca = run[0].ca_folder
    both = robot.parent / "both.cnf"
    both.write_text("[both]\nextendedKeyUsage = serverAuth, clientAuth\n")
    _openssl("x509", "-req", "-in", str(robot / "request.csr"), "-CA", str(ca / "ca.pem"), "-CAkey",
             str(ca / "ca.key"), "-extfile", str(both), "-extensions", "both", "-days", "5", "-out",
             str(robot / "cert.pem"))
    with pytest.raises(secure.CertificateError, match="is for both serverAuth and clientAuth .*--role robot"):
        secure.read_host_folder(robot)
    # Valid for one day: refused a day later (renew commands named) and before it starts (the clock).
    signed = certs.sign_request(ca, robot / "request.csr", "robot", days=1, out=robot)
    host = secure.read_host_folder(robot)
    secure.check_tls_files(host)
    assert host.not_after == signed.not_after and "(23 hours left)" in host.validity(time.time() + 60)
    with pytest.raises(secure.CertificateError, match=(
            rf"cert.pem expired .* UTC: renew it: `robot-rl certs request {robot} --host arm1` here, `robot-rl "
            rf"certs sign CA request.csr --role robot` on the CA's machine")):
        secure.read_host_folder(robot, now=time.time() + 2 * 86400)
    with pytest.raises(secure.CertificateError, match=r"cert.pem is not valid before .* \(is this host's clock"):
        secure.read_host_folder(robot, now=time.time() - 3600)


def _step(side: ssl.SSLObject, outgoing: ssl.MemoryBIO, peer_incoming: ssl.MemoryBIO) -> bool:
    """One handshake step of `side`; what it wrote goes to its peer. True once its handshake is done."""
    try:
        side.do_handshake()
        return True
    except ssl.SSLWantReadError:
        return False
    finally:
        peer_incoming.write(outgoing.read())


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> None:
    """A TLS handshake in memory between contexts `server` and `client`; raises ssl.SSLError where a side refuses."""
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    server_side = server.wrap_bio(server_in, server_out, server_side=True)
    client_side = client.wrap_bio(client_in, client_out, server_side=False)
    for _ in range(10):
        client_done = _step(client_side, client_out, server_in)
        server_done = _step(server_side, server_out, client_in)
        if client_done and server_done:
            return
    raise AssertionError("the handshake did not finish")


def _context(folder: Path, as_server: bool, verify: bool = True) -> ssl.SSLContext:
    """A TLS context holding `folder`'s certificate, trusting its CA; as a server it requires a client certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if as_server else ssl.PROTOCOL_TLS_CLIENT)
    context.load_cert_chain(str(folder / "cert.pem"), str(folder / "key.pem"))
    context.load_verify_locations(cafile=str(folder / "ca.pem"))
    context.check_hostname = False
    context.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    return context


def test_one_role_per_certificate_holds_in_a_tls_handshake(run):
    """OpenSSL's own purpose check: a robot's valid certificate of the run cannot pose as the server, and the
    server's cannot connect as a robot; the real pair connects."""
    out = run[0].out
    robot = _context(out / "arm1", as_server=False)
    _handshake(_context(out / "server", as_server=True), robot)
    # arm2 listens as if it were the server (accepting anyone): arm1 refuses its certificate.
    with pytest.raises(ssl.SSLCertVerificationError, match=PURPOSE_REFUSED):
        _handshake(_context(out / "arm2", as_server=True, verify=False), robot)
    # The server's certificate connecting as a client: the server refuses it.
    with pytest.raises(ssl.SSLCertVerificationError, match=PURPOSE_REFUSED):
        _handshake(_context(out / "server", as_server=True), _context(out / "server", as_server=False))
    # Another robot of the run as a client is fine; another run's robot is not.
    _handshake(_context(out / "server", as_server=True), _context(out / "arm2", as_server=False))
    with pytest.raises(ssl.SSLError):
        _handshake(_context(out / "server", as_server=True), _context(run[1].out / "arm1", as_server=False))


def _base(**variables: str) -> dict[str, str]:
    keep = ("PATH", "HOME", "LD_LIBRARY_PATH")
    return {**{k: os.environ[k] for k in keep if k in os.environ}, "ROS_DOMAIN_ID": "158", **variables}


def _wheels_or_skip():
    pytest.importorskip("rclpy")


def test_secure_mode_writes_the_role_s_profile_and_openssl_config(folders):
    _wheels_or_skip()
    for name, role in (("server", "server"), ("arm1", "robot")):
        shell = _base(ROBOT_RL_NETWORK="secure", ROBOT_RL_CERTS=str(folders[name]),
                      ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", ROS_STATIC_PEERS="10.1.1.1")
        # The host's own graph (every node but the learner and the link's network half): loopback only, no TLS.
        host = ros_environment(base=shell)
        assert host["FASTDDS_DEFAULT_PROFILES_FILE"] == str(FASTDDS_PROFILE_PATH) and "OPENSSL_CONF" not in host
        assert host["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST" and host["ROS_DOMAIN_ID"] == "158"
        assert ros_env.network_summary(host).startswith("network secure: this host's own graph (shared memory")
        env = ros_environment(base=host, graph="link")  # the learner link, as the learner makes it from that
        profile, openssl_conf = Path(env["FASTDDS_DEFAULT_PROFILES_FILE"]), Path(env["OPENSSL_CONF"])
        assert profile == folders[name] / "fastdds_secure.xml" and openssl_conf == folders[name] / "openssl_secure.cnf"
        assert env["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SYSTEM_DEFAULT"  # the profile decides, not rmw
        assert "VerifyMode = Peer,Require" in openssl_conf.read_text()
        root = ElementTree.parse(profile).getroot()
        rtps = root.find(f".//{NS}participant[@is_default_profile='true']/{NS}rtps")
        assert rtps.findtext(f"{NS}useBuiltinTransports") == "false"
        used = [t.text for t in rtps.iter(f"{NS}transport_id")]
        kinds = {d.findtext(f"{NS}transport_id"): d for d in root.iter(f"{NS}transport_descriptor")}
        assert [kinds[t].findtext(f"{NS}type") for t in used] == ["SHM", "UDPv4", "TCPv4"]
        assert [a.text for a in kinds[used[1]].iter(f"{NS}address")] == ["127.0.0.1"]
        tcp = kinds[used[2]]
        tls = tcp.find(f"{NS}tls")
        assert {c.tag.removeprefix(NS): c.text for c in tls if c.text and c.text.strip()}.items() >= {
            "private_key_file": str(folders[name] / "key.pem"), "cert_chain_file": str(folders[name] / "cert.pem"),
            "tmp_dh_file": str(folders[name] / "dh.pem"), "verify_file": str(folders[name] / "ca.pem"),
            "handshake_role": role.upper().replace("ROBOT", "CLIENT")}.items()
        assert int(tcp.findtext(f"{NS}sendBufferSize")) >= secure.MIN_TCP_BUFFER
        peers = rtps.find(f"{NS}builtin/{NS}initialPeersList")
        assert [a.text for a in peers.iter(f"{NS}address")] == (["127.0.0.1"] if role == "server"
                                                                 else ["127.0.0.1", SERVER])
        if role == "server":  # Fast DDS would keep only VERIFY_PEER of a <verify_mode>: OPENSSL_CONF decides
            assert tcp.findtext(f"{NS}listening_ports/{NS}port") == "7651" and tls.find(f"{NS}verify_mode") is None
        else:  # a client connects to the server's port; no logical <port> (nothing arrived with one)
            assert tcp.find(f"{NS}listening_ports") is None
            assert [v.text for v in tls.iter(f"{NS}verify")] == ["VERIFY_PEER"]
            assert peers.findtext(f".//{NS}tcpv4/{NS}physical_port") == "7651"
            assert peers.find(f".//{NS}tcpv4/{NS}port") is None
        assert ros_env.network_summary(env, graph="link") == (
            f"network secure: TLS as {role} {name}, server {SERVER}:7651, certificates {folders[name]}, "
            f"{secure.read_host_folder(folders[name]).validity()}, discovery SYSTEM_DEFAULT, domain 159, "
            f"profile {profile}")
        # A child process inherits both files: they are the mode's, not the user's; the same files are reused.
        stamp = profile.stat().st_mtime_ns
        assert ros_env._user_profile(env) is None
        assert ros_environment(base=env, graph="link") == env and profile.stat().st_mtime_ns == stamp
        # A child in another mode drops them.
        local = ros_environment(base={**env, "ROBOT_RL_NETWORK": "local", "ROS_AUTOMATIC_DISCOVERY_RANGE": ""})
        assert local["FASTDDS_DEFAULT_PROFILES_FILE"] == str(FASTDDS_PROFILE_PATH) and "OPENSSL_CONF" not in local
        lan = ros_environment(base={**env, "ROBOT_RL_NETWORK": "lan", "ROS_AUTOMATIC_DISCOVERY_RANGE": ""},
                              graph="link")
        assert is_lan_profile(lan["FASTDDS_DEFAULT_PROFILES_FILE"]) and "OPENSSL_CONF" not in lan


def test_secure_mode_errors_name_what_to_fix(folders, tmp_path):
    _wheels_or_skip()
    secure_base = _base(ROBOT_RL_NETWORK="secure", ROBOT_RL_CERTS=str(folders["arm1"]))
    relative = os.path.relpath(folders["arm1"])
    assert ros_environment(base={**secure_base, "ROBOT_RL_CERTS": relative})["ROBOT_RL_CERTS"] == str(folders["arm1"])
    with pytest.raises(RosEnvironmentError, match="ROBOT_RL_NETWORK=secure needs ROBOT_RL_CERTS="):
        ros_environment(base=_base(ROBOT_RL_NETWORK="secure"))
    (folders["server"] / "dh.pem").unlink()
    with pytest.raises(RosEnvironmentError, match=f"ROBOT_RL_CERTS={folders['server']}: .*dh.pem is missing"):
        ros_environment(base=_base(ROBOT_RL_NETWORK="secure", ROBOT_RL_CERTS=str(folders["server"])))
    mine = tmp_path / "mine.xml"
    mine.write_text("<dds/>")
    with pytest.raises(RosEnvironmentError, match=f"FASTDDS_DEFAULT_PROFILES_FILE={mine} would replace it"):
        ros_environment(base={**secure_base, "FASTDDS_DEFAULT_PROFILES_FILE": str(mine)})
    with pytest.raises(RosEnvironmentError, match="OPENSSL_CONF=/etc/ssl/openssl.cnf would replace it"):
        ros_environment(base={**secure_base, "OPENSSL_CONF": "/etc/ssl/openssl.cnf"})
    assert ros_environment(base={**_base(), "OPENSSL_CONF": "/etc/ssl/openssl.cnf"})["OPENSSL_CONF"] == (
        "/etc/ssl/openssl.cnf")  # another mode leaves the user's alone
    assert "secure (nodes on several hosts" in str(pytest.raises(
        RosEnvironmentError, ros_environment, base=_base(ROBOT_RL_NETWORK="wan")).value)


def test_a_read_only_folder_gets_its_files_in_a_per_user_temporary_folder(folders, tmp_path, monkeypatch):
    monkeypatch.setattr(secure.tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    host = secure.read_host_folder(folders["arm1"])
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")  # files "inside" a regular file cannot be written, even by root
    first = secure.write_if_changed("text\n", "profile.xml", blocked)
    assert first.parent == tmp_path / "tmp" / f"robot_rl-{os.getuid()}" and first.read_text() == "text\n"
    assert secure.write_if_changed("text\n", "profile.xml", blocked) == first  # stable for every process
    assert _mode(first.parent) == 0o700
    assert secure.is_generated_file(secure.write_network_files(host)[0])
    assert not secure.is_generated_file(FASTDDS_PROFILE_PATH) and not secure.is_generated_file(tmp_path / "none")


def test_fastdds_openssl_requires_peer_certificates_only_with_the_generated_config(folders):
    """In fresh processes (OpenSSL reads its configuration once): ensure_ros_environment sets OPENSSL_CONF and
    checks that the wheel's libssl took it; without it, the check refuses."""
    _wheels_or_skip()
    code = ("import os; from robot_rl.ros.net.env import ensure_ros_environment, network_summary; "
            "ensure_ros_environment(graph='link'); print(os.environ['OPENSSL_CONF']); "
            "print(network_summary(graph='link'))")
    env = {**_base(ROBOT_RL_NETWORK="secure", ROBOT_RL_CERTS=str(folders["server"])), "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == str(folders["server"] / "openssl_secure.cnf")
    assert out.stdout.splitlines()[1].startswith("network secure: TLS as server server")
    code = ("from robot_rl.ros.net.env import find_ros_wheels; from robot_rl.ros.net.secure import check_fastdds_openssl; "
            "check_fastdds_openssl(find_ros_wheels().library_dirs)")
    out = subprocess.run([sys.executable, "-c", code], env={**_base(), "PYTHONPATH": str(REPO_ROOT)},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "does not require peer certificates (verify mode 0x0" in out.stderr, out.stderr
