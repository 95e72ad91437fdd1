"""Files over ROS 2 between two processes (robot_rl.ros.nodes.file_share_node): the `file_share` node offers a folder of a few
MB; a second process that lacks it fetches it once, paced, byte-identical; a second fetch comes from the cache without
a transfer; a host whose own copy differs by one byte stops with one line naming the file and both hashes (with and
without the digest it expects, as learner weights carry for their base); a path that does not exist is one error
line and exit status 2 for the node. Through the learner link (robot_rl.ros.nodes.link_node, lan on one host) a folder and a
base cross both ways, and the file topics loop nowhere (without the link's own-publisher filter: 19,909 offers
relayed in a minute).

Runs as a client script in a private network namespace with its own ROS_DOMAIN_ID (tests/ros_harness.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from ros_harness import allocate_domain_id

DOMAIN_ID = allocate_domain_id()
RATE_MB_S = 8.0  # the offering node's pace: the transfer takes about half a second
SIZES = {"data/c.0": 3_000_000, "data/c.1": 1_200_000, "meta/episode_ends": 80, "zarr.json": 0}


def make_payload(folder: Path) -> None:
    rng = np.random.default_rng(7)
    for name, size in SIZES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())


def same_tree(a: Path, b: Path) -> bool:
    files = sorted(p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file())
    return files == sorted(p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file()) and all(
        (a / f).read_bytes() == (b / f).read_bytes() for f in files)


def base_flow(work: Path, learner, actor_node) -> dict:
    """The learner's weights name a base the actor's host lacks: the learner adds its digest to the weights it
    publishes, and the actor's PolicyFiles fetches it, then hands over the weights naming the fetched copy."""
    from robot_rl.core.codec import pack, unpack
    from robot_rl.wire.file_share import bundle_of
    from robot_rl.ros.nodes.file_share_node import PolicyFiles
    from robot_rl.wire.weights import WeightsMessage

    policy = work / "learner" / "runs" / "dp" / "policy"
    policy.mkdir(parents=True)
    (policy / "policy.json").write_text('{"kind": "diffusion"}')
    (policy / "model.safetensors").write_bytes(np.random.default_rng(1).bytes(700_000))
    (policy / "validation.json").write_text('{"format": 1}')
    weights = {"kind": "weights", "protocol": 1, "version": 3, "policy_config": {"base": str(policy)}}
    files = unpack(learner.weights_payload(pack(weights)))["files"]
    digest = bundle_of(policy).digest
    # On the robot host that path does not exist: the learner offers the same bundle under a name it lacks here.
    name = "/learner-host" + str(policy)
    learner.offer_bundle(bundle_of(policy, name))
    got, failures = [], []
    policy_files = PolicyFiles(actor_node, ready=got.append, failed=failures.append)
    message = WeightsMessage(3, b"", None, 4, {"base": name, "sac": {}}, "residual", files={name: digest})
    first = policy_files.local(message)
    deadline = time.monotonic() + 20
    while not (got or failures) and time.monotonic() < deadline:
        time.sleep(0.05)
    fetched = Path(got[0].policy_config["base"]) if got else None
    return {"base_files_ok": files == {str(policy): digest}, "base_first": first is None, "base_failures": failures,
            "base_identical": fetched is not None and same_tree(policy, fetched),
            "base_version": got[0].version if got else None,
            "base_again": str(policy_files.local(message).policy_config["base"]) == str(fetched)}


