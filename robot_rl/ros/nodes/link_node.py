"""The learner link: the only way between a host's own graph and the other hosts in the lan and secure modes.

In ``lan`` and ``secure`` every node of a host but the learner (the drivers or the sim node, the actor, the teleop,
the reward and file-share nodes) keeps to the host's own graph: the shipped profile (shared memory and 127.0.0.1) on
``ROS_DOMAIN_ID``, which no other host can reach. The learner and this link's network half are on the learner link:
the mode's profile (UDP between hosts, or TLS to the learner's host) on the link domain
(:func:`robot_rl.ros.net.env.link_domain_id`). This process carries exactly the learner's topics between the two, each in
the direction it flows (:data:`ROUTES`):

=====================  ==============  ======================================================================
topic                  direction       what
=====================  ==============  ======================================================================
/actor/transitions     host -> link    the actors' transition batches
/learner/weights       link -> host    the learner's weights (latched: an actor that starts later gets them)
/learner/ack           link -> host    what the learner has persisted
/files/offer           both            files offered between hosts (robot_rl.ros.nodes.file_share_node)
/files/request         both            "
/files/chunk           both            "
=====================  ==============  ======================================================================

Nothing else crosses: a process on another host that publishes ``/command/target_pose``, ``/teleop/*``,
``/safety/estop`` or calls the reset service reaches no node of this host (tests/test_insiders.py tries each).

Two processes, because rmw_fastrtps gives every participant of a process the same profile: the one the launcher
starts (the host half, on the host's graph) starts the network half (``--network-half``, on the link) and the two
pass each message's serialised bytes over a socket pair (a 5-byte header, then the CDR bytes: nothing is decoded). A
half never forwards what its own participant published (the file topics go both ways), and with two domains the
halves never meet each other's graph. When the learner appears on the link (it started or respawned), the host half
makes its acknowledgement publisher again, so an actor re-sends what the learner has not acknowledged at once, as it
does on one graph. When one half ends, the other does too, and the launcher restarts the link (``respawn``); the
actor keeps every unacknowledged transition meanwhile.

In the local mode there is one graph and nothing to link: the launch files start this node only in lan and secure.
On the learner's own host in the secure mode (``side:=all``) the network half reaches the learner by shared memory
(the local profile on the link domain): the TLS port is the learner's.
"""

from __future__ import annotations

if __name__ == "__main__":  # a program's start, before the heavy imports below
    from robot_rl.core.startup import program_start

    program_start()

import collections
import dataclasses
import os
import socket
import struct
import subprocess
import sys
import threading

from robot_rl.ros import qos

NODE_NAME = "link"
NETWORK_HALF_FLAG = "--network-half"
HOST, NETWORK = "host", "network"
_HEADER = struct.Struct(">IB")  # payload length, route index (CONTROL: a message between the halves)
_CONTROL = 255
_LEARNER_APPEARED = b"learner appeared"
_STOPPING = b"stopping"  # a half stops on a signal: the other one stops too, without an error
# The participant part of a publisher's GID (rmw_fastrtps: the GUID prefix): the same for every endpoint of a process.
_PARTICIPANT_BYTES = 12


@dataclasses.dataclass(frozen=True)
class Route:
    """A topic the link carries and where it enters: from the host's graph (``out``), the link (``in``) or both."""

    topic: str
    direction: str

    def leaves(self, side: str) -> bool:
        """Whether messages published in `side`'s graph cross to the other."""
        return self.direction == "both" or self.direction == ("out" if side == HOST else "in")

    def enters(self, side: str) -> bool:
        """Whether messages from the other graph are published in `side`'s."""
        return self.leaves(NETWORK if side == HOST else HOST)


ROUTES: tuple[Route, ...] = (
    Route(qos.ACTOR_TRANSITIONS, "out"),
    Route(qos.LEARNER_WEIGHTS, "in"),
    Route(qos.LEARNER_ACK, "in"),
    Route(qos.FILES_OFFER, "both"),
    Route(qos.FILES_REQUEST, "both"),
    Route(qos.FILES_CHUNK, "both"),
)
"""Every topic that crosses between hosts (module table); all std_msgs/UInt8MultiArray."""


