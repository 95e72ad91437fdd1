"""The `secure` network mode without a ROS graph: `robot-rl certs` (robot_rl.ros.secure) and what
robot_rl.ros.env makes of a certificate folder (the generated profile and OpenSSL config, errors naming the file)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from robot_rl.ros import env as ros_env
from robot_rl.ros import secure
from robot_rl.ros.env import FASTDDS_PROFILE_PATH, RosEnvironmentError, ros_environment
from robot_rl.ros.lan import is_lan_profile

SERVER = "10.232.9.2"  # written into certificates and profiles only: nothing here opens a connection
NS = "{http://www.eprosima.com}"
REPO_ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl command is not installed")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One run's certificates (server and robot `arm1`) and another run's (robot `rogue`)."""
    root = tmp_path_factory.mktemp("certs")
    return (secure.create_certificates(root / "run", server=SERVER, robots=["arm1"], port=7651),
            secure.create_certificates(root / "other", server=SERVER, robots=["rogue"]))


@pytest.fixture
def folders(run, tmp_path):
    """Copies of the server's and the robot's folders that a test may change (modes kept)."""
    return {name: Path(shutil.copytree(run[0].out / name, tmp_path / name)) for name in ("server", "arm1")}


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_certs_makes_a_ca_that_stays_and_one_complete_folder_per_host(run):
    made, _ = run
    out = made.out
    assert sorted(p.name for p in out.iterdir()) == ["arm1", "ca", "server"]
    assert sorted(p.name for p in (out / "ca").iterdir()) == ["ca.key", "ca.pem"]
    assert _mode(out / "ca" / "ca.key") == 0o600 and _mode(out / "ca") == 0o700
    ca_key = (out / "ca" / "ca.key").read_bytes()
    for host, role in (("server", "server"), ("arm1", "robot")):
        folder = out / host
        assert sorted(p.name for p in folder.iterdir()) == sorted(secure.HOST_FILES)
        assert _mode(folder / "key.pem") == 0o600 and _mode(folder) == 0o700
        assert (folder / "ca.pem").read_bytes() == (out / "ca" / "ca.pem").read_bytes()
        assert all(ca_key not in p.read_bytes() for p in folder.iterdir())  # the CA key is never copied
        assert json.loads((folder / "network.json").read_text()) == {
            "role": role, "server": SERVER, "port": 7651, "host": host}
        verified = subprocess.run(["openssl", "verify", "-CAfile", str(out / "ca" / "ca.pem"),
                                   str(folder / "cert.pem")], capture_output=True, text=True, check=True)
        assert verified.stdout.strip().endswith(": OK")
        text = subprocess.run(["openssl", "x509", "-in", str(folder / "cert.pem"), "-noout", "-text"],
                              capture_output=True, text=True, check=True).stdout
        assert "RSA Public-Key: (2048 bit)" in text or "Public-Key: (2048 bit)" in text
        assert "TLS Web Server Authentication, TLS Web Client Authentication" in text
        assert f"DNS:{host}" in text and ((f"IP Address:{SERVER}" in text) == (role == "server"))
    assert [h.role for h in made.hosts] == ["server", "robot"] and made.hosts[0].port == 7651
    printed = secure.instructions(made)
    for line in (f"{out}/ca/",
                 f"{out}/server/  copy to the learner's host (the robots reach it at {SERVER}, TCP port 7651)",
                 f"{out}/arm1/    copy to robot arm1's computer", "export ROBOT_RL_NETWORK=secure ROBOT_RL_CERTS="):
        assert line in printed, printed


