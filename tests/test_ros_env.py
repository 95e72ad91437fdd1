"""ROS 2 environment bootstrap and QoS/topic tables: LOCALHOST by default, the shipped profile is loopback-only."""

import os
import subprocess
import sys
import types

from pathlib import Path

import pytest

from robot_rl.ros.net import env as ros_env
from robot_rl.ros import qos
from robot_rl.ros.net.env import (
    FASTDDS_PROFILE_PATH,
    RosEnvironmentError,
    check_fastdds_profile,
    ensure_ros_environment,
    private_network_command,
    ros_environment,
)
from robot_rl.ros.net.lan import is_lan_profile


def test_shipped_profile_exists_parses_and_stays_on_loopback():
    assert FASTDDS_PROFILE_PATH.is_file()
    summary = check_fastdds_profile()
    assert summary.builtin_transports is False
    assert summary.udp_allowlist == ("127.0.0.1",)
    assert summary.shm_segment_size >= 32 * 2**20 and summary.shm_max_message_size >= 16 * 2**20


@pytest.mark.parametrize(
    "body,problem",
    [
        ("<dds><broken", "not valid XML"),
        ('<dds xmlns="http://www.eprosima.com"><profiles><participant profile_name="p" is_default_profile="true">'
         "<rtps><useBuiltinTransports>true</useBuiltinTransports></rtps></participant></profiles></dds>",
         "useBuiltinTransports"),
        ('<dds xmlns="http://www.eprosima.com"><profiles><transport_descriptors><transport_descriptor>'
         "<transport_id>udp</transport_id><type>UDPv4</type><interfaceWhiteList><address>10.0.0.5</address>"
         '</interfaceWhiteList></transport_descriptor></transport_descriptors><participant profile_name="p" '
         'is_default_profile="true"><rtps><userTransports><transport_id>udp</transport_id></userTransports>'
         "<useBuiltinTransports>false</useBuiltinTransports></rtps></participant></profiles></dds>",
         "restricted to 127.0.0.1"),
    ],
)
def test_profiles_that_could_leave_loopback_are_rejected(tmp_path, body, problem):
    path = tmp_path / "profile.xml"
    path.write_text(body)
    with pytest.raises(RosEnvironmentError, match=problem):
        check_fastdds_profile(path)
    with pytest.raises(RosEnvironmentError, match="does not exist"):
        check_fastdds_profile(tmp_path / "missing.xml")


def _wheels_or_skip():
    pytest.importorskip("rclpy")
    return ros_env.find_ros_wheels()