def network_half_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the network half: the learner link's (robot_rl.ros.net.env, graph ``link``), except on the
    learner's own host in the secure mode, where it takes the local profile on the link domain (the learner holds the
    TLS port; both are on this host)."""
    from robot_rl.ros.net.env import CERTS_VARIABLE, NETWORK_VARIABLE, link_domain_id, network_mode, ros_environment

    env = dict(os.environ if env is None else env)
    if network_mode(env) == "secure":
        from robot_rl.ros.net.secure import read_host_folder

        if read_host_folder(env.get(CERTS_VARIABLE, "")).role == "server":
            return ros_environment(domain_id=link_domain_id(env), base={**env, NETWORK_VARIABLE: "local"})
    return ros_environment(base=env, graph="link")


class _Frames:
    """Messages over the socket between the halves: send whole frames, read them back one at a time."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._send_lock = threading.Lock()

    def send(self, index: int, payload: bytes) -> None:
        with self._send_lock:
            self.sock.sendall(_HEADER.pack(len(payload), index) + payload)

    def _read_exactly(self, size: int) -> bytes | None:
        parts, missing = [], size
        while missing:
            part = self.sock.recv(min(missing, 1 << 20))
            if not part:
                return None
            parts.append(part)
            missing -= len(part)
        return b"".join(parts)

    def receive(self) -> tuple[int, bytes] | None:
        """The next (route index, payload), or None once the other half has gone."""
        header = self._read_exactly(_HEADER.size)
        if header is None:
            return None
        size, index = _HEADER.unpack(header)
        payload = self._read_exactly(size) if size else b""
        return None if payload is None else (index, payload)


class LinkHalf:
    """One half of the learner link (module doc): relays :data:`ROUTES` between its graph and the other half."""

    def __init__(self, side: str, sock: socket.socket, peer: subprocess.Popen | None = None):
        import rclpy
        from rclpy.event_handler import SubscriptionEventCallbacks
        from std_msgs.msg import UInt8MultiArray

        self.side, self.peer = side, peer
        self.node = rclpy.create_node(NODE_NAME if side == HOST else f"{NODE_NAME}_network")
        self._log = self.node.get_logger()
        self._msg = UInt8MultiArray
        self._frames = _Frames(sock)
        self._lock = threading.Lock()
        # What the other half sent, to publish here: as many per topic as its QoS keeps (a slow graph loses the
        # oldest, as DDS would).
        self._pending = {i: collections.deque(maxlen=qos.TOPICS[r.topic].stream.depth) for i, r in enumerate(ROUTES)}
        self._remake_acks = self._other_stopping = self._stopping = False
        self.finished = False
        self.exit_status = 0
        self.relayed = collections.Counter()
        self._publishers = {}
        for index, route in enumerate(ROUTES):
            if route.enters(side):
                self._publishers[index] = self._publisher(route.topic)
            if route.leaves(side):
                events = None
                if side == NETWORK and route.topic == qos.LEARNER_ACK:
                    events = SubscriptionEventCallbacks(matched=self._on_learner_matched)
                self.node.create_subscription(UInt8MultiArray, route.topic, _Forward(self, index),
                                              qos.topic_qos(route.topic), raw=True, event_callbacks=events)
        self._own_participant = self._find_own_participant()
        self._wake = self.node.create_guard_condition(self._publish_pending)
        self.node.create_timer(0.2, self._publish_pending)  # what the middleware refused, again
        self._reader = threading.Thread(target=self._read, name="link-reader", daemon=True)
        self._reader.start()
        self._log.info(f"{side} half: " + ", ".join(f"{r.topic} {_way(r, side)}" for r in ROUTES))

    def _publisher(self, topic: str):
        return self.node.create_publisher(self._msg, topic, qos.topic_qos(topic))

    def _find_own_participant(self) -> bytes:
        """The GID prefix of this process's participant, from one of its own publishers (rmw lists a process's own
        endpoints as it makes them)."""
        name, namespace = self.node.get_name(), self.node.get_namespace()
        for index in self._publishers:
            for info in self.node.get_publishers_info_by_topic(ROUTES[index].topic):
                if info.node_name == name and info.node_namespace == namespace:
                    return bytes(info.endpoint_gid[:_PARTICIPANT_BYTES])
        raise RuntimeError("the link cannot find its own publishers in the graph")

    def forward(self, index: int, payload: bytes, info) -> None:
        """A message published in this half's graph: to the other half, unless this process published it."""
        publisher = bytes((info.get("publisher_gid") or {}).get("data", b""))[:_PARTICIPANT_BYTES]
        if ROUTES[index].enters(self.side) and publisher == self._own_participant:
            return  # our own relay of what came from the other side
        try:
            self._frames.send(index, payload)
        except OSError:
            self._other_half_gone()
            return
        self.relayed[ROUTES[index].topic] += 1

    def _on_learner_matched(self, info) -> None:
        if info.current_count_change > 0:
            try:
                self._frames.send(_CONTROL, _LEARNER_APPEARED)
            except OSError:
                self._other_half_gone()

    def _read(self) -> None:
        while True:
            try:
                frame = self._frames.receive()
            except OSError:
                frame = None
            if frame is None:
                self._other_half_gone()
                return
            index, payload = frame
            with self._lock:
                if index == _CONTROL:
                    self._remake_acks |= payload == _LEARNER_APPEARED
                    self._other_stopping |= payload == _STOPPING
                elif index in self._pending:
                    self._pending[index].append(payload)
            self._wake.trigger()

    def _publish_pending(self) -> None:
        from robot_rl.ros.node_util import publish_refused

        with self._lock:
            remake, self._remake_acks = self._remake_acks, False
        if remake and self.side == HOST:
            ack = next(i for i, r in enumerate(ROUTES) if r.topic == qos.LEARNER_ACK)
            self.node.destroy_publisher(self._publishers[ack])
            self._publishers[ack] = self._publisher(qos.LEARNER_ACK)
            self._log.info("the learner appeared on the link: acknowledgements re-offered to this host's actors")
        for index, waiting in self._pending.items():
            while True:
                with self._lock:
                    if not waiting:
                        break
                    payload = waiting[0]
                if publish_refused(self._publishers[index], payload):
                    break  # the channel is full: the timer tries again
                with self._lock:
                    if waiting and waiting[0] is payload:
                        waiting.popleft()
                self.relayed[ROUTES[index].topic] += 1

    def _other_half_gone(self) -> None:
        if self.finished or self._stopping:  # this half closed the socket itself
            return
        other = "network" if self.side == HOST else "host"
        self.finished = True
        if self._other_stopping:
            self._log.info(f"the link's {other} half stopped: stopping too")
        else:
            self.exit_status = 1
            self._log.error(f"the link's {other} half has gone: the link stops (the launcher restarts it)")

    def stop(self, executor, signal_number) -> None:
        """Leave the loop: the other half follows (its socket closes)."""
        self._stopping = True
        if signal_number:
            try:
                self._frames.send(_CONTROL, _STOPPING)
            except OSError:
                pass
        counts = ", ".join(f"{topic} {n}" for topic, n in sorted(self.relayed.items())) or "nothing"
        self._log.info(f"stopping{f' (signal {signal_number})' if signal_number else ''}; relayed {counts}")

    def destroy(self) -> None:
        try:
            self._frames.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._frames.sock.close()
        if self.peer is not None:
            try:
                self.peer.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                self.peer.kill()
                self.peer.wait()
        self.node.destroy_node()