def test_cli_certs_prints_where_each_folder_goes_and_rejects_bad_input_in_one_line(tmp_path, capsys):
    from robot_rl.cli import main

    out = tmp_path / "run"
    main(["certs", str(out), "--server", "learner.example", "--robot", "a", "--robot", "b", "--port", "7700"])
    printed = capsys.readouterr().out
    assert f"{out}/a/" in printed and f"{out}/b/" in printed and "TCP port 7700 of learner.example" in printed
    assert sorted(p.name for p in out.iterdir()) == ["a", "b", "ca", "server"]
    bad = [
        ([str(out), "--server", SERVER, "--robot", "c"], "exists and is not an empty folder"),
        ([str(tmp_path / "n1"), "--server", SERVER], "give at least one --robot NAME"),
        ([str(tmp_path / "n2"), "--server", "no such host!", "--robot", "a"], "neither an IPv4 address nor"),
        ([str(tmp_path / "n3"), "--server", "0.0.0.0", "--robot", "a"], "must be the IPv4 address robots reach"),
        ([str(tmp_path / "n4"), "--server", SERVER, "--robot", "a", "--port", "70000"], "--port 70000 must be"),
        ([str(tmp_path / "n5"), "--server", SERVER, "--robot", "ca"], "--robot 'ca' is reserved"),
        ([str(tmp_path / "n6"), "--server", SERVER, "--robot", "a", "--robot", "A"], "given more than once"),
        ([str(tmp_path / "n7"), "--server", SERVER, "--robot", "a/b"], "must be a host name"),
        ([str(tmp_path / "n8"), "--server", SERVER, "--robot", "a", "--days", "0"], "--days 0 must be"),
        ([str(tmp_path / "n9"), "--robot", "a"], "missing --server"),
    ]
    for args, message in bad:
        with pytest.raises(SystemExit) as exit_info:
            main(["certs", *args])
        assert exit_info.value.code == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: ") and message in err, (args, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # nothing half-made
    empty = tmp_path / "empty"
    empty.mkdir()
    main(["certs", str(empty), "--server", SERVER, "--robot", "a"])  # an empty folder is fine
    assert (empty / "ca" / "ca.key").is_file()


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
                            ({"server": "1.2.3.4.5.6"}, "neither an IPv4 address nor a host name")):
        (robot / "network.json").write_text(json.dumps({**network, **change}))
        with pytest.raises(secure.CertificateError, match=message):
            secure.read_host_folder(robot)
    (robot / "network.json").write_text("{not json")
    with pytest.raises(secure.CertificateError, match="network.json is not valid JSON"):
        secure.read_host_folder(robot)
    (robot / "network.json").write_text(json.dumps(network))
    # A certificate of another run's CA, a key that is not the certificate's, a broken DH file.
    other = run[1].out / "rogue"
    shutil.copy(other / "cert.pem", robot / "cert.pem")
    with pytest.raises(secure.CertificateError, match="cert.pem and .*key.pem are not a PEM certificate with its"):
        secure.check_tls_files(secure.read_host_folder(robot))
    shutil.copy(other / "key.pem", robot / "key.pem")
    with pytest.raises(secure.CertificateError, match=r"cert.pem is not accepted by a peer trusting .*ca.pem"):
        secure.check_tls_files(secure.read_host_folder(robot))
    shutil.copy(run[0].out / "arm1" / "cert.pem", robot / "cert.pem")
    shutil.copy(run[0].out / "arm1" / "key.pem", robot / "key.pem")
    (robot / "dh.pem").write_text("not PEM\n")
    with pytest.raises(secure.CertificateError, match="dh.pem is not PEM DH parameters"):
        secure.check_tls_files(secure.read_host_folder(robot))
    for name in secure.HOST_FILES:
        broken = Path(shutil.copytree(run[0].out / "server", robot.parent / f"without-{name}"))
        (broken / name).unlink()
        with pytest.raises(secure.CertificateError, match=f"{broken / name} is missing"):
            secure.read_host_folder(broken)


def _base(**variables: str) -> dict[str, str]:
    keep = ("PATH", "HOME", "LD_LIBRARY_PATH")
    return {**{k: os.environ[k] for k in keep if k in os.environ}, "ROS_DOMAIN_ID": "158", **variables}


def _wheels_or_skip():
    pytest.importorskip("rclpy")


def test_secure_mode_writes_the_role_s_profile_and_openssl_config(folders):
    _wheels_or_skip()
    for name, role in (("server", "server"), ("arm1", "robot")):
        env = ros_environment(base=_base(ROBOT_RL_NETWORK="secure", ROBOT_RL_CERTS=str(folders[name]),
                                         ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", ROS_STATIC_PEERS="10.1.1.1"))
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
        assert ros_env.network_summary(env) == (
            f"network secure: TLS as {role} {name}, server {SERVER}:7651, certificates {folders[name]}, discovery "
            f"SYSTEM_DEFAULT, domain 158, profile {profile}")
        # A child process inherits both files: they are the mode's, not the user's; the same files are reused.
        stamp = profile.stat().st_mtime_ns
        assert ros_env._user_profile(env) is None
        assert ros_environment(base=env) == env and profile.stat().st_mtime_ns == stamp
        # A child in another mode drops them.
        local = ros_environment(base={**env, "ROBOT_RL_NETWORK": "local", "ROS_AUTOMATIC_DISCOVERY_RANGE": ""})
        assert local["FASTDDS_DEFAULT_PROFILES_FILE"] == str(FASTDDS_PROFILE_PATH) and "OPENSSL_CONF" not in local
        lan = ros_environment(base={**env, "ROBOT_RL_NETWORK": "lan", "ROS_AUTOMATIC_DISCOVERY_RANGE": ""})
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
    code = ("import os; from robot_rl.ros.env import ensure_ros_environment, network_summary; "
            "ensure_ros_environment(); print(os.environ['OPENSSL_CONF']); print(network_summary())")
    env = {**_base(ROBOT_RL_NETWORK="secure", ROBOT_RL_CERTS=str(folders["server"])), "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == str(folders["server"] / "openssl_secure.cnf")
    assert out.stdout.splitlines()[1].startswith("network secure: TLS as server server")
    code = ("from robot_rl.ros.env import find_ros_wheels; from robot_rl.ros.secure import check_fastdds_openssl; "
            "check_fastdds_openssl(find_ros_wheels().library_dirs)")
    out = subprocess.run([sys.executable, "-c", code], env={**_base(), "PYTHONPATH": str(REPO_ROOT)},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "does not require peer certificates (verify mode 0x0" in out.stderr, out.stderr
