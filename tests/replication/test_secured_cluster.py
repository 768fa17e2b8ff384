"""Brokers of a three-node cluster replicate over a SASL_SSL inter-broker listener.

Each node has a PLAINTEXT listener for the test's clients and an INTERNAL listener
(SASL_SSL, PLAIN, certificates from ``cormorant tls init``) named by
``inter.broker.listener.name``: follower fetches go to the leader's INTERNAL address, over
TLS, as ``User:broker``: an RF=3 topic ends with identical logs on every replica, survives
its leader's SIGKILL, and a SCRAM user added through one broker authenticates on another.
"""

from __future__ import annotations

import os
import socket
import struct
import zlib
from pathlib import Path

import pytest

from broker.security.client_config import ClientSecurity, client_security
from broker.security.scram import salted_password
from broker.tools.client import ClientError, KafkaClient
from broker.tools.tls_init import init_tls
from controller.raft import encode_peer_message
from tests.integration.quorum_cluster import Node, QuorumCluster, free_ports
from tests.replication.test_replication_cluster import (
    consume_all,
    create_replicated_topic,
    partition_state,
    produce,
    segment_bytes,
)
from wire.generated.api_003_metadata import MetadataRequest, MetadataResponse
from wire.generated.api_051_alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsRequestScramCredentialUpsertion,
    AlterUserScramCredentialsResponse,
)

pytestmark = pytest.mark.timeout(180)

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-secret" user_broker="broker-secret";')


class SecuredNode(Node):
    internal_port = 0

    def args(self) -> list[str]:
        out = super().args()
        for index, item in enumerate(out):
            if item.startswith("listeners="):
                out[index] = f"{item},INTERNAL://127.0.0.1:{self.internal_port}"
            elif item.startswith("advertised.listeners="):
                out[index] = f"{item},INTERNAL://127.0.0.1:{self.internal_port}"
        return out


def test_replication_over_sasl_ssl_inter_broker_listener(tmp_path: Path) -> None:
    certs = tmp_path / "tls"
    init_tls(certs, ["127.0.0.1"])
    overrides = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs / "broker-bundle.pem"),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs / "ca.pem"),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": JAAS,
        "replica.lag.time.max.ms": "5000",
    }
    cluster = QuorumCluster(tmp_path, overrides=overrides)
    # Not one of the ports the cluster chose (free until its nodes bind them).
    taken = {port for n in cluster.nodes.values() for port in (n.port, n.controller_port) if port}
    ports = free_ports(len(cluster.nodes), avoid=taken)
    for node, port in zip(cluster.nodes.values(), ports, strict=True):
        node.__class__ = SecuredNode
        assert isinstance(node, SecuredNode)
        node.internal_port = port
    with cluster:
        create_replicated_topic(cluster, min_isr=2)
        cluster.wait_value(lambda: partition_state(cluster), lambda p: len(p["isr"]) == 3, 30,
                           "topic with three in-sync replicas")
        bootstrap = [n.bootstrap for n in cluster.nodes.values()]
        values = [f"secured-{i}".encode() for i in range(20)]
        produce(bootstrap, values)
        assert consume_all(bootstrap, len(values)) == values

        def identical() -> bool:
            logs = {n.node_id: segment_bytes(n) for n in cluster.nodes.values()}
            return len(set(logs.values())) == 1 and len(logs[1]) > 0

        cluster.wait_for(identical, 20, "identical logs on every replica (followers fetched over INTERNAL)")
        authenticated = [e for n in cluster.nodes.values() for e in n.events("sasl_authenticated")
                         if e.get("listener") == "INTERNAL"]
        assert authenticated and {e["principal"] for e in authenticated} == {"User:broker"}

        # A SCRAM user added through node 1 authenticates on node 3 (the metadata log carries it).
        added = _alter_scram(cluster.nodes[1].bootstrap, "carol", "carol-secret")
        assert added.results[0].error_code == 0
        node3 = cluster.nodes[3]
        assert isinstance(node3, SecuredNode)
        security = client_security({
            "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                'username="carol" password="carol-secret";',
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs / "ca.pem")})
        cluster.wait_for(lambda: _authenticates(node3.internal_port, security), 20,
                         "carol authenticated on node 3")

        # The leader dies; a follower takes over and replication goes on over INTERNAL.
        state = partition_state(cluster)
        leader = cluster.nodes[state["leader"]]
        leader.kill9()
        survivors = [n for n in cluster.nodes.values() if n is not leader]
        cluster.wait_for(lambda: partition_state(cluster, survivors[0])["leader"] in {n.node_id for n in survivors},
                         30, "a new leader")
        more = [f"after-{i}".encode() for i in range(10)]
        cluster.wait_for(lambda: _try_produce([n.bootstrap for n in survivors], more), 60,
                         "acks=all writes accepted by the survivors")
        assert consume_all([n.bootstrap for n in survivors], len(values) + len(more))[-len(more):] == more