def test_ros_environment_defaults_to_localhost_and_sets_the_wheel_paths():
    wheels = _wheels_or_skip()
    env = ros_environment(domain_id=42, base={"LD_LIBRARY_PATH": "/opt/other", "PATH": "/usr/bin"})
    assert env["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    assert env["ROS_DOMAIN_ID"] == "42"
    assert env["RMW_IMPLEMENTATION"] == "rmw_fastrtps_cpp"
    assert env["FASTDDS_DEFAULT_PROFILES_FILE"] == str(FASTDDS_PROFILE_PATH)
    assert env["_ROS_WHEELS_BOOTSTRAP_COMPLETE"] == "1"
    assert env["AMENT_PREFIX_PATH"].split(os.pathsep)[0] == str(wheels.prefix)
    library_path = env["LD_LIBRARY_PATH"].split(os.pathsep)
    assert library_path[0] == str(wheels.prefix / "lib") and library_path[-1] == "/opt/other"
    assert any(p.endswith("ros_rclpy.libs") for p in library_path)
    assert env["PATH"] == "/usr/bin"


def test_ros_environment_respects_a_user_range_and_domain_and_rejects_bad_values():
    _wheels_or_skip()
    env = ros_environment(base={"ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET", "ROS_DOMAIN_ID": "17"})
    assert env["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SUBNET" and env["ROS_DOMAIN_ID"] == "17"
    assert ros_environment(base={})["ROS_DOMAIN_ID"] == "0"
    assert ros_environment(domain_id=3, base={"ROS_DOMAIN_ID": "17"})["ROS_DOMAIN_ID"] == "3"
    with pytest.raises(RosEnvironmentError, match="ROS_AUTOMATIC_DISCOVERY_RANGE='WAN'"):
        ros_environment(base={"ROS_AUTOMATIC_DISCOVERY_RANGE": "WAN"})
    with pytest.raises(RosEnvironmentError, match="domain id"):
        ros_environment(domain_id=500, base={})
    with pytest.raises(RosEnvironmentError, match="not an integer"):
        ros_environment(base={"ROS_DOMAIN_ID": "abc"})


def test_network_modes_local_by_default_lan_for_several_hosts_and_a_users_profile_wins(tmp_path):
    _wheels_or_skip()
    local = ros_environment(base={"ROS_DOMAIN_ID": "5"})
    assert local["FASTDDS_DEFAULT_PROFILES_FILE"] == str(FASTDDS_PROFILE_PATH)
    assert ros_env.network_summary(local) == (f"network local: discovery LOCALHOST, domain 5, profile "
                                              f"{FASTDDS_PROFILE_PATH}")
    # lan, the learner link: the generated lan profile (a parent's shipped loopback profile is dropped), SUBNET, the
    # peers given, the link domain (the one after ROS_DOMAIN_ID)
    lan = ros_environment(base={"ROBOT_RL_NETWORK": "lan", "ROS_STATIC_PEERS": "10.231.0.2",
                                "FASTDDS_DEFAULT_PROFILES_FILE": str(FASTDDS_PROFILE_PATH)}, graph="link")
    profile = lan["FASTDDS_DEFAULT_PROFILES_FILE"]
    assert is_lan_profile(profile) and lan["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SUBNET"
    assert lan["RMW_FASTRTPS_PUBLICATION_MODE"] == "AUTO"
    assert ros_env.network_summary(lan, graph="link") == (
        "network lan: link 20 Mbit/s (weights and transitions paced to 1.25 MB/s), discovery SUBNET, static peers "
        f"10.231.0.2, domain 1, profile {profile}")
    child = ros_environment(base=lan, graph="link")  # a child: the same file, the same domain
    assert child["FASTDDS_DEFAULT_PROFILES_FILE"] == profile and child["ROS_DOMAIN_ID"] == "1"
    fast = ros_environment(base={"ROBOT_RL_NETWORK": "lan", "ROBOT_RL_LINK_MBIT": "1000"}, graph="link")
    assert fast["FASTDDS_DEFAULT_PROFILES_FILE"] != profile
    paced = Path(fast["FASTDDS_DEFAULT_PROFILES_FILE"]).read_text()
    assert "<max_bytes_per_period>625000</max_bytes_per_period>" in paced  # 1000 Mbit/s: 62.5 MB/s, 10 ms periods
    with pytest.raises(RosEnvironmentError, match="ROBOT_RL_LINK_MBIT='fast' must be the slowest link"):
        ros_environment(base={"ROBOT_RL_NETWORK": "lan", "ROBOT_RL_LINK_MBIT": "fast"}, graph="link")
    assert ros_environment(base={"ROBOT_RL_NETWORK": "lan", "ROS_AUTOMATIC_DISCOVERY_RANGE": "SYSTEM_DEFAULT"},
                           graph="link")["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SYSTEM_DEFAULT"  # the user's range
    # a profile the user set wins over every mode
    mine = tmp_path / "my_profile.xml"
    mine.write_text("<dds/>")
    for mode in ("local", "lan"):
        env = ros_environment(base={"ROBOT_RL_NETWORK": mode, "FASTDDS_DEFAULT_PROFILES_FILE": str(mine)},
                              graph="link")
        assert env["FASTDDS_DEFAULT_PROFILES_FILE"] == str(mine)
        assert ros_env.network_summary(env, graph="link").endswith(
            f"profile {mine} (set by the user: it wins over the mode)")
    with pytest.raises(RosEnvironmentError, match="FASTDDS_DEFAULT_PROFILES_FILE='/nowhere.xml' does not exist"):
        ros_environment(base={"FASTDDS_DEFAULT_PROFILES_FILE": "/nowhere.xml"})
    with pytest.raises(RosEnvironmentError, match=r"ROBOT_RL_NETWORK='wan' is not a network mode: local \("):
        ros_environment(base={"ROBOT_RL_NETWORK": "wan"})


# The mode rule: ROBOT_RL_NETWORK wins; unset, the standard ROS 2 variables that reach other hosts make it lan.
LAN_FROM = "; ROBOT_RL_NETWORK overrides"
MODE_CASES = [
    ({}, "local", ""),
    ({"ROBOT_RL_NETWORK": ""}, "local", ""),
    ({"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}, "local", ""),
    ({"ROS_AUTOMATIC_DISCOVERY_RANGE": "OFF"}, "local", ""),
    ({"ROS_STATIC_PEERS": " "}, "local", ""),
    ({"ROS_STATIC_PEERS": "10.77.0.2"}, "lan", "from ROS_STATIC_PEERS" + LAN_FROM),
    ({"ROS_STATIC_PEERS": "10.77.0.2;10.77.0.3", "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}, "lan",
     "from ROS_STATIC_PEERS" + LAN_FROM),
    ({"ROS_STATIC_PEERS": "10.77.0.2", "ROS_AUTOMATIC_DISCOVERY_RANGE": "OFF"}, "lan",
     "from ROS_STATIC_PEERS" + LAN_FROM),
    ({"ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET"}, "lan", "from ROS_AUTOMATIC_DISCOVERY_RANGE=SUBNET" + LAN_FROM),
    ({"ROS_AUTOMATIC_DISCOVERY_RANGE": "SYSTEM_DEFAULT"}, "lan",
     "from ROS_AUTOMATIC_DISCOVERY_RANGE=SYSTEM_DEFAULT" + LAN_FROM),
    ({"ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET", "ROS_STATIC_PEERS": "10.77.0.2", "ROBOT_RL_NETWORK": " "}, "lan",
     "from ROS_STATIC_PEERS / ROS_AUTOMATIC_DISCOVERY_RANGE=SUBNET" + LAN_FROM),
    ({"ROBOT_RL_NETWORK": "local", "ROS_STATIC_PEERS": "10.77.0.2", "ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET"},
     "local", ""),
    ({"ROBOT_RL_NETWORK": "lan"}, "lan", ""),
    ({"ROBOT_RL_NETWORK": "lan", "ROS_STATIC_PEERS": "10.77.0.2"}, "lan", ""),
    ({"ROBOT_RL_NETWORK": "secure", "ROS_STATIC_PEERS": "10.77.0.2"}, "secure", ""),
]


@pytest.mark.parametrize("base,mode,why", MODE_CASES, ids=lambda case: repr(case) if isinstance(case, dict) else None)
def test_the_network_mode_follows_robot_rl_network_else_the_standard_variables(base, mode, why):
    assert ros_env.network_choice(base) == (mode, why)
    assert ros_env.network_mode(base) == mode


def test_the_network_mode_reads_os_environ_by_default(monkeypatch):
    for name in ("ROBOT_RL_NETWORK", "ROS_AUTOMATIC_DISCOVERY_RANGE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ROS_STATIC_PEERS", "10.77.0.2")
    assert ros_env.network_choice() == ("lan", "from ROS_STATIC_PEERS" + LAN_FROM)
    monkeypatch.setenv("ROBOT_RL_NETWORK", "local")
    assert ros_env.network_mode() == "local"


def test_the_standard_variables_alone_give_the_lan_mode_and_its_summary_says_why():
    _wheels_or_skip()
    env = ros_environment(base={"ROS_STATIC_PEERS": "10.77.0.2", "ROS_DOMAIN_ID": "5",
                                "FASTDDS_DEFAULT_PROFILES_FILE": str(FASTDDS_PROFILE_PATH)},  # a parent's local one
                          graph="link")
    profile = env["FASTDDS_DEFAULT_PROFILES_FILE"]
    assert is_lan_profile(profile) and env["RMW_FASTRTPS_PUBLICATION_MODE"] == "AUTO"
    assert env["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SUBNET" and "ROBOT_RL_NETWORK" not in env
    summary = ("network lan (from ROS_STATIC_PEERS / ROS_AUTOMATIC_DISCOVERY_RANGE=SUBNET; ROBOT_RL_NETWORK "
               "overrides): link 20 Mbit/s (weights and transitions paced to 1.25 MB/s), discovery SUBNET, static "
               f"peers 10.77.0.2, domain 6, profile {profile}")
    assert ros_env.network_summary(env, graph="link") == summary
    # A child started with that environment (a node's helper) derives the same mode and line.
    child = ros_environment(base=env, graph="link")
    assert child["FASTDDS_DEFAULT_PROFILES_FILE"] == profile and ros_env.network_summary(child, "link") == summary
    # A range the user chose stays: LOCALHOST plus peers (rmw adds the peers), SYSTEM_DEFAULT alone.
    kept = ros_environment(base={"ROS_STATIC_PEERS": "10.77.0.2", "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"},
                           graph="link")
    assert is_lan_profile(kept["FASTDDS_DEFAULT_PROFILES_FILE"])
    assert kept["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    assert ros_env.network_summary(kept, graph="link").startswith(
        "network lan (from ROS_STATIC_PEERS; ROBOT_RL_NETWORK overrides): link 20 Mbit/s")
    wide = ros_environment(base={"ROS_AUTOMATIC_DISCOVERY_RANGE": "SYSTEM_DEFAULT"}, graph="link")
    assert is_lan_profile(wide["FASTDDS_DEFAULT_PROFILES_FILE"]) and wide["ROS_AUTOMATIC_DISCOVERY_RANGE"] == (
        "SYSTEM_DEFAULT")
    # Neither: local, its summary as before.
    for base in ({}, {"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}, {"ROS_AUTOMATIC_DISCOVERY_RANGE": "OFF"}):
        local = ros_environment(base={**base, "ROS_DOMAIN_ID": "5"})
        assert local["FASTDDS_DEFAULT_PROFILES_FILE"] == str(FASTDDS_PROFILE_PATH)
        assert ros_env.network_summary(local) == (
            f"network local: discovery {local['ROS_AUTOMATIC_DISCOVERY_RANGE']}, domain 5, profile "
            f"{FASTDDS_PROFILE_PATH}")


def test_robot_rl_network_overrides_the_standard_variables_and_local_says_it_ignores_them(tmp_path):
    _wheels_or_skip()
    local = ros_environment(base={"ROBOT_RL_NETWORK": "local", "ROS_STATIC_PEERS": "10.77.0.2", "ROS_DOMAIN_ID": "5"})
    assert local["FASTDDS_DEFAULT_PROFILES_FILE"] == str(FASTDDS_PROFILE_PATH)
    assert local["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    assert ros_env.network_summary(local) == (
        "network local (ROBOT_RL_NETWORK=local, so ROS_STATIC_PEERS ignored: this host only): discovery LOCALHOST, "
        f"static peers 10.77.0.2, domain 5, profile {FASTDDS_PROFILE_PATH}")
    assert ros_env.network_summary(ros_environment(base=local)) == ros_env.network_summary(local)  # a child
    wide = ros_environment(base={"ROBOT_RL_NETWORK": "local", "ROS_AUTOMATIC_DISCOVERY_RANGE": "SYSTEM_DEFAULT",
                                 "ROS_STATIC_PEERS": "10.77.0.2"})
    assert wide["FASTDDS_DEFAULT_PROFILES_FILE"] == str(FASTDDS_PROFILE_PATH)
    assert ros_env.network_summary(wide).startswith(
        "network local (ROBOT_RL_NETWORK=local, so ROS_STATIC_PEERS / ROS_AUTOMATIC_DISCOVERY_RANGE=SYSTEM_DEFAULT "
        "ignored: this host only): discovery SYSTEM_DEFAULT")
    # A profile of the user's wins over the mode: then the peers may well reach, and nothing says they are ignored.
    mine = tmp_path / "my_profile.xml"
    mine.write_text("<dds/>")
    theirs = ros_environment(base={"ROBOT_RL_NETWORK": "local", "ROS_STATIC_PEERS": "10.77.0.2",
                                   "FASTDDS_DEFAULT_PROFILES_FILE": str(mine)})
    assert ros_env.network_summary(theirs).startswith("network local: discovery LOCALHOST, static peers 10.77.0.2")
    explicit = ros_environment(base={"ROBOT_RL_NETWORK": "lan", "ROS_STATIC_PEERS": "10.77.0.2"}, graph="link")
    assert ros_env.network_summary(explicit, graph="link").startswith("network lan: link 20 Mbit/s")


def test_a_process_started_with_the_derived_environment_is_in_the_lan_mode_too():
    _wheels_or_skip()
    base = {k: v for k, v in os.environ.items()
            if k not in ("ROBOT_RL_NETWORK", "ROS_AUTOMATIC_DISCOVERY_RANGE", "FASTDDS_DEFAULT_PROFILES_FILE")}
    env = ros_environment(base={**base, "ROS_STATIC_PEERS": "10.77.0.2"})
    code = ("import os; from robot_rl.ros.net.env import ensure_ros_environment, network_summary; "
            "ensure_ros_environment(); print(network_summary()); print(os.environ.get('ROBOT_RL_NETWORK'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [ros_env.network_summary(env), "None"]


def test_a_launch_network_argument_of_auto_lets_the_environment_decide(tmp_path, monkeypatch):
    """The shipped launch files' `network` argument defaults to auto: ROBOT_RL_NETWORK, else the standard variables
    decide; given (network:=local), it overrides them."""
    import yaml

    from robot_rl.ros.launch import Launcher
    from robot_rl.ros.launch_file import load_launch_file

    _wheels_or_skip()
    for name in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "FASTDDS_DEFAULT_PROFILES_FILE", "ROBOT_RL_NETWORK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ROS_STATIC_PEERS", "10.77.0.2")
    path = tmp_path / "network.launch.yaml"
    path.write_text(yaml.safe_dump({"launch": [
        {"arg": {"name": "network", "default": "auto"}},
        {"executable": {"cmd": "true", "name": "x"}},
        {"executable": {"cmd": "true", "name": "linked", "if": "$(not-equals $(network) local)"}}]}))
    # Every process gets the host graph's environment (the learner and the link pick the link's themselves).
    description = load_launch_file(path)
    derived = Launcher(description).base_env
    assert "ROBOT_RL_NETWORK" not in derived and derived["FASTDDS_DEFAULT_PROFILES_FILE"] == str(FASTDDS_PROFILE_PATH)
    assert ros_env.network_choice(derived) == ("lan", "from ROS_STATIC_PEERS" + LAN_FROM)
    assert [p.name for p in description.processes] == ["x", "linked"]  # $(network): the mode the processes get
    given = Launcher(load_launch_file(path, {"network": "local"})).base_env
    assert given["ROBOT_RL_NETWORK"] == "local" and given["FASTDDS_DEFAULT_PROFILES_FILE"] == str(FASTDDS_PROFILE_PATH)
    assert [p.name for p in load_launch_file(path, {"network": "local"}).processes] == ["x"]
    monkeypatch.setenv("ROBOT_RL_NETWORK", "local")  # the variable wins over the standard ones
    assert Launcher(load_launch_file(path)).base_env["FASTDDS_DEFAULT_PROFILES_FILE"] == str(FASTDDS_PROFILE_PATH)
    monkeypatch.delenv("ROBOT_RL_NETWORK")
    monkeypatch.delenv("ROS_STATIC_PEERS")
    assert Launcher(load_launch_file(path)).base_env["FASTDDS_DEFAULT_PROFILES_FILE"] == str(FASTDDS_PROFILE_PATH)
    path.write_text(yaml.safe_dump({"launch": [{"arg": {"name": "network", "default": "lan"}},
                                               {"executable": {"cmd": "true", "name": "x"}}]}))
    assert Launcher(load_launch_file(path)).base_env["ROBOT_RL_NETWORK"] == "lan"  # another default: it applies


def test_missing_wheels_name_the_install_command(monkeypatch):
    monkeypatch.setattr(ros_env.importlib.machinery.PathFinder, "find_spec", lambda name, path=None, target=None: None)
    with pytest.raises(RosEnvironmentError, match=r"pip install -e '\.\[ros\]'"):
        ros_environment(base={})


def test_ensure_refuses_when_rclpy_was_imported_with_another_config(monkeypatch):
    _wheels_or_skip()
    monkeypatch.setitem(sys.modules, "rclpy", types.ModuleType("rclpy"))
    monkeypatch.setenv("ROS_DOMAIN_ID", "3")
    with pytest.raises(RosEnvironmentError, match="already imported.*ROS_DOMAIN_ID"):
        ensure_ros_environment(domain_id=4)
    assert os.environ["ROS_DOMAIN_ID"] == "3"


def test_ensure_refuses_a_process_started_without_the_library_path(monkeypatch):
    _wheels_or_skip()
    monkeypatch.delitem(sys.modules, "rclpy", raising=False)
    monkeypatch.setenv("LD_LIBRARY_PATH", "")
    monkeypatch.setenv("ROS_DOMAIN_ID", "3")
    with pytest.raises(RosEnvironmentError, match="LD_LIBRARY_PATH"):
        ensure_ros_environment(domain_id=4)
    assert os.environ["ROS_DOMAIN_ID"] == "3"


def test_ensure_sets_up_a_fresh_process_that_then_initialises_rclpy():
    from ros_harness import private_network_or_skip

    _wheels_or_skip()
    code = (
        "import os; from robot_rl.ros.net.env import ensure_ros_environment; ensure_ros_environment(domain_id=61); "
        "import rclpy; rclpy.init(); rclpy.shutdown(); "
        "e = os.environ; print(e['ROS_DOMAIN_ID'], e['ROS_AUTOMATIC_DISCOVERY_RANGE'], e['RMW_IMPLEMENTATION'])"
    )
    base = {k: v for k, v in os.environ.items() if k not in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_DOMAIN_ID")}
    out = subprocess.run(private_network_or_skip([sys.executable, "-c", code]), env=base,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["61", "LOCALHOST", "rmw_fastrtps_cpp"]


@pytest.fixture
def fresh_namespace_probe():
    """The namespace probe is cached per process: start and leave each test with a fresh one."""
    ros_env._private_network_prefix.cache_clear()
    yield
    ros_env._private_network_prefix.cache_clear()


def test_private_network_command_wraps_the_command_where_a_namespace_can_be_made(fresh_namespace_probe):
    if ros_env.network_namespace_problem() is not None:
        pytest.skip(ros_env.network_namespace_problem())
    wrapped = private_network_command(["python", "-V"])
    assert "-n" in wrapped[1:3] and wrapped[-2:] == ["python", "-V"] and "link set lo up" in wrapped[-4]
    out = subprocess.run(wrapped[:-2] + ["cat", "/proc/net/dev"], capture_output=True, text=True, timeout=30)
    interfaces = [line.split(":")[0].strip() for line in out.stdout.splitlines()[2:]]
    assert out.returncode == 0 and interfaces == ["lo"], out


def test_private_network_command_gives_the_command_its_own_ipc_and_dev_shm(fresh_namespace_probe, tmp_path):
    """What one test's processes leave in /dev/shm (Fast DDS segments and port locks of a process killed by SIGKILL)
    never meets another's, and what the command writes there is gone with it."""
    if ros_env.network_namespace_problem() is not None:
        pytest.skip(ros_env.network_namespace_problem())
    leftover = Path("/dev/shm") / f"robot-rl-test-leftover-{os.getpid()}"
    leftover.write_bytes(b"a segment another test's process left")
    try:
        script = ("ls /dev/shm; readlink /proc/self/ns/ipc; touch /dev/shm/fastdds_made_inside; "
                  "stat -f -c %T /dev/shm")
        out = subprocess.run(private_network_command(["sh", "-c", script]), capture_output=True, text=True,
                             timeout=30)
    finally:
        leftover.unlink()
    assert out.returncode == 0, out
    *listed, ipc, filesystem = out.stdout.splitlines()
    assert listed == [] and filesystem == "tmpfs", out.stdout
    assert ipc != os.readlink("/proc/self/ns/ipc"), ipc
    assert not (Path("/dev/shm") / "fastdds_made_inside").exists()


def test_private_network_command_refuses_without_unshare(fresh_namespace_probe, monkeypatch):
    real_which = ros_env.shutil.which
    monkeypatch.setattr(ros_env.shutil, "which", lambda name: None if name == "unshare" else real_which(name))
    with pytest.raises(RosEnvironmentError, match="private network namespace.*unshare command .* not installed"):
        private_network_command(["python", "-V"])
    assert not ros_env.network_namespace_available()


def test_private_network_command_refuses_when_the_kernel_forbids_namespaces(fresh_namespace_probe, monkeypatch):
    calls = []

    def forbidden(command, **kwargs):
        calls.append(command)
        return subprocess.CompletedProcess(command, 1, "", "unshare: unshare failed: Operation not permitted\n")

    monkeypatch.setattr(ros_env.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(ros_env.subprocess, "run", forbidden)
    with pytest.raises(RosEnvironmentError) as error:
        private_network_command(["python", "-V"])
    assert "Operation not permitted" in str(error.value) and "--map-root-user" in str(error.value)
    assert len(calls) == 2  # as root, then in a user namespace


def test_the_harness_skips_with_the_reason_where_no_namespace_can_be_made(fresh_namespace_probe, monkeypatch):
    from ros_harness import private_network_or_skip

    monkeypatch.setattr(ros_env.shutil, "which", lambda name: None)
    with pytest.raises(pytest.skip.Exception, match="unshare command"):
        private_network_or_skip(["python", "-V"])


def test_every_topic_has_a_stream_and_streams_are_as_documented():
    assert qos.TOPICS[qos.LEARNER_WEIGHTS].stream.durability == "transient_local"
    assert qos.TOPICS[qos.SAFETY_ESTOP].stream.durability == "transient_local"
    assert qos.TOPICS[qos.COMMAND_TARGET_POSE].stream.depth == 1
    assert qos.TOPICS[qos.CAMERA_FRONT_IMAGE].stream is qos.SENSORS
    for name, topic in qos.TOPICS.items():
        assert name.startswith("/") and topic.message_type.count("/msg/") == 1
        assert topic.stream is qos.STREAMS[topic.stream.name]


def test_qos_profiles_build_with_rclpy():
    pytest.importorskip("rclpy")
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, ReliabilityPolicy

    weights = qos.qos_profile("weights")
    assert weights.durability == DurabilityPolicy.TRANSIENT_LOCAL and weights.depth == 1
    sensors = qos.topic_qos(qos.CAMERA_WRIST_IMAGE)
    assert sensors.reliability == ReliabilityPolicy.RELIABLE and sensors.history == HistoryPolicy.KEEP_LAST
    assert sensors.durability == DurabilityPolicy.VOLATILE and sensors.depth == 2
    assert qos.qos_profile(qos.TRANSITIONS, depth=500).depth == 500
    with pytest.raises(KeyError, match="unknown QoS stream"):
        qos.qos_profile("video")
    with pytest.raises(KeyError, match="unknown topic"):
        qos.topic_qos("/nope")
    with pytest.raises(ValueError, match="depth"):
        qos.qos_profile("sensors", depth=0)


def test_lan_with_a_real_robots_file_takes_an_explicit_allow_open_network(tmp_path, monkeypatch):
    """The open lan mode refuses a real robot's file unless allowed (a launch's allow_open_network:=true sets the
    variable for every process); the sim mirror's file, and the other modes, need nothing."""
    import yaml

    from robot_rl.ros.launch import Launcher
    from robot_rl.ros.launch_file import load_launch_file

    lan, peers, local = {"ROBOT_RL_NETWORK": "lan"}, {"ROS_STATIC_PEERS": "10.77.0.2"}, {}
    assert "launch with allow_open_network:=true (ROBOT_RL_ALLOW_OPEN_NETWORK=1)" in ros_env.open_network_problem(
        False, lan)
    assert "network lan (from ROS_STATIC_PEERS" in ros_env.open_network_problem(False, peers)  # derived lan too
    assert ros_env.open_network_problem(True, lan) is None  # the sim mirror
    assert ros_env.open_network_problem(False, {**lan, "ROBOT_RL_ALLOW_OPEN_NETWORK": "1"}) is None
    assert ros_env.open_network_problem(False, local) is None
    assert ros_env.open_network_problem(False, {"ROBOT_RL_NETWORK": "secure"}) is None

    _wheels_or_skip()
    for name in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "FASTDDS_DEFAULT_PROFILES_FILE", "ROBOT_RL_NETWORK",
                 "ROS_STATIC_PEERS", "ROBOT_RL_ALLOW_OPEN_NETWORK"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "open.launch.yaml"
    path.write_text(yaml.safe_dump({"launch": [{"arg": {"name": "network", "default": "lan"}},
                                               {"arg": {"name": "allow_open_network", "default": "false"}},
                                               {"executable": {"cmd": "true", "name": "x"}}]}))
    refused = Launcher(load_launch_file(path)).base_env
    assert "ROBOT_RL_ALLOW_OPEN_NETWORK" not in refused and ros_env.open_network_problem(False, refused)
    allowed = Launcher(load_launch_file(path, {"allow_open_network": "true"})).base_env
    assert allowed["ROBOT_RL_ALLOW_OPEN_NETWORK"] == "1" and ros_env.open_network_problem(False, allowed) is None
    launch_folder = Path(__file__).resolve().parents[1] / "launch"
    for name in ("robot_train.yaml", "robot_run.yaml", "teleop_record.yaml"):  # the shipped real-robot launches
        declared = {entry["arg"]["name"]: entry["arg"].get("default")
                    for entry in yaml.safe_load((launch_folder / name).read_text())["launch"] if "arg" in entry}
        assert declared.get("allow_open_network") == "false", name


def test_in_lan_and_secure_a_host_s_own_graph_keeps_to_it_and_only_the_link_crosses():
    """The two graphs of a host (robot_rl.ros.nodes.link_node): the host's own nodes get the shipped loopback profile on
    ROS_DOMAIN_ID whatever the mode; the learner link gets the mode's profile on the link domain. A link process
    started from a host environment (the launcher gives every process one) gets the link's own discovery range."""
    _wheels_or_skip()
    user = {"ROS_STATIC_PEERS": "10.77.0.2", "ROS_DOMAIN_ID": "5"}  # a user's shell: the standard variables
    host = ros_environment(base=user)
    assert host["FASTDDS_DEFAULT_PROFILES_FILE"] == str(FASTDDS_PROFILE_PATH)
    assert host["ROS_DOMAIN_ID"] == "5" and host["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    assert ros_env.network_mode(host) == "lan"  # a child still knows the mode
    assert ros_env.network_summary(host) == (
        "network lan (from ROS_STATIC_PEERS; ROBOT_RL_NETWORK overrides): this host's own graph (shared memory and "
        f"127.0.0.1 only, domain 5, profile {FASTDDS_PROFILE_PATH}); the learner link crosses between hosts on "
        "domain 6 through the link process (robot_rl.ros.nodes.link_node)")
    learner = ros_environment(base=host, graph="link")  # the learner, started by the launcher
    assert is_lan_profile(learner["FASTDDS_DEFAULT_PROFILES_FILE"]) and learner["ROS_DOMAIN_ID"] == "6"
    assert learner["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SUBNET"  # the link's range, not the host graph's
    assert ros_environment(base=learner, graph="link") == learner  # a child of the learner: the same
    again = ros_environment(base=host)
    assert again["ROS_DOMAIN_ID"] == "5" and again["FASTDDS_DEFAULT_PROFILES_FILE"] == str(FASTDDS_PROFILE_PATH)
    # The link domain can be named (the same on every host), and must be a domain id.
    assert ros_environment(base={**user, "ROBOT_RL_LINK_DOMAIN_ID": "40"}, graph="link")["ROS_DOMAIN_ID"] == "40"
    assert ros_environment(base={"ROS_DOMAIN_ID": "232", "ROBOT_RL_NETWORK": "lan"}, graph="link")[
        "ROS_DOMAIN_ID"] == "0"
    for bad in ("x", "-1", "233"):
        with pytest.raises(RosEnvironmentError, match=f"ROBOT_RL_LINK_DOMAIN_ID='{bad}' must be a ROS domain id"):
            ros_environment(base={**user, "ROBOT_RL_LINK_DOMAIN_ID": bad}, graph="link")
    with pytest.raises(RosEnvironmentError, match="ROBOT_RL_LINK_DOMAIN_ID=5 is ROS_DOMAIN_ID too"):
        ros_environment(base={**user, "ROBOT_RL_LINK_DOMAIN_ID": "5"})  # every node's start (the launcher's too)
    # local: one graph, the same for both
    local = {"ROS_DOMAIN_ID": "5"}
    assert ros_environment(base=local, graph="link") == ros_environment(base=local)
    with pytest.raises(ValueError, match="graph 'robot' is not one of"):
        ros_environment(base=local, graph="robot")
