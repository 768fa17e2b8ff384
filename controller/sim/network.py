"""A simulated network for pysyncobj voters: latency, loss, resets and partitions.

Each voter gets a :class:`SimTransport`, which speaks pysyncobj's transport
interface (``send``, the ``setOn...Callback`` setters, ``ready``, ``destroy``) so
pysyncobj runs unchanged on top of it. Messages are encoded and decoded as on
the real wire (:func:`controller.raft.encode_peer_message`), so the simulation
also exercises the restricted unpickler.

Faults, all drawn from one seeded Random:

- every message gets its own latency, so messages overtake one another —
  except snapshot chunks, which keep their order on a link (pysyncobj streams a
  snapshot as chunks and, like TCP, needs them in order; a lost chunk only
  ever goes with a lost connection);
- single messages are dropped;
- links reset: in-flight messages are lost, both ends see a disconnect and
  reconnect after a delay;
- nodes are isolated for a while, and crash (detach) and come back (attach).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controller.raft import decode_peer_message, encode_peer_message


@dataclass(frozen=True, slots=True)
class NetworkFaults:
    latency_min_s: float = 0.001
    latency_max_s: float = 0.030
    #: Probability that a message (other than a snapshot chunk) is lost.
    drop: float = 0.01
    #: Probability, per link and step, that the link resets.
    reset: float = 0.0005
    reconnect_min_s: float = 0.05
    reconnect_max_s: float = 0.5


def _is_chunk(message: Any) -> bool:
    return isinstance(message, dict) and ("serialized" in message or "transmission" in message)


class SimTransport:
    """pysyncobj's transport interface on the simulated network."""

    def __init__(self, network: SimNetwork, node_id: int, self_node: Any, other_nodes: Any) -> None:
        self.network = network
        #: The voter's message guards (:class:`controller.raft.PeerMessageGuard`), as in production.
        self.guard: Any = None
        self.node_id = node_id
        self.self_node = self_node
        self.peers = {int(node.node_id): node for node in other_nodes}
        self.connected: set[int] = set()
        self._on_message: Callable[[Any, Any], None] | None = None
        self._on_connected: Callable[[Any], None] | None = None
        self._on_disconnected: Callable[[Any], None] | None = None
        network.attach(self)

    # pysyncobj's interface (its names)
    def setOnMessageReceivedCallback(self, callback: Callable[[Any, Any], None] | None) -> None:
        self._on_message = callback

    def setOnNodeConnectedCallback(self, callback: Callable[[Any], None] | None) -> None:
        self._on_connected = callback

    def setOnNodeDisconnectedCallback(self, callback: Callable[[Any], None] | None) -> None:
        self._on_disconnected = callback

    def setOnReadonlyNodeConnectedCallback(self, callback: Any) -> None:
        pass

    def setOnReadonlyNodeDisconnectedCallback(self, callback: Any) -> None:
        pass

    def setOnUtilityMessageCallback(self, message: str, callback: Any) -> None:
        pass

    def tryGetReady(self) -> None:
        pass

    @property
    def ready(self) -> bool:
        return True

    def waitReady(self) -> None:
        pass

    def addNode(self, node: Any) -> None:
        raise NotImplementedError("membership changes are off")

    def dropNode(self, node: Any) -> None:
        raise NotImplementedError("membership changes are off")

    def send(self, node: Any, message: Any) -> bool:
        peer = int(node.node_id)
        if peer not in self.connected:
            return False
        self.network.send(self.node_id, peer, message)
        return True

    def destroy(self) -> None:
        self.network.detach(self.node_id)

    # called by the network
    def link_up(self, peer: int) -> None:
        if peer not in self.connected:
            self.connected.add(peer)
            if self._on_connected is not None:
                self._on_connected(self.peers[peer])

    def link_down(self, peer: int) -> None:
        if peer in self.connected:
            self.connected.discard(peer)
            if self._on_disconnected is not None:
                self._on_disconnected(self.peers[peer])

    def deliver(self, peer: int, message: Any) -> None:
        if peer not in self.connected or self._on_message is None or self.guard is None:
            return
        self.guard.deliver(self._on_message, self.peers[peer], message)


class SimNetwork:
    def __init__(self, rng: random.Random, clock: Callable[[], float], faults: NetworkFaults) -> None:
        self.rng = rng
        self.clock = clock
        self.faults = faults
        self.transports: dict[int, SimTransport] = {}
        self.isolated: set[int] = set()
        self._queue: list[tuple[float, int, int, int, int, bytes]] = []
        self._seq = 0
        #: A reset bumps a link's generation; messages of older generations are lost.
        self._generation: dict[tuple[int, int], int] = {}
        self._chunk_time: dict[tuple[int, int], float] = {}
        self._up: set[tuple[int, int]] = set()
        self._reconnect_at: dict[tuple[int, int], float] = {}
        self.delivered = 0
        self.dropped = 0

    def attach(self, transport: SimTransport) -> None:
        self.transports[transport.node_id] = transport

    def detach(self, node_id: int) -> None:
        transport = self.transports.pop(node_id, None)
        if transport is None:
            return
        for link in [link for link in self._up if node_id in link]:
            self._take_down(link)

    def _link(self, a: int, b: int) -> tuple[int, int]:
        return (a, b) if a < b else (b, a)

    def send(self, src: int, dst: int, message: Any) -> None:
        link = self._link(src, dst)
        if link not in self._up:
            return
        if not _is_chunk(message) and self.rng.random() < self.faults.drop:
            self.dropped += 1
            return
        now = self.clock()
        at = now + self.rng.uniform(self.faults.latency_min_s, self.faults.latency_max_s)
        if _is_chunk(message):
            at = max(at, self._chunk_time.get((src, dst), 0.0) + 1e-6)
            self._chunk_time[(src, dst)] = at
        self._seq += 1
        heapq.heappush(self._queue, (at, self._seq, src, dst, self._generation.get(link, 0),
                                     encode_peer_message(message)))

    def _take_down(self, link: tuple[int, int]) -> None:
        self._up.discard(link)
        self._generation[link] = self._generation.get(link, 0) + 1
        self._chunk_time.pop(link, None)
        self._chunk_time.pop((link[1], link[0]), None)
        self._reconnect_at[link] = self.clock() + self.rng.uniform(
            self.faults.reconnect_min_s, self.faults.reconnect_max_s)
        a, b = link
        if a in self.transports:
            self.transports[a].link_down(b)
        if b in self.transports:
            self.transports[b].link_down(a)

    def reset_random_links(self) -> None:
        for link in sorted(self._up):
            if self.rng.random() < self.faults.reset:
                self._take_down(link)

    def step(self) -> None:
        """Delivers what is due and brings links up or down to match node states."""
        now = self.clock()
        ids = sorted(self.transports)
        for i, a in enumerate(ids):
            for b in ids[i + 1 :]:
                link = (a, b)
                reachable = a not in self.isolated and b not in self.isolated
                if link in self._up and not reachable:
                    self._take_down(link)
                elif link not in self._up and reachable and self._reconnect_at.get(link, 0.0) <= now:
                    self._up.add(link)
                    self.transports[a].link_up(b)
                    self.transports[b].link_up(a)
        while self._queue and self._queue[0][0] <= now:
            _, _, src, dst, generation, payload = heapq.heappop(self._queue)
            link = self._link(src, dst)
            if link not in self._up or generation != self._generation.get(link, 0):
                continue
            transport = self.transports.get(dst)
            if transport is None:
                continue
            self.delivered += 1
            transport.deliver(src, decode_peer_message(payload))
