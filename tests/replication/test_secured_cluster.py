"""Brokers of a three-node cluster replicate over a SASL_SSL inter-broker listener.

Each node has a PLAINTEXT listener for the test's clients and an INTERNAL listener
(SASL_SSL, PLAIN, certificates from ``cormorant tls init``) named by
``inter.broker.listener.name``: follower fetches go to the leader's INTERNAL address, over
TLS, as ``User:broker``. An RF=3 topic with ``min.insync.replicas=3`` only acknowledges
``acks=all`` writes once both followers have fetched them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.tools.tls_init import init_tls
from tests.integration.quorum_cluster import Node, QuorumCluster, free_ports
from tests.replication.test_replication_cluster import (
    consume_all,
    create_replicated_topic,
    partition_state,
    produce,
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
        "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": JAAS,
        "replica.lag.time.max.ms": "5000",
    }
    cluster = QuorumCluster(tmp_path, overrides=overrides)
    ports = free_ports(len(cluster.nodes))
    for node, port in zip(cluster.nodes.values(), ports, strict=True):
        node.__class__ = SecuredNode
        assert isinstance(node, SecuredNode)
        node.internal_port = port
    with cluster:
        create_replicated_topic(cluster, min_isr=3)
        cluster.wait_value(lambda: partition_state(cluster), lambda p: len(p["isr"]) == 3, 30,
                           "topic with three in-sync replicas")
        bootstrap = [n.bootstrap for n in cluster.nodes.values()]
        values = [f"secured-{i}".encode() for i in range(20)]
        produce(bootstrap, values)
        assert consume_all(bootstrap, len(values)) == values
        authenticated = [e for n in cluster.nodes.values() for e in n.events("sasl_authenticated")
                         if e.get("listener") == "INTERNAL"]
        assert authenticated and {e["principal"] for e in authenticated} == {"User:broker"}