def late_conflict(work: Path, learner, watcher_node) -> dict:
    """A copy used here (a learner's demos) is watched: an offer of the same name with other bytes that comes later
    is one line, told to the node (which stops)."""
    from robot_rl.wire.file_share import bundle_of
    from robot_rl.ros.nodes.file_share_node import FileShare

    (work / "fetch" / "late.zarr").mkdir()
    (work / "fetch" / "late.zarr" / "zarr.json").write_text("{}")
    conflicts: list[str] = []
    watcher = FileShare(watcher_node, wait_s=30.0, on_conflict=conflicts.append)
    try:
        used = watcher.fetch("late.zarr", "demo_path")
        other = work / "other" / "late.zarr"
        other.mkdir(parents=True)
        (other / "zarr.json").write_text('{"other": 1}')
        learner.offer_bundle(bundle_of(other, "late.zarr"))
        deadline = time.monotonic() + 10
        while not conflicts and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        watcher.close()
    return {"late_used": str(used), "late_conflicts": conflicts}


def client() -> dict:
    from robot_rl.ros.net.env import ensure_ros_environment

    ensure_ros_environment()
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from robot_rl.wire.file_share import FileShareError, bundle_of
    from robot_rl.ros.nodes.file_share_node import FileShare

    work = Path(tempfile.mkdtemp(prefix="file-share-"))
    (work / "offer").mkdir()
    (work / "fetch").mkdir()
    make_payload(work / "offer" / "pick.zarr")
    os.environ["ROBOT_RL_FILE_CACHE"] = str(work / "cache")
    env = dict(os.environ)
    node_command = [sys.executable, "-m", "robot_rl.ros.nodes.file_share_node", "--ros-args", "-p",
                    f"rate_mb_s:={RATE_MB_S}"]
    offering = subprocess.Popen([*node_command, "-p", "offer:=pick.zarr"], cwd=work / "offer", env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    missing = subprocess.Popen([*node_command, "-p", "offer:=nothere", "-r", "__node:=missing"], cwd=work / "offer",
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    summary: dict = {}
    os.chdir(work / "fetch")  # where pick.zarr is not
    rclpy.init()
    executor = SingleThreadedExecutor()
    nodes = [rclpy.create_node(f"fetcher{i}") for i in range(4)] + [rclpy.create_node("learner"),
                                                                     rclpy.create_node("actor"),
                                                                     rclpy.create_node("watcher")]
    for node in nodes:
        executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    shares = [FileShare(node, wait_s=30.0) for node in nodes[:5]]
    try:
        start = time.monotonic()
        try:
            path = shares[0].fetch("pick.zarr", "demo_path")
        except FileShareError as error:  # the nodes' logs below say why
            summary["first_fetch"] = str(error)
            raise
        summary.update(fetch_s=round(time.monotonic() - start, 3), transfer=shares[0].transfers[0], path=str(path),
                       identical=same_tree(work / "offer" / "pick.zarr", path),
                       received=shares[0].received_bytes, in_cache=str(path).startswith(str(work / "cache")))
        start = time.monotonic()
        again = shares[1].fetch("pick.zarr", "demo_path")
        summary.update(reuse_s=round(time.monotonic() - start, 3), reuse_same=again == path,
                       reuse_received=shares[1].received_bytes, reuse_transfers=len(shares[1].transfers))
        # this host gets its own copy, one byte off: stop with one line naming the file and both hashes
        local = work / "fetch" / "pick.zarr"
        make_payload(local)
        data = bytearray((local / "data/c.1").read_bytes())
        data[1000] ^= 1
        (local / "data/c.1").write_bytes(bytes(data))
        summary["here"], summary["there"] = bundle_of(local).digest, bundle_of(work / "offer" / "pick.zarr").digest
        for share, key, what, expected in ((shares[2], "unpinned", "demo_path", None),
                                           (shares[3], "pinned", "base", summary["there"])):
            try:
                share.fetch("pick.zarr", what, expected)
                summary[key] = None
            except FileShareError as error:
                summary[key] = str(error)
        summary.update(base_flow(work, shares[4], nodes[5]))
        summary.update(late_conflict(work, shares[4], nodes[6]))
    finally:
        for share in shares:
            share.close()
        executor.shutdown()
        for node in nodes:
            node.destroy_node()
        rclpy.try_shutdown()
        offering.terminate()
        try:
            summary["missing_exit"] = missing.wait(timeout=20)
        except subprocess.TimeoutExpired:
            missing.kill()
            summary["missing_exit"] = "killed"
        summary["missing_log"] = missing.stdout.read()
        try:
            summary["offering_exit"] = offering.wait(timeout=10)
        except subprocess.TimeoutExpired:
            offering.kill()
            summary["offering_exit"] = "killed"
        summary["offering_log"] = offering.stdout.read()
        shutil.rmtree(work, ignore_errors=True)
        print("RESULT " + json.dumps(summary), flush=True)  # also when a step failed: the logs say why
    return summary


# A process of the host's own graph that fetches one bundle by name (as an actor fetches its base) and prints where.
HOST_FETCH = r"""
import sys, threading
from robot_rl.ros.net.env import ensure_ros_environment
ensure_ros_environment()
import rclpy
from rclpy.executors import SingleThreadedExecutor
from robot_rl.ros.nodes.file_share_node import FileShare
rclpy.init()
node = rclpy.create_node("actor")
executor = SingleThreadedExecutor()
executor.add_node(node)
threading.Thread(target=executor.spin, daemon=True).start()
share = FileShare(node, wait_s=60.0)
print("FETCHED " + str(share.fetch(sys.argv[1], "base")), flush=True)
share.close()
executor.shutdown()
node.destroy_node()
rclpy.try_shutdown()
"""


def link_client() -> dict:
    """Files cross the learner link both ways (robot_rl.ros.nodes.link_node; lan, every graph on this one host): the `file_share`
    node of the host's own graph offers a folder that a node on the link (the learner's place) fetches, and a bundle
    offered on the link reaches a process of the host's graph (an actor fetching its base)."""
    os.environ["ROBOT_RL_NETWORK"] = "lan"
    from robot_rl.ros.net.env import ensure_ros_environment, ros_environment

    host = ros_environment()  # what the launcher gives every process
    host["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    ensure_ros_environment(graph="link")
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from robot_rl.ros.nodes.file_share_node import FileShare

    work = Path(tempfile.mkdtemp(prefix="file-share-link-"))
    for folder in ("offer", "fetch", "base", "actor"):
        (work / folder).mkdir()
    make_payload(work / "offer" / "pick.zarr")
    make_payload(work / "base" / "policy")
    os.environ["ROBOT_RL_FILE_CACHE"] = str(work / "cache")
    summary: dict = {}
    link = subprocess.Popen([sys.executable, "-m", "robot_rl.ros.nodes.link_node"], env=host, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    offering = subprocess.Popen([sys.executable, "-m", "robot_rl.ros.nodes.file_share_node", "--ros-args", "-p",
                                 "offer:=pick.zarr", "-p", f"rate_mb_s:={RATE_MB_S}"], cwd=work / "offer", env=host,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    os.chdir(work / "fetch")
    rclpy.init()
    node = rclpy.create_node("learner")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    share = FileShare(node, wait_s=60.0, rate_mb_s=RATE_MB_S)
    try:
        path = share.fetch("pick.zarr", "demo_path")
        summary.update(identical=same_tree(work / "offer" / "pick.zarr", path), received=share.received_bytes)
        share.offer("policy", work / "base" / "policy")
        fetched = subprocess.run([sys.executable, "-c", HOST_FETCH, "policy"], cwd=work / "actor", timeout=90,
                                 env={**host, "ROBOT_RL_FILE_CACHE": str(work / "actor-cache")},
                                 capture_output=True, text=True)
        lines = [line for line in fetched.stdout.splitlines() if line.startswith("FETCHED ")]
        summary.update(base_fetched=bool(lines) and same_tree(work / "base" / "policy", Path(lines[-1][8:])),
                       base_log=(fetched.stdout + fetched.stderr)[-2000:])
    finally:
        share.close()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
        for process in (offering, link):
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        summary.update(link_exit=link.returncode, link_log=link.stdout.read())
        shutil.rmtree(work, ignore_errors=True)
        print("RESULT " + json.dumps(summary), flush=True)
    return summary


def test_files_cross_the_learner_link_both_ways_and_loop_nowhere():
    """The file topics go both ways through the link: each half must not send back what it relayed itself."""
    from ros_harness import run_ros_script

    summary, stderr, returncode = run_ros_script(__file__, "link", allocate_domain_id(), 120)
    context = json.dumps(summary)[-3000:] + stderr[-2000:]
    assert summary.get("identical") and summary["received"] == sum(SIZES.values()), context
    assert summary["base_fetched"], context
    assert summary["link_exit"] == 0, context
    relayed = [line for line in summary["link_log"].splitlines() if "[link]: stopping" in line]
    assert relayed, summary["link_log"][-3000:]
    counts = dict(item.rsplit(" ", 1) for item in relayed[-1].split("relayed ", 1)[1].split(", "))
    # Two offers, and two transfers of chunks each answered by a progress request: a loop would relay without end.
    from robot_rl.wire.file_share import CHUNK_SIZE

    chunks = 2 * (sum(SIZES.values()) // CHUNK_SIZE + len(SIZES))
    assert int(counts["/files/offer"]) <= 10, counts
    assert 0 < int(counts["/files/chunk"]) <= 1.2 * chunks and int(counts["/files/request"]) <= 1.2 * chunks, counts
    assert returncode == 0, stderr[-3000:]


def test_a_folder_crosses_once_verified_and_a_differing_copy_stops():
    from ros_harness import run_ros_script

    from robot_rl.wire.file_share import short

    summary, stderr, returncode = run_ros_script(__file__, "client", DOMAIN_ID, 60)
    context = json.dumps(summary)[-3000:] + stderr[-2000:]
    total = sum(SIZES.values())
    assert summary.get("identical") and summary["in_cache"] and summary["received"] == total, context
    transfer = summary["transfer"]
    # paced: the offering node sends at most RATE_MB_S (a lower bound on the time: load only adds to it)
    assert transfer["bytes"] == total and total / 1e6 / RATE_MB_S * 0.8 < transfer["seconds"], context
    # the second fetch comes from the cache: nothing crosses (how long either takes is a timing figure, not a test's)
    assert summary["reuse_same"] and summary["reuse_received"] == 0 and summary["reuse_transfers"] == 0, context
    here, there = short(summary["here"]), short(summary["there"])
    for key, whose in (("unpinned", "the file_share's (host"), ("pinned", "the learner's")):
        line = summary[key]
        assert line and "\n" not in line, context
        assert line.startswith(f"{'demo_path' if key == 'unpinned' else 'base'} pick.zarr: this host's copy sha256 "
                               f"{here} differs from {whose}"), line
        assert there in line and "files that differ: data/c.1)" in line, line
    assert summary["base_files_ok"] and summary["base_first"] and not summary["base_failures"], context
    assert summary["base_identical"] and summary["base_version"] == 3 and summary["base_again"], context
    assert summary["late_used"] == "late.zarr" and len(summary["late_conflicts"]) == 1, context
    assert summary["late_conflicts"][0].startswith("demo_path late.zarr: this host's copy sha256 "), context
    assert "differs from the learner's (host" in summary["late_conflicts"][0], context
    assert "offering pick.zarr (sha256" in summary["offering_log"], summary["offering_log"]
    assert "sending pick.zarr" in summary["offering_log"], summary["offering_log"]
    errors = [line for line in summary["missing_log"].splitlines() if "ERROR" in line]
    assert summary["missing_exit"] == 2 and len(errors) == 1 and "nothere" in errors[0], summary["missing_log"]
    assert returncode == 0, stderr[-3000:]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    link_client() if sys.argv[1:2] == ["link"] else client()