def _alter_scram(bootstrap: str, user: str, password: str) -> AlterUserScramCredentialsResponse:
    salt = os.urandom(32)
    upsertion = AlterUserScramCredentialsRequestScramCredentialUpsertion(
        name=user, mechanism=2, iterations=4096, salt=salt,
        salted_password=salted_password("SCRAM-SHA-512", password, salt, 4096))
    with KafkaClient.connect(bootstrap, timeout_s=20) as client:
        return client.send(AlterUserScramCredentialsRequest(upsertions=[upsertion]),
                           AlterUserScramCredentialsResponse)


def _authenticates(port: int, security: ClientSecurity) -> bool:
    try:
        with KafkaClient("127.0.0.1", port, timeout_s=10, security=security) as client:
            return bool(client.send(MetadataRequest(topics=[]), MetadataResponse).brokers)
    except ClientError:
        return False


def _try_produce(bootstrap: list[str], values: list[bytes]) -> bool:
    try:
        produce(bootstrap, values)
    except Exception:
        return False
    return True


def test_cluster_with_secured_controller_listeners(tmp_path: Path) -> None:
    """Registration, heartbeats, AlterPartition and forwarded requests reach the controllers over
    SASL_SSL as ``User:broker``; the voters' own traffic is encrypted with the quorum secret."""
    certs = tmp_path / "tls"
    init_tls(certs, ["127.0.0.1"])
    overrides = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs / "broker-bundle.pem"),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs / "ca.pem"),
        "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": JAAS,
        "controller.quorum.secret": "quorum-secret-for-tests",
        "replica.lag.time.max.ms": "5000",
    }
    cluster = QuorumCluster(tmp_path, overrides=overrides)
    with cluster:
        create_replicated_topic(cluster, min_isr=2)
        cluster.wait_value(lambda: partition_state(cluster), lambda p: len(p["isr"]) == 3, 30,
                           "topic with three in-sync replicas")
        bootstrap = [n.bootstrap for n in cluster.nodes.values()]
        values = [f"controller-secured-{i}".encode() for i in range(20)]
        produce(bootstrap, values)
        assert consume_all(bootstrap, len(values)) == values
        authenticated = [e for n in cluster.nodes.values() for e in n.events("sasl_authenticated")
                         if e.get("listener") == "CONTROLLER"]
        assert authenticated and {e["principal"] for e in authenticated} == {"User:broker"}
        # Nothing on the controller port speaks Kafka without TLS and SASL.
        with pytest.raises(ClientError):
            with KafkaClient("127.0.0.1", cluster.nodes[1].controller_port, timeout_s=5) as client:
                client.send(MetadataRequest(topics=[]), MetadataResponse)

        # A voter's hello without the secret (pysyncobj's clear framing) is dropped unanswered.
        assert _clear_raft_hello_is_dropped(cluster.nodes[1].controller_port, cluster.nodes[2])

        state = partition_state(cluster)
        leader = cluster.nodes[state["leader"]]
        leader.kill9()
        survivors = [n for n in cluster.nodes.values() if n is not leader]
        cluster.wait_for(lambda: partition_state(cluster, survivors[0])["leader"] in {n.node_id for n in survivors},
                         30, "a new leader")
        more = [f"after-{i}".encode() for i in range(10)]
        cluster.wait_for(lambda: _try_produce([n.bootstrap for n in survivors], more), 60,
                         "acks=all writes accepted by the survivors")
        assert consume_all([n.bootstrap for n in survivors], len(values) + len(more))[-len(more):] == more


def _clear_raft_hello_is_dropped(port: int | None, claimed: Node) -> bool:
    """A pysyncobj hello in clear naming another voter: the connection closes without a byte."""
    assert port is not None
    hello = zlib.compress(encode_peer_message(f"{claimed.host}:{claimed.controller_port}"), 3)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(struct.pack("i", len(hello)) + hello)
        try:
            return sock.recv(1) == b""
        except (TimeoutError, ConnectionResetError) as ex:
            return isinstance(ex, ConnectionResetError)


def test_secured_controller_listener_needs_the_quorum_secret(tmp_path: Path) -> None:
    """A controller listener that is not PLAINTEXT without controller.quorum.secret fails at
    start-up with the setting's name: the quorum's own traffic is never left in clear."""
    import subprocess
    import sys

    certs = tmp_path / "tls"
    init_tls(certs, ["127.0.0.1"])
    port, controller_port = free_ports(2)
    settings = {
        "node.id": "1", "process.roles": "broker,controller",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}", "controller.listener.names": "CONTROLLER",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs / "broker-bundle.pem"),
        "log.dirs": str(tmp_path / "data"),
    }
    properties = tmp_path / "server.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    started = subprocess.run([sys.executable, "-m", "broker", "serve", str(properties)],
                             capture_output=True, text=True, timeout=60, check=False)
    assert started.returncode != 0
    assert "controller.quorum.secret" in started.stdout + started.stderr