def _way(route: Route, side: str) -> str:
    """How `route` crosses at `side`'s half, for its start-up line."""
    if route.leaves(side) and route.enters(side):
        return "both ways"
    return "out" if route.leaves(side) else "in"


class _Forward:
    """A raw subscription's callback (message and its info) for one route."""

    def __init__(self, half: LinkHalf, index: int):
        self.half, self.index = half, index

    def __call__(self, payload: bytes, info) -> None:
        self.half.forward(self.index, payload, info)


def _start_network_half(sock: socket.socket) -> subprocess.Popen:
    from robot_rl.ros.net.env import RosEnvironmentError
    from robot_rl.ros.node_util import NodeStartupError
    from robot_rl.ros.net.secure import CertificateError

    try:
        env = network_half_environment()
    except (RosEnvironmentError, CertificateError) as error:
        raise NodeStartupError(str(error)) from None
    # The same process group as this one (the launcher's stop signals reach both); stdout / stderr shared.
    return subprocess.Popen([sys.executable, "-m", "robot_rl.ros.nodes.link_node", NETWORK_HALF_FLAG, str(sock.fileno())], env=env,
                            pass_fds=(sock.fileno(),), stdin=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    """Run one half of the link until SIGINT / SIGTERM or until the other half ends; returns the exit status."""
    from robot_rl.ros.net.env import network_mode
    from robot_rl.ros.node_util import log_error_line, run_node

    argv = list(sys.argv if argv is None else argv)
    if NETWORK_HALF_FLAG in argv:
        fd = int(argv[argv.index(NETWORK_HALF_FLAG) + 1])
        sock = socket.socket(fileno=fd)
        return run_node(lambda: LinkHalf(NETWORK, sock), argv, f"{NODE_NAME}_network", graph="link")
    if network_mode() == "local":
        log_error_line(NODE_NAME, "the network mode is local: every node is on this host's one graph and there is "
                                  "nothing to link (ROBOT_RL_NETWORK=lan or secure, or ROS_STATIC_PEERS)")
        return 2
    ours, theirs = socket.socketpair()

    def build() -> LinkHalf:
        peer = _start_network_half(theirs)
        theirs.close()
        return LinkHalf(HOST, ours, peer)

    return run_node(build, argv, NODE_NAME)


if __name__ == "__main__":
    sys.exit(main())
